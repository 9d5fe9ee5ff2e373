"""Inception-v3 (Szegedy et al. 2016) as torchvision writes it, and Inception-v4 (Szegedy et al. 2017) as
timm / Cadene's pretrainedmodels write it.

Both are described module by module the way those libraries write them: a ``BasicConv2d`` unit (conv
without bias, batch norm, ReLU) and one function per Inception module type, instantiated in a loop over the
network's sequence of modules. Both run on their native 299x299 input.

Data sets: ``imagenet`` only, meaning ImageNet at the native 299x299 crop (not the zoo's 224). There is no
CIFAR variant: the stem's unpadded stride-2 convolutions and max-pools need at least 75x75 pixels
(torchvision's documented ``min_size``), and none of the papers gives a 32x32 adaptation; inventing one
would not be Inception any more. ``num_classes`` still sets the classifier width.

Inception-v3's auxiliary classifier (``AuxLogits``) runs only in training. Its layers are part of the
network (their parameters are counted, as in torchvision's 27,161,264, and they appear in the training
ops), but they are left out of :attr:`Net.macs`, which follows torchvision's convention of an inference
forward (5.713 GFLOPS in its weights' metadata, which is the forward without the auxiliary branch). The
auxiliary classifier is a training-only branch (built inside :meth:`Net.aux_branch`, which marks its layers
``aux``); ``aux=False`` drops the branch altogether (torchvision's ``aux_logits=False``).
"""

from __future__ import annotations

from typing import Callable

from models.graph import Net, Tensor
from models.nets.registry import dataset_input, register

#: native input size of both networks
SIZE = 299
#: name prefix of Inception-v3's training-only auxiliary classifier
AUX_PREFIX = "AuxLogits"


def _pair(k: int | tuple[int, int]) -> tuple[int, int]:
    return (k, k) if isinstance(k, int) else k


