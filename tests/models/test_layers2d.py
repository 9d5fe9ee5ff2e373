"""Gradient checks of the 2-D layers and the residual network (float64, central differences, small shapes),
and the convolution against its direct definition."""

from __future__ import annotations

import numpy as np
import pytest

from models.surrogate.gradcheck import check_layer as _check, numerical_gradient as _num_grad
from models.surrogate.layers import softmax_cross_entropy
from models.surrogate.layers2d import (
    AvgPool2d,
    BatchNorm,
    Conv2d,
    ConvBN2d,
    GlobalAvgPool,
    MaxPool2d,
    ReLU,
    add_backward,
)
from models.surrogate.nets2d import ResidualBlock, ResNet


def _direct_conv(x, W, b, k, stride, pad):
    """The definition, by loops: y[n, i, j, o] = b[o] + sum_{a, c, ch} xpad[n, s i + a, s j + c, ch] W[a, c, ch, o]."""
    B, H, Wd, C = x.shape
    Wk = W.reshape(k, k, C, -1)
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ho, wo = (H + 2 * pad - k) // stride + 1, (Wd + 2 * pad - k) // stride + 1
    y = np.zeros((B, ho, wo, Wk.shape[-1]))
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, i * stride : i * stride + k, j * stride : j * stride + k, :]
            y[:, i, j] = np.einsum("nacd,acdo->no", patch, Wk) + b
    return y


CONVS = [  # c_in, c_out, k, stride, pad, bias, H, W
    (2, 3, 3, 1, 1, True, 5, 5),
    (2, 3, 3, 2, 1, False, 6, 5),
    (3, 2, 1, 2, 0, False, 5, 6),
    (1, 2, 2, 2, 0, True, 5, 5),
    (2, 2, 3, 1, 0, True, 4, 5),
    (1, 2, 3, 1, 2, False, 4, 3),
    (2, 1, 2, 1, 1, False, 3, 4),
    (1, 3, 3, 1, 1, True, 6, 6),  # one input channel: the tap-by-tap im2col
    (1, 2, 3, 2, 1, False, 7, 6),
    (2, 2, 3, 3, 1, False, 7, 8),  # stride 3: three phases per axis in the input gradient
    (3, 2, 5, 2, 2, True, 7, 6),
]


@pytest.mark.parametrize("c_in, c_out, k, stride, pad, bias, h, w", CONVS)
def test_conv2d_matches_its_definition_and_finite_differences(c_in, c_out, k, stride, pad, bias, h, w):
    rng = np.random.default_rng(1)
    conv = Conv2d(c_in, c_out, k, stride=stride, pad=pad, bias=bias, rng=rng, dtype=np.float64)
    conv.b[:] = rng.standard_normal(c_out) if bias else 0.0
    x = rng.standard_normal((2, h, w, c_in))
    np.testing.assert_allclose(conv.forward(x), _direct_conv(x, conv.W, conv.b, k, stride, pad), rtol=1e-12, atol=1e-12)
    assert conv.out.shape[1:3] == conv.out_hw(h, w)
    params = [(conv.W, "dW")] + ([(conv.b, "db")] if bias else [])
    _check(conv, x, rng, params)
    if not bias:
        assert not conv.db.any()


@pytest.mark.parametrize("shape", [(3, 4, 4, 3), (6, 3)])
def test_batch_norm_training_mode_gradients(shape):
    rng = np.random.default_rng(2)
    bn = BatchNorm(shape[-1], dtype=np.float64)
    bn.gamma[:] = rng.uniform(0.5, 1.5, shape[-1])
    bn.beta[:] = rng.standard_normal(shape[-1])
    x = rng.standard_normal(shape) * 2.0 + 1.0
    _check(bn, x, rng, [(bn.gamma, "dgamma"), (bn.beta, "dbeta")])


