"""The surrogate's networks, built from :mod:`models.surrogate.layers`."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from models.surrogate.layers import Conv1d, Flatten, Linear, MaxPool1d
from models.surrogate.predictors import pool_matrix

__all__ = ["Net", "build_network", "kept_statistics"]


@contextmanager
def kept_statistics(net):
    """Run the network on other data (a probe, a diagnostic) without changing its state beyond the weights:
    a network with batch norm (``running_stats`` / ``set_running_stats``) gets its running statistics back
    on exit; for the 1-D networks, which have none, it does nothing."""
    get = getattr(net, "running_stats", None)
    saved = get() if get is not None else None
    try:
        yield
    finally:
        if saved is not None:
            net.set_running_stats(saved)


class Net:
    """A sequential network; ``param_layers`` are the layers with weights, in forward order.

    ``in_shape``: one sample's input shape; ``out_shapes``: each layer's per-sample output shape (by
    ``id``), found by one forward pass of a zero sample. What the gradient schemes need of a network
    (``backward_to``, ``pooling`` and the layers' ``out``/``dout``/``backward``) is listed in
    :mod:`models.schemes.base`."""

    def __init__(self, layers, in_shape):
        self.layers = list(layers)
        self.param_layers = [l for l in self.layers if l.has_params]
        self.in_shape = tuple(in_shape)
        x = np.zeros((1, *self.in_shape), dtype=self.param_layers[0].W.dtype)
        self.out_shapes = {}
        for layer in self.layers:
            x = layer.forward(x)
            self.out_shapes[id(layer)] = tuple(x.shape[1:])

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def backward(self, dlogits):
        d = dlogits
        first = self.layers[0]
        for layer in reversed(self.layers):
            layer.dout = d  # dL/d(layer output): DNI's regression target
            d = layer.backward(d, need_dx=layer is not first)
        return d

    def backward_to(self, dlogits, layer):
        """Exact dL/d(``layer``'s output) by backprop through the layers after ``layer`` only."""
        d = dlogits
        for other in reversed(self.layers):
            if other is layer:
                return d
            d = other.backward(d, need_dx=True)
        raise ValueError("backward_to: the layer is not in this network")

    @staticmethod
    def pooling(spatial_shape, size: int) -> np.ndarray:
        """The pooling rule: ``(positions, size)`` adaptive average pooling along the (flattened) length;
        a vector output (no spatial axis) is one position."""
        return pool_matrix(int(np.prod(spatial_shape)) if len(spatial_shape) else 1, size)

    def n_params(self) -> int:
        return int(sum(l.W.size + l.b.size for l in self.param_layers))

    def predict(self, x, batch=1000):
        out = [self.forward(x[i : i + batch]).argmax(axis=1) for i in range(0, len(x), batch)]
        return np.concatenate(out)


def build_network(name: str, width: int, in_len, n_classes: int, rng, dtype=np.float32):
    """``cnn``: three conv(k=5, stride 2, pad 2)+ReLU of ``width`` channels, flatten, linear.
    ``cnn_pool``: three conv(k=5, stride 1, pad 2)+ReLU each followed by max-pool(2), flatten, linear.
    ``mlp``: linear+ReLU (``width``), linear+ReLU (``width``), linear. Input ``(batch, in_len, 1)``.
    ``resnet`` (2-D images only, ``in_len = (height, width)``): :class:`models.surrogate.nets2d.ResNet`,
    a stride-1 stem of ``width`` channels, then stages of ``width``, ``2 width``, ``4 width`` channels at
    strides 2, 2, 2 (a 14x14 input: 14x14, 7x7, 4x4, 2x2)."""
    shape = (in_len,) if isinstance(in_len, (int, np.integer)) else tuple(in_len)
    if name == "resnet":
        if len(shape) != 2:
            raise ValueError(f"network: 'resnet' needs an image task such as 'fashion' (got inputs of shape {shape})")
        from models.surrogate.nets2d import ResNet

        return ResNet(width, shape, n_classes, rng, dtype=dtype, stem_stride=1, stage1_stride=2)
    if len(shape) != 1 and name != "mlp":
        raise ValueError(f"network: {name!r} is 1-D; an image task needs 'resnet' or 'mlp' "
                         f"(got inputs of shape {shape})")
    in_len = int(np.prod(shape))
    layers = []
    if name in ("cnn", "cnn_pool"):
        c, length = 1, in_len
        for _ in range(3):
            if name == "cnn":
                conv = Conv1d(c, width, 5, stride=2, pad=2, rng=rng, dtype=dtype)
                layers.append(conv)
                length = conv.out_len(length)
            else:
                conv = Conv1d(c, width, 5, stride=1, pad=2, rng=rng, dtype=dtype)
                layers += [conv, MaxPool1d(2)]
                length = conv.out_len(length) // 2
            c = width
        layers += [Flatten(), Linear(length * width, n_classes, relu=False, rng=rng, dtype=dtype)]
    elif name == "mlp":
        layers = [
            Flatten(),
            Linear(in_len, width, rng=rng, dtype=dtype),
            Linear(width, width, rng=rng, dtype=dtype),
            Linear(width, n_classes, relu=False, rng=rng, dtype=dtype),
        ]
    else:
        raise ValueError(f"network: one of 'cnn', 'cnn_pool', 'mlp', 'resnet' (got {name!r})")
    return Net(layers, (*shape, 1))
