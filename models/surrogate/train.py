"""One training run of the surrogate: plain BP, ADA-GP, the null control or DNI, for one seed.

Pairing: the network's initialization comes from ``default_rng(seed)`` and the batch order from
``default_rng([seed, 1])`` for every scheme, so BP, ADA-GP and the null control of one seed see the same
initial weights and the same batches. The predictor has its own stream ``default_rng([seed, 2])``.

Step kinds:

* **BP step**: forward, loss, full backward; every layer updates with its true gradient (SGD with
  momentum). If a predictor exists it first predicts the predicted layers' gradients from this batch (the
  quality signal: cosine and relative error against the true gradient), then learns from the true ones.
* **GP step**: forward only; right after each predicted layer's forward, the predictor turns its output
  into the layer's gradient and the layer updates at once. The classifier layer updates with its true
  gradient (``true_output_grad``: one outer product from the loss, no backward pass) or is predicted too.
  In the null control the predicted layers skip GP steps (no update, momentum untouched).
"""

from __future__ import annotations

import time
from typing import Any, Optional

import numpy as np

from models.surrogate.config import SurrogateConfig
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import build_network
from models.surrogate.predictors import AdaGPPredictor, DNIPredictor, grad_matrix
from models.surrogate.tasks import load_task

__all__ = ["train_run", "Schedule", "phases_to_mask"]

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
        self.total = total
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
    cfg: SurrogateConfig, scheme: str, seed: int, *, replay: Optional[np.ndarray] = None
) -> dict[str, Any]:
    """Train once; ``scheme`` in ``bp``, ``adagp``, ``dni``, ``null`` (``null`` needs ``replay``, the GP mask
    of the run it controls) or ``oracle`` (a diagnostic, not a configurable scheme: GP steps apply the true
    gradient of an independent batch at the current weights, i.e. a perfect predictor of the expected
    gradient with minibatch noise; it needs a backward pass and no schedule knob adapts to it, so use
    ``adaptive=False``) or ``stale`` (a diagnostic too: GP steps apply each predicted layer's last true
    gradient, i.e. gradient reuse, no predictor; use ``adaptive=False``). Returns plain data (accuracy in percent, schedule, timeline, quality)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        return _train(cfg, scheme, seed, replay)


def _train(cfg, scheme, seed, replay):
    t0 = time.perf_counter()
    task = load_task(cfg.task)
    init_rng = np.random.default_rng(seed)
    order_rng = np.random.default_rng([seed, 1])
    pred_rng = np.random.default_rng([seed, 2])
    net = build_network(cfg.network, cfg.width, task.length, task.n_classes, init_rng)
    players = net.param_layers
    out_layer = players[-1]
    predicted = players[:-1] if cfg.true_output_grad else players
    pidx = {id(l): i for i, l in enumerate(predicted)}
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

    n = len(task.x)
    bs = min(cfg.batch_size, n)
    spe = n // bs
    total = cfg.epochs * spe

    source = None
    if scheme == "adagp":
        source = AdaGPPredictor([l.fan_in + 1 for l in predicted], cfg, pred_rng)
    elif scheme == "dni":
        sizes = []
        x = task.x[:2]
        for layer in net.layers:
            x = layer.forward(x)
            if id(layer) in pidx:
                sizes.append(int(np.prod(x.shape[1:])))
        source = DNIPredictor(sizes, task.n_classes, cfg, pred_rng)
    elif scheme == "oracle":
        oracle_rng = np.random.default_rng([seed, 3])
        oracle_g: list[Optional[np.ndarray]] = [None] * len(predicted)
    elif scheme == "stale":
        stale_g: list[Optional[np.ndarray]] = [None] * len(predicted)
    elif scheme not in ("bp", "null"):
        raise ValueError(f"scheme: one of 'bp', 'adagp', 'dni', 'null', 'oracle', 'stale' (got {scheme!r})")
    if scheme == "null" and replay is None:
        raise ValueError("null: needs the GP mask of the run it controls")

    sched = None if scheme == "bp" else Schedule(cfg, total, replay)
    agent = cfg.agent and source is not None
    last_true: list[Optional[np.ndarray]] = [None] * len(predicted)
    tau = [_AGENT_TAU0] * len(predicted)

    factored = cfg.pred_output == "factored"

    def xins(layers):
        """Each layer's batch-mean input patch (the factored output's row direction), else None."""
        return [_mean_patch(l) for l in layers] if factored else None

    def predict_bp(yb, trues):
        """Predicted G of each predicted layer on a BP batch (before learning from it); learns after."""
        if scheme == "adagp":
            return source.bp_step([l.out for l in predicted], trues, xins(predicted))
        preds = []
        for i, l in enumerate(predicted):
            l.backward(source.synth(i, l.out, yb), need_dx=False)
            preds.append(grad_matrix(l.dW, l.db))
            source.learn(i, l.out, yb, l.dout)
        return preds

    def gp_grad(i, layer, yb):
        if scheme == "oracle":
            return oracle_g[i]
        if scheme == "stale":
            return stale_g[i]
        if scheme == "adagp":
            g = source.predict(i, layer.out, xins([layer])[0] if factored else None)
        else:
            layer.backward(source.synth(i, layer.out, yb), need_dx=False)
            g = grad_matrix(layer.dW, layer.db)
        if agent and last_true[i] is not None:
            g = (1.0 - tau[i]) * g + tau[i] * last_true[i]
        return g

    mask = np.zeros(total, dtype=bool)
    q_cos = np.full(total, np.nan)
    q_rel = np.full(total, np.nan)
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
                if source is not None:
                    trues = [grad_matrix(*true_g[vidx[id(l)]]) for l in predicted]
                    preds = predict_bp(yb, trues)
                    cs, rs = [], []
                    for j, (p, tg) in enumerate(zip(preds, trues)):
                        if agent and last_true[j] is not None:
                            p = (1.0 - tau[j]) * p + tau[j] * last_true[j]
                            c_hat = max(0.0, _cos_rel(tg, last_true[j])[0])
                            tau[j] = _AGENT_DECAY * tau[j] + (1 - _AGENT_DECAY) * c_hat
                        c, r = _cos_rel(p, tg)
                        cs.append(c)
                        rs.append(r)
                        if agent:
                            last_true[j] = tg
                    q_cos[t], q_rel[t] = float(np.mean(cs)), float(np.mean(rs))
                    if t >= sched.warm:
                        sched.report(q_cos[t], q_rel[t])
                if scheme == "stale":
                    stale_g[:] = [grad_matrix(*true_g[vidx[id(l)]]) for l in predicted]
                for l, (dW, db) in zip(players, true_g):
                    update(l, dW, db)
            else:
                if scheme == "oracle":  # diagnostic: the true gradient of an independent batch, same weights
                    oidx = oracle_rng.choice(n, bs, replace=False)
                    _, d = softmax_cross_entropy(net.forward(task.x[oidx]), task.y[oidx])
                    net.backward(d)
                    oracle_g[:] = [grad_matrix(l.dW, l.db) for l in predicted]
                x = xb
                for layer in net.layers:
                    x = layer.forward(x)
                    j = pidx.get(id(layer))
                    if j is not None and (source is not None or scheme in ("oracle", "stale")):
                        g = gp_grad(j, layer, yb)
                        update(layer, g[:, :-1].T, g[:, -1])
                loss, d = softmax_cross_entropy(x, yb)
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
    result = {
        "scheme": scheme,
        "seed": int(seed),
        "accuracy": float((net.predict(task.x_test) == task.y_test).mean() * 100.0),
        "diverged": bool(t < total),
        "steps": int(total),
        "warmup_steps": int(warm),
        "gp_steps": gp_steps,
        "gp_fraction": gp_steps / post_steps if post_steps else 0.0,
        "phases": _mask_to_phases(mask),
        "cos": _nanmean(q_cos[post_q]),
        "relerr": _nanmean(q_rel[post_q]),
        "epochs": epochs_out,
        "network_params": net.n_params(),
        "predictor_params": source.n_params() if source is not None else 0,
        "wall_s": time.perf_counter() - t0,
    }
    return result


def _mean_patch(layer) -> np.ndarray:
    """Batch (and position) mean of a parameter layer's input patches from its last forward: length fan-in."""
    if hasattr(layer, "_cache"):  # Conv1d: the im2col matrix
        return layer._cache[1].mean(axis=0)
    return layer._x.reshape(layer._x.shape[0], -1).mean(axis=0)


def _nanmean(a: np.ndarray) -> Optional[float]:
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None
