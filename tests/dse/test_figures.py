"""The study figures: 2-D fronts, parallel coordinates, energy breakdown, honest importance for hybrid."""

from __future__ import annotations

import numpy as np
import pytest

from dse.figures.charts import nondominated_2d
from studyfiles import edit, with_strategy


def test_nondominated_2d_by_brute_force():
    rng = np.random.default_rng(0)
    for dx, dy in (("minimize", "minimize"), ("maximize", "minimize"), ("maximize", "maximize")):
        x, y = rng.integers(0, 8, 40).astype(float), rng.integers(0, 8, 40).astype(float)
        sx, sy = (-1 if dx == "maximize" else 1), (-1 if dy == "maximize" else 1)
        want = set()
        for i in range(len(x)):
            dominated = any(sx * x[j] <= sx * x[i] and sy * y[j] <= sy * y[i] and
                            (sx * x[j] < sx * x[i] or sy * y[j] < sy * y[i]) for j in range(len(x)))
            if not dominated:
                want.add((x[i], y[i]))
        got = nondominated_2d(x, y, dx, dy)
        assert {(x[i], y[i]) for i in got} == want and len(got) == len(want)  # duplicates kept once
        assert list(x[got]) == sorted(x[got])


def test_fanova_shares_are_shares():
    """Optuna's fANOVA, not normalized: a knob that alone makes the objective gets (nearly) all of it, an
    unused knob nothing; with an interaction the first-order shares add up to less than 1."""
    from dse.config.space import Choice, Space
    from dse.figures.plots import fanova_shares

    space = Space((("training.a", Choice((0, 1, 2, 3))), ("hardware.b", Choice((0, 1, 2)))))
    params = [{"training.a": a, "hardware.b": b} for a in range(4) for b in range(3)] * 3
    a = np.array([p["training.a"] for p in params], float)
    b = np.array([p["hardware.b"] for p in params], float)
    got = fanova_shares(params, {"alone": 2 * a, "product": (a - 1.5) * (b - 1)}, space)
    assert got["alone"]["training.a"] > 0.95 and got["alone"]["hardware.b"] < 0.02
    # a pure interaction: no first-order share in truth; the forest's estimate over 36 points is 0.37, far
    # from the 1 a normalized importance would claim
    assert sum(got["product"].values()) < 0.5
    assert all(0 <= v <= 1 for d in got.values() for v in d.values())
    assert all(sum(d.values()) <= 1 + 1e-9 for d in got.values())


