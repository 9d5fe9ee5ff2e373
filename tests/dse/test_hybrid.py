"""The hybrid strategy: Optuna on training knobs, the vectorized hardware model on hardware."""

from __future__ import annotations

import os
from dataclasses import replace

import moocore
import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

import dse
from accel import HardwareArray
from dse.evaluation.evaluator import evaluate, hardware_metrics
from dse.search.runner import run_study as run
from dse.search.strategies.hybrid import hardware_candidates, hardware_of
from dse.search.study import load_points, open_study
from dse.search.studyfile import load_study


def _hybrid(study_file):
    # six training settings, so that twelve trials need several of them
    study_file.write_text(study_file.read_text().replace("pred_width = [8, 32]",
                                                         "pred_width = [4, 8, 16, 32, 64, 128]"))
    return load_study(study_file).with_overrides(strategy="hybrid", front_size=3)


def test_candidates_enumerate_a_small_grid_and_sample_a_large_one(study_file):
    spec = _hybrid(study_file)
    grid = hardware_candidates(spec, max_points=10_000, seed=0)
    # rows x cols x bandwidth x predictor_unit = 3 x 3 x 2 x 2
    assert len(grid) == 36 and len({tuple(sorted(c.items())) for c in grid}) == 36
    sampled = hardware_candidates(spec, max_points=20, seed=0)
    assert len(sampled) == 20
    assert sampled == hardware_candidates(spec, max_points=20, seed=0)


def test_an_exhausted_space_ends_the_run(study_file):
    spec = load_study(study_file).with_overrides(strategy="hybrid", front_size=2)  # 2 settings x 2 points < 12
    res = run(spec)
    assert res["exhausted"] and res["finished"] == 4
    trials = open_study(spec, create=False).get_trials()
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials) == 4


def test_status_says_why_the_last_run_ended_early_until_a_run_ends_on_its_budget(study_file):
    """`dse status` did not know a run had ended before its budget, so after an exhausted hybrid run its stopping
    line could say a larger budget was likely to pay; a later run that reaches its budget clears the note."""
    from dse.results.views import status_summary

    spec = load_study(study_file).with_overrides(strategy="hybrid", front_size=2)
    assert run(spec)["exhausted"]
    st = status_summary(spec)
    assert "stopped early" in st["ended_early"]
    assert "ended before its trial budget" in st["last_10pct"] and "pay" not in st["last_10pct"]
    assert not run(spec.with_overrides(trials=4))["exhausted"]  # its budget is the 4 trials done
    st = status_summary(spec)
    assert "ended_early" not in st and "ended before" not in st["last_10pct"]


def test_a_worker_that_exhausts_the_space_says_why(study_file, cli):
    """`dse worker` said only "4/12 done", where `dse run` says why it ended before its budget."""
    from studyfiles import with_strategy

    study_file.write_text(with_strategy(study_file.read_text(), "hybrid", front_size=2))
    r = cli("worker", study_file, "--index", "0", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "4/12 done" in r.stdout and "worker 0: the hybrid search stopped early" in r.stderr


def test_hybrid_enters_the_hardware_subfront_of_each_trained_setting(study_file):
    spec = _hybrid(study_file)
    res = run(spec)
    assert res["finished"] == spec.trials
    study = open_study(spec, create=False)
    trials = study.get_trials()
    assert len(trials) == spec.trials and all(t.state == TrialState.COMPLETE for t in trials)
    settings = {}
    for t in trials:
        key = tuple(sorted((k, v) for k, v in t.params.items() if k.startswith("training.")))
        settings.setdefault(key, []).append(t)
    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=f"sqlite:///{study_file.parent / 'tiny.db'}")
    # one surrogate run per outer trial; a setting proposed twice adds only points not entered yet
    assert len(settings) <= len(outer.trials)
    assert len({tuple(sorted(t.params.items())) for t in trials}) == len(trials)
    # each setting's trials are feasible, mutually non-dominated, and non-dominated among ALL its hardware points
    maxi = [d == "maximize" for d in spec.directions]
    for key, ts in settings.items():
        assert len(ts) <= spec.front_size
        cfg = spec.configuration({**dict(key), **ts[0].params})
        cfg = replace(cfg, seeds=spec.seeds)
        metrics = evaluate(cfg)["metrics"]
        cands = [c for c in hardware_candidates(spec, max_points=spec.inner_points, seed=0)]
        hws = [h for h in (hardware_of(spec, c) for c in cands) if h is not None]
        hm = hardware_metrics(cfg, HardwareArray.from_list(hws), metrics["gp_fraction"])
        feasible = hm["area_mm2"] <= 4.0
        allv = np.column_stack([np.full(len(hws), metrics[m]) if m not in hm else hm[m] for m in spec.metrics])
        for t in ts:
            assert all(v <= 0 for v in t.constraints.values())
            v = np.array(t.values)
            # the entered values come from the scalar evaluate, allv from the vectorized model: equal up to
            # float rounding (1e-16 relative), so a tie must not count as domination
            tol = 1e-12 * np.maximum(np.abs(v), 1e-300)
            better_or_equal = np.where(maxi, allv[feasible] >= v - tol, allv[feasible] <= v + tol).all(axis=1)
            strictly = np.where(maxi, allv[feasible] > v + tol, allv[feasible] < v - tol).any(axis=1)
            assert not (better_or_equal & strictly).any(), "an entered point is dominated"
        assert moocore.is_nondominated(np.array([t.values for t in ts]), maximise=maxi).all()


