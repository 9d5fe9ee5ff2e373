"""``local``: local auxiliary classifiers (after Decoupled Greedy Learning, Belilovsky et al. 2019).

Training: per predicted layer a linear head on the layer's output, pooled to ``local_width`` positions,
predicts the label; on a GP step the layer updates from its head's loss alone (:class:`LocalClassifier`).

Cost: the layer's output average-pooled to ``local_width`` positions per spatial dimension, a linear head to
``n``, a softmax loss on the labels; in a GP step the head's backward gives the layer's output gradient
(unpooled, masked), then the layer's weight-gradient GEMM right after its forward; the head trains (SGD with
momentum) on every step; no stash. Size knob: ``local_width`` (:class:`LocalShape`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.graph import Net, TrainingOps
from models.schemes.base import GradientScheme, local_grad, out_shape, predicted_layers
from models.schemes.plan import (
    LOSS_ELEMS_PER_VALUE,
    MASK_ELEMS_PER_VALUE,
    SGD_MOMENTUM_ELEMS_PER_PARAM,
    SchemePlan,
    check_size,
    hidden_layers,
    label_aware_plan,
    output_layer,
    training_ops,
)
from models.surrogate.layers import softmax_cross_entropy

__all__ = ["LocalClassifier", "LocalShape", "head_lr", "local_ops", "local_plan", "pooled_size"]


class LocalClassifier(GradientScheme):
    """Local auxiliary classifiers (after Decoupled Greedy Learning, Belilovsky et al. 2019): per predicted
    layer a linear head on the layer's output pooled to ``local_width`` positions (the network's pooling
    rule; at most the layer's own number of positions; on a 2-D map ``local_width`` cells per axis) by
    channels predicts the label. Each head learns
    its cross-entropy on every step (BP and GP; SGD with the run's learning rate and momentum, ours); on a
    GP step the layer updates from the gradient of its head's loss through the head and the pooling only
    (no backward through later layers). Heads start at zero."""

    name = "local"
    size_knobs = ("local_width",)

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.pools, self.A, self.c = [], [], []
        for l in predicted_layers(cfg, net):
            shape = out_shape(net, l)
            spatial, C = shape[:-1], shape[-1]
            S = int(np.prod(spatial)) if spatial else 1
            if len(spatial) > 1:  # a map: local_width cells per spatial axis (as the accelerator model reads it)
                grid = tuple(min(cfg.local_width, int(n)) for n in spatial)
                P = int(np.prod(grid))
            else:
                grid = P = min(cfg.local_width, S)
            self.pools.append(net.pooling(spatial, grid).astype(np.float32) if spatial else None)
            self.A.append(np.zeros((P * C, n_classes), np.float32))
            self.c.append(np.zeros(n_classes, np.float32))
        self.vel = [(np.zeros_like(a), np.zeros_like(c)) for a, c in zip(self.A, self.c)]
        self.mu = np.float32(cfg.momentum)

    def state(self):
        return {f"A{i}": a for i, a in enumerate(self.A)} | {f"c{i}": c for i, c in enumerate(self.c)}

    def _pooled(self, i, h):
        B = h.shape[0]
        pm = self.pools[i]
        if pm is None:
            return h.reshape(B, -1)
        hs = h.reshape(B, pm.shape[0], h.shape[-1])  # (B, S, C)
        return np.einsum("bsc,sp->bpc", hs, pm).reshape(B, -1)

    def _dh(self, i, h, dflat):
        pm = self.pools[i]
        if pm is None:
            return dflat.reshape(h.shape)
        B, C = h.shape[0], h.shape[-1]
        return np.einsum("bpc,sp->bsc", dflat.reshape(B, pm.shape[1], C), pm).reshape(h.shape)

    def _step(self, step):
        grads = []
        for i, l in enumerate(step.layers):
            flat = self._pooled(i, l.out)
            _, d = softmax_cross_entropy(flat @ self.A[i] + self.c[i], step.y)
            grads.append(local_grad(l, self._dh(i, l.out, d @ self.A[i].T)))
            va, vc = self.vel[i]
            va *= self.mu
            va += flat.T @ d
            vc *= self.mu
            vc += d.sum(axis=0)
            lr = np.float32(head_lr(step.lr, self.cfg.momentum, flat))
            self.A[i] -= lr * va
            self.c[i] -= lr * vc
        return grads

    def bp_step(self, step):
        return self._step(step)

    def gp_step(self, step):
        return self._step(step)


def head_lr(lr: float, momentum: float, flat: np.ndarray) -> float:
    """The step of a head on this batch: the run's learning rate, capped at the stability limit of SGD with
    momentum ``mu`` on the head's loss (``lr * curvature < 2 (1 + mu)``). A softmax cross-entropy's Hessian in
    the head's weights and bias is at most half the second moment of its input ``[x, 1]`` (the logits' Hessian
    is at most 1/2), whose largest eigenvalue is at most its trace ``m``, the batch mean of ``|x|^2 + 1``:
    so ``lr <= 4 (1 + mu) / m`` keeps the head from diverging, whatever the scale of the layer's output."""
    m = float(np.einsum("bf,bf->", flat, flat, dtype=np.float64)) / flat.shape[0] + 1.0
    return min(float(lr), 4.0 * (1.0 + momentum) / m)


