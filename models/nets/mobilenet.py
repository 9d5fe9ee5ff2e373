"""MobileNetV2 (Sandler et al. 2018), as torchvision writes it."""

from __future__ import annotations

from models.graph import Net, Tensor
from models.nets.registry import dataset_input, register

# expansion t, output channels c, repeats n, first stride s (the paper's Table 2)
SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1)]


def _cbr(net: Net, x: Tensor, out: int, k: int, stride: int, name: str, groups: int = 1,
         act: bool = True) -> Tensor:
    x = net.conv(x, out, k, stride=stride, padding=(k - 1) // 2, groups=groups, name=name)
    x = net.bn(x, name=f"{name}.bn")
    return net.relu(x) if act else x  # ReLU6


def mobilenet_v2(*, dataset: str, num_classes: int | None) -> Net:
    c, s, k = dataset_input(dataset, num_classes)
    net = Net("mobilenet_v2", (c, s, s), k)
    cifar = dataset != "imagenet"
    x = net.input()
    # CIFAR adaptation (common practice): stride 1 in the stem and in the second stage
    x = _cbr(net, x, 32, 3, 1 if cifar else 2, "features.0")
    i = 1
    for t, ch, n, s0 in SETTINGS:
        for r in range(n):
            stride = s0 if r == 0 else 1
            if cifar and ch == 24:
                stride = 1
            name = f"features.{i}"
            hidden = x.c * t
            y = x
            if t != 1:
                y = _cbr(net, y, hidden, 1, 1, f"{name}.expand")
            y = _cbr(net, y, hidden, 3, stride, f"{name}.dw", groups=hidden)
            y = _cbr(net, y, ch, 1, 1, f"{name}.project", act=False)
            x = net.add(y, x, name=f"{name}.add") if stride == 1 and x.c == ch else y
            i += 1
    x = _cbr(net, x, 1280, 1, 1, f"features.{i}")
    x = net.global_pool(x)
    net.linear(x, k, name="classifier.1")
    return net


register("mobilenet_v2", family="mobilenet", description="MobileNetV2 1.0 (torchvision)")(mobilenet_v2)
