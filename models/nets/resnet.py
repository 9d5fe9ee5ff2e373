"""ResNet (He et al. 2016), as torchvision writes it (v1.5: the stride sits on the bottleneck's 3x3)."""

from __future__ import annotations

from models.graph import Net, Tensor
from models.nets.registry import dataset_input, register

# depth -> (block kind, blocks per stage)
DEPTHS = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
    101: ("bottleneck", (3, 4, 23, 3)),
    152: ("bottleneck", (3, 8, 36, 3)),
}
EXPANSION = {"basic": 1, "bottleneck": 4}


def _conv_bn(net: Net, x: Tensor, out: int, k: int, stride: int, name: str, relu: bool = True) -> Tensor:
    x = net.conv(x, out, k, stride=stride, padding=k // 2, name=name)
    x = net.bn(x, name=f"{name}.bn")
    return net.relu(x) if relu else x


def _block(net: Net, x: Tensor, kind: str, width: int, stride: int, name: str) -> Tensor:
    out = width * EXPANSION[kind]
    if kind == "basic":
        y = _conv_bn(net, x, width, 3, stride, f"{name}.conv1")
        y = _conv_bn(net, y, width, 3, 1, f"{name}.conv2", relu=False)
    else:
        y = _conv_bn(net, x, width, 1, 1, f"{name}.conv1")
        y = _conv_bn(net, y, width, 3, stride, f"{name}.conv2")
        y = _conv_bn(net, y, out, 1, 1, f"{name}.conv3", relu=False)
    sc = x
    if stride != 1 or x.c != out:
        sc = _conv_bn(net, x, out, 1, stride, f"{name}.downsample", relu=False)
    return net.relu(net.add(y, sc, name=f"{name}.add"))


def resnet(depth: int, *, dataset: str, num_classes: int | None) -> Net:
    c, s, k = dataset_input(dataset, num_classes)
    kind, blocks = DEPTHS[depth]
    net = Net(f"resnet{depth}", (c, s, s), k)
    x = net.input()
    if dataset == "imagenet":
        x = net.conv(x, 64, 7, stride=2, padding=3, name="conv1")
        x = net.relu(net.bn(x, name="bn1"))
        x = net.pool(x, 3, 2, 1, name="maxpool")
    else:
        # CIFAR adaptation (He et al. sec. 4.2 style): a 3x3 stride-1 stem and no max-pool
        x = net.conv(x, 64, 3, stride=1, padding=1, name="conv1")
        x = net.relu(net.bn(x, name="bn1"))
    for stage, n in enumerate(blocks):
        width = 64 * 2**stage
        for b in range(n):
            stride = 2 if stage > 0 and b == 0 else 1
            x = _block(net, x, kind, width, stride, f"layer{stage + 1}.{b}")
    x = net.global_pool(x, name="avgpool")
    net.linear(x, k, name="fc")
    return net


for _d in DEPTHS:
    register(f"resnet{_d}", family="resnet", description=f"ResNet-{_d} (torchvision v1.5)")(
        lambda *, _d=_d, **kw: resnet(_d, **kw)
    )
