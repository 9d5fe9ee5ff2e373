"""Central-difference gradients, for checking hand-written backward passes (the tests use it)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import numpy as np

__all__ = ["numerical_gradient", "check_layer"]


def numerical_gradient(f: Callable[[], float], arr: np.ndarray, eps: float = 1e-6,
                       at: Optional[Iterable[int]] = None) -> np.ndarray:
    """d f / d arr by central differences, perturbing ``arr`` in place (and restoring it). ``at``: only these
    flat indices (the other entries of the result stay 0)."""
    g = np.zeros_like(arr)
    for k in (range(arr.size) if at is None else at):
        i = np.unravel_index(int(k), arr.shape)
        old = arr[i]
        arr[i] = old + eps
        fp = f()
        arr[i] = old - eps
        fm = f()
        arr[i] = old
        g[i] = (fp - fm) / (2 * eps)
    return g


def check_layer(layer, x: np.ndarray, rng: np.random.Generator, params=None, owner=None,
                rtol: float = 1e-5, atol: float = 1e-7) -> None:
    """Loss = sum(out * R) for a random R: ``layer.backward``'s input gradient and the gradient of each
    ``(array, grad_attr)`` in ``params`` (attributes of ``owner``, default the layer; default params: ``W``
    and ``b`` of a parameter layer) must match central differences (AssertionError otherwise)."""
    out = layer.forward(x)
    R = rng.standard_normal(out.shape)
    dx = layer.backward(R.copy(), need_dx=True)
    if params is None:
        params = [(layer.W, "dW"), (layer.b, "db")] if getattr(layer, "has_params", False) else []
    src = layer if owner is None else owner
    grads = [(arr, np.array(getattr(src, g))) for arr, g in params]

    def loss():
        return float((layer.forward(x) * R).sum())

    np.testing.assert_allclose(dx, numerical_gradient(loss, x), rtol=rtol, atol=atol)
    for arr, g in grads:
        np.testing.assert_allclose(g, numerical_gradient(loss, arr), rtol=rtol, atol=atol)
