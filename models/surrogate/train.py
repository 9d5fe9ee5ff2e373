"""One training run of the surrogate, for one seed, with any registered gradient scheme.

Pairing: the network's initialization comes from ``default_rng(seed)`` and the batch order from
``default_rng([seed, 1])`` for every scheme, so BP, the scheme and its controls of one seed see the same
initial weights and the same batches. A scheme's own randomness has its own streams (``[seed, 2]``, ...).

Step kinds (the loop has no per-scheme branch; what differs is in the scheme's module, :mod:`models.schemes`):

* **BP step**: forward, loss, full backward; the scheme's ``bp_step`` predicts the predicted layers'
  gradients from this batch (the quality signal: cosine and relative error against the true gradient;
  on every ``PROBE_EVERY``-th post-warm-up BP step also against a large-batch gradient, see ``_probe``), then
  learns; every layer updates with its true gradient (SGD with momentum).
* **GP step**: forward only; the scheme's ``gp_step`` gives each predicted layer's gradient (or a skip) and
  the layers update. The classifier layer updates with its true gradient (``true_output_grad``: one outer
  product from the loss, no backward pass) or is predicted too. Applying a layer's update after the whole
  forward pass instead of right after its own forward changes no number: a layer's output is computed
  before its update either way.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional

import numpy as np

from models.schemes.base import Step, predicted_layers
from models.schemes.registry import make_scheme
from models.surrogate.config import SurrogateConfig
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import build_network, kept_statistics
from models.surrogate.predictors import grad_matrix
from models.surrogate.tasks import load_task

__all__ = ["train_run", "Schedule", "phases_to_mask", "at_chance", "PROBE_SIZE", "PROBE_EVERY"]

#: the large-batch quality probe: a fixed subset of PROBE_SIZE training samples (chosen once by
#: default_rng(PROBE_SEED), the same in every run), measured on every PROBE_EVERY-th post-warm-up BP step
PROBE_SIZE = 512
PROBE_EVERY = 25
PROBE_SEED = 20231

_AGENT_DECAY = 0.7  # tau <- 0.7 tau + 0.3 c_hat, tau0 = 0.1 (AGENT's damping)
_AGENT_TAU0 = 0.1


class Schedule:
    """Decides, step by step, BP or GP.

    Warm-up (``round(warmup * total)`` steps) is BP. Then GP phases alternate with BP phases of ``bp_phase``
    steps, starting with a GP phase. Adaptive: the first GP phase has ``gp_phase_init`` steps; after each BP
    phase the length doubles (0 -> 1) when the phase's mean cosine >= ``cos_threshold`` and mean relative
    error <= ``relerr_threshold``, and halves otherwise, clamped to [``gp_phase_min``, ``gp_phase_max``]; a
    length of 0 means another BP phase. Fixed: each BP phase of b steps earns ``b * f / (1 - f)`` GP steps
    (f = ``gp_fraction``), paid out in whole steps with the remainder carried (so the long-run fraction is
    f). ``replay``: follow a recorded per-step mask instead (the null control)."""

    def __init__(self, cfg: SurrogateConfig, total: int, replay: Optional[np.ndarray] = None):
        self.cfg = cfg
        self.warm = int(round(cfg.warmup * total))
        self.replay = replay
        self.kind = "bp"
        self.left = self.warm
        self.gp_len = cfg.gp_phase_init
        self.owed = 0.0
        self.q: list[tuple[float, float]] = []
        self.first = True

    def _next_gp_len(self) -> int:
        c = self.cfg
        if not c.adaptive:
            f = c.gp_fraction
            self.owed += c.bp_phase * f / (1.0 - f)
            g = int(np.floor(self.owed + 1e-9))
            self.owed -= g
            return g
        if self.first:
            return self.gp_len
        if self.q:
            cos = float(np.mean([a for a, _ in self.q]))
            rel = float(np.mean([b for _, b in self.q]))
            good = cos >= c.cos_threshold and rel <= c.relerr_threshold
        else:
            good = False
        g = max(1, 2 * self.gp_len) if good else self.gp_len // 2
        self.gp_len = int(min(c.gp_phase_max, max(c.gp_phase_min, g)))
        return self.gp_len

    def is_gp(self, t: int) -> bool:
        if self.replay is not None:
            return bool(self.replay[t])
        while self.left <= 0:
            if self.kind == "bp":
                g = self._next_gp_len()
                self.first = False
                self.q = []
                if g > 0:
                    self.kind, self.left = "gp", g
                else:
                    self.kind, self.left = "bp", self.cfg.bp_phase
            else:
                self.kind, self.left = "bp", self.cfg.bp_phase
        self.left -= 1
        return self.kind == "gp"

    def report(self, cos: float, rel: float) -> None:
        self.q.append((cos, rel))


def phases_to_mask(phases: list[list[Any]]) -> np.ndarray:
    """Run-length list ``[["bp", n], ["gp", m], ...]`` -> boolean per-step GP mask."""
    return np.concatenate([np.full(int(n), k == "gp", dtype=bool) for k, n in phases]) if phases else np.zeros(0, bool)


def _mask_to_phases(mask: np.ndarray) -> list[list[Any]]:
    out: list[list[Any]] = []
    for v in mask:
        k = "gp" if v else "bp"
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    return out


def _cos_rel(pred: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    p = pred.ravel().astype(np.float64)
    t = true.ravel().astype(np.float64)
    nt = float(np.linalg.norm(t))
    npred = float(np.linalg.norm(p))
    cos = float(p @ t / (npred * nt)) if npred > 0 and nt > 0 else 0.0
    rel = float(np.linalg.norm(p - t) / nt) if nt > 0 else 0.0
    return cos, rel


def train_run(
    cfg: SurrogateConfig, scheme: str, seed: int, *, replay: Optional[np.ndarray] = None,
    observer: Optional[Callable[[Step, Optional[list]], None]] = None,
) -> dict[str, Any]:
    """Train once with the registered scheme ``scheme`` (:mod:`models.schemes`: ``bp``,
    ``adagp``, ``efb``, ``local``, ``dni``; the controls ``null``, ``null_momentum``, ``truncated`` need
    ``replay``, the GP mask of the run they control; the diagnostics ``oracle`` and ``stale`` are meant for
    ``adaptive=False``). ``observer(step, preds)``, if given, is called on every BP step after the scheme's
    prediction and before the update (a diagnostic hook: it may run the network on other data, which the
    update does not depend on, but must not change the weights). Returns plain data (accuracy in percent,
    schedule, timeline, quality)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        out = _train(cfg, scheme, seed, replay, observer)
    out["blas"] = blas_kernel()  # float32 rounding, so the run's figures, depend on it (docs/surrogate.md)
    return out


