"""The study figures: 2-D fronts, parallel coordinates, energy breakdown, honest importance for hybrid."""

from __future__ import annotations

import numpy as np
import pytest

from dse.figures.charts import first_order_importance, nondominated_2d
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


def test_first_order_importance_closed_form():
    a, b = np.meshgrid(np.arange(4.0), np.arange(3.0), indexing="ij")
    a, b = a.ravel(), b.ravel()
    imp = first_order_importance({"a": a, "b": b}, 2 * a)
    assert imp["a"] == pytest.approx(1.0) and imp["b"] == pytest.approx(0.0)
    imp = first_order_importance({"a": a, "b": b}, a + b)  # additive: shares are the variances' shares
    assert imp["a"] == pytest.approx(np.var(a) / (np.var(a) + np.var(b)))
    assert first_order_importance({"a": a}, np.ones_like(a)) == {"a": 0.0}


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
