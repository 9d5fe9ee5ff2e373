"""The cost half's machinery: :class:`SchemePlan`, what a gradient scheme adds to a training step on the
accelerator, and the helpers every lowering shares.

The training surrogate (:mod:`models.surrogate`) measures what a scheme does to accuracy; a scheme's lowering
(``<name>_plan`` in ``models/schemes/<name>.py``) says what it costs. For a network, a batch and the scheme's
size knobs it gives a :class:`SchemePlan`:

* ``train`` -- the scheme's extra work on a **BP step** (its predictor, feedback map, heads or modules
  learning from the true gradients), as op rows in the project's GEMM convention (``models.graph``);
* ``gp`` -- its extra work on a **GP step** (the prediction itself);
* which of the main network's own backward ops a GP step still runs, per layer: ``gp_wgrad`` (weight-gradient
  GEMMs), ``gp_igrad`` (input-gradient GEMMs), ``gp_bwd_vec`` (vector-op backward), ``gp_update`` (weight
  updates), and ``gp_stash``: the layers whose activations must be kept from the forward until after it
  (the stash BP keeps, or part of it);
* ``overlap`` -- how the extra work may overlap the main array's on a dedicated predictor unit:
  ``"per_layer"`` (a layer's prediction follows that layer's forward, as ADA-GP's) or ``"after_forward"``
  (it needs the whole forward first, e.g. the output error).

The extra ops run on the predictor unit (``Hardware.predictor_unit()``: dedicated PEs and SRAM, or the main
array time-shared); the main network's ops selected above run on the main array. Extra-op phases:
``reorg``, ``pred_fwd``, ``pred_vec`` (inference side: in a BP step they may overlap the forward) and
``pred_refwd``, ``pred_loss``, ``pred_igrad``, ``pred_wgrad``, ``pred_update`` (training side). GEMM phases
are ``pred_fwd``, ``pred_refwd``, ``pred_igrad``, ``pred_wgrad``; the others are vector ops.
Layer ``-1`` marks an op of the whole step.

Here "hidden layers" are the layers with weights of their own below the output layer (the last conv/linear
layer, whose output is the logits); ``n`` is its output width per position (classes).

With ``true_output_grad`` (the default) the output layer updates with its true gradient in GP steps of every
scheme but ``adagp`` (its weight-gradient GEMM from ``dlogits``, one vector op: :func:`true_output_rows`);
ADA-GP's predictor predicts it (``models.predictor``; the difference is under 0.1% of a ResNet-50 step). With
``quality`` (an adaptive schedule needs a quality signal on BP batches) a BP step also predicts the hidden
layers' output gradients and compares them with the true ones (a cosine: one vector pass); ADA-GP's
predictor always predicts on BP steps (its loss needs it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from models.graph import Net, TrainingOps
from models.predictor import predicted_layers as weighted_layers

__all__ = ["SchemePlan", "output_layer", "hidden_layers", "own_output", "error_shape", "true_output_rows",
           "check_size", "training_ops", "empty_ops", "append_rows", "label_aware_plan",
           "ADAM_ELEMS_PER_PARAM", "SGD_MOMENTUM_ELEMS_PER_PARAM", "LOSS_ELEMS_PER_VALUE", "MASK_ELEMS_PER_VALUE"]

#: ADA-GP's predictor and DNI's modules train with Adam: weight (r+w), gradient (r), two moments (r+w each)
ADAM_ELEMS_PER_PARAM = 3 + 2 * 2
#: local heads train with SGD and momentum, as the network (the surrogate's choice): one momentum buffer
SGD_MOMENTUM_ELEMS_PER_PARAM = 3 + 2
#: a softmax cross-entropy (or its gradient) reads the logits and the label and writes its result
LOSS_ELEMS_PER_VALUE = 3
#: an element-wise product with the activation's derivative: read the gradient and the mask, write
MASK_ELEMS_PER_VALUE = 3


@dataclass(frozen=True)
class SchemePlan:
    """A scheme's cost on one network and batch (see the module docstring)."""

    name: str
    train: TrainingOps
    gp: TrainingOps
    gp_wgrad: tuple[int, ...] = ()
    gp_igrad: tuple[int, ...] = ()
    gp_bwd_vec: tuple[int, ...] = ()
    gp_update: tuple[int, ...] = ()
    gp_stash: tuple[int, ...] = ()
    overlap: str = "per_layer"
    #: parameters of the scheme's own predictor / feedback maps / heads / modules
    params: int = 0
    #: further state it keeps between steps (elements): statistics, running means
    state: int = 0

    def __post_init__(self) -> None:
        if self.overlap not in ("per_layer", "after_forward"):
            raise ValueError(f"overlap: 'per_layer' or 'after_forward', got {self.overlap!r}")


