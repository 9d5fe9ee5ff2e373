"""What limits the hybrid's ``hvi`` outer selection: its accuracy model, learned from the settings it trains.

    python bench/hvi_variants.py [--study studies/quickstart.toml] [--surrogate-seeds N] [--first-seed K]
        [--seeds 0 .. 9] [--budgets 10 25 50 100]
        [--variants shipped known ard ard-ts bma | kg kg1 fit50 fit100 ord ord-kg1] [--startup 6] [--jobs 2] [--json]

On the exhaustive table of ``bench/search_quality.py --truth`` (the same cached truth: every training setting
on fixed surrogate seeds, the whole hardware grid costed), the shipped :class:`dse.search.hvi.HviSelector` is
run as the strategy runs it (each setting scored before training by ``points_before_training``; once chosen,
its trained sub-front enters), with its accuracy model swapped:

* ``shipped``: the selector as dse ships it (one prior scale shared by every knob's effects);
* ``known``: the accuracy drop of every setting known *in advance* as the additive least-squares fit over all
  settings (``search_quality.expected_training_values``), its spread the fit's residual std (widened by
  ``HVI_OPTIMISM``, as the shipped rule widens its own; one training objective only): the same selection
  rule, with nothing left to learn but the seed's luck. The gap between ``shipped`` and ``known``
  is what learning the model from the trained settings costs;
* ``fit50`` and ``fit100``: as ``known``, the means those of the shipped model fitted in advance on 50 (100)
  settings drawn at random (their trained values, outside the budget; the draw seeded by the search seed):
  what the selection reaches when it is given, free, as much (twice as much) information about the model as
  its budget of 50 runs could buy, spent on learning alone;
* ``ard``: one prior scale per knob (automatic relevance determination: a knob that does not move the
  accuracy is shrunk to nothing), the scales and the noise by their marginal likelihood under log-normal
  hyper-priors (centred on half the trained values' spread, so a handful of settings cannot fit the noise
  away), fitted from 3 settings on;
* ``ard-ts``: ``ard`` with the knob effects drawn from their posterior at each choice (Thompson sampling:
  an effect measured on two unlucky settings is sometimes drawn small, so it is tried again), the spread that
  of the noise alone;
* ``bma``: the shipped model with its prior and noise scales averaged over their grid, each pair weighted by
  its marginal likelihood (the predictive mixture's mean and variance), instead of the best pair taken;
* ``ord``: the shipped model with the effects of an ordered knob's levels correlated by the distance of their
  ranks (a squared-exponential correlation, its length chosen with the prior and noise scales by marginal
  likelihood among ``ORD_LENGTHS``): a level borrows from its neighbours; the shipped model when the length is
  small;
* ``ord-kg1``: ``kg1``'s selection with ``ord``'s model;
* ``kg`` and ``kg1``: the shipped model, the selection valuing what training a setting would teach (a
  knowledge-gradient term: how much the best expected improvement of any setting is expected to rise once
  the setting's value updates the model), weighed by the runs left before the largest budget (``kg``,
  Ryzhov, Powell and Frazier's online knowledge gradient) or by one (``kg1``); see :func:`kg_next`.

Prints, per variant and budget (surrogate runs = distinct settings trained), the mean ± sample std of the
hypervolume share of the truth over the search seeds, the share of the seeds that trained the setting holding
the most hypervolume alone (``search_quality``'s ``ceiling.exclusive``), how far the variant's accuracy model
is from the additive fit over all settings when it chooses the setting of that budget (``model_rms``: the
root-mean-square difference of every setting's predicted mean from the fit; ``top_mean``: its mean for that
setting; one training objective), and the paired difference from
``shipped`` on the seeds 0-4 and 5-9 separately (tune, check) with a one-sided Wilcoxon signed-rank p over all
seeds. The searches run as ``search_quality``'s ``hybrid:hvi`` (its ``_run_hvi``, one worker).
Results are in docs/search.md ("What limits hvi").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.optimize import minimize

from dse.search.hvi import (
    _HVI_NODES,
    _HVI_SIGMAS,
    _HVI_TAUS,
    HVI_MIN_FIT,
    HVI_STARTUP,
    AdditiveModel,
    posterior,
    standardized,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_quality as sq  # noqa: E402

VARIANTS = ("shipped", "known", "ard", "ard-ts", "bma", "kg", "kg1", "fit50", "fit100", "ord", "ord-kg1")
#: run when --variants is not given (kg's horizon is the largest budget; docs/search.md measures it to 50 runs)
DEFAULT_VARIANTS = VARIANTS[:5]
#: Gauss-Hermite nodes over the looked-ahead setting's outcome (``kg``)
KG_NODES = 5
#: ``fit50``/``fit100``: the random draw of the settings the model is fitted on is seeded by this plus the search seed
FIT_SEED = 10_000
#: the hyper-priors of ``ard``: log-normal, median (in units of the trained values' spread) and log-sd
NOISE_PRIOR = (0.5, 0.5)
SCALE_PRIOR = (0.5, 1.0)


class KnownModel:
    """Every setting's training objective known in advance (the additive fit over all settings)."""

    def __init__(self, mean: np.ndarray, sd: float) -> None:
        self.mu, self.sd = mean, np.full(len(mean), sd)

    def predict(self, rows, y):
        return self.mu, self.sd