@functools.lru_cache(maxsize=1)
def blas_kernel() -> str:
    """numpy's BLAS library and the kernel it picked for this CPU (threadpoolctl), e.g. ``"openblas 0.3.31
    SkylakeX"``: a run's figures are reproducible on the same kernel, not across kernels. (scipy may load a
    BLAS of its own; the surrogate's products are numpy's.)"""
    import numpy as np
    from threadpoolctl import threadpool_info

    np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)  # numpy's BLAS loaded
    libs = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]
    mine = [lib for lib in libs if "numpy" in str(lib.get("filepath", ""))] or libs
    if not mine:
        return "unknown"
    return " ".join(str(mine[0][k]) for k in ("internal_api", "version", "architecture") if mine[0].get(k))


def _probe_subset(n: int) -> np.ndarray:
    """The fixed subset of the training set the large-batch gradient is measured on (same in every run)."""
    return np.sort(np.random.default_rng(PROBE_SEED).choice(n, min(PROBE_SIZE, n), replace=False))


def _train(cfg, scheme_name, seed, replay, observer):
    t0 = time.perf_counter()
    task = load_task(cfg.task)
    init_rng = np.random.default_rng(seed)
    order_rng = np.random.default_rng([seed, 1])
    net = build_network(cfg.network, cfg.width, task.shape, task.n_classes, init_rng)
    scheme = make_scheme(scheme_name, cfg, net, task.n_classes, seed, task)
    players = net.param_layers
    out_layer = players[-1]
    predicted = predicted_layers(cfg, net)
    vel = [(np.zeros_like(l.W), np.zeros_like(l.b)) for l in players]
    vidx = {id(l): i for i, l in enumerate(players)}
    mu = np.float32(cfg.momentum)
    lr = np.float32(cfg.lr)

    def update(layer, dW, db):
        vw, vb = vel[vidx[id(layer)]]
        vw *= mu
        vw += dW
        layer.W -= lr * vw
        vb *= mu
        vb += db
        layer.b -= lr * vb

    extras = list(getattr(net, "extra_params", ()))
    extra_vel = [np.zeros_like(getattr(u, p)) for u, p, _ in extras]

    n = len(task.x)
    bs = min(cfg.batch_size, n)
    spe = n // bs
    total = cfg.epochs * spe
    if scheme.control and replay is None:
        raise ValueError(f"{scheme_name}: needs the GP mask of the run it controls")

    sched = Schedule(cfg, total, replay) if scheme.uses_schedule else None
    agent = cfg.agent and scheme.predicts
    last_true: list[Optional[np.ndarray]] = [None] * len(predicted)
    tau = [_AGENT_TAU0] * len(predicted)
    probe_idx = _probe_subset(n) if scheme.predicts else None
    n_probed = 0

    mask = np.zeros(total, dtype=bool)
    q_cos = np.full(total, np.nan)
    q_rel = np.full(total, np.nan)
    q_large = np.full((total, 4), np.nan)  # cos_large, cos_large_bp, loss_decrease, loss_decrease_bp
    losses = np.zeros(total)
    epochs_out = []
    t = 0
    for epoch in range(cfg.epochs):
        perm = order_rng.permutation(n)
        for i in range(spe):
            idx = perm[i * bs : (i + 1) * bs]
            xb, yb = task.x[idx], task.y[idx]
            if cfg.lr_decay:
                lr = np.float32(cfg.lr * 0.5 * (1.0 + np.cos(np.pi * t / total)))
            gp = sched.is_gp(t) if sched is not None else False
            mask[t] = gp
            if not gp:
                logits = net.forward(xb)
                loss, d = softmax_cross_entropy(logits, yb)
                net.backward(d)
                true_g = [(l.dW, l.db) for l in players]
                extra_g = [getattr(u, g) for u, _, g in extras]
                trues = [grad_matrix(*true_g[vidx[id(l)]]) for l in predicted]
                step = Step(net, predicted, yb, d, trues, t, float(lr), xb)
                preds = scheme.bp_step(step)
                if preds is not None:
                    cs, rs = [], []
                    for j, (p, tg) in enumerate(zip(preds, trues)):
                        if agent and last_true[j] is not None:
                            p = (1.0 - tau[j]) * p + tau[j] * last_true[j]
                            preds[j] = p
                            c_hat = max(0.0, _cos_rel(tg, last_true[j])[0])
                            tau[j] = _AGENT_DECAY * tau[j] + (1 - _AGENT_DECAY) * c_hat
                        c, r = _cos_rel(p, tg)
                        cs.append(c)
                        rs.append(r)
                        if agent:
                            last_true[j] = tg
                    q_cos[t], q_rel[t] = float(np.mean(cs)), float(np.mean(rs))
                if observer is not None:  # before the probe, which runs the network on other data
                    observer(step, preds)
                if preds is not None:
                    if t >= sched.warm:
                        sched.report(q_cos[t], q_rel[t])
                        if n_probed % PROBE_EVERY == 0:
                            q_large[t] = _probe(net, predicted, task, probe_idx, preds, trues, lr)
                        n_probed += 1
                for l, (dW, db) in zip(players, true_g):
                    update(l, dW, db)
                for (u, p, _), g, v in zip(extras, extra_g, extra_vel):  # batch-norm scales: BP steps only
                    v *= mu
                    v += g
                    getattr(u, p)[...] -= lr * v
            else:
                step = Step(net, predicted, yb, None, None, t, float(lr), xb)
                scheme.begin_gp(step)
                logits = net.forward(xb)
                loss, d = softmax_cross_entropy(logits, yb)
                step.dlogits = d
                for j, (layer, g) in enumerate(zip(predicted, scheme.gp_step(step))):
                    if g is None:
                        continue
                    if agent and last_true[j] is not None:
                        g = (1.0 - tau[j]) * g + tau[j] * last_true[j]
                    update(layer, g[:, :-1].T, g[:, -1])
                if cfg.true_output_grad:
                    out_layer.backward(d, need_dx=False)
                    update(out_layer, out_layer.dW, out_layer.db)
            losses[t] = loss
            if not np.isfinite(loss):
                break
            t += 1
        lo, hi = epoch * spe, (epoch + 1) * spe
        sel = slice(lo, min(hi, t))
        post = np.arange(lo, hi) >= (sched.warm if sched is not None else total)
        acc_e = float((net.predict(task.x_test) == task.y_test).mean() * 100.0)
        epochs_out.append(
            {
                "epoch": epoch + 1,
                "gp_steps": int(mask[lo:hi].sum()),
                "post_warmup_steps": int(post.sum()),
                "cos": _nanmean(q_cos[sel]),
                "relerr": _nanmean(q_rel[sel]),
                **{k: _nanmean(q_large[sel, c]) for c, k in enumerate(_PROBE_KEYS)},
                "loss": float(np.mean(losses[sel])) if t > lo else float("nan"),
                "test_accuracy": acc_e,
            }
        )
        if t < hi:  # diverged
            break
    warm = sched.warm if sched is not None else total
    post_steps = max(0, total - warm)
    gp_steps = int(mask.sum())
    post_q = np.arange(total) >= warm
    # the last epoch's test accuracy when it ran to its end (the same weights: no second pass)
    acc = (epochs_out[-1]["test_accuracy"] if t == total and len(epochs_out) == cfg.epochs
           else float((net.predict(task.x_test) == task.y_test).mean() * 100.0))
    result = {
        "scheme": scheme_name,
        "seed": int(seed),
        "accuracy": acc,
        # a non-finite loss ended the run, or it ended at chance (the network learned nothing or collapsed)
        "diverged": bool(t < total) or at_chance(acc, task.n_classes, len(task.y_test)),
        "steps": int(total),
        "warmup_steps": int(warm),
        "gp_steps": gp_steps,
        "gp_fraction": gp_steps / post_steps if post_steps else 0.0,
        "phases": _mask_to_phases(mask),
        "cos": _nanmean(q_cos[post_q]),
        "relerr": _nanmean(q_rel[post_q]),
        **{k: _nanmean(q_large[post_q, c]) for c, k in enumerate(_PROBE_KEYS)},
        "epochs": epochs_out,
        "network_params": net.n_params(),
        "predictor_params": scheme.n_params(),
        "wall_s": time.perf_counter() - t0,
    }
    return result