def output_layer(net: Net) -> int:
    """Index of the output layer: the last conv or linear layer outside training-only branches."""
    idx = [i for i, l in enumerate(net.layers) if l.kind in ("conv", "linear") and not l.aux]
    if not idx:
        raise ValueError(f"{net.name}: no conv or linear layer")
    return idx[-1]


def hidden_layers(net: Net, *, true_output_grad: bool = True) -> list[int]:
    """Layers whose gradient a label-aware scheme predicts: the predicted layers (weights of their own) below
    the output layer, and the output layer too when ``true_output_grad`` is off."""
    out = output_layer(net)
    return [i for i in weighted_layers(net) if i != out or not true_output_grad]


def own_output(net: Net) -> tuple[int, bool]:
    """The output layer and whether it has weights of its own (a tied projection updates in BP steps)."""
    out = output_layer(net)
    return out, out in weighted_layers(net)


def error_shape(net: Net, i: int, batch: int) -> tuple[int, int, int]:
    """(rows, error width, gradient width) of the map from the output error to layer ``i``'s output
    gradient: per position when the layer's positions are the output's (sequence models), else per sample
    (the error over the whole output, the layer's whole output)."""
    n, p, q = net.layers[output_layer(net)].out
    c, lp, lq = net.layers[i].out
    if p * q > 1 and (lp, lq) == (p, q):
        return batch * p * q, n, c
    return batch, n * p * q, c * lp * lq


def true_output_rows(net: Net, batch: int, true_output_grad: bool) -> tuple[list[tuple], tuple[int, ...]]:
    """The output layer's true gradient in a GP step: dlogits (one vector op); the layer to update."""
    out, own = own_output(net)
    if not (true_output_grad and own):
        return [], ()
    return [(-1, "pred_vec", 0, 0, 0, 0, LOSS_ELEMS_PER_VALUE * batch * math.prod(net.layers[out].out), 0)], (out,)


def check_size(field: str, value: Any, low: int, what: str) -> None:
    """ValueError naming ``field`` unless ``value`` is an integer of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{field}: {what}, got {value!r}")


def training_ops(net: Net, batch: int, word_bytes: int, rows: list[tuple]) -> TrainingOps:
    """Op rows as a table (the scheme's own ops; its training uses Adam's bookkeeping in ``from_rows``)."""
    return TrainingOps.from_rows(net, batch, "adam", word_bytes, rows)


def empty_ops(net: Net, batch: int, word_bytes: int) -> TrainingOps:
    """No extra ops."""
    return training_ops(net, batch, word_bytes, [])


def append_rows(ops: TrainingOps, rows: list[tuple]) -> TrainingOps:
    """``ops`` with ``rows`` appended."""
    if not rows:
        return ops
    old = list(zip(ops.layer.tolist(), ops.phase.tolist(), ops.M.tolist(), ops.K.tolist(), ops.N.tolist(),
                   ops.repeat.tolist(), ops.vec_elems.tolist(), ops.stash_bytes.tolist()))
    return TrainingOps.from_rows(ops.net, ops.batch, ops.optimizer, ops.word_bytes, old + rows)


def label_aware_plan(name: str, lower: Callable, shape: Any, cfg: Any, net: Net, batch: int, word_bytes: int,
                     *, overlap: str, keeps_stash: bool) -> SchemePlan:
    """The plan of a scheme that predicts the hidden layers' output gradients (efb, local, dni): ``lower``
    gives its extra ops; a GP step computes every hidden layer's weight gradient (and the output layer's
    true one) and updates them."""
    tog = cfg.true_output_grad
    train, params, state = lower(net, batch, shape, train=True, true_output_grad=tog, quality=cfg.adaptive,
                                 word_bytes=word_bytes)
    gp, _, _ = lower(net, batch, shape, train=False, true_output_grad=tog, word_bytes=word_bytes)
    extra, out = true_output_rows(net, batch, tog)
    layers = tuple(sorted(tuple(hidden_layers(net, true_output_grad=tog)) + out))
    return SchemePlan(name, train, append_rows(gp, extra), gp_wgrad=layers, gp_update=layers,
                      gp_stash=tuple(range(len(net.layers))) if keeps_stash else (), overlap=overlap,
                      params=params, state=state)
