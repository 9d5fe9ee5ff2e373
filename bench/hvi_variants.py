"""What limits the hybrid's ``hvi`` outer selection: its accuracy model, learned from the settings it trains.

    python bench/hvi_variants.py [--study studies/quickstart.toml] [--surrogate-seeds N] [--seeds 0 .. 9]
        [--budgets 10 25 50 100] [--variants shipped known ard ard-ts] [--jobs 2] [--json]

On the exhaustive table of ``bench/search_quality.py --truth`` (the same cached truth: every training setting
on fixed surrogate seeds, the whole hardware grid costed), the shipped :class:`dse.search.hvi.HviSelector` is
run as the strategy runs it (each setting scored before training by ``points_before_training``; once chosen,
its trained sub-front enters), with its accuracy model swapped:

* ``shipped``: the selector as dse ships it (one prior scale shared by every knob's effects);
* ``known``: the accuracy drop of every setting known *in advance* as the additive least-squares fit over all
  settings (``search_quality.expected_training_values``), its spread the fit's residual std: the same
  selection rule, with nothing left to learn but the seed's luck. The gap between ``shipped`` and ``known``
  is what learning the model from the trained settings costs;
* ``ard``: one prior scale per knob (automatic relevance determination: a knob that does not move the
  accuracy is shrunk to nothing), the scales and the noise by their marginal likelihood under log-normal
  hyper-priors (centred on half the trained values' spread, so a handful of settings cannot fit the noise
  away), fitted from 3 settings on;
* ``ard-ts``: ``ard`` with the knob effects drawn from their posterior at each choice (Thompson sampling:
  an effect measured on two unlucky settings is sometimes drawn small, so it is tried again), the spread that
  of the noise alone.

Prints, per variant and budget (surrogate runs = distinct settings trained), the mean ± sample std of the
hypervolume share of the truth over the search seeds, and the paired difference from ``shipped`` on the
seeds 0-4 and 5-9 separately (tune, check) with a one-sided Wilcoxon signed-rank p over all seeds.
Results are in docs/search.md ("What limits hvi").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_quality as sq  # noqa: E402

VARIANTS = ("shipped", "known", "ard", "ard-ts")
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
        spread = float(np.std(y, ddof=1)) if len(y) > 1 else 0.0
        scale = spread if spread > 1e-9 * float(np.abs(y).max()) else (0.1 * float(np.abs(y).max()) or 1.0)
        yc = (y - y.mean()) / scale
        Xt = self.X[rows]
        theta = np.concatenate([np.full(self.K, np.log(SCALE_PRIOR[0])), [np.log(NOISE_PRIOR[0])]])
        if len(rows) >= 3:
            bounds = [(-4.0, 1.5)] * self.K + [(np.log(0.05), np.log(2.0))]
            theta = minimize(self._objective, theta, args=(Xt, yc), method="L-BFGS-B", bounds=bounds).x
        self.theta = theta  # the fitted log prior scales (one per knob) and log noise, in units of the spread
        s2 = np.exp(2 * theta[-1])
        cov = np.linalg.inv(np.diag(1.0 / self._prior(theta[:-1])) + Xt.T @ Xt / s2)
        mean = cov @ (Xt.T @ yc / s2)
        if self.thompson:
            mu = self.X @ self.rng.multivariate_normal(mean, cov, method="cholesky")
            sd = np.full(len(mu), np.sqrt(s2))
        else:
            mu = self.X @ mean
            sd = np.sqrt(np.einsum("ij,jk,ik->i", self.X, cov, self.X) + s2)
        return y.mean() + scale * mu, scale * sd


def knob_groups(settings) -> np.ndarray:
    """The knob (1, 2, ...) of each column of ``dse.search.hvi.one_hot`` (0: the constant)."""
    g = [0]
    for k, name in enumerate(settings[0]):
        g += [k + 1] * len({repr(s[name]) for s in settings})
    return np.array(g)


def run(t, pre: list, variant: str, seed: int, budgets: list[int]) -> dict:
    from dse.search.hvi import HviSelector

    cols = sq._training_columns(t)
    sel = HviSelector(t.settings, lambda i: pre[i], t.directions, t.ref, cols)
    if variant == "known":
        exp = sq.expected_training_values(t)[:, 0]
        y = t.values[t.possible, 0, cols[0]]
        sel.model = KnownModel(exp, float(np.std(y - exp[t.possible], ddof=1)))
    elif variant in ("ard", "ard-ts"):
        sel.model = ArdModel(sel.model.X, knob_groups(t.settings), thompson=variant == "ard-ts", seed=seed)
        sel.optimism = 1.0 if variant == "ard-ts" else sel.optimism
    rng = np.random.default_rng(seed)
    trained, failed, out = {}, set(), {}
    front = np.zeros((0, len(t.directions)))
    while len(trained) < max(budgets):
        i = sel.next(trained, failed, front, rng)
        if i is None:
            break
        if not t.possible[i]:
            failed.add(i)
            continue
        trained[i] = [float(t.values[i, 0, c]) for c in cols]
        front = sq._nondominated(t, np.vstack([front, t.entered(i)]))
        if len(trained) in budgets:
            out[len(trained)] = _share(t, front)
    return out


def _share(t, front) -> float:
    from dse.search.pareto import hypervolume_of

    return hypervolume_of(front, t.directions, t.ref) / t.hv


def _diff(r: dict) -> str:
    return "".join(f"{r[k]:+.3f} on seeds {w}, " for k, w in (("diff_tune", "0-4"), ("diff_check", "5-9"))
                   if r[k] is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="studies/quickstart.toml")
    ap.add_argument("--surrogate-seeds", type=int, default=None, help="fixed surrogate seeds of the truth")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)), help="search seeds")
    ap.add_argument("--budgets", type=int, nargs="+", default=[10, 25, 50, 100])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object (the table goes to stderr)")
    a = ap.parse_args()
    from joblib import Parallel, delayed
    from scipy.stats import wilcoxon

    from dse.search.strategies.hybrid import points_before_training
    from dse.search.studyfile import load_study

    spec = load_study(a.study)
    if a.surrogate_seeds is not None:
        spec = spec.with_overrides(seeds=a.surrogate_seeds)
    spec = spec.with_overrides(seeds_max=spec.seeds)
    spec.with_overrides(strategy="hybrid", sampler="hvi")  # refuses a space hvi does not apply to
    t = sq.Truth(spec, jobs=a.jobs)
    memo: dict = {}
    pre = [points_before_training(spec, s, t.hw_points, t.arr, t.ref, memo) for s in t.settings]
    jobs = [(v, s) for v in a.variants for s in a.seeds]
    res = Parallel(n_jobs=a.jobs, backend="loky")(delayed(run)(t, pre, v, s, a.budgets) for v, s in jobs)
    shares = {v: {s: r for (vv, s), r in zip(jobs, res) if vv == v} for v in a.variants}
    sq.log(f"hvi with each accuracy model, share of the truth ({t.hv:.6g}; surrogate seeds "
           f"{spec.seeds}), mean ± sample std over search seeds {a.seeds}:")
    table = {}
    for v in a.variants:
        row = {}
        for b in a.budgets:
            x = np.array([shares[v][s].get(b, np.nan) for s in a.seeds])
            row[str(b)] = {"mean": round(float(np.nanmean(x)), 4), "std": round(float(np.nanstd(x, ddof=1)), 4)}
            if v != "shipped" and "shipped" in shares:
                base = np.array([shares["shipped"][s].get(b, np.nan) for s in a.seeds])
                d = x - base
                tune = np.array(a.seeds) < 5
                row[str(b)]["diff_tune"] = round(float(np.mean(d[tune])), 4) if tune.any() else None
                row[str(b)]["diff_check"] = round(float(np.mean(d[~tune])), 4) if (~tune).any() else None
                row[str(b)]["wilcoxon_p"] = float(wilcoxon(x, base, alternative="greater").pvalue) \
                    if np.any(d != 0) else 1.0
        table[v] = row
        sq.log(f"  {v:8s} " + "  ".join(
            f"{b}: {r['mean']:.3f} ± {r['std']:.3f}"
            + (f" (vs shipped: {_diff(r)}p={r['wilcoxon_p']:.3f})" if "diff_tune" in r else "")
            for b, r in row.items()))
    if a.json:
        print(json.dumps({"truth_hv": t.hv, "surrogate_seeds": spec.seeds, "seeds": a.seeds, "variants": table,
                          "per_seed": {v: {str(s): shares[v][s] for s in a.seeds} for v in a.variants}}))


if __name__ == "__main__":
    main()
