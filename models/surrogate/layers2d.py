"""Hand-written forward and backward of the surrogate's 2-D layers (numpy only).

Feature maps are channels-last, ``(batch, height, width, channels)``, like the 1-D layers of
:mod:`models.surrogate.layers`. A convolution holds ``W`` of shape ``(fan_in, c_out)`` with
``fan_in = k * k * c_in`` in im2col order ``(row tap, column tap, channel)``, and a bias ``b`` of shape
``(c_out,)`` (zero and unused when ``bias=False``). The dtype follows the parameters (float32 in training,
float64 in the gradient checks). Every layer's ``backward(dy, need_dx=True)`` stores its parameter gradients
(``dW``, ``db``; ``dgamma``, ``dbeta`` for batch norm) and returns the input gradient when asked.

:class:`ConvBN2d` is the unit the residual network is built from and the gradient schemes see: a
convolution, a batch norm and an optional ReLU, presenting the parameter-layer protocol of the 1-D layers
(``W``, ``b``, ``fan_in``, ``c_out``, ``out``, ``dout``, ``dW``, ``db``). Its ``b`` IS the batch norm's shift
(the convolution has no bias of its own: a bias before a batch norm is cancelled by the mean subtraction), so
a gradient row ``[dW^T | db]`` covers the convolution weights and the shift. The batch norm's scale
``gamma`` is the unit's one further parameter (``extra_params``).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = [
    "Conv2d",
    "BatchNorm",
    "ReLU",
    "MaxPool2d",
    "AvgPool2d",
    "GlobalAvgPool",
    "ConvBN2d",
    "add_backward",
    "relu_",
]


def _im2col(xp: np.ndarray, k: int, s: int, ho: int, wo: int) -> np.ndarray:
    """Windows of a padded ``(B, H, W, C)`` map as a ``(B * ho * wo, k * k * C)`` matrix (one copy)."""
    B, _, _, C = xp.shape
    sb, sh, sw, sc = xp.strides
    win = as_strided(xp, shape=(B, ho, wo, k, k, C), strides=(sb, s * sh, s * sw, sh, sw, sc), writeable=False)
    return win.reshape(B * ho * wo, k * k * C)


_ZEROS: dict = {}


def relu_(y: np.ndarray) -> np.ndarray:
    """``y <- max(y, 0)`` in place. Against an array of zeros of ``y``'s shape (kept per shape): numpy's
    maximum with a broadcast scalar runs several times slower on these small maps."""
    key = (y.shape, y.dtype.str)
    z = _ZEROS.get(key)
    if z is None:
        if len(_ZEROS) > 64:
            _ZEROS.clear()
        z = _ZEROS[key] = np.zeros(y.shape, dtype=y.dtype)
    return np.maximum(y, z, out=y)


@functools.lru_cache(maxsize=64)
def _ones(n: int, dtype) -> np.ndarray:
    return np.ones(n, dtype=dtype)


@functools.lru_cache(maxsize=64)
def _tile_index(t: int, c: int) -> np.ndarray:
    return np.tile(np.arange(c), t)


def _rows(x: np.ndarray, c: int) -> tuple[np.ndarray, int, np.ndarray]:
    """A contiguous channels-last map as ``(rows, t * c)`` with whole pixels per row (``t`` of them, the
    positions of one sample), and the index that tiles a per-channel vector ``t`` times (``v[index]``): it
    then broadcasts along long rows (numpy's broadcast of a ``c``-vector over ``(n, c)`` runs several times
    slower for few channels)."""
    t = math.prod(x.shape[1:-1])
    return x.reshape(-1, t * c), t, _tile_index(t, c)


def _im2col_taps(xp: np.ndarray, k: int, s: int, ho: int, wo: int) -> np.ndarray:
    """:func:`_im2col` of a one-channel map, built tap by tap (contiguous copies, several times faster than
    the strided copy's one-value pieces): the same ``(B * ho * wo, k * k)`` matrix, as a transposed view."""
    B = xp.shape[0]
    taps = np.empty((k, k, B, ho, wo), dtype=xp.dtype)
    sh, sw = s * (ho - 1) + 1, s * (wo - 1) + 1
    for i in range(k):
        for j in range(k):
            taps[i, j] = xp[:, i : i + sh : s, j : j + sw : s, 0]
    return taps.reshape(k * k, B * ho * wo).T


def _padded(layer, role: str, shape: tuple, dtype) -> np.ndarray:
    """A zero-bordered buffer kept on ``layer`` per (role, shape, dtype): callers overwrite only its interior
    (the border stays zero) and copy out of it (im2col), so reusing it changes no result."""
    bufs = layer.__dict__.setdefault("_pad_bufs", {})
    key = (role, shape, np.dtype(dtype).str)
    buf = bufs.get(key)
    if buf is None:
        buf = bufs[key] = np.zeros(shape, dtype=dtype)
    return buf


class Conv2d:
    """2-D convolution (cross-correlation) by im2col: square kernel ``k``, ``stride``, zero ``pad``."""

    has_params = True

    def __init__(self, c_in, c_out, kernel, *, stride=1, pad=0, bias=True, rng=None, dtype=np.float32, gain=2.0):
        rng = np.random.default_rng(0) if rng is None else rng
        self.c_in, self.c_out, self.k, self.stride, self.pad, self.bias = c_in, c_out, kernel, stride, pad, bias
        self.fan_in = kernel * kernel * c_in
        self.W = (rng.standard_normal((self.fan_in, c_out)) * np.sqrt(gain / self.fan_in)).astype(dtype)
        self.b = np.zeros(c_out, dtype=dtype)

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        p, k, s = self.pad, self.k, self.stride
        return (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1

    def forward(self, x: np.ndarray) -> np.ndarray:
        B, H, Wd, C = x.shape
        p = self.pad
        if p:
            xp = _padded(self, "x", (B, H + 2 * p, Wd + 2 * p, C), x.dtype)
            xp[:, p : p + H, p : p + Wd] = x
        else:
            xp = np.ascontiguousarray(x)
        ho, wo = self.out_hw(H, Wd)
        if self.k == 1:
            cols = np.ascontiguousarray(xp[:, :: self.stride, :: self.stride][:, :ho, :wo]).reshape(-1, C)
        elif C == 1:
            cols = _im2col_taps(xp, self.k, self.stride, ho, wo)
        else:
            cols = _im2col(xp, self.k, self.stride, ho, wo)
        z = cols @ self.W
        if self.bias:
            z += self.b
        self.cols, self._shape = cols, (x.shape, ho, wo)
        self.out = z.reshape(B, ho, wo, self.c_out)
        return self.out

    def mean_input(self) -> np.ndarray:
        """Batch and position mean of the last forward's input patches (length ``fan_in``)."""
        return self.cols.mean(axis=0)

    def backward(self, dy: np.ndarray, need_dx: bool = True):
        (B, H, Wd, C), ho, wo = self._shape
        dz = dy.reshape(B * ho * wo, self.c_out)
        self.dW = self.cols.T @ dz
        self.db = dz.sum(axis=0) if self.bias else np.zeros_like(self.b)
        if not need_dx:
            return None
        k, s, p = self.k, self.stride, self.pad
        # input-patch gradients tap by tap, (k, k, B, ho, wo, C): each tap's block is contiguous, so the
        # scatter-add below runs over long rows instead of C-element pieces
        wt = self.W.reshape(k * k, C, self.c_out).transpose(0, 2, 1)
        dcols = np.matmul(dz, wt).reshape(k, k, B, ho, wo, C)
        if k == 1 and p == 0:
            if s == 1:
                return dcols[0, 0]
            dx = np.zeros((B, H, Wd, C), dtype=dy.dtype)
            dx[:, : s * ho : s, : s * wo : s] = dcols[0, 0]
            return dx
        if s == 1:
            dxp = np.zeros((B, H + 2 * p, Wd + 2 * p, C), dtype=dy.dtype)
            for i in range(k):
                for j in range(k):
                    dxp[:, i : i + ho, j : j + wo] += dcols[i, j]
            return dxp[:, p : p + H, p : p + Wd] if p else dxp
        # stride s > 1: padded input row r = i + s * o of tap i lies in phase r % s at r // s. Accumulate
        # into one buffer per (row phase, column phase), where each tap's block lands on contiguous runs of
        # wo * C values (not C-value pieces every s pixels), then interleave the phases once.
        hq, wq = -(-(H + 2 * p) // s), -(-(Wd + 2 * p) // s)
        ph = np.zeros((s, s, B, hq, wq, C), dtype=dy.dtype)
        for i in range(k):
            for j in range(k):
                ph[i % s, j % s, :, i // s : i // s + ho, j // s : j // s + wo] += dcols[i, j]
        dxp = ph.transpose(2, 3, 0, 4, 1, 5).reshape(B, s * hq, s * wq, C)
        return dxp[:, p : p + H, p : p + Wd]


class BatchNorm:
    """Batch normalization over every axis but the last (channels), with a learned scale and shift.

    Training mode (``training = True``): normalizes by the batch's mean and biased variance and updates the
    running statistics, ``r <- momentum * r + (1 - momentum) * batch`` (the running variance takes the
    unbiased batch variance, as PyTorch does). Inference mode: normalizes by the running statistics (then the
    layer is a fixed affine map and its backward is that map's)."""

    has_params = False  # its parameters belong to the unit that holds it (ConvBN2d), or are listed by the net

    def __init__(self, c, *, momentum=0.9, eps=1e-5, dtype=np.float32):
        self.c, self.momentum, self.eps = c, momentum, eps
        self.gamma = np.ones(c, dtype=dtype)
        self.beta = np.zeros(c, dtype=dtype)
        self.running_mean = np.zeros(c, dtype=dtype)
        self.running_var = np.ones(c, dtype=dtype)
        self.training = True

    def forward(self, x: np.ndarray) -> np.ndarray:
        # y = (x - mean) * scale + beta per channel (scale = gamma / sigma); the backward works from the
        # centred map (training) or x (inference): no normalized copy is made. Reductions over positions
        # are BLAS products with a ones vector on the (positions, c) view; elementwise work runs on the
        # (samples, positions * c) view with tiled per-channel vectors.
        shape, c = x.shape, self.c
        xr, t, ti = _rows(x, c)
        n = xr.size // c
        ones = _ones(n, x.dtype)
        if self.training:
            mean = (ones @ x.reshape(n, c)) / n
            xc = xr - mean[ti]
            sq = xc * xc
            var = (ones @ sq.reshape(n, c)) / n
            m = self.momentum
            self.running_mean = (m * self.running_mean + (1 - m) * mean).astype(x.dtype)
            unbiased = var * (n / max(n - 1, 1))
            self.running_var = (m * self.running_var + (1 - m) * unbiased).astype(x.dtype)
            xs, shift = xc, self.beta
        else:
            mean, var = self.running_mean, self.running_var
            xs, shift = xr, None
        inv = (1.0 / np.sqrt(var + self.eps)).astype(x.dtype)
        scale = self.gamma * inv
        if shift is None:
            shift = self.beta - mean * scale
        self._cache = (xs, mean, inv, self.training, ti)
        y = xs * scale[ti]
        y += shift[ti]
        return y.reshape(shape)

    def backward(self, dy: np.ndarray, need_dx: bool = True):
        xs, mean, inv, training, ti = self._cache  # xs: x - mean (training) or x (inference), as rows
        c = self.c
        d2 = dy.reshape(xs.shape)
        n = d2.size // c
        ones = _ones(n, dy.dtype)
        self.dbeta = ones @ dy.reshape(n, c)
        dxc = ones @ (d2 * xs).reshape(n, c)  # sum of dy * (x - mean), or of dy * x
        if not training:
            dxc = dxc - mean * self.dbeta
        self.dgamma = dxc * inv
        if not need_dx:
            return None
        g = self.gamma * inv
        dx = d2 * g[ti]
        if training:
            dx -= xs * (g * inv * self.dgamma / n)[ti]
            dx -= (g * self.dbeta / n)[ti]
        return dx.reshape(dy.shape)


class ReLU:
    has_params = False

    def forward(self, x):
        self.out = relu_(x.copy())
        return self.out

    def backward(self, dy, need_dx=True):
        return dy * (self.out > 0)


class _Pool2d:
    """Pooling with window = stride = ``k``; a trailing remainder row/column is dropped."""

    has_params = False

    def __init__(self, k=2):
        self.k = k

    def _windows(self, x):
        B, H, W, C = x.shape
        k = self.k
        ho, wo = H // k, W // k
        self._shape = (x.shape, ho, wo)
        return x[:, : ho * k, : wo * k].reshape(B, ho, k, wo, k, C)

    def _scatter(self, dwin):
        (B, H, W, C), ho, wo = self._shape
        k = self.k
        dx = np.zeros((B, H, W, C), dtype=dwin.dtype)
        dx[:, : ho * k, : wo * k] = dwin.reshape(B, ho * k, wo * k, C)
        return dx


class MaxPool2d(_Pool2d):
    """Max over each window; the gradient goes to the first maximum (argmax order) of each window."""

    def forward(self, x):
        B, _, _, C = x.shape
        k = self.k
        win = self._windows(x)
        ho, wo = win.shape[1], win.shape[3]
        flat = win.transpose(0, 1, 3, 5, 2, 4).reshape(B, ho, wo, C, k * k)
        self._idx = flat.argmax(axis=-1)[..., None]
        self.out = np.take_along_axis(flat, self._idx, axis=-1)[..., 0]
        return self.out

    def backward(self, dy, need_dx=True):
        B, ho, wo, C = dy.shape
        k = self.k
        flat = np.zeros((B, ho, wo, C, k * k), dtype=dy.dtype)
        np.put_along_axis(flat, self._idx, dy[..., None], axis=-1)
        return self._scatter(flat.reshape(B, ho, wo, C, k, k).transpose(0, 1, 4, 2, 5, 3))


class AvgPool2d(_Pool2d):
    def forward(self, x):
        self.out = self._windows(x).mean(axis=(2, 4))
        return self.out

    def backward(self, dy, need_dx=True):
        (B, H, W, C), ho, wo = self._shape
        k = self.k
        d = np.broadcast_to((dy / (k * k))[:, :, None, :, None, :], (B, ho, k, wo, k, C))
        return self._scatter(np.ascontiguousarray(d))


class GlobalAvgPool:
    """``(B, H, W, C)`` -> ``(B, C)``: the mean over positions."""

    has_params = False

    def forward(self, x):
        self._shape = x.shape
        self.out = x.mean(axis=(1, 2))
        return self.out

    def backward(self, dy, need_dx=True):
        B, H, W, C = self._shape
        return np.broadcast_to((dy / (H * W))[:, None, None, :], self._shape).copy()


def add_backward(dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residual add ``y = a + b``: both inputs receive ``dy``."""
    return dy, dy


class ConvBN2d:
    """Convolution (no bias) -> batch norm -> optional ReLU: one parameter unit.

    Protocol of a parameter layer: ``W`` (the convolution's, ``(fan_in, c_out)``), ``b`` (the batch norm's
    shift beta), ``fan_in``, ``c_out``, ``relu``, ``out`` (the unit's output after the optional ReLU),
    ``dW``, ``db`` after a backward (which takes dL/d(out); the network sets ``dout`` to it in a full
    backward pass), ``mean_input()``. ``extra_params`` names the one further parameter, the batch norm's
    scale (``gamma``, gradient ``dgamma``)."""

    has_params = True
    extra_params = (("gamma", "dgamma"),)

    def __init__(self, c_in, c_out, kernel, *, stride=1, pad=None, relu=True, rng=None, dtype=np.float32,
                 bn_momentum=0.9):
        pad = (kernel - 1) // 2 if pad is None else pad
        self.conv = Conv2d(c_in, c_out, kernel, stride=stride, pad=pad, bias=False, rng=rng, dtype=dtype)
        self.bn = BatchNorm(c_out, momentum=bn_momentum, dtype=dtype)
        self.relu = relu
        self.fan_in, self.c_out, self.k, self.stride = self.conv.fan_in, c_out, kernel, stride

    # parameters, as views of the parts' arrays (updated in place by the optimizer)
    @property
    def W(self):
        return self.conv.W

    @W.setter
    def W(self, value):
        self.conv.W = value

    @property
    def b(self):
        return self.bn.beta

    @b.setter
    def b(self, value):
        self.bn.beta = value

    @property
    def gamma(self):
        return self.bn.gamma

    @gamma.setter
    def gamma(self, value):
        self.bn.gamma = value

    @property
    def training(self) -> bool:
        return self.bn.training

    @training.setter
    def training(self, flag: bool) -> None:
        self.bn.training = flag

    def out_hw(self, h, w):
        return self.conv.out_hw(h, w)

    def mean_input(self):
        """Batch and position mean of the last forward's input patches (length ``fan_in``)."""
        return self.conv.mean_input()

    def forward(self, x):
        y = self.bn.forward(self.conv.forward(x))
        if self.relu:
            relu_(y)
        self.out = y
        return y

    def backward(self, dy, need_dx=True):
        d = dy * (self.out > 0) if self.relu else dy
        d = self.bn.backward(d)
        self.db, self.dgamma = self.bn.dbeta, self.bn.dgamma
        dx = self.conv.backward(d, need_dx=need_dx)
        self.dW = self.conv.dW
        return dx
