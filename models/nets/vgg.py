"""VGG (Simonyan & Zisserman 2015), as torchvision writes it (no batch norm)."""

from __future__ import annotations

from models.graph import Net
from models.nets.registry import dataset_input, register

# numbers are conv widths, "M" a 2x2 max-pool (torchvision's cfgs "B", "D", "E")
CFGS = {
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


def vgg(name: str, *, dataset: str, num_classes: int | None) -> Net:
    c, s, k = dataset_input(dataset, num_classes)
    net = Net(name, (c, s, s), k)
    x = net.input()
    i = 0  # torchvision's index into `features` (conv, ReLU and pool each take one)
    for v in CFGS[name]:
        if v == "M":
            x = net.pool(x, 2, 2, name=f"features.{i}")
            i += 1
        else:
            x = net.conv(x, v, 3, padding=1, bias=True, name=f"features.{i}")
            x = net.relu(x, name=f"features.{i + 1}")
            i += 2
    if dataset == "imagenet":
        # torchvision: adaptive average pool to 7x7, then 4096-4096-classes
        x = net.pool(x, x.h // 7, name="avgpool") if x.h != 7 else x
        flat = net.linear(_flatten(x), 4096, name="classifier.0")
        flat = net.relu(flat)
        flat = net.linear(flat, 4096, name="classifier.3")
        flat = net.relu(flat)
        net.linear(flat, k, name="classifier.6")
    else:
        # CIFAR adaptation (common practice): the 1x1x512 feature map feeds one linear classifier
        net.linear(_flatten(x), k, name="classifier")
    return net


def _flatten(x):
    from models.graph import Tensor

    return Tensor(x.c * x.h * x.w, 1, 1, x.grad)


for _n in CFGS:
    register(_n, family="vgg", description=f"{_n.upper()} (torchvision, no BN)")(
        lambda *, _n=_n, **kw: vgg(_n, **kw)
    )