def test_hybrid_is_deterministic_for_a_seed(study_file, tmp_path):
    other = tmp_path / "again"
    other.mkdir()
    copy = other / "tiny.toml"
    copy.write_text(study_file.read_text())
    out = []
    for f in (study_file, copy):
        spec = _hybrid(f)
        run(spec)
        out.append([(p.number, p.values, tuple(sorted(p.params.items())))
                    for p in load_points(open_study(spec, create=False), spec)])
    assert out[0] == out[1]


def test_hybrid_with_the_grid_sampler_visits_each_training_setting_once(study_file):
    spec = replace(_hybrid(study_file), sampler="grid", trials=1000)
    res = run(spec)
    assert res["exhausted"] and res["surrogate_runs"] == 6  # the six pred_width values, then it stops
    assert "every training setting of the grid" in res["stop_reason"]
    trials = open_study(spec, create=False).get_trials()
    assert {t.params["training.pred_width"] for t in trials} == {4, 8, 16, 32, 64, 128}
    # a grid walk that has trained every setting: more trials would run nothing new, whether or not the run ended
    # before its trial budget (the predictor preset reaches its budget exactly, and its stopping line said "a
    # larger budget is likely to pay")
    from dse.results.views import status_summary
    from dse.search.strategies.hybrid import GRID_DONE, Hybrid
    from dse.search.study import record_end

    study = open_study(spec, create=False)
    assert Hybrid.covered(spec, study) == GRID_DONE
    record_end(study, None)  # as after a run that reached its budget
    line = status_summary(spec)["last_10pct"]
    assert "more trials alone would run nothing new: it has searched every training setting" in line
    assert "likely to pay" not in line and "may still pay" not in line


def test_a_grid_walk_on_two_workers_says_it_searched_the_grid(study_file, cli):
    """The reason a grid walk ended, read from the study when the run's figures stay in the workers."""
    study_file.write_text(study_file.read_text().replace('sampler = "nsga2"', 'sampler = "grid"').replace(
        "trials = 12", "trials = 1000"))
    r = cli("run", study_file, "--strategy", "hybrid", "--workers", "2", "--quiet")
    assert r.returncode == 0, r.stderr
    assert "the search ended before its trial budget of 1000" in r.stdout
    assert "it has searched every training setting of the grid" in r.stderr