def test_batch_norm_statistics_training_and_inference():
    rng = np.random.default_rng(3)
    bn = BatchNorm(3, momentum=0.9, dtype=np.float64)
    x = rng.standard_normal((4, 5, 5, 3)) * np.array([1.0, 2.0, 3.0]) + np.array([0.5, -1.0, 2.0])
    y = bn.forward(x)
    flat = x.reshape(-1, 3)
    # training mode: each channel of the output has mean beta (0) and variance gamma^2 (1), up to eps
    np.testing.assert_allclose(y.reshape(-1, 3).mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.reshape(-1, 3).var(axis=0), flat.var(axis=0) / (flat.var(axis=0) + 1e-5), rtol=1e-10)
    # running statistics: one step of the decay from (0, 1), with the unbiased batch variance
    np.testing.assert_allclose(bn.running_mean, 0.1 * flat.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(bn.running_var, 0.9 + 0.1 * flat.var(axis=0, ddof=1), rtol=1e-12)
    # inference: normalizes by the running statistics, not by the batch, and does not update them
    bn.training = False
    before = (bn.running_mean.copy(), bn.running_var.copy())
    x2 = rng.standard_normal((2, 3, 3, 3))
    expect = (x2 - bn.running_mean) / np.sqrt(bn.running_var + 1e-5) * bn.gamma + bn.beta
    np.testing.assert_allclose(bn.forward(x2), expect, rtol=1e-12)
    np.testing.assert_array_equal(bn.running_mean, before[0])
    np.testing.assert_array_equal(bn.running_var, before[1])
    _check(bn, x2, rng, [(bn.gamma, "dgamma"), (bn.beta, "dbeta")])  # inference-mode backward too


def test_relu_pools_and_global_average_pool_gradients():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 7, 3))  # odd sizes: the trailing row/column is dropped by the pools
    for layer in (ReLU(), MaxPool2d(2), AvgPool2d(2), GlobalAvgPool()):
        _check(layer, x, rng)
    mp = MaxPool2d(2)
    out = mp.forward(x)
    np.testing.assert_array_equal(out, x[:, :4, :6].reshape(2, 2, 2, 3, 2, 3).max(axis=(2, 4)))
    np.testing.assert_allclose(AvgPool2d(3).forward(x), x[:, :3, :6].reshape(2, 1, 3, 2, 3, 3).mean(axis=(2, 4)))
    # a tie sends the whole gradient to one input, not to both
    tie = np.zeros((1, 2, 2, 1))
    mp.forward(tie)
    assert mp.backward(np.ones((1, 1, 1, 1))).sum() == 1.0


def test_residual_add_passes_the_gradient_to_both_inputs():
    d = np.arange(6.0).reshape(2, 3)
    a, b = add_backward(d)
    np.testing.assert_array_equal(a, d)
    np.testing.assert_array_equal(b, d)


@pytest.mark.parametrize("relu", [True, False])
def test_conv_bn_unit_gradients_and_protocol(relu):
    rng = np.random.default_rng(5)
    u = ConvBN2d(2, 3, 3, stride=2, relu=relu, rng=rng, dtype=np.float64)
    u.gamma[:] = rng.uniform(0.5, 1.5, 3)
    u.b[:] = rng.standard_normal(3)
    assert u.b is u.bn.beta and u.W is u.conv.W and u.fan_in == 18 and u.c_out == 3
    x = rng.standard_normal((3, 5, 5, 2))
    _check(u, x, rng, [(u.W, "dW"), (u.b, "db"), (u.gamma, "dgamma")])
    np.testing.assert_allclose(u.mean_input(), u.conv.cols.mean(axis=0))
    u.b -= 1.0  # the optimizer's in-place update reaches the batch norm
    assert u.bn.beta is u.b


@pytest.mark.parametrize("c_in, c_out, stride", [(2, 2, 1), (2, 3, 2)])
def test_residual_block_gradients(c_in, c_out, stride):
    rng = np.random.default_rng(6)
    blk = ResidualBlock(c_in, c_out, stride, rng, np.float64)
    for u in blk.units:
        u.b[:] = rng.standard_normal(c_out) * 0.3
    x = rng.standard_normal((3, 4, 4, c_in))

    class _Wrap:
        def forward(self, x):
            return blk.forward(x)

        def backward(self, dy, need_dx=True):
            return blk.backward(dy, need_dx)

    for u in blk.units:
        _check(_Wrap(), x, rng, [(u.W, "dW"), (u.b, "db"), (u.gamma, "dgamma")], owner=u)
    assert (blk.short is None) == (stride == 1 and c_in == c_out)


def test_whole_residual_network_backward_matches_finite_differences():
    rng = np.random.default_rng(7)
    net = ResNet(2, (6, 6), 3, rng, dtype=np.float64, stage1_stride=2)
    for u in net.units:
        u.b[:] = rng.standard_normal(u.c_out) * 0.2
        u.gamma[:] = rng.uniform(0.7, 1.3, u.c_out)
    x = rng.standard_normal((4, 6, 6, 1))
    y = np.array([0, 1, 2, 1])

    def loss():
        return softmax_cross_entropy(net.forward(x), y)[0]

    _, d = softmax_cross_entropy(net.forward(x), y)
    net.backward(d)
    grads = []
    for layer in net.param_layers:
        names = [("W", "dW"), ("b", "db")] + list(getattr(layer, "extra_params", ()))
        grads += [(getattr(layer, p), np.array(getattr(layer, g))) for p, g in names]
    assert len(grads) == 3 * len(net.units) + 2
    pick = np.random.default_rng(0)
    for arr, g in grads:  # up to 8 entries of each parameter array (the whole net in full takes 25 s)
        at = np.sort(pick.choice(arr.size, min(arr.size, 8), replace=False))
        num = _num_grad(loss, arr, at=at)
        np.testing.assert_allclose(g.ravel()[at], num.ravel()[at], rtol=1e-4, atol=1e-8)
    assert net.n_params() == sum(a.size for a, _ in grads)
    # every unit's dout is dL/d(its output): check one entry of each by perturbing the unit's output
    _, d = softmax_cross_entropy(net.forward(x), y)
    net.backward(d)
    douts = {id(u): u.dout.copy() for u in net.param_layers}
    for u in net.units:
        idx = (1, 0, 0, 1)
        assert douts[id(u)].shape == u.out.shape == (4, *net.out_shapes[id(u)])
        orig = u.forward

        def bumped(inp, eps, orig=orig, u=u):
            out = orig(inp)
            out[idx] += eps
            return out

        vals = []
        for eps in (1e-6, -1e-6):
            u.forward = lambda inp, eps=eps: bumped(inp, eps)
            vals.append(loss())
        u.forward = orig
        assert abs((vals[0] - vals[1]) / 2e-6 - douts[id(u)][idx]) < 1e-5 * max(1.0, abs(douts[id(u)][idx]))
        # backward_to gives the same exact output gradient (after a clean forward)
        net.forward(x)
        np.testing.assert_allclose(net.backward_to(d, u), douts[id(u)], rtol=1e-10, atol=1e-12)
    # the unit just below the classifier is the last block's second convolution (the 'truncated' control)
    assert net.param_layers[-2] is net.blocks[-1].conv2


