"""bench/hvi_variants.py: the accuracy models it swaps into the hvi selection behave as documented."""

from pathlib import Path

import numpy as np
import pytest

from dse.search.hvi import one_hot
from dse.search.studyfile import load_study
from repo_scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_script(ROOT / "bench" / "hvi_variants.py")


def _settings():
    return [{"a": a, "b": b, "c": c} for a in (1, 2, 3, 4) for b in ("x", "y", "z") for c in (0, 1)]


def test_ard_shrinks_a_knob_that_does_not_move_the_value():
    """Data that only knob a moves (plus noise): its prior scale is fitted far above b's and c's, and the
    predictions are closer to the noiseless truth than the shipped shared-scale model's."""
    hv = _bench()
    from dse.search.hvi import AdditiveModel

    settings = _settings()
    X = one_hot(settings)
    a_eff = {1: 0.0, 2: 1.0, 3: 2.5, 4: 4.5}
    truth = np.array([a_eff[s["a"]] for s in settings])
    rng = np.random.default_rng(0)
    errs = {"ard": [], "shipped": []}
    for rep in range(5):
        y = truth + rng.normal(0, 0.6, len(truth))
        rows = np.sort(rng.choice(len(settings), 12, replace=False))
        m = hv.ArdModel(X, hv.knob_groups(settings))
        mu, sd = m.predict(rows, y[rows])
        scales = np.exp(m.theta[:-1])
        assert scales[0] > 2 * max(scales[1], scales[2])  # the shared-scale model: equal by construction
        assert np.all(sd > 0)
        errs["ard"].append(np.sqrt(np.mean((mu - truth) ** 2)))
        mu0, _ = AdditiveModel(X).predict(rows, y[rows])
        errs["shipped"].append(np.sqrt(np.mean((mu0 - truth) ** 2)))
    assert np.mean(errs["ard"]) < np.mean(errs["shipped"])


def test_thompson_draws_vary_and_center_on_the_posterior_mean():
    hv = _bench()
    settings = _settings()
    X = one_hot(settings)
    rng = np.random.default_rng(1)
    y = np.array([s["a"] * 1.0 for s in settings]) + rng.normal(0, 0.3, len(settings))
    rows = np.arange(0, len(settings), 2)
    mean, _ = hv.ArdModel(X, hv.knob_groups(settings)).predict(rows, y[rows])
    ts = hv.ArdModel(X, hv.knob_groups(settings), thompson=True, seed=3)
    draws = np.array([ts.predict(rows, y[rows])[0] for _ in range(200)])
    assert draws.std(axis=0).min() > 0
    assert np.abs(draws.mean(axis=0) - mean).max() < 0.1


def test_bma_is_the_shipped_model_when_one_scale_pair_holds_the_evidence(monkeypatch):
    """Averaged over a grid of one (prior, noise) pair, the mixture is that pair's posterior: the shipped
    model's with the same grid; over the full grid its mean lies within its pairs' means."""
    from dse.search import hvi
    from dse.search.hvi import AdditiveModel

    hv = _bench()
    settings = _settings()
    X = one_hot(settings)
    rng = np.random.default_rng(2)
    y = np.array([s["a"] + (s["b"] == "y") for s in settings], dtype=float) + rng.normal(0, 0.5, len(settings))
    rows = np.sort(rng.choice(len(settings), 12, replace=False))
    monkeypatch.setattr(hvi, "_HVI_TAUS", (0.75,))
    monkeypatch.setattr(hvi, "_HVI_SIGMAS", (0.35,))
    mu0, sd0 = AdditiveModel(X).predict(rows, y[rows])
    mu1, sd1 = hv.BmaModel(X, taus=(0.75,), sigmas=(0.35,)).predict(rows, y[rows])
    assert np.allclose(mu0, mu1) and np.allclose(sd0, sd1)
    full = hv.BmaModel(X)
    mu, sd = full.predict(rows, y[rows])
    means = np.array([hv.BmaModel(X, taus=(t,), sigmas=(s,)).predict(rows, y[rows])[0] for t, s in full.grid])
    assert np.all(mu >= means.min(axis=0) - 1e-9) and np.all(mu <= means.max(axis=0) + 1e-9)
    assert np.all(sd > 0)