@dataclass(frozen=True)
class LocalShape:
    """A local classifier's size: pooled positions per spatial dimension of the layer's output."""

    width: int = 4

    def __post_init__(self) -> None:
        check_size("local_width", self.width, 1, "a positive integer")


def pooled_size(net: Net, i: int, width: int) -> int:
    """Values of layer ``i``'s output pooled to ``width`` positions per spatial dimension (a head's input)."""
    c, p, q = net.layers[i].out
    return c * min(width, p) * min(width, q)


def local_ops(net: Net, batch: int, shape: LocalShape, *, train: bool, true_output_grad: bool = True,
              quality: bool = False, word_bytes: int = 2) -> tuple[TrainingOps, int, int]:
    """Local classifiers' extra ops for a BP step (``train``: the heads learn; the layers take their true
    gradients) or a GP step (the heads learn and give the layers their output gradients); their parameters
    and further state (none)."""
    n = net.layers[output_layer(net)].out_channels
    rows: list[tuple] = []
    params = 0
    for i in hidden_layers(net, true_output_grad=true_output_grad):
        out = batch * math.prod(net.layers[i].out)
        f = pooled_size(net, i, shape.width)
        params += f * n + n
        rows.append((i, "reorg", 0, 0, 0, 0, out + batch * f, 0))  # average-pool the output
        rows.append((i, "pred_fwd", batch, f, n, 1, 0, 0))  # head
        rows.append((i, "pred_loss", 0, 0, 0, 0, LOSS_ELEMS_PER_VALUE * batch * n, 0))
        rows.append((i, "pred_wgrad", f, batch, n, 1, 0, 0))
        if not train or quality:
            rows.append((i, "pred_igrad", batch, n, f, 1, 0, 0))  # into the pooled output
            rows.append((i, "pred_vec", 0, 0, 0, 0, batch * f + out, 0))  # unpool
            rows.append((i, "pred_vec", 0, 0, 0, 0, MASK_ELEMS_PER_VALUE * out, 0))  # * relu'
            if train:  # cosine against the true output gradient
                rows.append((i, "pred_loss", 0, 0, 0, 0, 2 * out, 0))
        rows.append((i, "pred_update", 0, 0, 0, 0, (f * n + n) * SGD_MOMENTUM_ELEMS_PER_PARAM, 0))
    return training_ops(net, batch, word_bytes, rows), params, 0


def local_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """Local classifiers' cost at ``cfg.local_width``."""
    shape = LocalShape(width=cfg.local_width)
    return label_aware_plan("local", local_ops, shape, cfg, net, batch, word_bytes, overlap="per_layer",
                            keeps_stash=False)
