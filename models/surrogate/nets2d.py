"""The surrogate's residual network for 2-D images, built from :mod:`models.surrogate.layers2d`.

``resnet`` (ResNet-like, He et al. 2016, scaled down): a stem ConvBN 3x3 (``width`` channels, ReLU), then
three stages of one basic residual block each, ``width``, ``2 width``, ``4 width`` channels (8-16-32 by
default), the first at stride ``stage1_stride`` and the others at stride 2; global average pooling; a linear
classifier. A basic block is ConvBN 3x3 (stride s, ReLU) -> ConvBN 3x3 (no ReLU), plus the shortcut (the
identity, or a ConvBN 1x1 at stride s when the shape changes), then a ReLU.

The network presents what the training loop and the gradient schemes need of a network (listed in
:mod:`models.schemes.base`): ``param_layers`` (the parameter units in forward order, the classifier
last; within a block the shortcut comes first, so the unit just below the classifier is the last block's
second convolution), ``out_shapes``, ``forward``, ``backward(dlogits)`` (every unit's ``dout`` and gradients
set), ``backward_to``, ``pooling`` (adaptive average pooling onto a grid), ``predict`` (inference mode: batch
norm on its running statistics), ``n_params``, and, beyond the 1-D networks, ``extra_params`` (the batch
norms' scales, trained on BP steps only) and ``running_stats`` / ``set_running_stats`` (the batch norms'
running statistics, which every training-mode forward updates).
"""

from __future__ import annotations

import numpy as np

from models.surrogate.layers import Linear
from models.surrogate.layers2d import ConvBN2d, GlobalAvgPool, relu_
from models.surrogate.predictors import pool_matrix

__all__ = ["ResNet", "ResidualBlock", "grid_pooling", "grid_shape"]

def grid_shape(size: int) -> tuple[int, int]:
    """The factor pair ``(rows, cols)`` of ``size`` closest to square, rows <= cols (8 -> 2 x 4, 16 -> 4 x 4,
    7 -> 1 x 7)."""
    r = int(np.floor(np.sqrt(size)))
    while size % r:
        r -= 1
    return r, size // r


def grid_pooling(spatial_shape, size) -> np.ndarray:
    """``(H * W, cells)``: adaptive average pooling of an ``H x W`` map (positions flattened in C order) onto
    a grid (cells in C order): ``size`` cells in the :func:`grid_shape` arrangement, or ``size = (rows,
    cols)``; separable, rows then columns, with nearest-neighbour upsampling along an axis shorter than the
    grid's. A vector (no spatial axis) is one position; a 1-D length pools along it."""
    shape = tuple(int(s) for s in spatial_shape)
    if len(shape) < 2:
        return pool_matrix(shape[0] if shape else 1, int(np.prod(size)))
    (H, W), (r, c) = shape, (tuple(size) if isinstance(size, tuple) else grid_shape(size))
    return np.kron(pool_matrix(H, r), pool_matrix(W, c))


class ResidualBlock:
    """Basic block: relu(conv2(conv1(x)) + shortcut(x))."""

    def __init__(self, c_in, c_out, stride, rng, dtype):
        self.conv1 = ConvBN2d(c_in, c_out, 3, stride=stride, relu=True, rng=rng, dtype=dtype)
        self.conv2 = ConvBN2d(c_out, c_out, 3, stride=1, relu=False, rng=rng, dtype=dtype)
        self.short = None
        if stride != 1 or c_in != c_out:
            self.short = ConvBN2d(c_in, c_out, 1, stride=stride, pad=0, relu=False, rng=rng, dtype=dtype)
        self.units = ([self.short] if self.short is not None else []) + [self.conv1, self.conv2]

    def forward(self, x):
        s = self.short.forward(x) if self.short is not None else x
        h = self.conv2.forward(self.conv1.forward(x))
        y = relu_(h + s)
        self.out = y
        return y

    def backward(self, dy, need_dx=True):
        d = dy * (self.out > 0)
        self.conv2.dout = d
        d1 = self.conv2.backward(d)
        self.conv1.dout = d1
        dx = self.conv1.backward(d1, need_dx=need_dx)
        if self.short is not None:
            self.short.dout = d
            ds = self.short.backward(d, need_dx=need_dx)
        else:
            ds = d
        return dx + ds if need_dx else None


