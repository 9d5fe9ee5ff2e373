"""Search quality: the stopping signal (hypervolume added by the latest trials), the auto sampler's rule, the
hybrid's sub-front selection, and bench/search_quality.py's exact front against real searches."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

from dse.cli import main
from dse.results.views import CONVERGED_GAIN, recent_line
from dse.search.pareto import Point, hypervolume, recent_gain
from dse.search.runner import run_study as run
from dse.search.samplers import SAMPLERS
from dse.search.study import hv_reference, load_points, open_study
from dse.search.studyfile import load_study
from repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _pt(n, values, feasible=True):
    return Point(number=n, values=tuple(values), metrics={}, params={}, feasible=feasible, config={})


def _cli(*args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code


def test_recent_gain_is_what_the_latest_tenth_of_the_trials_added():
    dirs, ref = ["minimize", "minimize"], [10.0, 10.0]
    early = [_pt(n, (5.0, 5.0)) for n in range(19)]  # hypervolume 25
    late = _pt(19, (1.0, 1.0))  # hypervolume 81: the last 2 of 20 points (ceil of 10 %) hold it
    g = recent_gain([late, *early], dirs, ref)  # order does not matter: by trial number
    assert g["recent"] == 2 and g["hypervolume"] == pytest.approx(81.0) and g["before"] == pytest.approx(25.0)
    assert g["gain"] == pytest.approx(56 / 81)
    # 21 points: the latest 3 count; a dominated one adds nothing, (7, 1) adds 3 x 9 minus its overlap 3 x 5
    g = recent_gain([*early, _pt(19, (6.0, 6.0)), _pt(20, (7.0, 1.0))], dirs, ref)
    assert g["recent"] == 3 and g["before"] == pytest.approx(25.0) and g["gain"] == pytest.approx(12 / 37)
    g = recent_gain([*early, _pt(19, (6.0, 6.0))], dirs, ref)
    assert g["recent"] == 2 and g["gain"] == 0.0
    assert recent_gain([], dirs, ref) == {"hypervolume": 0.0, "before": 0.0, "recent": 0, "settings": 0, "gain": 0.0,
                                          "points": 0, "feasible": 0}
    # the distinct training settings among the latest points
    pts = [Point(n, (5.0, 5.0), {}, {"training.a": n // 2, "hardware.b": n}, True, {}) for n in range(30)]
    assert recent_gain(pts, dirs, ref)["settings"] == 2  # points 27-29: settings 13 and 14


def test_recent_line_reads_converged_or_still_improving():
    base = {"hypervolume": 100.0, "before": 99.5, "recent": 4, "settings": 4}
    assert "converged for this budget" in recent_line({**base, "gain": CONVERGED_GAIN / 2})
    # one hybrid setting's sub-front: too few settings to call it converged
    one = recent_line({**base, "settings": 1, "gain": 0.0})
    assert "1 training setting," in one and "too few" in one and "converged for" not in one
    assert "still improving" in recent_line({**base, "gain": 0.2})
    assert "20.00%" in recent_line({**base, "gain": 0.2}) and "(4)" in recent_line({**base, "gain": 0.2})
    assert "starved" in recent_line({"hypervolume": 0.0, "before": 0.0, "recent": 3, "gain": 0.0})
    none = recent_line({"hypervolume": 0.0, "before": 0.0, "recent": 3, "gain": 0.0, "points": 30, "feasible": 0})
    assert "none of the 30 complete trials meets the constraints" in none and "starved" not in none
    # a run that ended before its budget (a hybrid's exhausted space): not "a larger budget is likely to pay"
    for case in ({**base, "gain": 0.2}, {**base, "gain": CONVERGED_GAIN / 2}, {**base, "settings": 1, "gain": 0.0},
                 {"hypervolume": 0.0, "before": 0.0, "recent": 3, "gain": 0.0}):
        ended = recent_line(case, ended_early=True)
        assert "ended before its trial budget" in ended and "pay" not in ended and "give it more" not in ended
    covered = recent_line({**base, "gain": 0.2}, covered="the hybrid search ended: it has searched every setting")
    assert "still improving, but more trials alone would run nothing new: it has searched every setting" in covered


def test_run_summary_and_status_print_the_stopping_signal(study_file, capsys):
    assert _cli("run", str(study_file), "--quiet") == 0
    out = capsys.readouterr().out
    spec = load_study(study_file)
    pts = load_points(open_study(spec, create=False), spec)
    g = recent_gain(pts, spec.directions, hv_reference(spec))
    assert recent_line(g) in out  # the run summary's line
    assert _cli("status", str(study_file), "--json") == 0
    st = json.loads(capsys.readouterr().out)
    assert st["hv_gain_last_10pct"] == pytest.approx(g["gain"]) and st["last_10pct"] == recent_line(g)
    assert st["hypervolume"] == pytest.approx(hypervolume(pts, spec.directions, hv_reference(spec)))
    assert _cli("status", str(study_file)) == 0
    text = capsys.readouterr().out
    assert recent_line(g) in text
    assert f"hypervolume  {st['hypervolume']:.6g}\n" in text  # as the run summary prints it, not 16 digits


def _toy(trial):
    x = [trial.suggest_categorical(f"x{i}", [0, 1, 2, 3]) for i in range(5)]
    return float(sum(x)), float(-x[0]), float(x[1] * x[2]), float((x[3] - 2) ** 2)


@pytest.mark.parametrize("objectives,evolutionary", [(4, "NSGAIIISampler"), (3, "NSGAIISampler")])
def test_auto_sampler_follows_the_published_rule(objectives, evolutionary):
    from dse.search.auto_sampler import AutoRuleSampler

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["minimize"] * objectives,
                               sampler=AutoRuleSampler(seed=0, population=6, switch_at=12))
    study.optimize(lambda t: _toy(t)[:objectives], n_trials=30)
    used = [t.system_attrs["auto:sampler"] for t in study.trials]
    assert used[0] == "RandomSampler" and set(used[1:12]) == {"TPESampler"} and set(used[12:]) == {evolutionary}
    # the trials sampled before the switch are the evolutionary sampler's first generation
    key = f"{evolutionary}:generation"
    assert all(t.system_attrs[key] == 0 for t in study.trials[:12])
    assert max(t.system_attrs[key] for t in study.trials) >= 1  # it went on to later generations


def test_auto_is_a_named_sampler_and_runs_a_study(study_file):
    assert "auto" in SAMPLERS
    spec = load_study(study_file).with_overrides(sampler="auto")
    assert run(spec)["finished"] == spec.trials


def test_sub_front_is_the_feasible_non_dominated_points_thinned():
    from dse.search.strategies.hybrid import sub_front

    spec = load_study_text()
    rng = np.random.default_rng(1)
    n = 200
    metrics = {"accuracy_drop": np.full(n, 1.0), "speedup": rng.uniform(1, 3, n), "area_mm2": rng.uniform(1, 6, n)}
    idx, best = sub_front(spec, metrics, None)
    feas = metrics["area_mm2"] <= 4.0
    for i in np.flatnonzero(feas):  # every feasible point is in the sub-front or dominated by one of it
        sp, ar = metrics["speedup"], metrics["area_mm2"]
        dominated = any(sp[j] >= sp[i] and ar[j] <= ar[i] and j != i for j in idx)
        assert i in idx or dominated
    assert feas[idx].all()
    assert best == [1.0, metrics["speedup"][feas].max(), metrics["area_mm2"][feas].min()]
    thin, _ = sub_front(spec, metrics, 3)
    assert len(thin) == 3 and set(thin) <= set(idx)
    # nothing feasible: the least-violating point
    metrics["area_mm2"] = rng.uniform(5, 6, n)
    idx, _ = sub_front(spec, metrics, 3)
    assert list(idx) == [int(np.argmin(metrics["area_mm2"]))]


def test_thinning_keeps_the_points_that_hold_the_most_hypervolume():
    """A sub-front thinned to k points keeps the k whose hypervolume is largest (checked against every subset
    on a small front), and more of it than an even spread along one objective."""
    import itertools

    from dse.search.pareto import hypervolume_of
    from dse.search.strategies.hybrid import sub_front

    spec = load_study_text()  # accuracy_drop (min), speedup (max), area_mm2 (min), area <= 4
    ref = [10.0, 1.0, 5.0]
    # a front bunched at its low-speed-up end: 9 points there, 3 spread over the rest
    sp = np.r_[np.linspace(1.10, 1.30, 9), 1.8, 2.4, 3.0]
    ar = 0.2 + sp ** 1.2
    metrics = {"accuracy_drop": np.full(len(sp), 1.0), "speedup": sp, "area_mm2": ar}
    idx, _ = sub_front(spec, metrics, None)
    assert len(idx) == len(sp)

    def hv(sel):
        return hypervolume_of(np.column_stack([metrics[m][list(sel)] for m in spec.metrics]), spec.directions, ref)

    for k in (2, 3, 4):
        thin, best = sub_front(spec, metrics, k, ref)
        assert len(thin) == k
        assert hv(thin) == pytest.approx(max(hv(c) for c in itertools.combinations(range(len(sp)), k)), rel=0.02)
        even = np.unique(np.round(np.linspace(0, len(sp) - 1, k)).astype(int))  # the former rule
        assert hv(thin) > hv(even)
        assert best[1] == metrics["speedup"][thin].max()
    # a non-finite objective leaves no volume to measure: still k points, spread along the first that varies
    from dse.search.strategies.hybrid import _thin

    vals = np.column_stack([np.full(5, 1.0), np.linspace(1, 2, 5), np.r_[1.0, 2.0, 3.0, np.inf, 3.5]])
    assert list(_thin(vals, [False, True, False], ref, 3)) == [0, 2, 4]


def load_study_text():
    import tomllib

    from dse.search.studyfile import spec_from_dict
    from studyfiles import FAST_STUDY

    return spec_from_dict(tomllib.loads(FAST_STUDY))


def _bench():
    return load_script(ROOT / "bench" / "search_quality.py")


def test_the_exact_front_bounds_every_real_search(study_file):
    """bench/search_quality.py's truth: its table matches dse's evaluation, its front is at least as good as
    what real joint and hybrid runs of the same study find, and a search of the whole table reaches it."""
    sq = _bench()
    spec = load_study(study_file).with_overrides(front_size=1000)  # sub-fronts not thinned
    truth = sq.Truth(spec, jobs=1)
    assert len(truth.settings) == 2 and len(truth.hw_points) == 36
    assert truth.check(n=4) < 1e-12
    for strategy in ("joint", "hybrid"):
        s = spec.with_overrides(name=f"tiny-{strategy}", strategy=strategy, trials=30)
        run(s)
        pts = [p for p in load_points(open_study(s, create=False), s) if p.feasible]
        assert pts
        hv = hypervolume(pts, s.directions, truth.ref)
        assert 0 < hv <= truth.hv * (1 + 1e-12)
        for p in pts:  # each found point is on the exact front or dominated by a point of it
            v = np.array(p.values)
            better = (truth.front[:, 0] <= v[0]) & (truth.front[:, 1] >= v[1]) & (truth.front[:, 2] <= v[2])
            assert better.any()
    # the hybrid with no thinning, over every setting, finds the exact front
    rows = sq.curve(truth, sq.run_hybrid(truth, "grid", 0, 2)["trace"], hybrid=True)
    assert [r["runs"] for r in rows] == [1, 2] and rows[1]["share"] == pytest.approx(1.0)
    shares = [r["share"] for r in sq.one_method(truth, "random", 0, 2, 500, 1)]
    assert shares == sorted(shares) and not any(math.isnan(x) for x in shares)
    # the ceiling: greedy choice of both settings holds the whole front, and a larger budget never holds less
    c = sq.ceiling(truth, [1, 2])
    assert c["training_objectives"] == ["accuracy_drop"]
    for kind in ("oracle", "expected"):
        assert 0 < c[kind]["1"] <= c[kind]["2"] == pytest.approx(1.0)
    # what each setting holds alone: the truth less what the other setting's feasible sub-front holds
    from dse.search.pareto import hypervolume_of

    ex = c["exclusive"]
    assert ex and [e["share"] for e in ex] == sorted((e["share"] for e in ex), reverse=True)
    for e in ex:
        other = 1 - e["index"]
        idx = truth.fronts[other][0]
        alone = hypervolume_of(truth.values[other, idx[truth.feasible[other, idx]]], truth.directions, truth.ref)
        assert e["share"] == pytest.approx(1 - alone / truth.hv, abs=1e-5)
    # the hybrid's hvi selection on the table (dse.search.hvi, its random startup here) trains both settings
    rows = sq.curve(truth, sq.run_hybrid(truth, "hvi-s1", 0, 2)["trace"], hybrid=True)
    assert [r["runs"] for r in rows] == [1, 2] and rows[1]["share"] == pytest.approx(1.0)
    assert sorted(r["setting"] for r in rows) == [0, 1]


def test_expected_values_are_the_additive_fit_of_the_knobs():
    """The ceiling's expected training values: an additive (one-hot per knob level) least-squares fit, exact on
    additive data; what a seed adds to one setting shows as residual, not in the fit's other settings' levels
    beyond their share of it."""
    from types import SimpleNamespace

    sq = _bench()
    a_eff, b_eff = {1: 0.0, 2: 0.7, 3: 1.9}, {"x": 0.0, "y": -0.4}
    settings = [{"training.a": a, "training.b": b} for a in a_eff for b in b_eff]
    y = np.array([2.0 + a_eff[s["training.a"]] + b_eff[s["training.b"]] for s in settings])
    spec = SimpleNamespace(metrics=["accuracy_drop", "speedup"])
    t = SimpleNamespace(spec=spec, settings=settings, train_knobs=["training.a", "training.b"],
                        possible=np.ones(len(settings), dtype=bool),
                        values=np.stack([np.column_stack([y, np.arange(len(y))])] * 3, axis=1))
    assert np.allclose(sq.expected_training_values(t)[:, 0], y)
    t.values[0, :, 0] += 1.2  # one setting's lucky seed
    fit = sq.expected_training_values(t)[:, 0]
    assert abs(fit[0] - y[0]) < 1.2 and not np.allclose(fit, y)


def test_startup_trials_reach_tpe_and_auto_and_bad_values_are_refused(tmp_path):
    from dse.errors import UsageError
    from studyfiles import FAST_STUDY, edit, write_study

    spec = load_study(write_study(tmp_path, edit("population = 4", "population = 4\nstartup_trials = 3")))
    assert spec.startup_trials == 3
    assert SAMPLERS["tpe"](spec, 0)._n_startup_trials == 3
    assert SAMPLERS["auto"](spec, 0)._tpe._n_startup_trials == 3
    assert SAMPLERS["tpe"](load_study(write_study(tmp_path, FAST_STUDY)), 0)._n_startup_trials == 10
    with pytest.raises(UsageError, match="study.startup_trials"):
        load_study(write_study(tmp_path, edit("population = 4", "population = 4\nstartup_trials = 0")))


def test_the_bench_refuses_gp_without_torch_before_any_work(monkeypatch, capsys, tmp_path):
    sq = _bench()
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed: importing it raises ImportError
    monkeypatch.setattr(sq, "Truth", lambda *a, **k: pytest.fail("the truth was built before the check"))
    monkeypatch.setenv("DSE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["search_quality.py", "--truth", "--methods", "tpe", "hybrid:gp-s3"])
    with pytest.raises(SystemExit) as e:
        sq.main()
    assert e.value.code == 2 and "GPSampler needs torch" in capsys.readouterr().err