def test_hybrid_accepts_a_training_metric_as_objective_and_constraint(study_file):
    text = study_file.read_text().replace('metric = "area_mm2"\n\n[[constraints]]',
                                          'metric = "gp_fraction"\n\n[[constraints]]')
    text += '\n[[constraints]]\nmetric = "gp_fraction"\nmax = 0.9\n'
    text = text.replace("pred_width = [8, 32]", "pred_width = [4, 8, 16, 32, 64, 128]")
    study_file.write_text(text)
    spec = load_study(study_file).with_overrides(strategy="hybrid", front_size=3, trials=6)
    assert "gp_fraction" in spec.metrics
    res = run(spec)
    assert res["finished"] == 6
    for t in open_study(spec, create=False).get_trials():
        assert t.values[2] == t.user_attrs["metrics"]["gp_fraction"] <= 0.9


def test_a_trained_setting_whose_points_could_not_enter_is_marked_and_counted(study_file, monkeypatch, cli):
    """When the budget is met by other workers while a setting trains, none of its points enter: its trial in
    the .training study says so (entered_points 0, not_entered), and the run summary counts it."""
    from dse.search.strategies.hybrid import Hybrid

    spec = _hybrid(study_file)
    real, calls = Hybrid._enter, []

    def enter(self, points, *a, **kw):  # the second setting's batch all pruned, as by a race at the budget
        calls.append(len(points))
        return 0 if len(calls) == 2 else real(self, points, *a, **kw)

    monkeypatch.setattr(Hybrid, "_enter", enter)
    r = cli("run", study_file, "--strategy", "hybrid", "--quiet")
    assert r.returncode == 0, r.stderr
    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=f"sqlite:///{study_file.parent / 'tiny.db'}")
    trained = [t for t in outer.get_trials() if t.user_attrs.get("trained")]
    marked = [t for t in trained if t.user_attrs.get("entered_points") == 0]
    assert len(marked) == 1 and "budget was reached" in marked[0].user_attrs["not_entered"]
    assert all(t.user_attrs["entered_points"] > 0 for t in trained if t not in marked)
    main = {t.user_attrs.get("training_trial") for t in open_study(spec, create=False).get_trials()}
    assert marked[0].number not in main
    line = next(ln for ln in r.stdout.splitlines() if "training settings trained" in ln)
    runs = sum(t.user_attrs["seeds"] for t in trained)
    assert (f"{len(trained)} training settings trained on {runs} surrogate runs, {len(trained) - 1} of them with "
            "points") in line
    assert "1 entered none" in line


def test_an_unforeseen_error_in_a_setting_is_recorded_and_the_search_goes_on(study_file, monkeypatch):
    """A bug or an unforeseen input while a setting is costed fails its training trial with the reason (not
    a failure with none), and the search goes on to meet the budget with other settings."""
    from dse.search.strategies.hybrid import Hybrid

    spec = _hybrid(study_file)
    real, calls = Hybrid._costed, []

    def costed(self, cfg, number):
        calls.append(number)
        if len(calls) == 1:
            raise RuntimeError("an unforeseen error")
        return real(self, cfg, number)

    monkeypatch.setattr(Hybrid, "_costed", costed)
    res = run(spec)
    assert res["finished"] == spec.trials
    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=f"sqlite:///{study_file.parent / 'tiny.db'}")
    failed = [t for t in outer.get_trials() if t.state == TrialState.FAIL]
    assert [t.user_attrs.get("fail_reason") for t in failed] == ["RuntimeError: an unforeseen error"]


def test_a_run_whose_settings_all_fail_with_an_error_says_so_not_that_the_space_is_exhausted(study_file,
                                                                                               monkeypatch):
    """A study whose parameters Optuna refused failed every setting as its points entered; after 50 of them the
    run said the space was exhausted ("brought no hardware point that is not in the study already")."""
    from dse.search.strategies import hybrid
    from dse.search.study import ended_early

    spec = _hybrid(study_file)
    monkeypatch.setattr(hybrid, "MAX_REPEATS", 3)
    monkeypatch.setattr(hybrid.Hybrid, "_enter", lambda self, *a: (_ for _ in ()).throw(ValueError("a clash")))
    res = run(spec)
    assert res["exhausted"] and res["finished"] == 0
    want = "its last 3 training settings failed with an error (the last: ValueError: a clash)"
    assert want in res["stop_reason"] and "exhausted" not in res["stop_reason"]
    assert want in ended_early(open_study(spec, create=False))