class ArdModel:
    """Bayesian additive model on one-hot knob levels, one prior scale per knob (see the module's docstring)."""

    def __init__(self, X: np.ndarray, groups: np.ndarray, thompson: bool = False, seed: int = 0) -> None:
        self.X, self.groups, self.K = X, groups, int(groups.max())
        self.thompson, self.rng = thompson, np.random.default_rng(seed)

    def _prior(self, log_scales):
        return np.concatenate([[1e4], np.exp(2 * log_scales)[self.groups[1:] - 1]])

    def _objective(self, theta, Xt, yc):
        C = (Xt * self._prior(theta[:-1])) @ Xt.T + np.exp(2 * theta[-1]) * np.eye(len(yc))
        L = np.linalg.cholesky(C)
        a = np.linalg.solve(L, yc)
        pen = 0.5 * ((theta[-1] - np.log(NOISE_PRIOR[0])) / NOISE_PRIOR[1]) ** 2
        pen += 0.5 * np.sum(((theta[:-1] - np.log(SCALE_PRIOR[0])) / SCALE_PRIOR[1]) ** 2)
        return 0.5 * a @ a + np.log(np.diag(L)).sum() + pen

    def predict(self, rows, y):
        scale, yc = standardized(y)
        Xt = self.X[rows]
        theta = np.concatenate([np.full(self.K, np.log(SCALE_PRIOR[0])), [np.log(NOISE_PRIOR[0])]])
        if len(rows) >= 3:
            bounds = [(-4.0, 1.5)] * self.K + [(np.log(0.05), np.log(2.0))]
            theta = minimize(self._objective, theta, args=(Xt, yc), method="L-BFGS-B", bounds=bounds).x
        self.theta = theta  # the fitted log prior scales (one per knob) and log noise, in units of the spread
        s2 = np.exp(2 * theta[-1])
        mean, cov = posterior(Xt, yc, self._prior(theta[:-1]), s2)
        if self.thompson:
            mu = self.X @ self.rng.multivariate_normal(mean, cov, method="cholesky")
            sd = np.full(len(mu), np.sqrt(s2))
        else:
            mu = self.X @ mean
            sd = np.sqrt(np.einsum("ij,jk,ik->i", self.X, cov, self.X) + s2)
        return y.mean() + scale * mu, scale * sd