def test_ord_with_short_lengths_is_the_shipped_model_and_longer_ones_borrow_between_neighbours():
    """Function space against weight space: with a correlation length far below the levels' spacing the
    ordinal model's predictive mean and spread are the shipped model's for the same scales; with a long one,
    a level never trained (a = 3 between 2 and 4) is predicted near its neighbours' values, where the shipped
    model can only give it the constant's."""
    from dse.search.hvi import AdditiveModel

    hv = _bench()
    settings = _settings()
    X = one_hot(settings)
    rng = np.random.default_rng(4)
    a_eff = {1: 0.0, 2: 1.0, 3: 2.0, 4: 3.0}
    y = np.array([a_eff[s["a"]] for s in settings]) + rng.normal(0, 0.2, len(settings))
    rows = np.sort(rng.choice(len(settings), 12, replace=False))
    mu0, sd0 = AdditiveModel(X).predict(rows, y[rows])
    ordm, kgm = hv.OrdModel(X, settings, lengths=(1e-3,)), hv.KgModel(X)
    mu1, sd1 = ordm.predict(rows, y[rows])
    assert np.allclose(mu0, mu1, atol=1e-8) and np.allclose(sd0, sd1, atol=1e-8)
    kgm.predict(rows, y[rows])  # the covariance of the settings' means (ord-kg1's lookahead), both forms
    idx = np.arange(0, len(settings), 3)
    assert np.allclose(ordm.mean_cov(idx), kgm.mean_cov(idx), atol=1e-7)
    rows = np.array([i for i, s in enumerate(settings) if s["a"] != 3])
    three = np.array([s["a"] == 3 for s in settings])
    for m in (hv.OrdModel(X, settings, lengths=(1.0,)), AdditiveModel(X)):
        mu, _ = m.predict(rows, y[rows])
        err = np.abs(mu[three] - 2.0).mean()
        if isinstance(m, hv.OrdModel):
            assert err < 0.3, err
        else:
            assert err > 0.3, err  # the shipped model: the constant, about the values' mean (1.33)


@pytest.mark.parametrize("variant", ["shipped", "known", "ard", "ard-ts", "bma", "kg", "kg1", "fit50", "fit100",
                                     "ord", "ord-kg1"])
def test_every_variant_chooses_with_its_own_model_on_the_tiny_space(study_file, variant, monkeypatch):
    """With one random setting first, the second choice is the variant's model's (its predict is called),
    and the two settings of the tiny space make the exact front."""
    hv = _bench()
    from dse.search.hvi import AdditiveModel
    from dse.search.strategies.hybrid import points_before_training

    cls = {"shipped": AdditiveModel, "known": hv.KnownModel, "ard": hv.ArdModel, "ard-ts": hv.ArdModel,
           "bma": hv.BmaModel, "kg": hv.KgModel, "kg1": hv.KgModel, "fit50": hv.KnownModel,
           "fit100": hv.KnownModel, "ord": hv.OrdModel, "ord-kg1": hv.OrdModel}[variant]
    calls = []
    predict = cls.predict

    means = []

    def counted(self, rows, y):
        calls.append(len(rows))
        mu, sd = predict(self, rows, y)
        means.append(mu)
        return mu, sd

    monkeypatch.setattr(cls, "predict", counted)
    spec = load_study(study_file).with_overrides(front_size=1000)
    t = hv.sq.Truth(spec, jobs=1)
    pre = [points_before_training(spec, s, t.hw_points, t.arr, t.ref, {}) for s in t.settings]
    out = hv.run(t, pre, variant, 0, [1, 2], top=0, startup=1)
    assert calls == [1]
    assert 0 < out["share"][1] <= out["share"][2] == pytest.approx(1.0)
    assert set(out["trained_top"]) == {1, 2} and out["trained_top"][2]  # by 2 runs every setting is trained
    # the model's distance from the fit over every setting, when it chose the second setting
    exp = hv.sq.expected_training_values(t)[:, 0]
    assert set(out["model_rms"]) == {2} and out["model_rms"][2] >= 0
    # what was logged is the distance of the prediction that chose the second setting (the one counted above)
    assert out["model_rms"][2] == pytest.approx(np.sqrt(np.mean((means[0] - exp) ** 2)))
    assert out["top_mean"][2] == pytest.approx(means[0][0])
    if variant == "known":
        assert out["model_rms"][2] == 0 and out["top_mean"][2] == exp[0]


def test_known_is_the_additive_fit_over_every_setting(study_file):
    hv = _bench()
    from dse.search.hvi import HviSelector

    t = hv.sq.Truth(load_study(study_file), jobs=1)
    sel = HviSelector(t.settings, lambda i: np.zeros((0, len(t.directions))), t.directions, t.ref, [0])
    hv.configure(t, "known", 0)(sel)
    mu, sd = sel.model.predict(np.array([0]), np.array([123.0]))  # what it is told changes nothing
    exp = hv.sq.expected_training_values(t)
    assert np.array_equal(mu, exp[:, 0])
    assert np.all(sd == hv.sq.residual_std(t, exp)[0])