def test_a_claim_is_compared_only_once_earlier_claims_have_their_knobs(monkeypatch):
    """Another worker's outer trial exists before its sampler has set its knobs: the check waits until every
    earlier running claim has them (else two workers could both train one setting), and gives up on one that
    never gets them after CLAIM_WAIT_S when its worker cannot be told from here; at once when its worker died;
    and not after CLAIM_WAIT_S when its worker is alive on this machine (a loaded machine holds it back)."""
    from types import SimpleNamespace

    import dse.search.strategies.hybrid as hy
    from dse.search.runguard import owner

    def trial(number, params, worker=None):
        return SimpleNamespace(number=number, state=TrialState.RUNNING, params=params,
                               user_attrs={} if worker is None else {"worker": worker})

    class Outer:
        def __init__(self, partial_reads, worker=None):
            self.reads, self.partial_reads, self.worker = 0, partial_reads, worker

        def get_trials(self, deepcopy=False):
            self.reads += 1
            earlier = trial(3, {"training.a": 1} if self.reads <= self.partial_reads else {"training.a": 1,
                                                                                            "training.b": 2},
                            self.worker)
            return [earlier, trial(4, {"training.a": 1, "training.b": 2})]

    me = SimpleNamespace(outer=Outer(partial_reads=3), train_knobs=[("training.a", None), ("training.b", None)])
    got = hy.Hybrid._settled_claims(me, 4)
    assert me.outer.reads == 4 and got[0].params == {"training.a": 1, "training.b": 2}
    later = SimpleNamespace(outer=Outer(partial_reads=10**9), train_knobs=me.train_knobs)
    assert len(hy.Hybrid._settled_claims(later, 3)) == 2 and later.outer.reads == 1  # no earlier claim: no wait
    dead_pid = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 1000  # (no such process)
    dead = SimpleNamespace(outer=Outer(partial_reads=10**9, worker=owner().rsplit(":", 2)[0] + f":{dead_pid}:1"),
                           train_knobs=me.train_knobs)
    assert hy.Hybrid._settled_claims(dead, 4)[0].params == {"training.a": 1} and dead.outer.reads == 1  # at once
    monkeypatch.setattr(hy, "CLAIM_WAIT_S", 0.0)
    unseen = SimpleNamespace(outer=Outer(partial_reads=10**9), train_knobs=me.train_knobs)
    assert hy.Hybrid._settled_claims(unseen, 4)[0].params == {"training.a": 1}  # given up on
    live = SimpleNamespace(outer=Outer(partial_reads=3, worker=owner()), train_knobs=me.train_knobs)
    got = hy.Hybrid._settled_claims(live, 4)  # waited for past CLAIM_WAIT_S: its worker is alive
    assert live.outer.reads == 4 and got[0].params == {"training.a": 1, "training.b": 2}
    monkeypatch.setattr(hy, "CLAIM_LIVE_WAIT_S", 0.0)
    stuck = SimpleNamespace(outer=Outer(partial_reads=10**9, worker=owner()), train_knobs=me.train_knobs)
    assert hy.Hybrid._settled_claims(stuck, 4)[0].params == {"training.a": 1}  # not for ever


def test_a_setting_an_earlier_run_cut_short_is_trained_first_on_resume(study_file):
    """A setting whose training an interruption or a fault cut short (its outer trial failed with no reason)
    holds runs and no point; the resumed run queues it first and finishes it, whatever the sampler proposes."""
    spec = replace(_hybrid(study_file), trials=3)  # one setting's sub-front
    run(spec)
    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=f"sqlite:///{study_file.parent / 'tiny.db'}")
    done = outer.get_trials(states=(TrialState.COMPLETE,))
    left = [w for w in (4, 8, 16, 32, 64, 128) if w != done[0].params["training.pred_width"]][-1]
    outer.add_trial(optuna.trial.create_trial(  # what an interrupted setting leaves
        state=TrialState.FAIL, params={"training.pred_width": left}, distributions=done[0].distributions,
        user_attrs={"trained": True, "seeds": 1, "cut_short": True}))
    run(replace(spec, trials=6))
    new = [t for t in outer.get_trials() if t.number > done[0].number + 1]
    assert new[0].params == {"training.pred_width": left} and new[0].state == TrialState.COMPLETE
    assert new[0].user_attrs["retry_of"] == done[0].number + 1


