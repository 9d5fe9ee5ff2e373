"""The training half's machinery: the :class:`GradientScheme` base class and the :class:`Step` it sees.

A scheme's training behaviour is a subclass of :class:`GradientScheme` (in ``models/schemes/<name>.py``,
registered in ``models.schemes.registry``). It says

* **what it predicts**: :meth:`GradientScheme.gp_step` returns, after the forward pass of a GP step, one
  gradient matrix ``G = [dW^T | db]`` (shape ``(c_out, fan_in + 1)``) per predicted layer, or ``None`` for
  a layer that skips this step (no update, momentum untouched); a zero matrix is a real momentum step;
* **what it learns from on BP steps**: :meth:`GradientScheme.bp_step` sees the BP step (labels, the output
  error, every predicted layer's exact output gradient ``dL/dh`` and weight gradient) and returns its
  prediction of each layer's ``G`` made *before* learning from the batch (the quality signal: cosine and
  relative error with the true gradient; ``None`` for a scheme with no prediction, e.g. a control);
* **its size knobs**: :attr:`GradientScheme.size_knobs`, the ``SurrogateConfig`` fields that size its
  predictor or state (the accelerator cost of a scheme is a function of these);
* **its state**: :meth:`GradientScheme.state` (the arrays it carries between steps) and
  :meth:`GradientScheme.n_params` (their number of values, reported as ``predictor_params``).

The training loop (``models.surrogate.train``) has no per-scheme branch: it calls ``bp_step`` on BP steps,
``begin_gp`` before and ``gp_step`` after the forward pass of GP steps, and applies what they return.

**How a network exposes what the schemes need** (any network, 1-D or 2-D, plain or residual):

* ``net.param_layers``: the layers with weights in forward order, the classifier last;
* each parameter layer ``l`` after a forward pass keeps its *input* (for a convolution its im2col patches)
  and its *pre-activation* (or the activation's derivative mask) and exposes its *output* ``l.out``,
  channels-last ``(batch, *spatial, channels)`` (a vector layer: ``(batch, channels)``), plus
  ``l.fan_in``, ``l.c_out``, ``l.W`` ``(fan_in, c_out)``, ``l.b``;
* ``l.backward(dh, need_dx=False)`` turns an output gradient ``dh`` (same shape as ``l.out``) into the
  layer's weight gradient ``l.dW``, ``l.db`` from its own input and activation derivative
  (``dW = x^T (dh * f'(z))``) -- the local step every output-gradient scheme (efb, local, dni) uses
  (:func:`local_grad`);
* after ``net.backward(dlogits)``, ``l.dout`` holds the exact ``dL/d l.out`` (what efb and dni learn from);
* ``l.mean_input()``: the batch (and position) mean of the layer's input patches, length ``fan_in``
  (ADA-GP's factored output);
* ``net.backward_to(dlogits, l)``: exact ``dL/d l.out`` by backprop through the layers after ``l`` only
  (the ``truncated`` control);
* ``net.pooling(spatial_shape, size)``: the pooling rule, a ``(prod(spatial_shape), size)`` matrix whose
  columns average groups of spatial positions (flattened in C order); the 1-D networks use adaptive
  average pooling along the length (:func:`models.surrogate.predictors.pool_matrix`); a 2-D network
  returns e.g. adaptive pooling onto a grid. ADA-GP's tensor reorganization and ``local``'s heads pool with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from models.surrogate.predictors import grad_matrix

__all__ = ["GradientScheme", "Step", "predicted_layers", "local_grad", "out_shape", "out_size"]


@dataclass
class Step:
    """What a scheme sees of one training step.

    ``layers``: the predicted layers in forward order (after the forward pass: their ``out`` is set);
    ``y``: labels; ``dlogits``: dL/dlogits of the batch (``(softmax - onehot) / batch``; on a GP step from
    the forward pass alone); ``trues``: on BP steps each predicted layer's true ``G`` (after the backward
    pass, which also left each layer's exact ``dout``); ``t``: step index; ``lr``: this step's learning rate."""

    net: Any
    layers: list
    y: np.ndarray
    dlogits: Optional[np.ndarray] = None
    trues: Optional[list] = None
    t: int = 0
    lr: float = 0.0
    x: Optional[np.ndarray] = None


class GradientScheme:
    """Base class (see the module docstring). Subclasses set :attr:`name` and override what they need."""

    #: registry name (``SurrogateConfig.scheme`` / ``train_run``'s ``scheme``)
    name: str = ""
    #: SurrogateConfig fields that size the scheme's predictor or state
    size_knobs: tuple[str, ...] = ()
    #: False: no GP steps at all (plain BP, no schedule)
    uses_schedule: bool = True
    #: True: a control that replays the GP/BP mask of the run it controls
    control: bool = False
    #: True: bp_step returns predictions (a quality signal for the adaptive schedule and the reports)
    predicts: bool = True

    def __init__(self, cfg, net, n_classes: int, seed: int, task=None):
        self.cfg = cfg
        self.net = net
        self.n_classes = n_classes
        self.seed = seed
        self.task = task

    def n_params(self) -> int:
        """Number of values of the scheme's learned state (the predictor's parameters)."""
        return int(sum(a.size for a in self.state().values()))

    def state(self) -> dict[str, np.ndarray]:
        """The arrays the scheme carries from step to step (its learned state)."""
        return {}

    def bp_step(self, step: Step) -> Optional[list]:
        """A BP step: return each predicted layer's predicted ``G`` (before learning), then learn."""
        return None

    def begin_gp(self, step: Step) -> None:
        """Called before the forward pass of a GP step (``step.layers`` not yet run on this batch)."""

    def gp_step(self, step: Step) -> list:
        """A GP step, after the forward pass: one ``G`` or ``None`` (skip) per predicted layer."""
        return [None] * len(step.layers)


def predicted_layers(cfg, net) -> list:
    """The layers a GP step predicts: every parameter layer but the classifier if ``true_output_grad``."""
    return net.param_layers[:-1] if cfg.true_output_grad else list(net.param_layers)


def local_grad(layer, dh: np.ndarray) -> np.ndarray:
    """The layer's weight gradient ``G`` from an output gradient ``dh`` (its own input, no backward beyond)."""
    layer.backward(dh, need_dx=False)
    return grad_matrix(layer.dW, layer.db)


def out_shape(net, layer) -> tuple:
    """The shape of ``layer``'s output (channels last, with the batch) as the network records it."""
    return net.out_shapes[id(layer)]


def out_size(net, layer) -> int:
    """The number of values of ``layer``'s output."""
    return int(np.prod(out_shape(net, layer)))
