"""The controls every scheme is reported against; each replays the GP/BP step mask of the run it controls.

* ``null`` -- GP steps skip the hidden layers' update (forward only);
* ``null_momentum`` -- a zero gradient with the momentum step still taken (the update's traffic);
* ``truncated`` -- only the layer below the output layer gets its exact gradient (on the accelerator: the
  output layer's input-gradient GEMM, the vector backward in between, the two layers' weight gradients and
  updates).

Their BP steps are plain BP (no extra ops). With ``true_output_grad`` the output layer also takes its true
gradient in GP steps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from models.graph import Net
from models.predictor import predicted_layers as weighted_layers
from models.schemes.base import GradientScheme, local_grad
from models.schemes.plan import LOSS_ELEMS_PER_VALUE, SchemePlan, empty_ops, own_output, training_ops, true_output_rows

__all__ = ["Null", "NullMomentum", "Truncated", "null_plan", "null_momentum_plan", "truncated_plan"]


class Null(GradientScheme):
    """Control: predicted layers skip GP steps (no update, momentum untouched)."""

    name = "null"
    control = True
    predicts = False


class NullMomentum(GradientScheme):
    """Control: a zero gradient in GP steps, the momentum step still taken (what a GP step with a useless
    predictor does on an accelerator that keeps the optimizer running)."""

    name = "null_momentum"
    control = True
    predicts = False

    def gp_step(self, step):
        return [np.zeros((l.c_out, l.fan_in + 1), dtype=l.W.dtype) for l in step.layers]


class Truncated(GradientScheme):
    """Control: in GP steps only the layer below the classifier gets its exact gradient (backprop one layer
    deep from the output error); the other predicted layers skip."""

    name = "truncated"
    control = True
    predicts = False

    def gp_step(self, step):
        below = self.net.param_layers[-2] if len(self.net.param_layers) > 1 else None
        out = []
        for l in step.layers:
            out.append(local_grad(l, self.net.backward_to(step.dlogits, l)) if l is below else None)
        return out


def null_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """``null``'s cost: a GP step updates only the output layer (its true gradient, if ``true_output_grad``)."""
    extra, out = true_output_rows(net, batch, cfg.true_output_grad)
    return SchemePlan("null", empty_ops(net, batch, word_bytes), training_ops(net, batch, word_bytes, extra),
                      gp_wgrad=out, gp_update=out, overlap="after_forward")


def null_momentum_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """``null_momentum``'s cost: ``null``'s, with every weighted layer's update (the momentum step)."""
    extra, out = true_output_rows(net, batch, cfg.true_output_grad)
    return SchemePlan("null_momentum", empty_ops(net, batch, word_bytes), training_ops(net, batch, word_bytes, extra),
                      gp_wgrad=out, gp_update=tuple(weighted_layers(net)), overlap="after_forward")


def truncated_plan(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    """``truncated``'s cost: one layer of backprop from the output error in a GP step."""
    out, own = own_output(net)
    below = [i for i in weighted_layers(net) if i < out]
    if not below:
        raise ValueError(f"truncated: {net.name} has no layer with weights below its output layer")
    b = below[-1]
    extra = [(-1, "pred_vec", 0, 0, 0, 0, LOSS_ELEMS_PER_VALUE * batch * math.prod(net.layers[out].out), 0)]
    layers = (b, out) if own else (b,)
    return SchemePlan("truncated", empty_ops(net, batch, word_bytes), training_ops(net, batch, word_bytes, extra),
                      gp_wgrad=layers, gp_igrad=(out,), gp_bwd_vec=tuple(range(b + 1, out)),
                      gp_update=layers, gp_stash=tuple(range(b, len(net.layers))), overlap="after_forward")
