"""Gradient schemes: the one extension point for "what a GP step applies to each predicted layer".

A scheme is a subclass of :class:`GradientScheme` registered in :data:`REGISTRY` under its name. It says

* **what it predicts**: :meth:`GradientScheme.gp_step` returns, after the forward pass of a GP step, one
  gradient matrix ``G = [dW^T | db]`` (shape ``(c_out, fan_in + 1)``) per predicted layer, or ``None`` for
  a layer that skips this step (no update, momentum untouched); a zero matrix is a real momentum step;
* **what it learns from on BP steps**: :meth:`GradientScheme.bp_step` sees the BP step (labels, the output
  error, every predicted layer's exact output gradient ``dL/dh`` and weight gradient) and returns its
  prediction of each layer's ``G`` made *before* learning from the batch (the quality signal: cosine and
  relative error with the true gradient; ``None`` for a scheme with no prediction, e.g. a control);
* **its size knobs**: :attr:`GradientScheme.size_knobs`, the :class:`SurrogateConfig` fields that size its
  predictor or state (the accelerator cost of a scheme is a function of these);
* **its state**: :meth:`GradientScheme.state` (the arrays it carries between steps) and
  :meth:`GradientScheme.n_params` (their number of values, reported as ``predictor_params``).

The training loop (``models.surrogate.train``) has no per-scheme branch: it calls ``bp_step`` on BP steps,
``begin_gp`` before and ``gp_step`` after the forward pass of GP steps, and applies what they return.

Schemes: ``bp`` (plain backprop; no GP step), ``adagp`` (ADA-GP's shared predictor), ``efb`` (error
feedback), ``local`` (local auxiliary classifiers), ``dni`` (conditional DNI); controls ``null`` (skip),
``null_momentum`` (zero gradient, momentum step taken), ``truncated`` (the layer below the classifier gets
its exact gradient, one layer of backprop; the others skip); diagnostics ``oracle`` and ``stale``.

**How a network exposes what the schemes need** (any network, 1-D or 2-D, plain or residual):

* ``net.param_layers``: the layers with weights in forward order, the classifier last;
* each parameter layer ``l`` after a forward pass keeps its *input* (for a convolution its im2col patches)
  and its *pre-activation* (or the activation's derivative mask) and exposes its *output* ``l.out``,
  channels-last ``(batch, *spatial, channels)`` (a vector layer: ``(batch, channels)``), plus
  ``l.fan_in``, ``l.c_out``, ``l.W`` ``(fan_in, c_out)``, ``l.b``;
* ``l.backward(dh, need_dx=False)`` turns an output gradient ``dh`` (same shape as ``l.out``) into the
  layer's weight gradient ``l.dW``, ``l.db`` from its own input and activation derivative
  (``dW = x^T (dh * f'(z))``) -- the local step every output-gradient scheme (efb, local, dni) uses;
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

from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.nets import kept_statistics
from models.surrogate.predictors import AdaGPPredictor, DNIPredictor, grad_matrix

__all__ = ["GradientScheme", "Step", "REGISTRY", "CONTROLS", "DIAGNOSTICS", "make_scheme", "register",
           "predicted_layers"]

#: efb's ridge: lambda = _EFB_RIDGE * trace(S_ee) / n_classes (ours)
_EFB_RIDGE = 1e-3


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


#: name -> scheme class; one place to add a scheme
REGISTRY: dict[str, type[GradientScheme]] = {}


def register(cls: type[GradientScheme]) -> type[GradientScheme]:
    REGISTRY[cls.name] = cls
    return cls


def _local_grad(layer, dh: np.ndarray) -> np.ndarray:
    """The layer's weight gradient ``G`` from an output gradient ``dh`` (its own input, no backward beyond)."""
    layer.backward(dh, need_dx=False)
    return grad_matrix(layer.dW, layer.db)


@register
class BP(GradientScheme):
    """Plain backprop (the reference): no GP step."""

    name = "bp"
    uses_schedule = False
    predicts = False


@register
class AdaGP(GradientScheme):
    """ADA-GP: one shared predictor turns each layer's reorganized output into its weight-gradient rows
    (:class:`models.surrogate.predictors.AdaGPPredictor`); learns by MSE on the true gradients."""

    name = "adagp"
    size_knobs = ("pred_input", "pred_hidden_layers", "pred_width", "pred_head", "pred_layer_code")

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        layers = predicted_layers(cfg, net)
        self.p = AdaGPPredictor([l.fan_in + 1 for l in layers], cfg, np.random.default_rng([seed, 2]),
                                pooling=net.pooling)
        self.factored = cfg.pred_output == "factored"

    def state(self):
        return {f"W{i}": w for i, w in enumerate(self.p.Ws)} | {f"b{i}": b for i, b in enumerate(self.p.bs)}

    def n_params(self):
        return self.p.n_params()

    def _xins(self, layers):
        return [l.mean_input() for l in layers] if self.factored else None

    def bp_step(self, step):
        return self.p.bp_step([l.out for l in step.layers], step.trues, self._xins(step.layers))

    def gp_step(self, step):
        return [self.p.predict(i, l.out, l.mean_input() if self.factored else None)
                for i, l in enumerate(step.layers)]


