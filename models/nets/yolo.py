"""YOLOv3 (Redmon & Farhadi 2018): the Darknet-53 backbone and three detection scales, as darknet's
``yolov3.cfg`` writes it.

Every convolution is conv (no bias) + batch norm + leaky ReLU, with "same" padding, except the three 1x1
output convolutions, which have a bias and no norm or activation and give ``3 * (classes + 5)`` channels per
cell (three anchors, each with four box coordinates, an objectness score and the class scores).

* Darknet-53: a 3x3 conv (32), then five stages, each a stride-2 3x3 conv doubling the width followed by
  residual blocks (1x1 conv to half the width, 3x3 conv back, shortcut add); 1, 2, 8, 8, 4 blocks.
* Head, from the coarsest scale (stride 32) to the finest (stride 8): five convs alternating 1x1 (w) and
  3x3 (2w), a 3x3 (2w) and the 1x1 output conv; w = 512, 256, 128. Between scales, the fifth conv's output
  goes through a 1x1 conv (w/2) and a 2x nearest upsample and is concatenated with the backbone stage of
  that resolution (darknet's ``route`` layers).
* The ``[yolo]`` layers' logistic activation of the outputs is kept as a vector op; the loss itself and box
  decoding are not modeled.

Data set: ``native`` only: COCO-style detection at the native 416x416 input (``size`` may set another
multiple of 32: darknet's 320 and 608 variants use the same cfg), ``num_classes`` (default 80, COCO) sets the
output width. The zoo's image-classification data sets do not apply to a detector.
"""

from __future__ import annotations

from models.graph import Net, Tensor
from models.nets.registry import register

#: native input size and COCO's class count
SIZE = 416
CLASSES = 80
ANCHORS_PER_SCALE = 3
#: residual blocks per Darknet-53 stage (the stem conv has 32 channels, stage i ends at 64 * 2**i)
DARKNET53_BLOCKS = (1, 2, 8, 8, 4)
STEM_WIDTH = 32
#: how many of the coarsest backbone stages feed the head, one detection scale each
SCALES = 3


def _cbl(net: Net, x: Tensor, out: int, k: int, name: str, stride: int = 1) -> Tensor:
    """darknet's ``[convolutional]`` with ``batch_normalize=1`` and ``activation=leaky``."""
    x = net.conv(x, out, k, stride=stride, padding=k // 2, name=name)
    x = net.bn(x, name=f"{name}.bn")
    return net.relu(x, name=f"{name}.leaky")


def _darknet53(net: Net, x: Tensor) -> list[Tensor]:
    """The backbone; returns every stage's output (strides 2, 4, 8, 16, 32)."""
    x = _cbl(net, x, STEM_WIDTH, 3, "backbone.conv0")
    outs = []
    for s, blocks in enumerate(DARKNET53_BLOCKS):
        width = 2 * STEM_WIDTH * 2**s
        x = _cbl(net, x, width, 3, f"backbone.stage{s + 1}.down", stride=2)
        for b in range(blocks):
            name = f"backbone.stage{s + 1}.{b}"
            y = _cbl(net, x, width // 2, 1, f"{name}.conv1")
            y = _cbl(net, y, width, 3, f"{name}.conv2")
            x = net.add(x, y, name=f"{name}.shortcut")
        outs.append(x)
    return outs


def yolov3(*, dataset: str, num_classes: int | None, size: int = SIZE) -> Net:
    if size % 32 or size < 32:
        raise ValueError(f"yolov3: input size must be a positive multiple of 32, got {size}")
    k = num_classes or CLASSES
    out_channels = ANCHORS_PER_SCALE * (k + 5)
    net = Net("yolov3", (3, size, size), k)
    feats = _darknet53(net, net.input())
    route = None
    # coarsest scale first; scale i reads backbone stage -1-i
    for i in range(SCALES):
        x = feats[-1 - i]
        w = x.c // 2
        name = f"head.p{5 - i}"
        if route is not None:
            r = _cbl(net, route, w, 1, f"{name}.reduce")
            r = net.upsample(r, 2, name=f"{name}.upsample")
            x = net.concat([r, x], name=f"{name}.route")
        for j in range(5):
            x = _cbl(net, x, w if j % 2 == 0 else 2 * w, 1 if j % 2 == 0 else 3, f"{name}.conv{j + 1}")
        route = x
        y = _cbl(net, x, 2 * w, 3, f"{name}.conv6")
        y = net.conv(y, out_channels, 1, bias=True, name=f"{name}.out")
        net.relu(y, name=f"{name}.yolo")  # the [yolo] layer's logistic activation
    return net


register("yolov3", family="yolo", description="YOLOv3-416 (darknet yolov3.cfg, Darknet-53, 3 scales)",
         default_dataset="native", datasets=("native",))(yolov3)