def _basic(net: Net, x: Tensor, out: int, k: int | tuple[int, int], name: str, *, stride: int = 1,
           same: bool = True) -> Tensor:
    """``BasicConv2d``: conv (no bias) + batch norm + ReLU; ``same`` pads k//2 per axis, else no padding."""
    kh, kw = _pair(k)
    padding = (kh // 2, kw // 2) if same else 0
    x = net.conv(x, out, (kh, kw), stride=stride, padding=padding, name=f"{name}.conv")
    x = net.bn(x, name=f"{name}.bn")
    return net.relu(x, name=f"{name}.relu")


def _chain(net: Net, x: Tensor, convs: list[tuple[int, int | tuple[int, int]]], name: str,
           names: list[str] | None = None, *, last_stride: int = 1, last_same: bool = True) -> Tensor:
    """A branch of ``BasicConv2d`` units given as (width, kernel); the last one may be strided/unpadded."""
    for i, (out, k) in enumerate(convs):
        last = i == len(convs) - 1
        x = _basic(net, x, out, k, f"{name}{names[i] if names else f'.{i}'}",
                   stride=last_stride if last else 1, same=last_same if last else True)
    return x


def _avgpool_conv(net: Net, x: Tensor, out: int, name: str) -> Tensor:
    """The pooling branch of the Inception modules: 3x3 average pool (stride 1, pad 1), then a 1x1 unit."""
    return _basic(net, net.pool(x, 3, 1, 1, name=f"{name}.pool"), out, 1, name)


def _factorized(n: int, k: int) -> list[tuple[int, int]]:
    """Kernels of a factorized k x k chain of n convs alternating 1 x k and k x 1 (the Inception-v3 trick)."""
    return [(1, k) if i % 2 == 0 else (k, 1) for i in range(n)]


# -- Inception-v3 (torchvision) ---------------------------------------------------------------------------
def _v3_a(net: Net, x: Tensor, name: str, *, pool_features: int) -> Tensor:
    b1 = _basic(net, x, 64, 1, f"{name}.branch1x1")
    b5 = _chain(net, x, [(48, 1), (64, 5)], f"{name}.branch5x5", ["_1", "_2"])
    b3 = _chain(net, x, [(64, 1), (96, 3), (96, 3)], f"{name}.branch3x3dbl", ["_1", "_2", "_3"])
    bp = _avgpool_conv(net, x, pool_features, f"{name}.branch_pool")
    return net.concat([b1, b5, b3, bp], name=f"{name}.cat")


def _v3_b(net: Net, x: Tensor, name: str) -> Tensor:
    b3 = _basic(net, x, 384, 3, f"{name}.branch3x3", stride=2, same=False)
    bd = _chain(net, x, [(64, 1), (96, 3), (96, 3)], f"{name}.branch3x3dbl", ["_1", "_2", "_3"],
                last_stride=2, last_same=False)
    bp = net.pool(x, 3, 2, name=f"{name}.branch_pool")
    return net.concat([b3, bd, bp], name=f"{name}.cat")


def _v3_c(net: Net, x: Tensor, name: str, *, channels_7x7: int) -> Tensor:
    c7 = channels_7x7
    b1 = _basic(net, x, 192, 1, f"{name}.branch1x1")
    # a 7x7 factorized as 1x7 then 7x1 (two convs), and a doubled 7x7 (four convs, starting with 7x1)
    k7 = _factorized(2, 7)
    b7 = _chain(net, x, [(c7, 1), (c7, k7[0]), (192, k7[1])], f"{name}.branch7x7", ["_1", "_2", "_3"])
    k7d = [kk[::-1] for kk in _factorized(4, 7)]
    widths = [c7] * 3 + [192]
    bd = _chain(net, x, [(c7, 1)] + list(zip(widths, k7d)), f"{name}.branch7x7dbl",
                [f"_{i + 1}" for i in range(5)])
    bp = _avgpool_conv(net, x, 192, f"{name}.branch_pool")
    return net.concat([b1, b7, bd, bp], name=f"{name}.cat")


def _v3_d(net: Net, x: Tensor, name: str) -> Tensor:
    b3 = _chain(net, x, [(192, 1), (320, 3)], f"{name}.branch3x3", ["_1", "_2"], last_stride=2,
                last_same=False)
    k7 = _factorized(2, 7)
    b7 = _chain(net, x, [(192, 1), (192, k7[0]), (192, k7[1]), (192, 3)], f"{name}.branch7x7x3",
                ["_1", "_2", "_3", "_4"], last_stride=2, last_same=False)
    bp = net.pool(x, 3, 2, name=f"{name}.branch_pool")
    return net.concat([b3, b7, bp], name=f"{name}.cat")


def _split_1x3_3x1(net: Net, x: Tensor, out: int, name: str, suffixes: tuple[str, str]) -> Tensor:
    """Inception-v3/v4's expanded filter bank: parallel 1x3 and 3x1 convs on one input, concatenated."""
    ys = [_basic(net, x, out, k, f"{name}{s}") for k, s in zip(_factorized(2, 3), suffixes)]
    return net.concat(ys, name=f"{name}.cat")


def _v3_e(net: Net, x: Tensor, name: str) -> Tensor:
    b1 = _basic(net, x, 320, 1, f"{name}.branch1x1")
    b3 = _basic(net, x, 384, 1, f"{name}.branch3x3_1")
    b3 = _split_1x3_3x1(net, b3, 384, f"{name}.branch3x3", ("_2a", "_2b"))
    bd = _chain(net, x, [(448, 1), (384, 3)], f"{name}.branch3x3dbl", ["_1", "_2"])
    bd = _split_1x3_3x1(net, bd, 384, f"{name}.branch3x3dbl", ("_3a", "_3b"))
    bp = _avgpool_conv(net, x, 192, f"{name}.branch_pool")
    return net.concat([b1, b3, bd, bp], name=f"{name}.cat")


def _v3_aux(net: Net, x: Tensor, classes: int, name: str = AUX_PREFIX) -> None:
    """``InceptionAux``: 5x5/3 average pool, 1x1 (128) and 5x5 (768) units, pool, linear classifier."""
    x = net.pool(x, 5, 3, name=f"{name}.pool")
    x = _basic(net, x, 128, 1, f"{name}.conv0")
    x = _basic(net, x, 768, 5, f"{name}.conv1", same=False)
    x = net.global_pool(x, name=f"{name}.avgpool")
    net.linear(x, classes, name=f"{name}.fc")


#: torchvision's Inception3 after the stem: (module name, module, keyword arguments)
V3_MODULES: list[tuple[str, Callable[..., Tensor], dict]] = [
    ("Mixed_5b", _v3_a, {"pool_features": 32}),
    ("Mixed_5c", _v3_a, {"pool_features": 64}),
    ("Mixed_5d", _v3_a, {"pool_features": 64}),
    ("Mixed_6a", _v3_b, {}),
    ("Mixed_6b", _v3_c, {"channels_7x7": 128}),
    ("Mixed_6c", _v3_c, {"channels_7x7": 160}),
    ("Mixed_6d", _v3_c, {"channels_7x7": 160}),
    ("Mixed_6e", _v3_c, {"channels_7x7": 192}),
    ("Mixed_7a", _v3_d, {}),
    ("Mixed_7b", _v3_e, {}),
    ("Mixed_7c", _v3_e, {}),
]
#: the auxiliary classifier reads this module's output (17x17x768)
V3_AUX_AFTER = "Mixed_6e"


def inception_v3(*, dataset: str, num_classes: int | None, aux: bool = True) -> Net:
    """torchvision's ``inception_v3``; ``aux`` keeps the auxiliary classifier (torchvision's default)."""
    c, _, k = dataset_input(dataset, num_classes)
    net = Net("inception_v3", (c, SIZE, SIZE), k)
    x = net.input()
    x = _basic(net, x, 32, 3, "Conv2d_1a_3x3", stride=2, same=False)
    x = _basic(net, x, 32, 3, "Conv2d_2a_3x3", same=False)
    x = _basic(net, x, 64, 3, "Conv2d_2b_3x3")
    x = net.pool(x, 3, 2, name="maxpool1")
    x = _basic(net, x, 80, 1, "Conv2d_3b_1x1")
    x = _basic(net, x, 192, 3, "Conv2d_4a_3x3", same=False)
    x = net.pool(x, 3, 2, name="maxpool2")
    for name, module, kw in V3_MODULES:
        x = module(net, x, name, **kw)
        if aux and name == V3_AUX_AFTER:
            with net.aux_branch():
                _v3_aux(net, x, k)
    x = net.global_pool(x, name="avgpool")
    net.linear(x, k, name="fc")
    return net


# -- Inception-v4 (timm / Cadene) -----------------------------------------------------------------------
def _v4_mixed3a(net: Net, x: Tensor, name: str) -> Tensor:
    p = net.pool(x, 3, 2, name=f"{name}.maxpool")
    y = _basic(net, x, 96, 3, f"{name}.conv", stride=2, same=False)
    return net.concat([p, y], name=f"{name}.cat")


def _v4_mixed4a(net: Net, x: Tensor, name: str) -> Tensor:
    k7 = _factorized(2, 7)
    b0 = _chain(net, x, [(64, 1), (96, 3)], f"{name}.branch0", last_same=False)
    b1 = _chain(net, x, [(64, 1), (64, k7[0]), (64, k7[1]), (96, 3)], f"{name}.branch1", last_same=False)
    return net.concat([b0, b1], name=f"{name}.cat")


def _v4_mixed5a(net: Net, x: Tensor, name: str) -> Tensor:
    y = _basic(net, x, 192, 3, f"{name}.conv", stride=2, same=False)
    p = net.pool(x, 3, 2, name=f"{name}.maxpool")
    return net.concat([y, p], name=f"{name}.cat")


def _v4_a(net: Net, x: Tensor, name: str) -> Tensor:
    b0 = _basic(net, x, 96, 1, f"{name}.branch0")
    b1 = _chain(net, x, [(64, 1), (96, 3)], f"{name}.branch1")
    b2 = _chain(net, x, [(64, 1), (96, 3), (96, 3)], f"{name}.branch2")
    b3 = _avgpool_conv(net, x, 96, f"{name}.branch3")
    return net.concat([b0, b1, b2, b3], name=f"{name}.cat")


def _v4_reduction_a(net: Net, x: Tensor, name: str) -> Tensor:
    b0 = _basic(net, x, 384, 3, f"{name}.branch0", stride=2, same=False)
    b1 = _chain(net, x, [(192, 1), (224, 3), (256, 3)], f"{name}.branch1", last_stride=2, last_same=False)
    b2 = net.pool(x, 3, 2, name=f"{name}.branch2")
    return net.concat([b0, b1, b2], name=f"{name}.cat")


def _v4_b(net: Net, x: Tensor, name: str) -> Tensor:
    b0 = _basic(net, x, 384, 1, f"{name}.branch0")
    k7 = _factorized(2, 7)
    b1 = _chain(net, x, [(192, 1), (224, k7[0]), (256, k7[1])], f"{name}.branch1")
    # the doubled 7x7 starts with 7x1 here
    k7d = [kk[::-1] for kk in _factorized(4, 7)]
    b2 = _chain(net, x, [(192, 1)] + list(zip([192, 224, 224, 256], k7d)), f"{name}.branch2")
    b3 = _avgpool_conv(net, x, 128, f"{name}.branch3")
    return net.concat([b0, b1, b2, b3], name=f"{name}.cat")


def _v4_reduction_b(net: Net, x: Tensor, name: str) -> Tensor:
    k7 = _factorized(2, 7)
    b0 = _chain(net, x, [(192, 1), (192, 3)], f"{name}.branch0", last_stride=2, last_same=False)
    b1 = _chain(net, x, [(256, 1), (256, k7[0]), (320, k7[1]), (320, 3)], f"{name}.branch1",
                last_stride=2, last_same=False)
    b2 = net.pool(x, 3, 2, name=f"{name}.branch2")
    return net.concat([b0, b1, b2], name=f"{name}.cat")


def _v4_c(net: Net, x: Tensor, name: str) -> Tensor:
    b0 = _basic(net, x, 256, 1, f"{name}.branch0")
    b1 = _basic(net, x, 384, 1, f"{name}.branch1_0")
    b1 = _split_1x3_3x1(net, b1, 256, f"{name}.branch1", ("_1a", "_1b"))
    b2 = _basic(net, x, 384, 1, f"{name}.branch2_0")
    k3 = _factorized(2, 3)
    b2 = _basic(net, b2, 448, k3[1], f"{name}.branch2_1")
    b2 = _basic(net, b2, 512, k3[0], f"{name}.branch2_2")
    b2 = _split_1x3_3x1(net, b2, 256, f"{name}.branch2", ("_3a", "_3b"))
    b3 = _avgpool_conv(net, x, 256, f"{name}.branch3")
    return net.concat([b0, b1, b2, b3], name=f"{name}.cat")


#: the paper's Figure 9: stem modules, then 4 x Inception-A, Reduction-A, 7 x Inception-B, Reduction-B,
#: 3 x Inception-C (timm's ``features`` after its three stem convs)
V4_MODULES: list[tuple[Callable[..., Tensor], int]] = [
    (_v4_mixed3a, 1), (_v4_mixed4a, 1), (_v4_mixed5a, 1),
    (_v4_a, 4), (_v4_reduction_a, 1), (_v4_b, 7), (_v4_reduction_b, 1), (_v4_c, 3),
]


def inception_v4(*, dataset: str, num_classes: int | None) -> Net:
    c, _, k = dataset_input(dataset, num_classes)
    net = Net("inception_v4", (c, SIZE, SIZE), k)
    x = net.input()
    x = _basic(net, x, 32, 3, "features.0", stride=2, same=False)
    x = _basic(net, x, 32, 3, "features.1", same=False)
    x = _basic(net, x, 64, 3, "features.2")
    i = 3
    for module, repeats in V4_MODULES:
        for _ in range(repeats):
            x = module(net, x, f"features.{i}")
            i += 1
    x = net.global_pool(x, name="global_pool")
    net.linear(x, k, name="last_linear")
    return net


register("inception_v3", family="inception",
         description="Inception-v3 (torchvision, 299x299, with the auxiliary classifier)",
         default_dataset="imagenet", datasets=("imagenet",))(inception_v3)
register("inception_v4", family="inception", description="Inception-v4 (timm / Cadene, 299x299)",
         default_dataset="imagenet", datasets=("imagenet",))(inception_v4)