class BmaModel(AdditiveModel):
    """The shipped model, its (prior, noise) scale pairs averaged by marginal likelihood (module docstring)."""

    def __init__(self, X: np.ndarray, taus=_HVI_TAUS, sigmas=_HVI_SIGMAS) -> None:
        super().__init__(X)
        self.grid = [(t, s) for t in taus for s in sigmas]

    def predict(self, rows, y):
        scale, yc = standardized(y)
        grid, w = [(1.0, 0.5)], np.ones(1)  # the shipped model's scales before it fits them
        if len(rows) >= HVI_MIN_FIT:
            grid = self.grid
            le = np.array([self._log_evidence(rows, yc, t, s) for t, s in grid])
            w = np.exp(le - le.max())
            w /= w.sum()
        m1 = m2 = 0.0
        for (t, s), wk in zip(grid, w):
            mu, var = self.predictive(rows, yc, t, s)
            m1, m2 = m1 + wk * mu, m2 + wk * (var + mu ** 2)
        return y.mean() + scale * m1, scale * np.sqrt(np.maximum(m2 - m1 ** 2, 0.0))


#: ``ord``: the correlation lengths of neighbouring levels' effects tried, in units of an ordered knob's range
ORD_LENGTHS = (0.1, 0.3, 0.6, 1.2, 2.4, 4.8)