def _outer_and_main(spec, study_file):
    url = f"sqlite:///{study_file.parent / 'tiny.db'}"
    return (optuna.load_study(study_name=f"{spec.name}.training", storage=url),
            optuna.load_study(study_name=spec.name, storage=url))


def test_a_signal_while_a_settings_points_are_costed_marks_it_cut_and_resume_finishes_it(study_file, monkeypatch):
    """Only the training was guarded: an interruption while the setting's points were costed and entered (most
    of a setting's time on a warm cache) failed its outer trial with no mark, so a resumed run never trained
    it again, although its runs counted: the front lost that setting for good."""
    import dse.search.strategies.hybrid as hy

    spec = replace(_hybrid(study_file), trials=3)
    real, calls = hy.evaluate_hardware, []

    def interrupted(*a, **kw):
        calls.append(1)
        if len(calls) == 2:  # the second point of the first setting: a signal in dse's own code raises here
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(hy, "evaluate_hardware", interrupted)
    assert run(spec)["interrupted"]
    monkeypatch.setattr(hy, "evaluate_hardware", real)
    outer, main = _outer_and_main(spec, study_file)
    cut = outer.get_trials()[0]
    assert cut.state == TrialState.FAIL and cut.user_attrs.get("cut_short") and "fail_reason" not in cut.user_attrs
    assert not main.get_trials()  # nothing entered, nothing left running
    run(spec)
    retry = [t for t in outer.get_trials() if t.user_attrs.get("retry_of") == cut.number]
    assert [t.state for t in retry] == [TrialState.COMPLETE] and retry[0].params == cut.params
    assert len(main.get_trials(states=(TrialState.COMPLETE,))) == 3


def test_a_signal_while_points_are_entered_stops_the_run_after_the_batch(study_file, monkeypatch):
    """A signal between a point's trial being created (RUNNING) and told left it RUNNING with no owner record
    and its setting unmarked; the batch now finishes and the run stops after the step."""
    import os
    import signal
    import sys

    spec = replace(_hybrid(study_file), trials=3)
    storage = type(open_study(spec, create=True)._storage)  # the class the run writes through (Optuna's cache)
    real, calls = storage.create_new_trial, []

    def create_then_signal(self, *a, **kw):
        tid = real(self, *a, **kw)
        if sys._getframe(1).f_code.co_name == "_enter":  # a point's trial, not the outer study's
            calls.append(tid)
            if len(calls) == 1:
                os.kill(os.getpid(), signal.SIGINT)  # delivered here, in the batch
        return tid

    monkeypatch.setattr(storage, "create_new_trial", create_then_signal)
    res = run(spec)
    monkeypatch.undo()
    outer, main = _outer_and_main(spec, study_file)
    assert res["interrupted"] and len(calls) >= 2
    assert not main.get_trials(states=(TrialState.RUNNING,))
    assert [t.state for t in outer.get_trials()] == [TrialState.COMPLETE]


def test_a_setting_cut_short_at_the_end_of_the_run_budget_is_still_finished_on_resume(study_file):
    """Its runs count toward the budget: with no room left for a new setting, the resumed run queued its retry
    and failed it at once ('queued by a run that stopped'), so the runs stayed held with no point entered."""
    spec = replace(_hybrid(study_file), trials=12).with_overrides(runs=2)  # one seed per setting: two settings
    run(replace(spec, trials=3))  # one setting trained: 1 of the 2 runs held
    outer, main = _outer_and_main(spec, study_file)
    done = outer.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 1
    left = [w for w in (4, 8, 16, 32, 64, 128) if w != done[0].params["training.pred_width"]][-1]
    outer.add_trial(optuna.trial.create_trial(  # a second setting cut short after its one run: 2 of 2 held
        state=TrialState.FAIL, params={"training.pred_width": left}, distributions=done[0].distributions,
        user_attrs={"trained": True, "seeds": 1, "cut_short": True}))
    res = run(spec)
    retry = [t for t in outer.get_trials() if t.user_attrs.get("retry_of") == done[0].number + 1]
    assert [t.state for t in retry] == [TrialState.COMPLETE], [t.user_attrs for t in retry]
    assert any(t.params.get("training.pred_width") == left for t in main.get_trials(states=(TrialState.COMPLETE,)))
    assert res["training_runs"] == 2  # the budget is not exceeded


