"""Network description: layers, a shape-inferring builder, and the lowering to training ops.

A network is described once, per sample, by a builder function (see :mod:`models.zoo`) that calls the
methods of :class:`Net`; shapes are inferred as it goes. :meth:`Net.training_ops` then lowers it, for a
batch size and an optimizer, to the operations one training step executes.

GEMM convention (used everywhere in the project)
-----------------------------------------------
Every matrix product is ``A[M x K] @ B[K x N]``, SCALE-Sim's orientation:

* ``M`` -- output rows (for a convolution: batch * P * Q output pixels; for a linear layer: batch * tokens),
* ``K`` -- the reduction (for a convolution: C_in / groups * R * S, its im2col window),
* ``N`` -- output columns (output channels per group / output features),
* ``repeat`` -- how many independent products of that shape (groups, batch * attention heads).

From the forward ``Y[M x N] = X[M x K] @ W[K x N]`` the two gradient GEMMs follow:

* input gradient ``dX[M x K] = dY[M x N] @ W^T[N x K]``  -> ``(M, N, K)``;
* weight gradient ``dW[K x N] = X^T[K x M] @ dY[M x N]`` -> ``(K, M, N)`` (the batch becomes the reduction).

All three have ``M*K*N*repeat`` MACs. For a convolution, the input gradient is computed in the im2col view
(``dX_col``) and folded back into the input (col2im, a vector op), so its MAC count equals the forward's even
for strided convolutions; a transposed-convolution lowering would skip the zeros of the dilated gradient and
do the same number of useful MACs. For a batched matmul with no weights (attention's ``Q K^T`` and ``A V``)
both operands are activations: the "weight gradient" row is the gradient of the second operand, with the
same shape rule. An input gradient is emitted only when the layer's input needs a gradient: never for a
layer that reads the network's input directly.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np

__all__ = [
    "Tensor",
    "Layer",
    "Net",
    "TrainingOps",
    "OPTIMIZER_STATE",
    "PHASES",
]

#: Optimizer state tensors kept per parameter (momentum buffer; Adam's two moments).
OPTIMIZER_STATE = {"sgd": 0, "sgd_momentum": 1, "adam": 2}

#: Training-op phases, in the order a plain back-propagation step runs them.
PHASES = ("fwd", "fwd_vec", "igrad", "wgrad", "bwd_vec", "update")


@dataclass(frozen=True)
class Tensor:
    """A per-sample activation of shape (C, H, W); sequences use (d_model, length, 1).

    ``grad`` says whether back-propagation computes a gradient for it (False only for the network input).
    """

    c: int
    h: int = 1
    w: int = 1
    grad: bool = True

    @property
    def numel(self) -> int:
        return self.c * self.h * self.w

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.c, self.h, self.w)


@dataclass(frozen=True)
class Layer:
    """One layer, per sample.

    ``kind`` is ``conv``, ``linear`` or ``matmul`` (a GEMM layer) or a vector kind (``pool``, ``norm``,
    ``act``, ``eltwise``, ``softmax``, ``embed``, ``concat``). For GEMM layers ``gemm`` holds the forward's
    per-sample ``(M, K, N, repeat)``: the batch multiplies ``M`` (conv, linear) or ``repeat`` (matmul).
    """

    name: str
    kind: str
    params: int
    inp: tuple[int, int, int]
    out: tuple[int, int, int]
    gemm: tuple[int, int, int, int] | None = None
    needs_igrad: bool = True
    #: elements read and written per sample by a vector op's forward
    vec_elems: int = 0
    #: elements of activations this layer keeps for its backward pass, per sample
    stash_elems: int = 0
    #: for conv layers: (C_in, C_out, R, S, stride, padding, dilation, groups)
    conv: tuple[int, ...] | None = None
    #: fan-in of one output channel's weight row (C_in/groups*R*S, or in_features); 0 if no weights
    fan_in: int = 0
    #: number of output channels (weight rows): predictor samples for this layer
    out_channels: int = 0
    #: part of a training-only branch (Inception-v3's auxiliary classifier): trained, but not in the
    #: inference forward that published MAC counts describe
    aux: bool = False
    #: for conv layers, the input geometry of one group's product: (in_h, in_w, in_c per group, k_h, k_w,
    #: stride_h, stride_w, pad_h, pad_w, dilation) -- what the accelerator model needs to fetch the raw input
    geometry: tuple[int, ...] | None = None

    @property
    def is_gemm(self) -> bool:
        return self.gemm is not None

    @property
    def macs(self) -> int:
        """Forward multiply-accumulates per sample."""
        if self.gemm is None:
            return 0
        m, k, n, r = self.gemm
        return m * k * n * r


def _conv_out(size: int, k: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (k - 1) - 1) // stride + 1


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


@dataclass
class Net:
    """A network under construction; its builder methods take and return :class:`Tensor` objects."""

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    layers: list[Layer] = field(default_factory=list)
    #: how the input is printed (default "CxHxW")
    input_desc: str = ""
    _aux: bool = field(default=False, repr=False)

    # -- bookkeeping ---------------------------------------------------------------------------------
    def input(self) -> Tensor:
        c, h, w = self.input_shape
        return Tensor(c, h, w, grad=False)

    def _name(self, name: str | None, kind: str) -> str:
        return name or f"{kind}{len(self.layers)}"

    def _add(self, layer: Layer) -> None:
        self.layers.append(replace(layer, aux=True) if self._aux else layer)

    @contextmanager
    def aux_branch(self):
        """Layers added inside this block form a training-only branch (see :attr:`Layer.aux`)."""
        self._aux = True
        try:
            yield
        finally:
            self._aux = False

    # -- GEMM layers ---------------------------------------------------------------------------------
    def conv(
        self,
        x: Tensor,
        out_channels: int,
        kernel: int | tuple[int, int],
        *,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = False,
        name: str | None = None,
        tied: bool = False,
    ) -> Tensor:
        """A 2-D convolution. ``tied``: its weights are an earlier layer's (one tensor used twice): its own
        parameters are its bias alone, as :meth:`linear`'s."""
        kh, kw = _pair(kernel)
        sh, sw = _pair(stride)
        ph, pw = _pair(padding)
        if x.c % groups or out_channels % groups:
            raise ValueError(f"conv {name}: channels {x.c}->{out_channels} not divisible by groups {groups}")
        p = _conv_out(x.h, kh, sh, ph, dilation)
        q = _conv_out(x.w, kw, sw, pw, dilation)
        if p < 1 or q < 1:
            raise ValueError(f"conv {name}: input {x.h}x{x.w} too small for kernel {kh}x{kw}")
        k_red = x.c // groups * kh * kw
        n_out = out_channels // groups
        params = (0 if tied else out_channels * k_red) + (out_channels if bias else 0)
        self._add(
            Layer(
                name=self._name(name, "conv"),
                kind="conv",
                params=params,
                inp=x.shape,
                out=(out_channels, p, q),
                gemm=(p * q, k_red, n_out, groups),
                needs_igrad=x.grad,
                stash_elems=x.numel,
                conv=(x.c, out_channels, kh, kw, sh, ph, dilation, groups),
                geometry=(x.h, x.w, x.c // groups, kh, kw, sh, sw, ph, pw, dilation),
                fan_in=k_red,
                out_channels=out_channels,
            )
        )
        return Tensor(out_channels, p, q)

    def linear(self, x: Tensor, out_features: int, *, bias: bool = True, name: str | None = None,
               tied: bool = False) -> Tensor:
        """A fully connected layer over the channel axis, applied at every (h, w) position (token).

        ``tied``: the weight matrix is an earlier layer's (tied embeddings): its parameters, and so its
        weight update, belong to that layer; this layer's own parameters are its bias alone.
        """
        tokens = x.h * x.w
        params = (0 if tied else x.c * out_features) + (out_features if bias else 0)
        self._add(
            Layer(
                name=self._name(name, "linear"),
                kind="linear",
                params=params,
                inp=x.shape,
                out=(out_features, x.h, x.w),
                gemm=(tokens, x.c, out_features, 1),
                needs_igrad=x.grad,
                stash_elems=x.numel,
                fan_in=x.c,
                out_channels=out_features,
            )
        )
        return Tensor(out_features, x.h, x.w)

    def matmul(self, a_rows: int, k: int, n: int, heads: int, *, name: str | None = None) -> None:
        """A batched product with no weights, per sample ``heads`` products of (a_rows x k) @ (k x n)."""
        self._add(
            Layer(
                name=self._name(name, "matmul"),
                kind="matmul",
                params=0,
                inp=(heads, a_rows, k),
                out=(heads, a_rows, n),
                gemm=(a_rows, k, n, heads),
                stash_elems=heads * (a_rows * k + k * n),
            )
        )

    # -- vector layers -------------------------------------------------------------------------------
    def _vector(self, x: Tensor, kind: str, out: Tensor, *, params: int = 0, name: str | None = None,
                stash: int | None = None, reads: int | None = None, igrad: bool | None = None) -> Tensor:
        """A vector layer reading ``x`` (``reads`` elements; default its own). ``igrad``: whether its backward
        passes a gradient on (default: ``x`` needs one; an op of several inputs: any of them)."""
        reads = x.numel if reads is None else reads
        self._add(
            Layer(
                name=self._name(name, kind),
                kind=kind,
                params=params,
                inp=x.shape,
                out=out.shape,
                needs_igrad=x.grad if igrad is None else igrad,
                vec_elems=reads + out.numel,
                stash_elems=x.numel if stash is None else stash,
            )
        )
        return Tensor(out.c, out.h, out.w, grad=out.grad)

    def bn(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Batch normalization (learned scale and shift: 2*C parameters)."""
        return self._vector(x, "norm", x, params=2 * x.c, name=name)

    def layernorm(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """Layer normalization over the channel (d_model) axis (2*C parameters)."""
        return self._vector(x, "norm", x, params=2 * x.c, name=name)

    def relu(self, x: Tensor, *, name: str | None = None) -> Tensor:
        """An activation function (ReLU, ReLU6, leaky ReLU, GELU: same traffic)."""
        return self._vector(x, "act", x, name=name)

    def softmax(self, x: Tensor, *, name: str | None = None) -> Tensor:
        return self._vector(x, "softmax", x, name=name)

    def pool(self, x: Tensor, kernel: int | tuple[int, int], stride: int | tuple[int, int] | None = None,
             padding: int = 0, *, ceil_mode: bool = False, name: str | None = None) -> Tensor:
        """Max or average pooling over kh x kw windows (``kernel`` an int for square ones)."""
        kh, kw = _pair(kernel)
        sh, sw = (kh, kw) if stride is None else _pair(stride)
        if ceil_mode:
            p = -(-(x.h + 2 * padding - kh) // sh) + 1
            q = -(-(x.w + 2 * padding - kw) // sw) + 1
            # the last window must start inside the input or its left padding (PyTorch's rule)
            p -= (p - 1) * sh >= x.h + padding
            q -= (q - 1) * sw >= x.w + padding
        else:
            p = _conv_out(x.h, kh, sh, padding, 1)
            q = _conv_out(x.w, kw, sw, padding, 1)
        return self._vector(x, "pool", Tensor(x.c, p, q), name=name)

    def global_pool(self, x: Tensor, *, name: str | None = None) -> Tensor:
        return self._vector(x, "pool", Tensor(x.c, 1, 1), name=name)

    def add(self, *xs: Tensor, name: str | None = None) -> Tensor:
        """Element-wise sum of tensors of one shape (residual connections)."""
        shapes = {t.shape for t in xs}
        if len(shapes) != 1:
            raise ValueError(f"add {name}: shapes differ: {sorted(shapes)}")
        x = xs[0]
        grad = any(t.grad for t in xs)
        return self._vector(x, "eltwise", Tensor(x.c, x.h, x.w, grad), name=name, stash=0,
                            reads=sum(t.numel for t in xs), igrad=grad)

    def concat(self, xs: list[Tensor], *, name: str | None = None) -> Tensor:
        """Concatenation along channels (a copy: costs traffic, no arithmetic)."""
        hw = {(t.h, t.w) for t in xs}
        if len(hw) != 1:
            raise ValueError(f"concat {name}: spatial sizes differ: {sorted(hw)}")
        h, w = hw.pop()
        out = Tensor(sum(t.c for t in xs), h, w, any(t.grad for t in xs))
        return self._vector(xs[0], "concat", out, name=name, stash=0, reads=out.numel, igrad=out.grad)

    def upsample(self, x: Tensor, factor: int, *, name: str | None = None) -> Tensor:
        return self._vector(x, "pool", Tensor(x.c, x.h * factor, x.w * factor), name=name, stash=0)

    def embed(self, tokens: Tensor, vocab: int, dim: int, *, name: str | None = None,
              tied: bool = False) -> Tensor:
        """A token-embedding lookup (a gather: vector traffic) into ``dim`` channels over ``tokens.h``.

        ``tied``: the table is an earlier embedding's (no parameters of its own).
        """
        out = Tensor(dim, tokens.h, 1)
        return self._vector(tokens, "embed", out, params=0 if tied else vocab * dim, name=name,
                            stash=tokens.numel)

    # -- summaries -----------------------------------------------------------------------------------
    @property
    def params(self) -> int:
        """Trainable parameters (tied weights counted once, with the layer that owns them)."""
        return sum(l.params for l in self.layers)

    @property
    def macs(self) -> int:
        """Forward multiply-accumulates per sample of conv and linear layers (torchvision's convention:
        the inference forward, training-only branches excluded)."""
        return sum(l.macs for l in self.layers if l.kind in ("conv", "linear") and not l.aux)

    @property
    def aux_macs(self) -> int:
        """Forward multiply-accumulates per sample of training-only branches (conv and linear)."""
        return sum(l.macs for l in self.layers if l.kind in ("conv", "linear") and l.aux)

    @property
    def matmul_macs(self) -> int:
        """Forward multiply-accumulates per sample of weight-free batched matmuls (attention)."""
        return sum(l.macs for l in self.layers if l.kind == "matmul")

    @property
    def gemm_layers(self) -> list[Layer]:
        return [l for l in self.layers if l.is_gemm]

    @property
    def max_fan_in(self) -> int:
        return max((l.fan_in for l in self.layers), default=0)

    def summary(self) -> dict:
        c, h, w = self.input_shape
        return {
            "name": self.name,
            "input": self.input_desc or f"{c}x{h}x{w}",
            "classes": self.num_classes,
            "layers": len(self.gemm_layers),
            "all_layers": len(self.layers),
            "params": self.params,
            "macs": self.macs,
            "matmul_macs": self.matmul_macs,
        }

    def training_ops(self, batch: int, *, optimizer: str = "sgd_momentum", word_bytes: int = 2
                     ) -> "TrainingOps":
        return TrainingOps.lower(self, batch, optimizer=optimizer, word_bytes=word_bytes)


@dataclass(frozen=True)
class TrainingOps:
    """A training step's operations as columns (one row per op), ready for the vectorized cost model.

    Columns: ``layer`` (index into ``net.layers``), ``phase`` (one of :data:`PHASES`), ``M``, ``K``, ``N``,
    ``repeat`` (0 for vector ops), ``vec_elems`` (elements read plus written by a vector op; 0 for GEMMs),
    ``stash_bytes`` (on ``fwd`` rows: activation bytes the layer keeps for its backward pass),
    ``im2col`` (an (L, 11) table: per op, whether its A operand is a convolution's im2col matrix -- 0 no,
    1 ``A = X_col`` (the forward), 2 ``A = X_col^T`` (the weight gradient) -- followed by the layer's
    :attr:`Layer.geometry`; zeros elsewhere; ``accel.gemm`` fetches such an operand as the raw input).
    ``batch``, ``optimizer`` and ``word_bytes`` record how it was lowered.
    """

    net: Net
    batch: int
    optimizer: str
    word_bytes: int
    layer: np.ndarray
    phase: np.ndarray
    M: np.ndarray
    K: np.ndarray
    N: np.ndarray
    repeat: np.ndarray
    vec_elems: np.ndarray
    stash_bytes: np.ndarray
    im2col: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.im2col is None:
            object.__setattr__(self, "im2col", np.zeros((len(self.layer), 11), dtype=np.int64))

    @classmethod
    def lower(cls, net: Net, batch: int, *, optimizer: str = "sgd_momentum", word_bytes: int = 2
              ) -> "TrainingOps":
        if batch < 1:
            raise ValueError(f"batch must be a positive integer, got {batch}")
        if optimizer not in OPTIMIZER_STATE:
            raise ValueError(f"optimizer must be one of {sorted(OPTIMIZER_STATE)}, got {optimizer!r}")
        rows: list[tuple] = []
        # state tensors read and written per parameter: weight (r+w), gradient (r), optimizer state (r+w)
        update_elems_per_param = 3 + 2 * OPTIMIZER_STATE[optimizer]
        for i, l in enumerate(net.layers):
            if l.gemm is not None:
                m, k, n, r = l.gemm
                if l.kind == "matmul":
                    r = r * batch
                else:
                    m = m * batch
                stash = l.stash_elems * batch * word_bytes
                geo = l.geometry if l.kind == "conv" else None
                rows.append((i, "fwd", m, k, n, r, 0, stash, (1, *geo) if geo else None))
                if l.needs_igrad:
                    rows.append((i, "igrad", m, n, k, r, 0, 0))
                rows.append((i, "wgrad", k, m, n, r, 0, 0, (2, *geo) if geo else None))
                if l.kind == "conv" and l.needs_igrad:
                    # col2im: fold the im2col input gradient back into the input's shape
                    rows.append((i, "bwd_vec", 0, 0, 0, 0, (m * k * r + math.prod(l.inp) * batch), 0))
            else:
                stash = l.stash_elems * batch * word_bytes
                rows.append((i, "fwd_vec", 0, 0, 0, 0, l.vec_elems * batch, stash))
                if l.needs_igrad or l.params:
                    # backward of a vector op reads the output gradient (and its stash), writes the input's
                    # gradient (or, for an embedding, scatter-adds into the table's rows)
                    rows.append((i, "bwd_vec", 0, 0, 0, 0, l.vec_elems * batch + l.stash_elems * batch, 0))
            if l.params:
                rows.append((i, "update", 0, 0, 0, 0, l.params * update_elems_per_param, 0))
        return cls.from_rows(net, batch, optimizer, word_bytes, rows)

    @classmethod
    def from_rows(cls, net: Net, batch: int, optimizer: str, word_bytes: int, rows: list[tuple]
                  ) -> "TrainingOps":
        """Columns from rows ``(layer, phase, M, K, N, repeat, vec_elems, stash_bytes)``, optionally followed
        by a ninth entry: the op's ``im2col`` row (role and geometry, see the class docstring) or None."""
        im2col = np.zeros((len(rows), 11), dtype=np.int64)
        for j, row in enumerate(rows):
            if len(row) > 8 and row[8] is not None:
                im2col[j] = row[8]
        rows = [tuple(row[:8]) for row in rows]
        cols = list(zip(*rows)) if rows else [()] * 8
        return cls(
            net=net,
            batch=batch,
            optimizer=optimizer,
            word_bytes=word_bytes,
            layer=np.asarray(cols[0], dtype=np.int64),
            phase=np.asarray(cols[1], dtype="<U12"),
            M=np.asarray(cols[2], dtype=np.int64),
            K=np.asarray(cols[3], dtype=np.int64),
            N=np.asarray(cols[4], dtype=np.int64),
            repeat=np.asarray(cols[5], dtype=np.int64),
            vec_elems=np.asarray(cols[6], dtype=np.int64),
            stash_bytes=np.asarray(cols[7], dtype=np.int64),
            im2col=im2col,
        )

    def __len__(self) -> int:
        return len(self.layer)

    @property
    def macs(self) -> np.ndarray:
        return self.M * self.K * self.N * self.repeat

    def mask(self, *phases: str) -> np.ndarray:
        return np.isin(self.phase, phases)

    def to_records(self) -> list[dict]:
        # layer -1: an op of the whole step rather than of one layer (the predictor's update)
        names = [l.name for l in self.net.layers] + ["(step)"]
        kinds = [l.kind for l in self.net.layers] + ["-"]
        return [
            {
                "layer": int(self.layer[i]),
                "name": names[self.layer[i]],
                "kind": kinds[self.layer[i]],
                "phase": str(self.phase[i]),
                "M": int(self.M[i]),
                "K": int(self.K[i]),
                "N": int(self.N[i]),
                "repeat": int(self.repeat[i]),
                "macs": int(self.macs[i]),
                "vec_elems": int(self.vec_elems[i]),
                "stash_bytes": int(self.stash_bytes[i]),
            }
            for i in range(len(self))
        ]
