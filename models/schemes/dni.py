"""``dni``: conditional synthetic gradients (DNI, Jaderberg et al. 2017, conditioned on the label).

Training: per predicted layer a linear module maps the layer's output and the one-hot label to a synthetic
``dL/dh``, regressed on the true ``dL/dh`` of BP batches; the layer's local backward turns it into its weight
gradient (:class:`DNI`).

Cost: per hidden layer a linear module maps the layer's flattened output and the one-hot label to its output
gradient (``dense``, the surrogate's module), or, as a what-if for large maps, a convolution of ``kernel`` x
``kernel`` over the output and ``n`` label planes (:class:`DNIShape`); then the layer's weight-gradient GEMM.
Modules train on BP steps (L2 on the true output gradient, Adam). No size knob (the surrogate's modules are
dense).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from models.graph import Net, TrainingOps
from models.schemes.base import GradientScheme, local_grad, out_size, predicted_layers
from models.schemes.plan import (
    ADAM_ELEMS_PER_PARAM,
    MASK_ELEMS_PER_VALUE,
    SchemePlan,
    check_size,
    hidden_layers,
    label_aware_plan,
    output_layer,
    training_ops,
)
from models.surrogate.predictors import DNIPredictor

__all__ = ["DNI", "DNIShape", "dni_ops", "dni_plan"]


class DNI(GradientScheme):
    """Conditional DNI: per layer a linear module maps (h, one-hot label) to a synthetic dL/dh, regressed
    on the true dL/dh of BP batches; the layer's local backward turns it into its weight gradient."""

    name = "dni"
    size_knobs = ()

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.p = DNIPredictor([out_size(net, l) for l in predicted_layers(cfg, net)], n_classes, cfg,
                              np.random.default_rng([seed, 2]))

    def state(self):
        return {f"M{i}": m for i, m in enumerate(self.p.Ms)} | {f"c{i}": c for i, c in enumerate(self.p.cs)}

    def bp_step(self, step):
        preds = []
        for i, l in enumerate(step.layers):
            preds.append(local_grad(l, self.p.synth(i, l.out, step.y)))
            self.p.learn(i, l.out, step.y, l.dout)
        return preds

    def gp_step(self, step):
        return [local_grad(l, self.p.synth(i, l.out, step.y)) for i, l in enumerate(step.layers)]


@dataclass(frozen=True)
class DNIShape:
    """A synthetic-gradient module: ``kernel = 0`` the surrogate's dense linear map of the whole flattened
    output (and the label); ``kernel = k`` a k x k convolution over the output and ``n`` label planes."""

    kernel: int = 0

    def __post_init__(self) -> None:
        check_size("dni_kernel", self.kernel, 0, "0 (dense) or a positive integer")


def dni_ops(net: Net, batch: int, shape: DNIShape, *, train: bool, true_output_grad: bool = True,
            quality: bool = False, word_bytes: int = 2) -> tuple[TrainingOps, int, int]:
    """Synthetic-gradient modules' extra ops for a BP step (``train``: they learn) or a GP step; their
    parameters and further state (none)."""
    n = net.layers[output_layer(net)].out_channels
    rows: list[tuple] = []
    params = 0
    for i in hidden_layers(net, true_output_grad=true_output_grad):
        c, p, q = net.layers[i].out
        d = c * p * q
        if shape.kernel == 0:
            m, k, nn = batch, d + n, d
        else:
            m, k, nn = batch * p * q, (c + n) * shape.kernel ** 2, c
        params += k * nn + nn
        rows.append((i, "pred_fwd", m, k, nn, 1, 0, 0))  # the synthetic output gradient
        if not train or quality:
            rows.append((i, "pred_vec", 0, 0, 0, 0, MASK_ELEMS_PER_VALUE * batch * d, 0))  # * relu'
        if train:
            # L2 against the true output gradient (read both, write the difference), the module's
            # weight gradient and its Adam update
            rows.append((i, "pred_loss", 0, 0, 0, 0, 3 * batch * d, 0))
            rows.append((i, "pred_wgrad", k, m, nn, 1, 0, 0))
            rows.append((i, "pred_update", 0, 0, 0, 0, (k * nn + nn) * ADAM_ELEMS_PER_PARAM, 0))
    return training_ops(net, batch, word_bytes, rows), params, 0


def dni_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """DNI's cost with the surrogate's dense modules (a convolutional module is a what-if of :func:`dni_ops`,
    not a training knob)."""
    return label_aware_plan("dni", dni_ops, DNIShape(), cfg, net, batch, word_bytes, overlap="per_layer",
                            keeps_stash=False)