_PROBE_KEYS = ("cos_large", "cos_large_bp", "loss_decrease", "loss_decrease_bp")


def _probe(net, layers, task, idx, preds, trues, lr) -> list[float]:
    """Quality against the expected gradient, at the current weights, on the fixed probe subset: the
    cosine of the prediction (and, for scale, of the true minibatch gradient) with the subset's gradient,
    and the decrease of the subset's loss by one plain SGD step ``-lr * G`` of the predicted layers with
    the prediction (and with the true minibatch gradient). Leaves the weights exactly as they were, and
    batch-norm running statistics too."""
    with kept_statistics(net):
        return _probe_at(net, layers, task, idx, preds, trues, lr)


def _probe_at(net, layers, task, idx, preds, trues, lr) -> list[float]:
    xs, ys = task.x[idx], task.y[idx]
    logits = net.forward(xs)
    base, d = softmax_cross_entropy(logits, ys)
    net.backward(d)
    large = [grad_matrix(l.dW, l.db) for l in layers]
    cos_p = float(np.mean([_cos_rel(p, g)[0] for p, g in zip(preds, large)]))
    cos_t = float(np.mean([_cos_rel(p, g)[0] for p, g in zip(trues, large)]))
    decs = []
    for gs in (preds, trues):
        saved = [(l.W.copy(), l.b.copy()) for l in layers]
        for l, g in zip(layers, gs):
            l.W -= lr * g[:, :-1].T
            l.b -= lr * g[:, -1]
        decs.append(base - softmax_cross_entropy(net.forward(xs), ys)[0])
        for l, (w, b) in zip(layers, saved):
            l.W[...] = w
            l.b[...] = b
    return [cos_p, cos_t, decs[0], decs[1]]


def at_chance(accuracy: float, n_classes: int, n_test: int) -> bool:
    """Whether a test accuracy (percent) is at chance: within three binomial standard errors of ``1 / n_classes``
    on ``n_test`` samples, or below it (10 classes: 12.85% on 1,000 test samples, 12.01% on 2,000)."""
    p = 1.0 / n_classes
    return bool(accuracy <= 100.0 * (p + 3.0 * np.sqrt(p * (1.0 - p) / n_test)))


def _nanmean(a: np.ndarray) -> Optional[float]:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None