class ResNet:
    """Stem, three one-block stages, global average pooling, linear classifier. Input ``(B, H, W, 1)``."""

    def __init__(self, width: int, in_hw: tuple[int, int], n_classes: int, rng, dtype=np.float32,
                 stage1_stride: int = 1, in_channels: int = 1, stem_stride: int = 1):
        self.stem = ConvBN2d(in_channels, width, 3, stride=stem_stride, relu=True, rng=rng, dtype=dtype)
        widths = (width, 2 * width, 4 * width)
        strides = (stage1_stride, 2, 2)
        self.blocks = []
        c = width
        for w, s in zip(widths, strides):
            self.blocks.append(ResidualBlock(c, w, s, rng, dtype))
            c = w
        self.pool = GlobalAvgPool()
        self.fc = Linear(c, n_classes, relu=False, rng=rng, dtype=dtype)
        self.units = [self.stem] + [u for b in self.blocks for u in b.units]
        self.param_layers = self.units + [self.fc]
        self.in_shape = (*tuple(in_hw), in_channels)
        saved = self.running_stats()
        x = np.zeros((2, *self.in_shape), dtype=dtype)
        self.forward(x)
        self.out_shapes = {id(l): tuple(l.out.shape[1:]) for l in self.param_layers}
        self.set_running_stats(saved)

    @property
    def extra_params(self) -> list[tuple[object, str, str]]:
        """``(unit, param_attr, grad_attr)`` of every parameter beyond ``W`` and ``b`` (the batch norms'
        scales), updated with their true gradients on BP steps only."""
        return [(u, p, g) for u in self.units for p, g in u.extra_params]

    def running_stats(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(u.bn.running_mean.copy(), u.bn.running_var.copy()) for u in self.units]

    def set_running_stats(self, stats) -> None:
        for u, (m, v) in zip(self.units, stats):
            u.bn.running_mean, u.bn.running_var = m.copy(), v.copy()

    def set_training(self, flag: bool) -> None:
        for u in self.units:
            u.training = flag

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.stem.forward(x)
        for blk in self.blocks:
            h = blk.forward(h)
        return self.fc.forward(self.pool.forward(h))

    def _head_backward(self, dlogits: np.ndarray) -> np.ndarray:
        """dL/d(last block's output, before its ReLU) from the logits' gradient."""
        self.fc.dout = dlogits
        d = self.pool.backward(self.fc.backward(dlogits))
        return d * (self.blocks[-1].out > 0)

    def backward(self, dlogits: np.ndarray) -> None:
        """Backprop through the whole network; every unit's ``dout``, ``dW``, ``db`` (and ``dgamma``) set."""
        d = self.pool.backward(self.fc.backward(dlogits))
        self.fc.dout = dlogits
        for blk in reversed(self.blocks):
            d = blk.backward(d)
        self.stem.dout = d
        self.stem.backward(d, need_dx=False)

    def backward_to(self, dlogits: np.ndarray, layer) -> np.ndarray:
        """Exact dL/d(``layer``'s output). For the units whose output reaches the classifier through no
        other unit (the last block's second convolution and its shortcut) by backprop through the
        classifier, the pooling and the block's ReLU only; for any other unit by a full backward pass."""
        if layer is self.fc:
            return dlogits
        last = self.blocks[-1]
        if layer is last.conv2 or (last.short is not None and layer is last.short):
            return self._head_backward(dlogits)
        if not any(layer is u for u in self.units):
            raise ValueError("backward_to: the layer is not in this network")
        self.backward(dlogits)
        return layer.dout

    @staticmethod
    def pooling(spatial_shape, size: int) -> np.ndarray:
        """The pooling rule of the schemes (ADA-GP's reorganization, local heads): :func:`grid_pooling`."""
        return grid_pooling(spatial_shape, size)

    def n_params(self) -> int:
        n = sum(l.W.size + l.b.size for l in self.param_layers)
        n += sum(getattr(u, p).size for u, p, _ in self.extra_params)
        return int(n)

    def predict(self, x: np.ndarray, batch: int = 250) -> np.ndarray:
        # batches of 250 keep the 14x14 maps in cache: the 2,000 test images take half the time of 1,000-batches
        self.set_training(False)
        try:
            out = [self.forward(x[i : i + batch]).argmax(axis=1) for i in range(0, len(x), batch)]
        finally:
            self.set_training(True)
        return np.concatenate(out)
