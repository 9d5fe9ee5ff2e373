"""Write ResNet-18 as an ONNX model with the onnx helper API (no torch), the way torchvision defines it.

Independent of the zoo's builder (models/nets/resnet.py): written from torchvision's ResNet-18 (basic
blocks [2, 2, 2, 2], 7x7/2 stem + 3x3/2 max-pool for ImageNet, a 3x3/1 stem without max-pool for CIFAR),
exported as torch.onnx would (Conv with bias=False, BatchNormalization, Relu, Add, GlobalAveragePool,
Flatten, Gemm). Weights are zeros: only shapes matter to the importer.

    python tests/data/onnx/make_resnet18.py OUT.onnx [imagenet|cifar10]
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build(dataset: str = "imagenet") -> onnx.ModelProto:
    size, classes = (224, 1000) if dataset == "imagenet" else (32, 10)
    nodes, inits = [], []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name))
        return name

    def conv_bn(x: str, cin: int, cout: int, k: int, stride: int, name: str, relu: bool = True) -> str:
        w = weight(f"{name}.weight", (cout, cin, k, k))
        nodes.append(helper.make_node("Conv", [x, w], [f"{name}.out"], name=name, kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[k // 2] * 4))
        bn = [weight(f"{name}.bn.{p}", (cout,)) for p in ("scale", "bias", "mean", "var")]
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.out", *bn], [f"{name}.bn.out"],
                                      name=f"{name}.bn"))
        y = f"{name}.bn.out"
        if relu:
            nodes.append(helper.make_node("Relu", [y], [f"{name}.relu.out"], name=f"{name}.relu"))
            y = f"{name}.relu.out"
        return y

    x = "input"
    if dataset == "imagenet":
        x = conv_bn(x, 3, 64, 7, 2, "conv1")
        nodes.append(helper.make_node("MaxPool", [x], ["maxpool.out"], name="maxpool", kernel_shape=[3, 3],
                                      strides=[2, 2], pads=[1, 1, 1, 1]))
        x = "maxpool.out"
    else:
        x = conv_bn(x, 3, 64, 3, 1, "conv1")
    cin = 64
    for stage in range(4):
        width = 64 * 2**stage
        for b in range(2):
            stride = 2 if stage > 0 and b == 0 else 1
            name = f"layer{stage + 1}.{b}"
            y = conv_bn(x, cin, width, 3, stride, f"{name}.conv1")
            y = conv_bn(y, width, width, 3, 1, f"{name}.conv2", relu=False)
            sc = x
            if stride != 1 or cin != width:
                sc = conv_bn(x, cin, width, 1, stride, f"{name}.downsample", relu=False)
            nodes.append(helper.make_node("Add", [y, sc], [f"{name}.add.out"], name=f"{name}.add"))
            nodes.append(helper.make_node("Relu", [f"{name}.add.out"], [f"{name}.out"], name=f"{name}.relu"))
            x, cin = f"{name}.out", width
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["avgpool.out"], name="avgpool"))
    nodes.append(helper.make_node("Flatten", ["avgpool.out"], ["flat"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", weight("fc.weight", (classes, 512)),
                                           weight("fc.bias", (classes,))], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes, f"resnet18_{dataset}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="dse-tests")


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "resnet18.onnx"
    model = build(sys.argv[2] if len(sys.argv) > 2 else "imagenet")
    onnx.checker.check_model(model)
    onnx.save(model, out)
    print(out)
