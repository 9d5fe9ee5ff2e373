"""Gradient schemes as workloads: what each scheme adds to a training step, one registry entry per scheme.

The training surrogate (:mod:`models.surrogate`) measures what a scheme does to accuracy; this module says
what it costs. For a network, a batch and the scheme's size knobs it gives a :class:`SchemePlan`:

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

Schemes (names as in ``SurrogateConfig.scheme``; the semantics are the surrogate's, see
``docs/surrogate.md``). Here "hidden layers" are the layers with weights of their own below the output layer
(the last conv/linear layer, whose output is the logits); ``n`` is its output width per position (classes):

* ``adagp`` -- ADA-GP's shared predictor (:mod:`models.predictor`): reorganization and inference after
  every predicted layer; GP steps update the predicted layers, no backward, no stash.
* ``efb`` -- error feedback: after the whole forward, the output error ``e = softmax - onehot`` is mapped to
  each hidden layer's output gradient by a rank-``r`` factored map ``B_l = U_l V_l`` (GEMMs ``e U_l`` and
  ``(e U_l) V_l``), masked by the activation's derivative, then the layer's own weight-gradient GEMM; no
  input-gradient GEMMs; BP's activation stash is kept (the feedback needs the output first). After every
  BP step ``B_l`` is refit (the surrogate's reduced-rank ridge regression): the decayed statistics
  ``S_ee = E^T E`` and ``S_eh = E^T dH_l`` accumulated; ``S_ee + a I = C C^T`` (about ``n^3``),
  ``M = C^-1 S_eh`` (``n x n x |h|``), the top-``r`` eigenvectors ``W_r`` of the Gram matrix ``M M^T``
  (``n x |h| x n``, then about ``n^3``), ``U_l = C^-T W_r`` and ``V_l = W_r^T M`` (``r x n x |h|``). Its
  cost grows as ``n^2 |h|`` per layer and BP step, its state as ``n |h|``.
* ``local`` -- a local classifier per hidden layer: the layer's output average-pooled to ``local_width``
  positions per spatial dimension, a linear head to ``n``, a softmax loss on the labels; in a GP step the
  head's backward gives the layer's output gradient (unpooled, masked), then the layer's weight-gradient
  GEMM right after its forward; the head trains (SGD with momentum) on every step; no stash.
* ``dni`` -- conditional synthetic gradients: per hidden layer a linear module maps the layer's flattened
  output and the one-hot label to its output gradient (``dense``, the surrogate's module), or, as a what-if
  for large maps, a convolution of ``kernel`` x ``kernel`` over the output and ``n`` label planes; then the
  layer's weight-gradient GEMM. Modules train on BP steps (L2 on the true output gradient, Adam).
* ``null`` -- GP steps skip the hidden layers' update (forward only); ``null_momentum`` -- a zero gradient
  with the momentum step still taken (the update's traffic); ``truncated`` -- only the layer below the output
  layer gets its exact gradient (the output layer's input-gradient GEMM, the vector backward in between, the
  two layers' weight gradients and updates). Their BP steps are plain BP.

With ``true_output_grad`` (the default) the output layer updates with its true gradient in GP steps of every
scheme but ``adagp`` (its weight-gradient GEMM from ``dlogits``, one vector op); ADA-GP's predictor predicts it
(``models.predictor``; the difference is under 0.1% of a ResNet-50 step). With ``quality`` (an adaptive
schedule needs a quality signal on BP batches) a BP step also predicts the hidden layers' output gradients
and compares them with the true ones (a cosine: one vector pass); ADA-GP's predictor always predicts on BP
steps (its loss needs it).

Adding a scheme: write its lowering below and register it in :data:`SCHEMES`; ``accel.schedule`` and
``dse.evaluate`` need no change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from models.graph import Net, TrainingOps
from models.predictor import PredictorShape, predicted_layers, predictor_ops, predictor_params

__all__ = ["SchemePlan", "SCHEMES", "scheme_plan", "scheme_names", "output_layer", "hidden_layers",
           "efb_ops", "local_ops", "dni_ops", "EFBShape", "LocalShape", "DNIShape"]

#: ADA-GP's predictor and DNI's modules train with Adam: weight (r+w), gradient (r), two moments (r+w each)
_ADAM_ELEMS_PER_PARAM = 3 + 2 * 2
#: local heads train with SGD and momentum, as the network (the surrogate's choice): one momentum buffer
_SGD_MOMENTUM_ELEMS_PER_PARAM = 3 + 2
#: a softmax cross-entropy (or its gradient) reads the logits and the label and writes its result
_LOSS_ELEMS_PER_VALUE = 3
#: an element-wise product with the activation's derivative: read the gradient and the mask, write
_MASK_ELEMS_PER_VALUE = 3


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
    return [i for i in predicted_layers(net) if i != out or not true_output_grad]


def _own_output(net: Net) -> tuple[int, bool]:
    """The output layer and whether it has weights of its own (a tied projection updates in BP steps)."""
    out = output_layer(net)
    return out, out in predicted_layers(net)


def _error_shape(net: Net, i: int, batch: int) -> tuple[int, int, int]:
    """(rows, error width, gradient width) of the map from the output error to layer ``i``'s output
    gradient: per position when the layer's positions are the output's (sequence models), else per sample
    (the error over the whole output, the layer's whole output)."""
    n, p, q = net.layers[output_layer(net)].out
    c, lp, lq = net.layers[i].out
    if p * q > 1 and (lp, lq) == (p, q):
        return batch * p * q, n, c
    return batch, n * p * q, c * lp * lq


def _true_output_rows(net: Net, batch: int, true_output_grad: bool) -> tuple[list[tuple], tuple[int, ...]]:
    """The output layer's true gradient in a GP step: dlogits (one vector op); the layer to update."""
    out, own = _own_output(net)
    if not (true_output_grad and own):
        return [], ()
    return [(-1, "pred_vec", 0, 0, 0, 0, _LOSS_ELEMS_PER_VALUE * batch * math.prod(net.layers[out].out), 0)], (out,)


def _check_size(field: str, value: Any, low: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{field}: {what}, got {value!r}")


def _ops(net: Net, batch: int, word_bytes: int, rows: list[tuple]) -> TrainingOps:
    return TrainingOps.from_rows(net, batch, "adam", word_bytes, rows)


# -- efb ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EFBShape:
    """Error feedback's size: the rank of each layer's feedback map (1 to the output width)."""

    rank: int = 10

    def __post_init__(self) -> None:
        _check_size("efb_rank", self.rank, 1, "a positive integer")


def efb_ops(net: Net, batch: int, shape: EFBShape, *, train: bool, true_output_grad: bool = True,
            quality: bool = False, word_bytes: int = 2) -> tuple[TrainingOps, int, int]:
    """Error feedback's extra ops for a BP step (``train``) or a GP step; also its parameters and state."""
    rows: list[tuple] = []
    params = state = 0
    grams: set[tuple[int, int]] = set()
    predict = not train or quality
    for i in hidden_layers(net, true_output_grad=true_output_grad):
        m, ne, d = _error_shape(net, i, batch)
        r = min(shape.rank, ne)
        params += ne * r + r * d
        state += ne * d
        grams.add((m, ne))
        if predict:
            rows.append((i, "pred_fwd", m, ne, r, 1, 0, 0))  # e U_l
            rows.append((i, "pred_fwd", m, r, d, 1, 0, 0))  # (e U_l) V_l
            rows.append((i, "pred_vec", 0, 0, 0, 0, _MASK_ELEMS_PER_VALUE * m * d, 0))  # * relu'(z_l)
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
        rows.append((-1, "pred_vec", 0, 0, 0, 0, _LOSS_ELEMS_PER_VALUE * m * ne, 0))  # e = softmax - onehot
        if train:
            rows.append((-1, "pred_wgrad", ne, m, ne, 1, 0, 0))  # E^T E
            rows.append((-1, "pred_wgrad", ne, ne, ne, 1, 0, 0))  # Cholesky of S_ee + a I (about n^3)
            rows.append((-1, "pred_update", 0, 0, 0, 0, 2 * ne * ne, 0))
    return _ops(net, batch, word_bytes, rows), params, state


def _label_aware(name: str, lower: Callable, shape: Any, cfg: Any, net: Net, batch: int, word_bytes: int,
                 *, overlap: str, keeps_stash: bool) -> SchemePlan:
    """The plan of a scheme that predicts the hidden layers' output gradients (efb, local, dni): ``lower``
    gives its extra ops; a GP step computes every hidden layer's weight gradient (and the output layer's
    true one) and updates them."""
    tog = cfg.true_output_grad
    train, params, state = lower(net, batch, shape, train=True, true_output_grad=tog, quality=cfg.adaptive,
                                 word_bytes=word_bytes)
    gp, _, _ = lower(net, batch, shape, train=False, true_output_grad=tog, word_bytes=word_bytes)
    extra, out = _true_output_rows(net, batch, tog)
    layers = tuple(sorted(tuple(hidden_layers(net, true_output_grad=tog)) + out))
    return SchemePlan(name, train, _append(gp, extra), gp_wgrad=layers, gp_update=layers,
                      gp_stash=tuple(range(len(net.layers))) if keeps_stash else (), overlap=overlap,
                      params=params, state=state)


def _efb(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    shape = EFBShape(rank=cfg.efb_rank)
    return _label_aware("efb", efb_ops, shape, cfg, net, batch, word_bytes, overlap="after_forward",
                        keeps_stash=True)


# -- local -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalShape:
    """A local classifier's size: pooled positions per spatial dimension of the layer's output."""

    width: int = 4

    def __post_init__(self) -> None:
        _check_size("local_width", self.width, 1, "a positive integer")


def _pooled(net: Net, i: int, width: int) -> int:
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
        f = _pooled(net, i, shape.width)
        params += f * n + n
        rows.append((i, "reorg", 0, 0, 0, 0, out + batch * f, 0))  # average-pool the output
        rows.append((i, "pred_fwd", batch, f, n, 1, 0, 0))  # head
        rows.append((i, "pred_loss", 0, 0, 0, 0, _LOSS_ELEMS_PER_VALUE * batch * n, 0))
        rows.append((i, "pred_wgrad", f, batch, n, 1, 0, 0))
        if not train or quality:
            rows.append((i, "pred_igrad", batch, n, f, 1, 0, 0))  # into the pooled output
            rows.append((i, "pred_vec", 0, 0, 0, 0, batch * f + out, 0))  # unpool
            rows.append((i, "pred_vec", 0, 0, 0, 0, _MASK_ELEMS_PER_VALUE * out, 0))  # * relu'
            if train:  # cosine against the true output gradient
                rows.append((i, "pred_loss", 0, 0, 0, 0, 2 * out, 0))
        rows.append((i, "pred_update", 0, 0, 0, 0, (f * n + n) * _SGD_MOMENTUM_ELEMS_PER_PARAM, 0))
    return _ops(net, batch, word_bytes, rows), params, 0


def _local(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    shape = LocalShape(width=cfg.local_width)
    return _label_aware("local", local_ops, shape, cfg, net, batch, word_bytes, overlap="per_layer",
                        keeps_stash=False)


# -- dni ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DNIShape:
    """A synthetic-gradient module: ``kernel = 0`` the surrogate's dense linear map of the whole flattened
    output (and the label); ``kernel = k`` a k x k convolution over the output and ``n`` label planes."""

    kernel: int = 0

    def __post_init__(self) -> None:
        _check_size("dni_kernel", self.kernel, 0, "0 (dense) or a positive integer")


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
            rows.append((i, "pred_vec", 0, 0, 0, 0, _MASK_ELEMS_PER_VALUE * batch * d, 0))  # * relu'
        if train:
            # L2 against the true output gradient (read both, write the difference), the module's
            # weight gradient and its Adam update
            rows.append((i, "pred_loss", 0, 0, 0, 0, 3 * batch * d, 0))
            rows.append((i, "pred_wgrad", k, m, nn, 1, 0, 0))
            rows.append((i, "pred_update", 0, 0, 0, 0, (k * nn + nn) * _ADAM_ELEMS_PER_PARAM, 0))
    return _ops(net, batch, word_bytes, rows), params, 0


def _dni(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    # the surrogate's dense modules (a convolutional module is a what-if of dni_ops, not a training knob)
    return _label_aware("dni", dni_ops, DNIShape(), cfg, net, batch, word_bytes, overlap="per_layer",
                        keeps_stash=False)


# -- adagp -------------------------------------------------------------------------------------------------
def adagp_shape(cfg: Any) -> PredictorShape:
    """ADA-GP's predictor shape from the training knobs (the same knobs size the surrogate's predictor)."""
    features = 2 if cfg.pred_features == "both" else 1  # level and deviation maps side by side
    return PredictorShape(inputs=cfg.pred_input * features, hidden=(cfg.pred_width,) * cfg.pred_hidden_layers,
                          head=cfg.pred_head or None, layer_code=cfg.pred_layer_code,
                          factored=cfg.pred_output == "factored", train_steps=cfg.pred_steps)


def _adagp(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    shape = adagp_shape(cfg)
    return SchemePlan("adagp", predictor_ops(shape, net, batch, train=True, word_bytes=word_bytes),
                      predictor_ops(shape, net, batch, train=False, word_bytes=word_bytes),
                      gp_update=tuple(predicted_layers(net)), overlap="per_layer",
                      params=predictor_params(shape, net))


# -- controls ----------------------------------------------------------------------------------------------
def _empty(net: Net, batch: int, word_bytes: int) -> TrainingOps:
    return _ops(net, batch, word_bytes, [])


def _null(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    extra, out = _true_output_rows(net, batch, cfg.true_output_grad)
    return SchemePlan("null", _empty(net, batch, word_bytes), _ops(net, batch, word_bytes, extra),
                      gp_wgrad=out, gp_update=out, overlap="after_forward")


def _null_momentum(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    extra, out = _true_output_rows(net, batch, cfg.true_output_grad)
    return SchemePlan("null_momentum", _empty(net, batch, word_bytes), _ops(net, batch, word_bytes, extra),
                      gp_wgrad=out, gp_update=tuple(predicted_layers(net)), overlap="after_forward")


def _truncated(cfg: Any, net: Net, batch: int, word_bytes: int) -> SchemePlan:
    out, own = _own_output(net)
    below = [i for i in predicted_layers(net) if i < out]
    if not below:
        raise ValueError(f"truncated: {net.name} has no layer with weights below its output layer")
    b = below[-1]
    extra = [(-1, "pred_vec", 0, 0, 0, 0, _LOSS_ELEMS_PER_VALUE * batch * math.prod(net.layers[out].out), 0)]
    layers = (b, out) if own else (b,)
    return SchemePlan("truncated", _empty(net, batch, word_bytes), _ops(net, batch, word_bytes, extra),
                      gp_wgrad=layers, gp_igrad=(out,), gp_bwd_vec=tuple(range(b + 1, out)),
                      gp_update=layers, gp_stash=tuple(range(b, len(net.layers))), overlap="after_forward")


def _append(ops: TrainingOps, rows: list[tuple]) -> TrainingOps:
    if not rows:
        return ops
    old = list(zip(ops.layer.tolist(), ops.phase.tolist(), ops.M.tolist(), ops.K.tolist(), ops.N.tolist(),
                   ops.repeat.tolist(), ops.vec_elems.tolist(), ops.stash_bytes.tolist()))
    return TrainingOps.from_rows(ops.net, ops.batch, ops.optimizer, ops.word_bytes, old + rows)


#: scheme name -> lowering ``(training knobs, net, batch, word_bytes) -> SchemePlan``; the training knobs are
#: any object with the scheme's fields (a ``SurrogateConfig``)
SCHEMES: dict[str, Callable[[Any, Net, int, int], SchemePlan]] = {
    "adagp": _adagp,
    "efb": _efb,
    "local": _local,
    "dni": _dni,
    "null": _null,
    "null_momentum": _null_momentum,
    "truncated": _truncated,
}


def scheme_names() -> list[str]:
    """Schemes with a cost (``bp`` is plain back-propagation: no plan)."""
    return list(SCHEMES)


def scheme_plan(cfg: Any, net: Net, batch: int, *, word_bytes: int = 2) -> SchemePlan:
    """The plan of ``cfg.scheme`` (not ``bp``) for ``net`` at ``batch``."""
    try:
        lower = SCHEMES[cfg.scheme]
    except KeyError:
        raise ValueError(f"scheme: one of {', '.join(SCHEMES)} has a cost plan (got {cfg.scheme!r})") from None
    return lower(cfg, net, batch, word_bytes)