def _synthetic_selector(seed):
    """An hvi selector on 24 settings of three knobs, each with 5 random hardware points (3 objectives
    minimised) and one training objective (minimised)."""
    from dse.search.hvi import HviSelector

    settings = _settings()
    rng = np.random.default_rng(seed)
    hw = [rng.uniform(0.1, 1.0, (5, 3)) for _ in settings]
    value = np.array([0.5 * s["a"] + (s["b"] == "y") - 0.3 * s["c"] for s in settings]) + rng.normal(0, 0.4, 24)

    def points(i):
        return np.hstack([np.zeros((5, 1)), hw[i]])

    sel = HviSelector(settings, points, ["minimize"] * 4, [6.0, 1.1, 1.1, 1.1], [0], startup=3)
    return sel, value


def _choices(sel, value, nxt, n, seed):
    """The first ``n`` settings ``nxt`` chooses, each trained (its value told) before the next choice."""
    rng = np.random.default_rng(seed)
    trained, front = {}, np.zeros((0, 4))
    for _ in range(n):
        i = nxt(trained, set(), front, rng)
        trained[i] = [float(value[i])]
        p = sel.points(i).copy()
        p[:, 0] = value[i]
        front = np.vstack([front, p])
    return list(trained)


def test_kg_without_a_horizon_chooses_as_the_shipped_rule():
    """kg's expected improvement (interpolated between the front's accuracy values) is the shipped rule's:
    with no lookahead it chooses the same settings in the same order; with one it starts with the same random
    settings and chooses otherwise somewhere in the three searches."""
    hv = _bench()
    differs = []
    for seed in (0, 1, 2):
        sel, value = _synthetic_selector(seed)
        shipped = _choices(sel, value, sel.next, 14, seed)
        sel.model = hv.KgModel(sel.model.X)
        assert _choices(sel, value, lambda *a: hv.kg_next(sel, lambda n: 0.0, *a), 14, seed) == shipped
        looked = _choices(sel, value, lambda *a: hv.kg_next(sel, lambda n: 20.0, *a), 14, seed)
        assert looked[:3] == shipped[:3] and len(set(looked)) == 14
        differs.append(looked != shipped)
    assert any(differs)


@pytest.mark.parametrize("args, message", [
    (["--startup", "0"], "--startup: 0; at least 1 (the first setting is always drawn at random)"),
    (["--first-seed", "-1"], "--first-seed: must be an integer from 0 to 1000000, got -1"),
])
def test_a_bad_option_is_refused_in_one_line(monkeypatch, capsys, args, message):
    import sys

    hv = _bench()
    monkeypatch.setattr(sys, "argv", ["hvi_variants.py", "--study", str(ROOT / "studies" / "quickstart.toml"), *args])
    with pytest.raises(SystemExit) as e:
        hv.main()
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip() == f"hvi_variants: error: {message}"


def test_fit_variants_use_the_shipped_model_fitted_on_a_seeded_random_draw(study_file):
    """fit50 / fit100: the means of the shipped model fitted on that many settings drawn at random (all of
    them when the space has fewer), the draw fixed by the search seed and differing between seeds; the spread
    as known's."""
    hv = _bench()
    from dse.search.hvi import AdditiveModel, HviSelector

    spec = load_study(study_file).with_overrides(front_size=1000)
    t = hv.sq.Truth(spec, jobs=1)
    models = []
    for variant, seed in (("fit50", 0), ("fit50", 0), ("fit100", 3), ("known", 0)):
        sel = HviSelector(t.settings, lambda i: np.zeros((0, len(spec.metrics))), spec.directions, t.ref, [0])
        hv.configure(t, variant, seed)(sel)
        models.append(sel.model)
    y = hv.sq.training_values(t)[:, 0]
    every = np.flatnonzero(t.possible)
    draws = [tuple(hv.fit_rows(t, 1, seed)) for seed in range(10)]
    assert draws == [tuple(hv.fit_rows(t, 1, seed)) for seed in range(10)] and len(set(draws)) == 2
    assert sorted(hv.fit_rows(t, 50, 0)) == list(every)
    fitted = AdditiveModel(one_hot(t.settings)).predict(every, y[every])[0]
    assert np.allclose(models[0].mu, fitted) and np.allclose(models[2].mu, fitted)  # 2 settings: both drawn
    assert np.array_equal(models[0].mu, models[1].mu)
    assert np.array_equal(models[0].sd, models[3].sd)