def test_a_study_file_cannot_open_a_hybrid_studys_own_outer_study(study_file, cli):
    """A joint study named 'tiny.training' on the hybrid study tiny's storage ran the hybrid's queued retry as a
    joint trial. Refused by the outer study's mark, not by the name: on its own storage that name is free."""
    spec = replace(_hybrid(study_file), trials=3)
    run(spec)
    outer, _ = _outer_and_main(spec, study_file)
    before = len(outer.get_trials())
    other = study_file.with_name("other.toml")
    other.write_text(study_file.read_text().replace('name = "tiny"', 'name = "tiny.training"')
                     .replace('strategy = "hybrid"', 'strategy = "joint"'))
    url = f"sqlite:///{study_file.parent / 'tiny.db'}"
    r = cli("run", other, "--storage", url, "--trials", "2", "--quiet")
    assert r.returncode == 2 and "is the hybrid strategy's own study of 'tiny'" in r.stderr, r.stderr
    assert len(outer.get_trials()) == before
    assert cli("run", other, "--trials", "1", "--quiet").returncode == 0  # its own storage: no clash


@pytest.mark.parametrize("inner_points", [None, 12])
def test_a_setting_whose_points_the_trial_budget_cut_enters_the_rest_when_the_run_resumes(study_file, inner_points):
    """A run that reaches its trial budget in the middle of a setting's sub-front enters only part of it; a
    resumed run with a larger budget used to go on to new settings and never enter the rest (the setting
    counts as searched). It now enters them first: the cut setting holds the points one run of the larger
    budget gives it -- its hardware sample too, when the grid is sampled (inner_points) -- and, on the whole
    grid, the two runs hold the points one run holds (the grid walk's order does not depend on the history)."""
    text = study_file.read_text().replace('sampler = "nsga2"', 'sampler = "grid"')
    study_file.write_text(text)
    one = replace(_hybrid(study_file), trials=12)
    if inner_points:
        one = one.with_overrides(inner_points=inner_points)

    def points(main, setting=None):
        return sorted(str(sorted(t.params.items())) for t in main.get_trials(states=(TrialState.COMPLETE,))
                      if setting is None or all(t.params[k] == v for k, v in setting.items()))

    res = run(one)
    assert res["finished"] == 12
    outer, main = _outer_and_main(one, study_file)
    want = points(main)
    first, second = (t.user_attrs["entered_points"] for t in outer.get_trials()[:2])
    assert second >= 2
    (study_file.parent / "tiny.db").unlink()
    # the second setting's sub-front cut after its first point
    assert run(replace(one, trials=first + 1))["finished"] == first + 1
    outer, main = _outer_and_main(one, study_file)
    cut = outer.get_trials()[-1]
    assert cut.user_attrs["points_left"] == second - 1 and cut.user_attrs["entered_points"] == 1
    with dse.open_study(one) as s:  # the stopping signal does not say more trials would run nothing new
        assert "nothing new" not in s.status()["last_10pct"]
    res = run(one)
    got = points(main, cut.params)
    assert len(got) == second and set(got) <= set(want)  # the sub-front one run gives it, whole
    finish = [t for t in outer.get_trials() if t.user_attrs.get("finish_of") == cut.number]
    assert len(finish) == 1 and finish[0].user_attrs["entered_points"] == second - 1
    assert finish[0].user_attrs["seeds"] == cut.user_attrs["seeds"]  # costed again on the same seeds
    assert "points_left" not in finish[0].user_attrs
    trained = [str(sorted(t.params.items())) for t in outer.get_trials() if t.user_attrs.get("trained")]
    assert res["surrogate_runs"] == len(set(trained)) == len(trained) - 1  # the finished one not a second setting
    if not inner_points:
        assert points(main) == want