class OrdModel(AdditiveModel):
    """The shipped model with the effects of an ordered knob's levels correlated by their distance (module
    docstring): in function space, the prior covariance of two settings' values is the constant's, plus
    ``tau**2`` times, per knob, the correlation of their levels -- ``exp(-d**2 / 2 l**2)`` for an ordered knob
    (``d``: the distance of the two levels' ranks over the knob's range, 0 to 1), 1 or 0 for a categorical
    one. With ``l`` small every knob's levels are independent: the shipped model, exactly."""

    def __init__(self, X: np.ndarray, settings, lengths=ORD_LENGTHS) -> None:
        super().__init__(X)
        self.S = {}
        for ell in lengths:
            S = np.zeros((len(settings), len(settings)))
            for k in settings[0]:
                vals = [s[k] for s in settings]
                ordered = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
                levels = sorted(set(vals)) if ordered else sorted({repr(v) for v in vals})
                rank = np.array([levels.index(v if ordered else repr(v)) for v in vals], dtype=np.float64)
                if ordered and len(levels) > 1:
                    d = (rank[:, None] - rank[None, :]) / (len(levels) - 1)
                    S += np.exp(-0.5 * (d / ell) ** 2)
                else:
                    S += rank[:, None] == rank[None, :]
            self.S[ell] = S
        self.grid = [(t, s, ell) for t in _HVI_TAUS for s in _HVI_SIGMAS for ell in lengths]

    @staticmethod
    def _evidence(S_rows, yc, tau, sigma):
        """The log marginal likelihood (up to a constant) of ``yc`` given the trained rows' correlations."""
        L = np.linalg.cholesky(1e4 + tau ** 2 * S_rows + sigma ** 2 * np.eye(len(yc)))
        a = np.linalg.solve(L, yc)
        return -0.5 * float(a @ a) - float(np.log(np.diag(L)).sum())

    def predict(self, rows, y):
        scale, yc = standardized(y)
        tau, sigma, ell = 1.0, 0.5, sorted(self.S)[len(self.S) // 2]  # before the fit: a middle length
        if len(rows) >= HVI_MIN_FIT:
            S_rows = {e: S[np.ix_(rows, rows)] for e, S in self.S.items()}  # the grid reads the trained rows only
            tau, sigma, ell = max(self.grid, key=lambda g: self._evidence(S_rows[g[2]], yc, g[0], g[1]))
        self.hyper = (tau, sigma, ell)
        K = 1e4 + tau ** 2 * self.S[ell]
        C = K[np.ix_(rows, rows)] + sigma ** 2 * np.eye(len(rows))
        self._post = (rows, K, C, scale)
        Ks = K[:, rows]
        mu = Ks @ np.linalg.solve(C, yc)
        var = np.diag(K) - np.einsum("ij,ji->i", Ks, np.linalg.solve(C, Ks.T)) + sigma ** 2
        return y.mean() + scale * mu, scale * np.sqrt(np.maximum(var, 0.0))

    def mean_cov(self, idx):
        """The posterior covariance of the mean accuracy of the settings ``idx`` (``ord-kg1``)."""
        rows, K, C, scale = self._post
        Kft = K[np.ix_(idx, rows)]
        return scale ** 2 * (K[np.ix_(idx, idx)] - Kft @ np.linalg.solve(C, Kft.T))


class KgModel(AdditiveModel):
    """The shipped model, keeping its posterior covariance (``kg`` looks one setting ahead with it)."""

    def predict(self, rows, y):
        self.scale = standardized(y)[0]
        return super().predict(rows, y)

    def predictive(self, rows, yc, tau, sigma):
        self.cov = posterior(self.X[rows], yc, self._prior(tau), sigma ** 2)[1]
        return super().predictive(rows, yc, tau, sigma)

    def mean_cov(self, idx):
        """The posterior covariance of the mean accuracy of the settings ``idx`` (``kg_next``)."""
        Xf = self.X[idx]
        return self.scale ** 2 * Xf @ self.cov @ Xf.T


def kg_next(sel, horizon: Callable[[int], float], trained, taken, front, rng):
    """``HviSelector.next`` with a knowledge-gradient term (``kg``, one training objective): each candidate
    ``c`` is valued by its expected hypervolume improvement (the shipped rule's, exactly: the improvement of a
    setting's sub-front is piecewise linear in its accuracy value, its breakpoints the front's accuracy values,
    so it is computed there once and interpolated) plus ``horizon(trained)`` times what training it would teach:
    the expected rise of the best expected improvement of any setting once ``c``'s value updates the model
    (its posterior mean and variance, ``c``'s outcome over ``KG_NODES`` Gauss-Hermite nodes; the front kept as
    it is, and each setting's improvement taken over its widened predictive, as the shipped rule takes it).
    Ryzhov, Powell and Frazier's online knowledge gradient (Operations Research 60(1), 2012) weighs it by the
    remaining budget (``kg``); ``kg1`` by one (a two-step lookahead's information term). With a horizon of 0
    it chooses exactly as the shipped rule (tests/dse/test_hvi_variants.py)."""
    free = np.array([i for i in range(len(sel.settings)) if i not in taken and i not in trained])
    if not len(free):
        return None
    if len(trained) < sel.startup:
        return int(rng.choice(free))
    rows = np.array(sorted(trained))
    y = np.array([trained[i][0] for i in rows], dtype=np.float64)
    fin = np.isfinite(y)  # as the shipped rule: an infinite value says nothing of the knobs' effects
    if not fin.any():
        return int(rng.choice(free))
    mu, sd = sel.model.predict(rows[fin], y[fin])
    c = sel.training[0]
    m = sel.sign[c] * mu  # minimised
    f = sel.minimised_front(front)
    base = sel._hv(f)
    z, w = np.polynomial.hermite_e.hermegauss(_HVI_NODES)
    w = w / w.sum()
    zl, wl = np.polynomial.hermite_e.hermegauss(KG_NODES)
    wl = wl / wl.sum()
    reach = (abs(zl).max() + sel.optimism * abs(z).max()) * sd.max() + 1.0
    ref_c = sel.ref[c]
    grid = np.unique(np.concatenate([[m.min() - reach], f[:, c][f[:, c] < ref_c], [ref_c]]))
    H = np.zeros((len(free), len(grid)))
    ok = np.ones(len(free), dtype=bool)
    for n, i in enumerate(free):
        p = sel.points(i)
        if not len(p):
            ok[n] = False
            continue
        for j, a in enumerate(grid[:-1]):  # the improvement only shrinks as the value worsens
            q = p.copy()
            q[:, c] = a
            g = sel._hv(np.vstack([f, q])) - base
            if not g > 0:
                break
            H[n, j] = g

    def ehvi(mean, spread):  # mean, spread: (..., settings); the expectation over the widened predictive
        a = np.clip(mean[..., None] + sel.optimism * spread[..., None] * z, grid[0], grid[-1])
        j = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 2)
        t = (a - grid[j]) / (grid[j + 1] - grid[j])
        idx = np.arange(len(free)).reshape((1,) * (a.ndim - 2) + (len(free), 1))
        val = H[idx, j] * (1 - t) + H[idx, j + 1] * t
        return (val * w).sum(axis=-1)

    now = np.where(ok, ehvi(m[free], sd[free]), -1.0)
    value = now.copy()
    h = horizon(len(trained))
    if h > 0:
        K = sel.model.mean_cov(free)  # covariance of the settings' mean accuracy
        v = sd[free] ** 2  # the outcome's variance (noise included)
        shift = K / np.sqrt(v)[:, None]  # [candidate, setting]: a standard outcome moves the setting's mean so
        after = np.sqrt(np.maximum(sd[free][None, :] ** 2 - K ** 2 / v[:, None], 1e-18))
        best_now = now.max()
        gain = np.zeros(len(free))
        for zk, wk in zip(zl, wl):
            e = ehvi(m[free][None, :] + shift * zk, after)
            e[:, ~ok] = -1.0
            gain += wk * e.max(axis=1)
        value = np.where(ok, now + h * (gain - best_now), -1.0)
    top = np.flatnonzero(value == value.max())
    return int(free[top[0]] if len(top) == 1 else free[int(rng.choice(top))])