@register
class DNI(GradientScheme):
    """Conditional DNI: per layer a linear module maps (h, one-hot label) to a synthetic dL/dh, regressed
    on the true dL/dh of BP batches; the layer's local backward turns it into its weight gradient."""

    name = "dni"
    size_knobs = ()

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.p = DNIPredictor([_out_size(net, l) for l in predicted_layers(cfg, net)], n_classes, cfg,
                              np.random.default_rng([seed, 2]))

    def state(self):
        return {f"M{i}": m for i, m in enumerate(self.p.Ms)} | {f"c{i}": c for i, c in enumerate(self.p.cs)}

    def bp_step(self, step):
        preds = []
        for i, l in enumerate(step.layers):
            preds.append(_local_grad(l, self.p.synth(i, l.out, step.y)))
            self.p.learn(i, l.out, step.y, l.dout)
        return preds

    def gp_step(self, step):
        return [_local_grad(l, self.p.synth(i, l.out, step.y)) for i, l in enumerate(step.layers)]


@register
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
        sizes = [_out_size(net, l) for l in predicted_layers(cfg, net)]
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
        lam = _EFB_RIDGE * max(float(np.trace(A)) / K, 1e-30)
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
        preds = [_local_grad(l, self._dh(i, l, e)) for i, l in enumerate(step.layers)]
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
        return [_local_grad(l, self._dh(i, l, step.dlogits)) for i, l in enumerate(step.layers)]


@register
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
            shape = _out_shape(net, l)
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
        lr = np.float32(step.lr)
        for i, l in enumerate(step.layers):
            flat = self._pooled(i, l.out)
            _, d = softmax_cross_entropy(flat @ self.A[i] + self.c[i], step.y)
            grads.append(_local_grad(l, self._dh(i, l.out, d @ self.A[i].T)))
            va, vc = self.vel[i]
            va *= self.mu
            va += flat.T @ d
            vc *= self.mu
            vc += d.sum(axis=0)
            self.A[i] -= lr * va
            self.c[i] -= lr * vc
        return grads

    def bp_step(self, step):
        return self._step(step)

    def gp_step(self, step):
        return self._step(step)


# -- controls ----------------------------------------------------------------------------------------------
@register
class Null(GradientScheme):
    """Control: predicted layers skip GP steps (no update, momentum untouched)."""

    name = "null"
    control = True
    predicts = False


@register
class NullMomentum(GradientScheme):
    """Control: a zero gradient in GP steps, the momentum step still taken (what a GP step with a useless
    predictor does on an accelerator that keeps the optimizer running)."""

    name = "null_momentum"
    control = True
    predicts = False

    def gp_step(self, step):
        return [np.zeros((l.c_out, l.fan_in + 1), dtype=l.W.dtype) for l in step.layers]


@register
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
            out.append(_local_grad(l, self.net.backward_to(step.dlogits, l)) if l is below else None)
        return out


# -- diagnostics (train_run only, not configurable) --------------------------------------------------------
@register
class Oracle(GradientScheme):
    """Diagnostic: GP steps apply the true gradient of an independent random batch at the current weights
    (a perfect predictor of the expected gradient, with minibatch noise). Use ``adaptive=False``."""

    name = "oracle"
    predicts = False

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.rng = np.random.default_rng([seed, 3])
        self.g: list = []

    def begin_gp(self, step):
        n = len(self.task.x)
        idx = self.rng.choice(n, min(self.cfg.batch_size, n), replace=False)
        with kept_statistics(self.net):  # another batch's forward must not move batch-norm statistics
            _, d = softmax_cross_entropy(self.net.forward(self.task.x[idx]), self.task.y[idx])
        self.net.backward(d)
        self.g = [grad_matrix(l.dW, l.db) for l in step.layers]

    def gp_step(self, step):
        return self.g


@register
class Stale(GradientScheme):
    """Diagnostic: GP steps apply each predicted layer's last true gradient (gradient reuse, no predictor).
    Use ``adaptive=False``."""

    name = "stale"
    predicts = False

    def __init__(self, cfg, net, n_classes, seed, task=None):
        super().__init__(cfg, net, n_classes, seed, task)
        self.g: list = [None] * len(predicted_layers(cfg, net))

    def bp_step(self, step):
        self.g = list(step.trues)
        return None

    def gp_step(self, step):
        return self.g


#: the controls every scheme is reported against (each replays the scheme's exact GP/BP step mask)
CONTROLS = ("null", "null_momentum", "truncated")
#: diagnostic schemes of train_run (not SurrogateConfig.scheme values)
DIAGNOSTICS = ("oracle", "stale")


def predicted_layers(cfg, net) -> list:
    """The layers a GP step predicts: every parameter layer but the classifier if ``true_output_grad``."""
    return net.param_layers[:-1] if cfg.true_output_grad else list(net.param_layers)


def _out_shape(net, layer) -> tuple:
    return net.out_shapes[id(layer)]


def _out_size(net, layer) -> int:
    return int(np.prod(_out_shape(net, layer)))


def make_scheme(name: str, cfg, net, n_classes: int, seed: int, task=None) -> GradientScheme:
    """An instance of the registered scheme ``name`` for one run."""
    cls = REGISTRY.get(name)
    if cls is None:
        raise ValueError(f"scheme: one of {', '.join(repr(k) for k in REGISTRY)} (got {name!r})")
    return cls(cfg, net, n_classes, seed, task)
