"""Why ADA-GP's predictor has almost no cosine with the true gradient: measurements along plain-BP training.

``python -m models.surrogate.diagnose [--seeds N] [--every K]`` trains the default network with plain BP
(the default predictor learns alongside, as in BP phases, without ever being applied) and every ``K``-th
post-warm-up step compares, per predicted layer, estimates of the gradient with the true minibatch
gradient ``g_b`` and with the full-training-set gradient ``g_full`` at the same weights (the expected
gradient, the thing a predictor can hope to track):

* ``predictor``: the default ADA-GP predictor's output (before it learns from the batch);
* ``last k``: the layer's true gradient k steps earlier; ``ema 0.9`` / ``ema 0.99``: running means of the
  layer's true gradients; ``independent batch``: the true gradient of another random batch (the oracle);
  ``full batch``: ``g_full`` itself (how close any expected-gradient predictor can get to ``g_b``);
* ``ridge, level/deviation input``: the best shared linear map from the channel features (the predictor's
  input: pooled batch mean of the channel's output, "level"; or that minus its running mean, "deviation"),
  fitted by ridge regression on the previous 100 BP steps and evaluated on the current one (out of sample);
* ``rank-1, optimal coefficients``: each gradient row replaced by its least-squares multiple of the layer's
  batch-mean input patch (a ceiling of the factored output: the coefficients are fitted to the target);
* ``in-sample LS, level input``: a shared linear map from the features fitted to this step's ``g_full``
  (not a predictor: a loose upper bound of what a function of the features could express).

Also the lag autocorrelation ``cos(g_t, g_t-k)`` of the true minibatch gradients. Means over steps, layers
listed separately. Numpy only; about 15 s per seed.
"""

from __future__ import annotations

import argparse
from typing import Any, Sequence

import numpy as np

from models.surrogate.config import SurrogateConfig
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.predictors import grad_matrix
from models.surrogate.tasks import load_task
from models.surrogate.train import train_run

__all__ = ["measure", "main"]

_WINDOW = 100