def test_residual_network_inference_uses_running_statistics():
    rng = np.random.default_rng(8)
    net = ResNet(2, (6, 6), 3, rng, dtype=np.float64)
    x = rng.standard_normal((5, 6, 6, 1))
    net.forward(x)  # training mode: batch statistics, running statistics updated once
    rm = [u.bn.running_mean.copy() for u in net.units]
    p1 = net.predict(x[:1])
    p5 = net.predict(x)
    assert p1[0] == p5[0]  # inference: a sample's prediction does not depend on the rest of the batch
    for u, m in zip(net.units, rm):
        np.testing.assert_array_equal(u.bn.running_mean, m)
        assert u.training


def test_build_network_offers_resnet_for_images_only():
    from models.surrogate.nets import build_network

    rng = np.random.default_rng(0)
    net = build_network("resnet", 8, (14, 14), 10, rng)
    assert isinstance(net, ResNet)
    assert [u.c_out for u in net.units] == [8, 8, 8, 8, 16, 16, 16, 32, 32, 32]
    assert [u.k for u in net.units] == [3, 1, 3, 3, 1, 3, 3, 1, 3, 3]  # every stage at stride 2: shortcut first
    assert net.forward(np.zeros((2, 14, 14, 1), np.float32)).shape == (2, 10)
    assert net.stem.out.shape == (2, 14, 14, 8) and net.blocks[0].out.shape == (2, 7, 7, 8)
    assert net.blocks[-1].out.shape == (2, 2, 2, 32)  # stages at 7x7, 4x4, 2x2 after a stride-1 stem
    assert net.n_params() == 19_890
    with pytest.raises(ValueError, match="resnet.*image task"):
        build_network("resnet", 8, 40, 10, rng)
    with pytest.raises(ValueError, match="image task needs 'resnet' or 'mlp'"):
        build_network("cnn", 8, (14, 14), 10, rng)
    mlp = build_network("mlp", 8, (14, 14), 10, rng)  # an MLP flattens an image
    assert mlp.forward(np.zeros((2, 14, 14, 1), np.float32)).shape == (2, 10)


def test_grid_pooling_averages_onto_a_near_square_grid():
    from models.surrogate.nets2d import grid_pooling, grid_shape

    assert [grid_shape(n) for n in (8, 16, 7, 1, 12)] == [(2, 4), (4, 4), (1, 7), (1, 1), (3, 4)]
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 6))
    pm = grid_pooling((4, 6), 8)  # 2 x 4 cells
    pooled = (a.reshape(-1) @ pm).reshape(2, 4)
    assert pooled[0, 0] == pytest.approx(a[:2, :2].mean())  # columns 0-1 of 6 for cell 0 (bins [0, 2))
    assert pooled[1, 3] == pytest.approx(a[2:, 4:].mean())
    np.testing.assert_allclose(pm.sum(axis=0), 1.0, rtol=1e-6)
    # a map smaller than the grid repeats positions; a vector is one position
    np.testing.assert_allclose(grid_pooling((1, 2), 4).sum(axis=0), 1.0, rtol=1e-6)
    assert grid_pooling((), 3).shape == (1, 3)


def test_running_statistics_can_be_saved_and_restored():
    rng = np.random.default_rng(10)
    net = ResNet(2, (6, 6), 3, rng, dtype=np.float64)
    # building the network (one forward of zeros for its shapes) left the statistics at their start
    for u in net.units:
        np.testing.assert_array_equal(u.bn.running_mean, 0.0)
        np.testing.assert_array_equal(u.bn.running_var, 1.0)
    saved = net.running_stats()
    net.forward(rng.standard_normal((4, 6, 6, 1)))
    assert any(np.any(u.bn.running_mean != 0) for u in net.units)
    net.set_running_stats(saved)
    for u in net.units:
        np.testing.assert_array_equal(u.bn.running_mean, 0.0)
    assert [(type(u).__name__, p, g) for u, p, g in net.extra_params][:1] == [("ConvBN2d", "gamma", "dgamma")]
    assert len(net.extra_params) == len(net.units)