def knob_groups(settings) -> np.ndarray:
    """The knob (1, 2, ...) of each column of ``dse.search.hvi.one_hot`` (0: the constant)."""
    g = [0]
    for k, name in enumerate(settings[0]):
        g += [k + 1] * len({repr(s[name]) for s in settings})
    return np.array(g)


def fit_rows(t, n: int, seed: int) -> np.ndarray:
    """``fit50``/``fit100``: the settings the model is fitted on, ``n`` possible ones (all, when fewer) drawn at
    random, the draw seeded by the search ``seed``."""
    ok = np.flatnonzero(t.possible)
    return np.random.default_rng(FIT_SEED + seed).choice(ok, min(n, len(ok)), replace=False)


def configure(t, variant: str, seed: int, horizon_runs: int = 50) -> Callable:
    """What ``variant`` changes in the shipped selector: its accuracy model (and, ``ard-ts``, its widening)."""
    def apply(sel) -> None:
        if variant in ("known", "fit50", "fit100"):  # a fixed model, its spread the fit's residual
            exp = sq.expected_training_values(t)
            mean = exp[:, 0]
            if variant != "known":
                rows = fit_rows(t, int(variant[3:]), seed)
                mean = AdditiveModel(sel.model.X).predict(rows, sq.training_values(t)[rows, 0])[0]
            sel.model = KnownModel(mean, float(sq.residual_std(t, exp)[0]))
        elif variant in ("ard", "ard-ts"):
            sel.model = ArdModel(sel.model.X, knob_groups(t.settings), thompson=variant == "ard-ts", seed=seed)
            sel.optimism = 1.0 if variant == "ard-ts" else sel.optimism
        elif variant == "bma":
            sel.model = BmaModel(sel.model.X)
        elif variant in ("ord", "ord-kg1"):
            sel.model = OrdModel(sel.model.X, t.settings)
        elif variant in ("kg", "kg1"):
            sel.model = KgModel(sel.model.X)
        if variant in ("kg", "kg1", "ord-kg1"):
            def horizon(n: int) -> float:  # kg: the runs left after this one (online KG); kg1, ord-kg1: one
                return max(horizon_runs - n - 1, 0) if variant == "kg" else 1.0
            sel.next = lambda *a: kg_next(sel, horizon, *a)
    return apply


