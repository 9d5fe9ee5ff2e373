"""Hand-written forward and backward of the surrogate's layers (numpy only).

Activations are channels-last: a 1-D feature map is ``(batch, length, channels)``, a vector
``(batch, features)``. Parameter layers hold ``W`` of shape ``(fan_in, out)`` (for a convolution the fan-in
is ``kernel * in_channels``, im2col order ``(tap, channel)``) and a bias ``b`` of shape ``(out,)``; a fused
ReLU is applied to the output when ``relu`` is set. The dtype follows the parameters (float32 in training,
float64 in the gradient checks).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = ["Conv1d", "Linear", "MaxPool1d", "Flatten", "softmax_cross_entropy"]


class Conv1d:
    """1-D convolution (cross-correlation), zero padding, stride; optional fused ReLU."""

    has_params = True

    def __init__(self, c_in, c_out, kernel, *, stride=1, pad=0, relu=True, rng=None, dtype=np.float32):
        rng = np.random.default_rng(0) if rng is None else rng
        self.c_in, self.c_out, self.k, self.stride, self.pad, self.relu = c_in, c_out, kernel, stride, pad, relu
        self.fan_in = kernel * c_in
        gain = 2.0 if relu else 1.0
        self.W = (rng.standard_normal((self.fan_in, c_out)) * np.sqrt(gain / self.fan_in)).astype(dtype)
        self.b = np.zeros(c_out, dtype=dtype)
        self._pad_bufs: dict = {}  # (batch, length, channels, dtype) -> zero-bordered buffer

    def out_len(self, length: int) -> int:
        return (length + 2 * self.pad - self.k) // self.stride + 1

    def forward(self, x: np.ndarray) -> np.ndarray:
        B, L, C = x.shape
        p, s, k = self.pad, self.stride, self.k
        if p:  # zero padding: the input copied into a kept buffer whose borders stay zero (np.pad is slow)
            key = (B, L, C, x.dtype.str)
            buf = self._pad_bufs.get(key)
            if buf is None:
                buf = self._pad_bufs[key] = np.zeros((B, L + 2 * p, C), dtype=x.dtype)
            buf[:, p : p + L] = x
            xp = buf
        else:
            xp = np.ascontiguousarray(x)
        lout = self.out_len(L)
        sb, sl, sc = xp.strides
        win = as_strided(xp, shape=(B, lout, k, C), strides=(sb, s * sl, sl, sc), writeable=False)
        cols = win.reshape(B * lout, k * C)
        if p and np.may_share_memory(cols, xp):  # non-overlapping windows: a view of the buffer, copy it
            cols = cols.copy()
        z = cols @ self.W + self.b
        self._cache = (x.shape, cols, lout)
        if self.relu:
            np.maximum(z, 0, out=z)
        self.out = z.reshape(B, lout, self.c_out)
        return self.out

    def mean_input(self) -> np.ndarray:
        """Batch and position mean of the last forward's input patches (length ``fan_in``)."""
        return self._cache[1].mean(axis=0)

    def backward(self, dy: np.ndarray, need_dx: bool = True):
        """Gradients of W and b (``self.dW``, ``self.db``) and, if asked, of the input."""
        (B, L, C), cols, lout = self._cache
        dz = dy.reshape(B * lout, self.c_out)
        if self.relu:
            dz = dz * (self.out.reshape(B * lout, self.c_out) > 0)
        self.dW = cols.T @ dz
        self.db = dz.sum(axis=0)
        if not need_dx:
            return None
        dcols = (dz @ self.W.T).reshape(B, lout, self.k, C)
        p, s = self.pad, self.stride
        dxp = np.zeros((B, L + 2 * p, C), dtype=dy.dtype)
        span = s * (lout - 1) + 1
        for j in range(self.k):
            dxp[:, j : j + span : s] += dcols[:, :, j]
        return dxp[:, p : p + L]


class Linear:
    """Fully connected layer on ``(batch, features)``; optional fused ReLU."""

    has_params = True

    def __init__(self, n_in, n_out, *, relu=True, rng=None, dtype=np.float32):
        rng = np.random.default_rng(0) if rng is None else rng
        self.fan_in, self.c_out, self.relu = n_in, n_out, relu
        gain = 2.0 if relu else 1.0
        self.W = (rng.standard_normal((n_in, n_out)) * np.sqrt(gain / n_in)).astype(dtype)
        self.b = np.zeros(n_out, dtype=dtype)

    def forward(self, x):
        self._x = x
        z = x @ self.W + self.b
        if self.relu:
            np.maximum(z, 0, out=z)
        self.out = z
        return z

    def mean_input(self) -> np.ndarray:
        """Batch mean of the last forward's input (length ``fan_in``)."""
        return self._x.reshape(self._x.shape[0], -1).mean(axis=0)

    def backward(self, dy, need_dx=True):
        dz = dy * (self.out > 0) if self.relu else dy
        self.dW = self._x.T @ dz
        self.db = dz.sum(axis=0)
        return dz @ self.W.T if need_dx else None


class MaxPool1d:
    """Max-pooling over length with window = stride = ``k`` (a trailing remainder is dropped)."""

    has_params = False

    def __init__(self, k=2):
        self.k = k

    def forward(self, x):
        B, L, C = x.shape
        lo = L // self.k
        xr = x[:, : lo * self.k].reshape(B, lo, self.k, C)
        idx = xr.argmax(axis=2)
        self._cache = (x.shape, idx)
        self.out = np.take_along_axis(xr, idx[:, :, None, :], axis=2)[:, :, 0]
        return self.out

    def backward(self, dy, need_dx=True):
        (B, L, C), idx = self._cache
        lo = L // self.k
        dxr = np.zeros((B, lo, self.k, C), dtype=dy.dtype)
        np.put_along_axis(dxr, idx[:, :, None, :], dy[:, :, None, :], axis=2)
        dx = np.zeros((B, L, C), dtype=dy.dtype)
        dx[:, : lo * self.k] = dxr.reshape(B, lo * self.k, C)
        return dx


class Flatten:
    """``(batch, length, channels)`` -> ``(batch, length * channels)``."""

    has_params = False

    def forward(self, x):
        self._shape = x.shape
        self.out = x.reshape(x.shape[0], -1)
        return self.out

    def backward(self, dy, need_dx=True):
        return dy.reshape(self._shape)


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray):
    """Mean cross-entropy over the batch and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = e / e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = float(-np.log(p[np.arange(n), y] + 1e-12).mean())
    d = p
    d[np.arange(n), y] -= 1.0
    d /= n
    return loss, d