def test_a_dead_workers_finish_trial_is_retried_as_a_finish(tmp_path):
    """A trial queued to enter the rest of a cut sub-front (finish_of) whose worker died was retried without
    finish_of: the retry found the setting trained already and entered nothing (until a later run queued the
    finish again). Its retry keeps what it was queued to do, and nothing of what it did."""
    from optuna.distributions import CategoricalDistribution

    from dse.search.runguard import _HOST, owner
    from dse.search.study import open_storage, recover_dead_workers

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'd.db'}"), directions=["minimize"])
    t = study.ask({"training.pred_width": CategoricalDistribution([8, 32])})
    for k, v in {"worker": f"{_HOST}:{os.getpid()}:not-this-process", "finish_of": 3, "trained": True,
                 "seeds": 2}.items():
        t.set_user_attr(k, v)
    assert recover_dead_workers(study) == [t.number]
    retry = study.get_trials(states=(TrialState.WAITING,))
    assert len(retry) == 1 and retry[0].system_attrs["fixed_params"] == t.params
    assert retry[0].user_attrs == {"retry_of": t.number, "finish_of": 3, "queued_by": owner()}


def test_points_pruned_when_other_workers_met_the_budget_are_entered_when_the_run_resumes(study_file, monkeypatch):
    """Under several workers a setting's points are created and then pruned ("budget reached by other
    workers") when the others met the budget first: they count in points_left, and the resumed run's finish
    enters them (it skipped them as if they were in the study)."""
    from dse.search.runner import Runner

    study_file.write_text(study_file.read_text().replace('sampler = "nsga2"', 'sampler = "grid"'))
    one = replace(_hybrid(study_file), trials=12)
    real = Runner.remaining
    monkeypatch.setattr(Runner, "remaining", lambda self: real(self) + 5)  # as if the others had not met it
    assert run(replace(one, trials=4))["finished"] == 4
    monkeypatch.setattr(Runner, "remaining", real)
    outer, main = _outer_and_main(one, study_file)
    cut = outer.get_trials()[-1]
    pruned = [t for t in main.get_trials(states=(TrialState.PRUNED,))
              if t.user_attrs.get("training_trial") == cut.number]
    assert pruned and cut.user_attrs["points_left"] == len(pruned)
    run(one)
    entered = {str(sorted(t.params.items())) for t in main.get_trials(states=(TrialState.COMPLETE,))}
    assert {str(sorted(t.params.items())) for t in pruned} <= entered


def test_a_walked_grid_with_a_sub_front_cut_is_not_covered_until_its_rest_is_entered(study_file):
    """Every setting of the grid taken, the last one's sub-front cut by the trial budget: the stopping signal
    said more trials would run nothing new (GRID_DONE), though a resumed run enters the rest; it says so only
    once the rest is in."""
    import dse.search.strategies.hybrid as hy

    study_file.write_text(study_file.read_text().replace('sampler = "nsga2"', 'sampler = "grid"'))
    full = replace(_hybrid(study_file), trials=1000)
    run(full)
    outer, main = _outer_and_main(full, study_file)
    entered = [t.user_attrs["entered_points"] for t in outer.get_trials() if t.user_attrs.get("trained")]
    assert len(entered) == 6 and entered[-1] >= 2
    (study_file.parent / "tiny.db").unlink()
    cut = replace(full, trials=sum(entered[:-1]) + 1)  # the sixth setting cut after its first point
    run(cut)
    _, main = _outer_and_main(cut, study_file)
    assert hy.Hybrid.covered(cut, main) is None
    run(full)
    _, main = _outer_and_main(full, study_file)
    assert hy.Hybrid.covered(full, main) == hy.GRID_DONE
    assert len(main.get_trials(states=(TrialState.COMPLETE,))) == sum(entered)
