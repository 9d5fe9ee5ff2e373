"""``efb``: error feedback (ours, after feedback alignment with a learned feedback map).

Training: after the forward pass each predicted layer's output gradient is ``dh_l = e B_l`` from the output
error ``e = dL/dlogits`` (then times the activation's derivative in the layer's local backward), ``dW_l`` from
the layer's own input; ``B_l`` is refit on every BP batch (:class:`ErrorFeedback`).

Cost: after the whole forward, the output error ``e = softmax - onehot`` is mapped to each hidden layer's
output gradient by a rank-``r`` factored map ``B_l = U_l V_l`` (GEMMs ``e U_l`` and ``(e U_l) V_l``), masked by
the activation's derivative, then the layer's own weight-gradient GEMM; no input-gradient GEMMs; BP's
activation stash is kept (the feedback needs the output first). After every BP step ``B_l`` is refit (the
surrogate's reduced-rank ridge regression): the decayed statistics ``S_ee = E^T E`` and ``S_eh = E^T dH_l``
accumulated; ``S_ee + a I = C C^T`` (about ``n^3``), ``M = C^-1 S_eh`` (``n x n x |h|``), the top-``r``
eigenvectors ``W_r`` of the Gram matrix ``M M^T`` (``n x |h| x n``, then about ``n^3``), ``U_l = C^-T W_r``
and ``V_l = W_r^T M`` (``r x n x |h|``). Its cost grows as ``n^2 |h|`` per layer and BP step, its state as
``n |h|``. Size knob: ``efb_rank`` (:class:`EFBShape`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.graph import Net, TrainingOps
from models.schemes.base import GradientScheme, local_grad, out_size, predicted_layers
from models.schemes.plan import (
    LOSS_ELEMS_PER_VALUE,
    MASK_ELEMS_PER_VALUE,
    SchemePlan,
    check_size,
    error_shape,
    hidden_layers,
    label_aware_plan,
    training_ops,
)

__all__ = ["ErrorFeedback", "EFBShape", "efb_ops", "efb_plan", "EFB_RIDGE"]

#: efb's ridge: lambda = EFB_RIDGE * trace(S_ee) / n_classes (ours)
EFB_RIDGE = 1e-3


class ErrorFeedback(GradientScheme):
    """Error feedback (ours, after feedback alignment with a learned feedback map): after the forward pass,
    each predicted layer's output gradient is ``dh_l = e B_l`` (then times ``f'(z_l)`` in the layer's local
    backward) from the output error ``e = dL/dlogits``, and ``dW_l`` comes from the layer's own input.

    ``B_l`` (``n_classes x size(h_l)``, rank ``efb_rank``) is the reduced-rank ridge regression of the true
    ``dL/dh_l`` on ``e`` over BP batches, from the decayed statistics ``S_ee <- d S_ee + e^T e`` and
    ``S_eh <- d S_eh + e^T dh`` (``d = efb_decay``), refit after every BP batch; stored as factors
    ``P_l`` (``n_classes x r``) and ``Q_l`` (``r x size(h_l)``), so a GP step costs ``e P_l Q_l``."""

    name = "efb"
    size_knobs = ("efb_rank",)

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        K = n_classes
        self.rank = min(cfg.efb_rank, K)
        self.decay = cfg.efb_decay
        sizes = [out_size(net, l) for l in predicted_layers(cfg, net)]
        self.See = [np.zeros((K, K)) for _ in sizes]
        self.Seh = [np.zeros((K, d)) for d in sizes]
        self.P = [np.zeros((K, self.rank), np.float32) for _ in sizes]
        self.Q = [np.zeros((self.rank, d), np.float32) for d in sizes]

    def state(self):
        out = {}
        for i in range(len(self.P)):
            out.update({f"P{i}": self.P[i], f"Q{i}": self.Q[i], f"See{i}": self.See[i], f"Seh{i}": self.Seh[i]})
        return out

    def n_params(self):
        """The feedback factors plus the statistics they are refit from."""
        return int(sum(p.size + q.size + a.size + b.size for p, q, a, b in zip(self.P, self.Q, self.See, self.Seh)))

    def _dh(self, i, layer, e):
        return ((e @ self.P[i]) @ self.Q[i]).reshape(layer.out.shape)

    def _refit(self, i):
        """Reduced-rank ridge regression from the statistics: with ``S_ee + lam I = C C^T`` and
        ``M = C^-1 S_eh`` the ridge map is ``B = C^-T M``; its best rank-r fit of the fitted values is
        ``C^-T U_r U_r^T M`` (``U_r``: top-r eigenvectors of ``M M^T``), stored as ``P = C^-T U_r``,
        ``Q = U_r^T M``; at full rank it is the ridge map itself."""
        K = self.n_classes
        A = self.See[i]
        lam = EFB_RIDGE * max(float(np.trace(A)) / K, 1e-30)
        C = np.linalg.cholesky(A + lam * np.eye(K))
        M = np.linalg.solve(C, self.Seh[i])
        if self.rank < K:
            _, U = np.linalg.eigh(M @ M.T)  # ascending eigenvalues
            Ur = U[:, K - self.rank :]
            self.P[i] = np.linalg.solve(C.T, Ur).astype(np.float32)
            self.Q[i] = (Ur.T @ M).astype(np.float32)
        else:
            self.P[i] = np.linalg.inv(C.T).astype(np.float32)
            self.Q[i] = M.astype(np.float32)

    def bp_step(self, step):
        e = step.dlogits
        preds = [local_grad(l, self._dh(i, l, e)) for i, l in enumerate(step.layers)]
        e64 = e.astype(np.float64)
        for i, l in enumerate(step.layers):
            dh = l.dout.reshape(e.shape[0], -1).astype(np.float64)
            self.See[i] *= self.decay
            self.See[i] += e64.T @ e64
            self.Seh[i] *= self.decay
            self.Seh[i] += e64.T @ dh
            self._refit(i)
        return preds

    def gp_step(self, step):
        return [local_grad(l, self._dh(i, l, step.dlogits)) for i, l in enumerate(step.layers)]


@dataclass(frozen=True)
class EFBShape:
    """Error feedback's size: the rank of each layer's feedback map (1 to the output width)."""

    rank: int = 10

    def __post_init__(self) -> None:
        check_size("efb_rank", self.rank, 1, "a positive integer")


def efb_ops(net: Net, batch: int, shape: EFBShape, *, train: bool, true_output_grad: bool = True,
            quality: bool = False, word_bytes: int = 2) -> tuple[TrainingOps, int, int]:
    """Error feedback's extra ops for a BP step (``train``) or a GP step; also its parameters and state."""
    rows: list[tuple] = []
    params = state = 0
    grams: set[tuple[int, int]] = set()
    predict = not train or quality
    for i in hidden_layers(net, true_output_grad=true_output_grad):
        m, ne, d = error_shape(net, i, batch)
        r = min(shape.rank, ne)
        params += ne * r + r * d
        state += ne * d
        grams.add((m, ne))
        if predict:
            rows.append((i, "pred_fwd", m, ne, r, 1, 0, 0))  # e U_l
            rows.append((i, "pred_fwd", m, r, d, 1, 0, 0))  # (e U_l) V_l
            rows.append((i, "pred_vec", 0, 0, 0, 0, MASK_ELEMS_PER_VALUE * m * d, 0))  # * relu'(z_l)
        if train:
            if quality:  # cosine of the predicted and the true output gradient: read both
                rows.append((i, "pred_loss", 0, 0, 0, 0, 2 * m * d, 0))
            rows.append((i, "pred_wgrad", ne, m, d, 1, 0, 0))  # E^T dH_l
            rows.append((i, "pred_update", 0, 0, 0, 0, 2 * ne * d, 0))  # S_eh <- decay S_eh + E^T dH_l
            rows.append((i, "pred_wgrad", ne, ne, d, 1, 0, 0))  # M = C^-1 S_eh
            rows.append((i, "pred_wgrad", ne, d, ne, 1, 0, 0))  # Gram M M^T
            rows.append((i, "pred_wgrad", ne, ne, ne, 1, 0, 0))  # its eigenvectors (about n^3)
            rows.append((i, "pred_wgrad", ne, ne, r, 1, 0, 0))  # U_l = C^-T W_r
            rows.append((i, "pred_wgrad", r, ne, d, 1, 0, 0))  # V_l = W_r^T M
            rows.append((i, "pred_update", 0, 0, 0, 0, 2 * (ne * r + r * d), 0))  # write U_l, V_l
    for m, ne in sorted(grams):
        state += ne * ne
        rows.append((-1, "pred_vec", 0, 0, 0, 0, LOSS_ELEMS_PER_VALUE * m * ne, 0))  # e = softmax - onehot
        if train:
            rows.append((-1, "pred_wgrad", ne, m, ne, 1, 0, 0))  # E^T E
            rows.append((-1, "pred_wgrad", ne, ne, ne, 1, 0, 0))  # Cholesky of S_ee + a I (about n^3)
            rows.append((-1, "pred_update", 0, 0, 0, 0, 2 * ne * ne, 0))
    return training_ops(net, batch, word_bytes, rows), params, state


def efb_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """Error feedback's cost at ``cfg.efb_rank``."""
    shape = EFBShape(rank=cfg.efb_rank)
    return label_aware_plan("efb", efb_ops, shape, cfg, net, batch, word_bytes, overlap="after_forward",
                            keeps_stash=True)