def run(t, pre: list, variant: str, seed: int, budgets: list[int], top: int | None = None,
        startup: int = HVI_STARTUP) -> dict:
    """One search of ``variant`` on search seed ``seed``, as ``bench/search_quality.py`` runs ``hybrid:hvi``
    (one worker; ``pre``: every setting's scored sub-front): its share of the truth at each budget (settings
    trained), and, with ``top`` (a setting's index), whether it was trained within each budget; with one
    training objective, the model's distance from the additive fit over all settings when it chose each
    budget's setting (``model_rms``, and ``top_mean``: its mean for ``top``)."""
    exp = sq.expected_training_values(t)
    log: dict[int, tuple[float, float]] = {}
    setup = configure(t, variant, seed, max(budgets))

    def apply(sel) -> None:
        setup(sel)
        predict = sel.model.predict

        def traced(rows, y):
            mu, sd = predict(rows, y)
            if exp.shape[1] == 1:  # the settings trained so far: this prediction chooses setting len(rows) + 1
                log[len(rows) + 1] = (float(np.sqrt(np.mean((mu - exp[:, 0]) ** 2))),
                                      float(mu[top]) if top is not None else float("nan"))
            return mu, sd
        sel.model.predict = traced

    trace = sq._run_hvi(t, f"hvi-s{startup}", seed, max(budgets), 1, configure=apply,
                        points=lambda i: pre[i])["trace"]
    rows = sq.curve(t, trace, hybrid=True)
    out = {"share": {r["runs"]: r["share"] for r in rows if r["runs"] in budgets}}
    if top is not None:
        order = [r["setting"] for r in rows]
        out["trained_top"] = {b: top in order[:b] for b in budgets}
    if log:
        out["model_rms"] = {b: log[b][0] for b in budgets if b in log}
        out["top_mean"] = {b: log[b][1] for b in budgets if b in log}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="studies/quickstart.toml")
    ap.add_argument("--surrogate-seeds", type=int, default=None, help="fixed surrogate seeds of the truth")
    ap.add_argument("--first-seed", type=int, default=None,
                    help="the truth's first surrogate seed (default: the study's first_seed, 0): 5 to 9 check "
                         "a finding on seeds it was not found on")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)), help="search seeds")
    ap.add_argument("--budgets", type=int, nargs="+", default=[10, 25, 50, 100])
    ap.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS)
    ap.add_argument("--startup", type=int, default=HVI_STARTUP,
                    help=f"settings drawn at random before the model chooses (shipped: {HVI_STARTUP})")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object (the table goes to stderr)")
    a = ap.parse_args()
    from joblib import Parallel, delayed
    from scipy.stats import wilcoxon

    from dse.errors import UsageError
    from dse.search.strategies.hybrid import points_before_training, training_columns
    from dse.search.studyfile import load_study

    try:
        spec = load_study(a.study)
        if a.surrogate_seeds is not None:
            spec = spec.with_overrides(seeds=a.surrogate_seeds)
        spec = spec.with_overrides(seeds_max=spec.seeds, first_seed=a.first_seed)
        spec.with_overrides(strategy="hybrid", sampler="hvi")  # refuses a space hvi does not apply to
        if a.startup < 1:
            raise UsageError(f"--startup: {a.startup}; at least 1 (the first setting is always drawn at random)")
        if {"known", "fit50", "fit100"} & set(a.variants) and len(training_columns(spec)) != 1:
            raise UsageError(f"--variants: known, fit50 and fit100 model one training objective; {a.study} has "
                             f"{len(training_columns(spec))}")
    except UsageError as e:
        print(f"hvi_variants: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    t = sq.Truth(spec, jobs=a.jobs)
    memo: dict = {}
    pre = [points_before_training(spec, s, t.hw_points, t.arr, t.ref, memo) for s in t.settings]
    excl = sq.ceiling(t, a.budgets)["exclusive"]
    top = excl[0]["index"] if excl else None
    jobs = [(v, s) for v in a.variants for s in a.seeds]
    res = Parallel(n_jobs=a.jobs, backend="loky")(delayed(run)(t, pre, v, s, a.budgets, top, a.startup)
                                                  for v, s in jobs)
    runs = {v: {s: r for (vv, s), r in zip(jobs, res) if vv == v} for v in a.variants}
    tune = np.array(a.seeds) < 5  # tuned on seeds 0-4, checked on the others
    sq.log(f"hvi with each accuracy model, share of the truth ({t.hv:.6g}; surrogate seeds {spec.seeds} from "
           f"{spec.first_seed}; "
           f"{a.startup} settings at random first), mean ± sample std over search seeds {a.seeds}; paired "
           "difference from shipped on the seeds below 5 and on the others, one-sided Wilcoxon p over all; in "
           "brackets the share of the seeds that trained the setting holding the most hypervolume alone:")
    table = {}
    for v in a.variants:
        row = {}
        for b in a.budgets:
            x = np.array([runs[v][s]["share"].get(b, np.nan) for s in a.seeds])
            # unrounded: the table rounds once, when it prints
            r = row[str(b)] = {"mean": float(np.nanmean(x)), "std": float(np.nanstd(x, ddof=1)),
                               "reached": int(np.isfinite(x).sum())}
            if top is not None:
                r["trained_top"] = round(float(np.mean([runs[v][s]["trained_top"][b] for s in a.seeds])), 2)
            for k in ("model_rms", "top_mean"):  # the model's distance from the fit over all settings
                m = [runs[v][s][k][b] for s in a.seeds if b in runs[v][s].get(k, {})]
                if m:
                    r[k] = float(np.mean(m))
            if v != "shipped" and "shipped" in runs:
                d = x - np.array([runs["shipped"][s]["share"].get(b, np.nan) for s in a.seeds])
                r["diff_tune"] = float(np.mean(d[tune])) if tune.any() else None
                r["diff_check"] = float(np.mean(d[~tune])) if (~tune).any() else None
                ok = np.isfinite(d)  # a seed that never reached the budget on either side is left out
                r["wilcoxon_p"] = (float(wilcoxon(d[ok], alternative="greater").pvalue) if np.any(d[ok] != 0)
                                   else 1.0) if ok.any() else None
        table[v] = row
        sq.log(f"  {v:8s} " + "  ".join(
            f"{b}: {r['mean']:.3f} ± {r['std']:.3f}" + (f" [{r['trained_top']:.1f}]" if "trained_top" in r else "")
            + (f" ({r['diff_tune']:+.3f} / {r['diff_check']:+.3f}, p={r['wilcoxon_p']:.3f})"
               if r.get("wilcoxon_p") is not None and None not in (r["diff_tune"], r["diff_check"]) else "")
            for b, r in row.items()))
    if any("model_rms" in r for row in table.values() for r in row.values()):
        sq.log("the accuracy model when it chose the setting of each budget, mean over the seeds: the rms "
               "difference of every setting's predicted mean from the additive fit over all settings"
               + (f", and its mean for the setting holding the most alone (the fit: {excl[0]['index']} at "
                  f"{sq.expected_training_values(t)[excl[0]['index'], 0]:.2f})" if top is not None else "") + ":")
        for v, row in table.items():
            sq.log(f"  {v:8s} " + "  ".join(f"{b}: {r['model_rms']:.2f}" + (f" [{r['top_mean']:.2f}]"
                                                                               if top is not None else "")
                                            for b, r in row.items() if "model_rms" in r))
    if a.json:
        print(json.dumps({"truth_hv": t.hv, "surrogate_seeds": spec.seeds, "first_seed": spec.first_seed,
                          "seeds": a.seeds,
                          "top_exclusive": excl[0] if excl else None, "variants": table,
                          "per_seed": {v: {str(s): runs[v][s]["share"] for s in a.seeds} for v in a.variants},
                          "per_seed_model_rms": {v: {str(s): runs[v][s].get("model_rms", {}) for s in a.seeds}
                                                 for v in a.variants}},
                         default=float))


if __name__ == "__main__":
    main()