def test_study_plots_are_all_written(cli, ran_study, tmp_path):
    r = cli("plot", ran_study, "--out", tmp_path)
    assert r.returncode == 0, r.stderr
    for stem in ("objectives", "front-parallel", "energy", "hypervolume", "importance"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 10_000, stem


def test_hybrid_importance_uses_every_costed_hardware_point(cli, ran_study, tmp_path):
    """The rebuilt points of a hybrid study hold, for each trained setting, the whole hardware grid, with
    the metrics the stored trials recorded for the points they entered."""
    from dse.search.strategies.hybrid import costed_points, hardware_candidates
    from dse.search.study import open_study
    from dse.search.studyfile import load_study

    p = tmp_path / "hyb.toml"
    p.write_text(with_strategy(edit('name = "tiny"', 'name = "hyb"', ran_study.read_text()), "hybrid", front_size=3)
                 .replace("trials = 12", "trials = 6"))
    assert cli("run", p, "--quiet").returncode == 0
    spec = load_study(p)
    study = open_study(spec, create=False)
    X, Y, n_set, n_pts = costed_points(spec, study)
    grid = len(hardware_candidates(spec, max_points=spec.inner_points, seed=0))
    assert n_pts == n_set * grid and n_set >= 1
    assert set(X) == {n for n, _ in spec.space.searched()}
    # every entered trial is one of the rebuilt points, with the same objective values
    for t in study.get_trials(deepcopy=False):
        if t.values is None:
            continue
        hit = np.ones(n_pts, dtype=bool)
        for k, v in t.params.items():
            hit &= X[k].astype(str) == str(v)
        assert hit.sum() == 1
        for m, v in zip(spec.metrics, t.values):
            assert Y[m][hit][0] == pytest.approx(v, rel=1e-9)
    # a sample is costed on its own: the same points and figures as those rows of the whole costing
    Xs, Ys, n_set_s, n_pts_s = costed_points(spec, study, sample=n_pts // 3)
    idx = np.sort(np.random.default_rng(0).choice(n_pts, n_pts // 3, replace=False))
    assert (n_set_s, n_pts_s) == (n_set, n_pts) and set(Xs) == set(X) and set(Ys) == set(Y)
    for k in X:
        assert list(Xs[k]) == list(X[k][idx])
    for m in Y:
        assert np.array_equal(Ys[m], Y[m][idx], equal_nan=True)


def _text_boxes(fig) -> list[tuple[str, object]]:
    """Every piece of text the figure draws (tick labels inside the axis range, axis labels, titles, texts,
    legends), with its box on the canvas."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    out, seen = [], set()

    def add(t):
        if t is not None and id(t) not in seen and t.get_visible() and t.get_text().strip():
            seen.add(id(t))
            out.append((t.get_text(), t.get_window_extent(r)))

    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            lo, hi = sorted(lim)
            eps = 1e-9 * (hi - lo)
            for tick in axis.get_major_ticks():
                if lo - eps <= tick.get_loc() <= hi + eps:
                    add(tick.label1)
                    add(tick.label2)
            add(axis.label)
        add(ax.title)
        for t in ax.texts:
            add(t)
        if ax.get_legend() is not None:
            for t in [*ax.get_legend().get_texts(), ax.get_legend().get_title()]:
                add(t)
    for t in fig.texts:
        add(t)
    add(getattr(fig, "_suptitle", None))
    for leg in fig.legends:
        for t in [*leg.get_texts(), leg.get_title()]:
            add(t)
    return out


def text_overlaps(fig, tol: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of texts whose boxes overlap by more than ``tol`` pixels both ways."""
    boxes = _text_boxes(fig)
    bad = []
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            if a.x0 < b.x1 - tol and b.x0 < a.x1 - tol and a.y0 < b.y1 - tol and b.y0 < a.y1 - tol:
                bad.append((ta, tb))
    return bad


def test_text_overlap_check_finds_an_overlap():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 100000], [0, 1])
    ax.set_xticks([0, 20000, 40000, 60000, 80000, 100000])  # "100000" labels crowd a 3-inch axis
    ax.tick_params(labelsize=14)
    assert text_overlaps(fig)
    plt.close(fig)


def test_quickstart_like_plots_have_no_overlapping_text_and_units_on_ticks(cli, ran_study, tmp_path):
    """A small hybrid study shaped as the quick start (four objectives with energy, a categorical knob, a
    bundle, an area constraint): no two texts of any figure overlap at the default size; energy ticks are
    SI-prefixed with their unit; the parallel coordinates show the categorical knob and the bundle's fields
    and leave out the knobs constant on the front."""
    import matplotlib.pyplot as plt

    from dse.figures.plots import study_figures
    from dse.search.study import open_study
    from dse.search.studyfile import load_study

    text = with_strategy(edit('name = "tiny"', 'name = "qs"', ran_study.read_text()), "hybrid", front_size=4)
    text = text.replace("pred_width = [8, 32]", 'pred_width = [8, 32]\npred_features = ["level", "deviation"]')
    text = text.replace('[[objectives]]\nmetric = "area_mm2"',
                        '[[objectives]]\nmetric = "energy_j"\n\n[[objectives]]\nmetric = "area_mm2"')
    p = tmp_path / "qs.toml"
    p.write_text(text)
    assert cli("run", p, "--quiet").returncode == 0
    spec = load_study(p)
    assert len(spec.metrics) == 4
    seen, warned = set(), []
    for stem, fig in study_figures(open_study(spec, create=False), spec, warned.append):
        seen.add(stem)
        assert text_overlaps(fig) == [], stem
        texts = [t for t, _ in _text_boxes(fig)]
        if stem == "objectives":
            assert any(t.endswith(" kJ") or t.endswith(" MJ") or t.endswith(" J") for t in texts)
            assert not any(len(t) > 5 and t.isdigit() for t in texts)  # no 100000 on an axis
        if stem == "front-parallel":
            joined = " ".join(texts)
            assert "pred_\nfeatures" in joined or "pred_features" in joined, joined
            assert "hardware.predictor_unit" not in joined
        if stem == "importance":  # the settings it rests on, and a warning: 2 training knobs need 8 settings
            joined = " ".join(texts)
            n = len({(t.params["training.pred_width"], t.params["training.pred_features"])
                     for t in open_study(spec, create=False).get_trials() if t.state.name == "COMPLETE"})
            assert f"rest on {n} distinct training setting" in joined, joined
            assert n < 8 and "Warning" in joined and warned and f"only {n} distinct training settings" in warned[0]
        plt.close(fig)
    assert seen == {"objectives", "front-parallel", "energy", "hypervolume", "importance"}


def test_every_method_has_its_own_colour_and_unlisted_ones_distinct_shades_of_another():
    from dse.figures.charts import METHODS, method_colours

    listed = method_colours(list(METHODS))
    assert len(set(listed.values())) == len(METHODS)
    extra = method_colours([*METHODS, "mine", "theirs"])
    assert extra["mine"] != extra["theirs"] and not {extra["mine"], extra["theirs"]} & set(listed.values())


def test_the_hypervolume_history_is_the_fronts_at_sampled_trials_not_every_prefix_from_scratch(ran_study,
                                                                                                 monkeypatch):
    """`dse plot` recomputed the hypervolume of every prefix of the trials from scratch: 88 s at 10^4 trials,
    more than 3 minutes at 2 x 10^4. It keeps the front as trials arrive and computes the hypervolume at most
    HISTORY_POINTS times; each value is the prefix's exact hypervolume."""
    import moocore

    from dse.figures import plots
    from dse.search.pareto import hypervolume
    from dse.search.study import hv_reference, load_points, open_study
    from dse.search.studyfile import load_study

    spec = load_study(ran_study)
    study = open_study(spec, create=False)
    monkeypatch.setattr(plots, "HISTORY_POINTS", 5)
    calls = []
    real = moocore.hypervolume
    monkeypatch.setattr(moocore, "hypervolume", lambda *a, **k: calls.append(1) or real(*a, **k))
    figs = dict(plots.study_figures(study, spec))
    line = figs["hypervolume"].axes[0].lines[0]
    xs, ys = list(line.get_xdata()), list(line.get_ydata())
    n = len(study.trials)
    assert len(xs) <= 6 and xs[-1] == n - 1 and len(calls) <= 6 < n  # (12 trials: one in three, and the last)
    monkeypatch.setattr(moocore, "hypervolume", real)
    pts = load_points(study, spec)
    for x, y in zip(xs, ys):
        want = hypervolume([p for p in pts if p.number <= x], spec.directions, hv_reference(spec))
        assert y == pytest.approx(want, rel=1e-12)
    import matplotlib.pyplot as plt

    for f in figs.values():
        plt.close(f)


def test_a_large_studys_grey_trials_are_an_image_in_the_svg_and_its_front_stays_vector(tmp_path):
    """At 10^4 trials the objective pairs' SVG was 9 MB of markers (seconds to write and to open)."""
    import io

    import matplotlib.pyplot as plt

    from dse.figures import charts
    from dse.search.pareto import Point
    from dse.search.studyfile import load_study
    from studyfiles import write_study

    spec = load_study(write_study(tmp_path))
    rng = np.random.default_rng(0)

    def svg(n):
        pts = [Point(i, tuple(float(x) for x in rng.uniform(1, 2, len(spec.metrics))), {}, {}, True, {})
               for i in range(n)]
        fig = charts.objective_pairs(spec, pts, {0, 1}, lambda m, d: m)
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
        plt.close(fig)
        return buf.getvalue()

    small, large = svg(200), svg(charts.RASTER_ABOVE + 1000)
    assert "<image" not in small  # every marker a vector mark
    # 16x the grey trials, one image per pair: under twice the size (drawn as markers, 16x)
    assert large.count("<image") == 3 and len(large) < 2 * len(small)


def test_a_joint_studys_importance_rests_on_a_sample_of_its_trials(ran_study, monkeypatch):
    """fANOVA's time grows with its points (about 20 s an objective at 10^4): a joint study's importance, like
    the hybrid's, is computed over a sample (seed 0) of at most MAX_IMPORTANCE_POINTS complete trials, and the
    figure says so."""
    import matplotlib.pyplot as plt

    from dse.figures import plots
    from dse.search.study import open_study
    from dse.search.studyfile import load_study

    spec = load_study(ran_study)
    study = open_study(spec, create=False)
    complete = [dict(t.params) for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 12
    real, seen = plots.fanova_shares, []
    monkeypatch.setattr(plots, "fanova_shares", lambda params, *a, **k: seen.append(params) or real(params, *a, **k))
    monkeypatch.setattr(plots, "MAX_IMPORTANCE_POINTS", 5)
    titles = []
    for _ in range(2):
        figs = dict(plots.study_figures(study, spec))
        titles.append(figs["importance"].axes[0].get_title())
        for f in figs.values():
            plt.close(f)
    assert len(seen) == 2 and seen[0] == seen[1]  # the same sample each time
    assert len(seen[0]) == 5 and all(p in complete for p in seen[0])
    assert len({tuple(sorted(p.items())) for p in seen[0]}) == 5  # drawn without replacement
    assert "5 of the 12 complete trials" in titles[0]
    monkeypatch.setattr(plots, "MAX_IMPORTANCE_POINTS", 1000)
    figs = dict(plots.study_figures(study, spec))
    assert len(seen[-1]) == 12 and "12 complete trials" in figs["importance"].axes[0].get_title()
    for f in figs.values():
        plt.close(f)


def test_a_trial_chosen_twice_for_the_energy_figure_keeps_both_names(ran_study):
    """The energy figure's bars: the knee and each objective's best, a trial once; a trial best in two
    objectives was named after the first only (found by probing: no bar said "best energy_j")."""
    from dse.figures.plots import _chosen_points
    from dse.search.pareto import Point
    from dse.search.studyfile import load_study

    spec = load_study(ran_study)
    n = len(spec.metrics)
    # trial 1 is best in every objective at once; trial 2 is the other end, so the knee is one of them
    best = tuple(100.0 if d == "maximize" else 0.0 for d in spec.directions)
    worst = tuple(0.0 if d == "maximize" else 100.0 for d in spec.directions)
    pts = [Point(1, best, {}, {}, True, {}), Point(2, worst, {}, {}, True, {})]
    labels = [name for name, _ in _chosen_points(spec, pts)]
    one = next(lbl for lbl in labels if lbl.startswith("trial 1\n"))
    assert all(f"(best {m})" in one for m in spec.metrics) and one.count("\n") >= n
    assert len(labels) == len({lbl.split("\n")[0] for lbl in labels})  # each trial once


def test_compare_figure_labels_ticks_with_units_as_dse_plot_does(tmp_path, monkeypatch):
    """`dse compare --plot` wrote plain numbers (60000 with a 1e4 above the axis) where `dse plot` writes 60 kJ."""
    import matplotlib.pyplot as plt

    from dse.figures.charts import compare_figure

    drawn = []
    monkeypatch.setattr(plt, "close", lambda fig: drawn.append(fig))
    fronts = {"a": {"values": [[1.2, 52000.0], [1.5, 61000.0]]}, "b": {"values": [[1.3, 48000.0]]}}
    compare_figure(fronts, ["speedup", "energy_j"], ["maximize", "minimize"], ["speed-up", "energy (J)"],
                   [1.0, 70000.0], tmp_path / "c.png")
    ax = drawn[0].axes[0]
    labels = [t.get_text() for t in ax.yaxis.get_ticklabels() if t.get_text()]
    assert labels and all(t.endswith(" kJ") for t in labels), labels
    assert not ax.yaxis.get_offset_text().get_text()
