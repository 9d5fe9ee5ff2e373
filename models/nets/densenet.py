"""DenseNet-BC (Huang et al. 2017), as torchvision writes it."""

from __future__ import annotations

from models.graph import Net, Tensor
from models.nets.registry import dataset_input, register

# name -> (growth rate, layers per dense block, stem width)
CONFIGS = {
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet161": (48, (6, 12, 36, 24), 96),
    "densenet201": (32, (6, 12, 48, 32), 64),
}
BN_SIZE = 4  # bottleneck width = BN_SIZE * growth rate


def _bn_relu_conv(net: Net, x: Tensor, out: int, k: int, name: str) -> Tensor:
    x = net.relu(net.bn(x, name=f"{name}.norm"))
    return net.conv(x, out, k, padding=k // 2, name=f"{name}.conv")


def densenet(name: str, *, dataset: str, num_classes: int | None) -> Net:
    c, s, k = dataset_input(dataset, num_classes)
    growth, blocks, stem = CONFIGS[name]
    net = Net(name, (c, s, s), k)
    x = net.input()
    if dataset == "imagenet":
        x = net.conv(x, stem, 7, stride=2, padding=3, name="features.conv0")
        x = net.relu(net.bn(x, name="features.norm0"))
        x = net.pool(x, 3, 2, 1, name="features.pool0")
    else:
        # CIFAR adaptation: a 3x3 stride-1 stem, no max-pool
        x = net.conv(x, stem, 3, padding=1, name="features.conv0")
        x = net.relu(net.bn(x, name="features.norm0"))
    for bi, n in enumerate(blocks):
        features = [x]
        for li in range(n):
            ln = f"features.denseblock{bi + 1}.denselayer{li + 1}"
            inp = features[0] if len(features) == 1 else net.concat(features, name=f"{ln}.cat")
            y = _bn_relu_conv(net, inp, BN_SIZE * growth, 1, f"{ln}.1")
            y = _bn_relu_conv(net, y, growth, 3, f"{ln}.2")
            features.append(y)
        x = net.concat(features, name=f"features.denseblock{bi + 1}.out")
        if bi != len(blocks) - 1:
            tn = f"features.transition{bi + 1}"
            x = _bn_relu_conv(net, x, x.c // 2, 1, tn)
            x = net.pool(x, 2, 2, name=f"{tn}.pool")
    x = net.relu(net.bn(x, name="features.norm5"))
    x = net.global_pool(x)
    net.linear(x, k, name="classifier")
    return net


for _n in CONFIGS:
    register(_n, family="densenet", description=f"DenseNet-{_n[8:]} (torchvision)")(
        lambda *, _n=_n, **kw: densenet(_n, **kw)
    )