def _cos(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def _grads(net, x, y, layers):
    _, d = softmax_cross_entropy(net.forward(x), y)
    net.backward(d)
    return [grad_matrix(l.dW, l.db).astype(np.float64) for l in layers]


def _ridge(X, Y, lam=1e-2):
    A = X.T @ X
    A = A + lam * max(1e-12, np.trace(A) / A.shape[0]) * np.eye(A.shape[0])
    return np.linalg.solve(A, X.T @ Y)


def _run(seed: int, every: int) -> list[dict[Any, float]]:
    """Plain BP with the default ADA-GP predictor learning alongside: ``train_run`` of ``adagp`` at GP
    fraction 0 (every step BP), measured by its observer hook at the weights of each BP step."""
    cfg = SurrogateConfig(gp_fraction=0.0)
    task = load_task(cfg.task)
    other = np.random.default_rng([seed, 3])
    n = len(task.x)
    total = cfg.epochs * (n // min(cfg.batch_size, n))
    warm = int(round(cfg.warmup * total))
    hist: list[tuple] = []
    ema9: list = []
    ema99: list = []
    fmean: list = []
    pools: dict[tuple, np.ndarray] = {}
    rec = []

    def observe(step, p):
        t, net, layers = step.t, step.net, step.layers
        L = len(layers)
        if not ema9:
            ema9.extend([None] * L)
            ema99.extend([None] * L)
            fmean.extend([None] * L)
        measure = t >= warm and t % every == 0 and len(hist) >= _WINDOW
        trues = [g.astype(np.float64) for g in step.trues]
        lvl, dev, xbar = [], [], []
        for j, l in enumerate(layers):
            a = l.out.mean(axis=0)
            spatial = a.shape[:-1]
            pm = pools.get(spatial)
            if pm is None:
                pm = pools[spatial] = net.pooling(spatial, cfg.pred_input)
            raw = (pm.T @ a.reshape(-1, a.shape[-1])).T.astype(np.float64)
            lvl.append(raw / (np.sqrt(np.mean(raw * raw)) + 1e-8))
            fmean[j] = raw if fmean[j] is None else 0.95 * fmean[j] + 0.05 * raw
            dv = raw - fmean[j]
            dev.append(dv / (np.sqrt(np.mean(dv * dv)) + 1e-12))
            xbar.append(np.concatenate([l.mean_input(), [1.0]]).astype(np.float64))
        if measure:  # the network's state is this step's weights: the caches it overwrites are not used again
            gfull = _grads(net, task.x, task.y, layers)
            oidx = other.choice(n, step.y.shape[0], replace=False)
            gind = _grads(net, task.x[oidx], task.y[oidx], layers)
            r: dict[Any, float] = {"t": t}
            for k in range(1, 11):
                r[("lag", k)] = float(np.mean([_cos(hist[-k][0][j], trues[j]) for j in range(L)]))
            for j in range(L):
                g, gf = trues[j], gfull[j]
                est = {
                    "predictor": p[j],
                    "last 1": hist[-1][0][j],
                    "last 2": hist[-2][0][j],
                    "last 5": hist[-5][0][j],
                    "ema 0.9": ema9[j],
                    "ema 0.99": ema99[j],
                    "independent batch": gind[j],
                    "full batch": gf,
                }
                for fname, fi, cur in (("level", 1, lvl[j]), ("deviation", 2, dev[j])):
                    X = np.concatenate([h[fi][j] for h in hist])
                    Y = np.concatenate([h[0][j] / np.linalg.norm(h[0][j]) for h in hist])
                    est[f"ridge, {fname} input"] = cur @ _ridge(X, Y)
                for name, e in est.items():
                    r[(name, "b", j)] = _cos(e, g)
                    r[(name, "f", j)] = _cos(e, gf)
                u = xbar[j]
                for nm, tgt in (("b", g), ("f", gf)):
                    r[("rank-1, optimal coefficients", nm, j)] = _cos(np.outer(tgt @ u / (u @ u), u), tgt)
                W = np.linalg.lstsq(lvl[j], gf, rcond=None)[0]
                r[("in-sample LS, level input", "f", j)] = _cos(lvl[j] @ W, gf)
            rec.append(r)
        hist.append((trues, lvl, dev))
        del hist[:-_WINDOW]
        for j in range(L):
            ema9[j] = trues[j] if ema9[j] is None else 0.9 * ema9[j] + 0.1 * trues[j]
            ema99[j] = trues[j] if ema99[j] is None else 0.99 * ema99[j] + 0.01 * trues[j]

    train_run(cfg, "adagp", seed, observer=observe)
    return rec


def measure(seeds: Sequence[int] = (0, 1, 2), every: int = 10) -> dict[str, Any]:
    """Mean cosines over measured steps and seeds: ``{"lag": {k: c}, "rows": {name: {"b": [...], "f": [...]}}}``
    (one value per predicted layer; None where not measured) and ``spread``: per-seed means of each row."""
    per_seed = [_run(int(s), every) for s in seeds]
    recs = [r for rs in per_seed for r in rs]
    names = []
    for r in recs:
        for k in r:
            if isinstance(k, tuple) and k[0] != "lag" and k[0] not in names:
                names.append(k[0])
    L = 1 + max(k[2] for k in recs[0] if isinstance(k, tuple) and len(k) == 3)

    def mean(rs, key):
        v = [r[key] for r in rs if key in r]
        return float(np.mean(v)) if v else None

    rows = {nm: {w: [mean(recs, (nm, w, j)) for j in range(L)] for w in ("b", "f")} for nm in names}
    spread = {
        nm: {w: [float(np.mean([r[(nm, w, j)] for r in rs for j in range(L) if (nm, w, j) in r] or [np.nan]))
                 for rs in per_seed] for w in ("b", "f")}
        for nm in names
    }
    lag = {k: mean(recs, ("lag", k)) for k in range(1, 11)}
    return {"lag": lag, "rows": rows, "spread": spread, "steps": len(recs), "seeds": list(seeds)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--every", type=int, default=10)
    args = ap.parse_args(argv)
    m = measure(range(args.seeds), args.every)
    L = len(next(iter(m["rows"].values()))["b"])
    print(f"seeds 0-{args.seeds - 1}, {m['steps']} measured steps; cos with the minibatch gradient g_b / with the "
          f"full-batch gradient g_full, per predicted layer; last column: mean over layers, mean ± std over seeds\n")
    head = " | ".join(f"L{j} g_b | L{j} g_full" for j in range(L))
    print(f"| estimate | {head} | all g_b | all g_full |\n|---|" + "---:|" * (2 * L + 2))

    def f(x):
        return "-" if x is None else f"{x:+.3f}"

    def ms(v):
        v = [x for x in v if np.isfinite(x)]
        return "-" if not v else f"{np.mean(v):+.3f} ± {np.std(v, ddof=1) if len(v) > 1 else 0:.3f}"

    for nm, d in m["rows"].items():
        cells = " | ".join(f"{f(d['b'][j])} | {f(d['f'][j])}" for j in range(L))
        print(f"| {nm} | {cells} | {ms(m['spread'][nm]['b'])} | {ms(m['spread'][nm]['f'])} |")
    print("\nlag autocorrelation cos(g_t, g_t-k) of true minibatch gradients (mean over layers):")
    print("| k | " + " | ".join(str(k) for k in m["lag"]) + " |\n|---|" + "---:|" * len(m["lag"]))
    print("| cos | " + " | ".join(f"{v:+.3f}" for v in m["lag"].values()) + " |")


if __name__ == "__main__":
    main()
