"""The workload zoo against published parameter and MAC counts, and the lowering's invariants."""

from __future__ import annotations

import numpy as np
import pytest

from models.graph import OPTIMIZER_STATE, PHASES, Net, Tensor
from models.zoo import DATASETS, build, dataset_input, entry, names, register

# (model, params, forward GMACs of conv+linear per sample, source). torchvision's model documentation
# (https://pytorch.org/vision/stable/models.html, "Table of all available classification weights"):
# its "GFLOPS" column counts multiply-accumulates; its params include batch-norm scale and shift.
TORCHVISION = [
    ("vgg13", 133_047_848, 11.31, "torchvision VGG13_Weights.IMAGENET1K_V1"),
    ("vgg16", 138_357_544, 15.47, "torchvision VGG16_Weights.IMAGENET1K_V1"),
    ("vgg19", 143_667_240, 19.63, "torchvision VGG19_Weights.IMAGENET1K_V1"),
    ("resnet18", 11_689_512, 1.81, "torchvision ResNet18_Weights.IMAGENET1K_V1"),
    ("resnet34", 21_797_672, 3.66, "torchvision ResNet34_Weights.IMAGENET1K_V1"),
    ("resnet50", 25_557_032, 4.09, "torchvision ResNet50_Weights.IMAGENET1K_V1"),
    ("resnet101", 44_549_160, 7.80, "torchvision ResNet101_Weights.IMAGENET1K_V1"),
    ("resnet152", 60_192_808, 11.51, "torchvision ResNet152_Weights.IMAGENET1K_V1"),
    ("densenet121", 7_978_856, 2.83, "torchvision DenseNet121_Weights.IMAGENET1K_V1"),
    ("densenet161", 28_681_000, 7.73, "torchvision DenseNet161_Weights.IMAGENET1K_V1"),
    ("densenet201", 20_013_928, 4.29, "torchvision DenseNet201_Weights.IMAGENET1K_V1"),
    ("mobilenet_v2", 3_504_872, 0.30, "torchvision MobileNet_V2_Weights.IMAGENET1K_V1"),
    # params include the auxiliary classifier; MACs are the forward without it (299x299)
    ("inception_v3", 27_161_264, 5.71, "torchvision Inception_V3_Weights.IMAGENET1K_V1"),
]

# Models whose reference is not torchvision's table: (model, params, tolerance on params, GMACs, source).
OTHER = [
    # timm's model card for inception_v4.tf_in1k: 42.7 M params (rounded to 0.1 M: half of it is the
    # tolerance), 12.3 GMACs at 299x299
    ("inception_v4", 42.7e6, 0.05e6, 12.3, "timm inception_v4.tf_in1k model card"),
    # darknet prints 65.864 BFLOPs (2 x MACs, conv layers) for yolov3.cfg at 416; ultralytics' YOLOv3
    # summary: 61,949,149 parameters (COCO, 80 classes), an exact count
    ("yolov3", 61_949_149, 0, 65.864 / 2, "darknet yolov3.cfg / ultralytics YOLOv3 summary"),
]


@pytest.mark.parametrize("name,params,gmacs,source", TORCHVISION, ids=[t[0] for t in TORCHVISION])
def test_torchvision_published_counts(name, params, gmacs, source):
    net = build(name, dataset="imagenet")
    assert net.params == params, source  # torchvision's parameter counts are exact
    assert net.macs / 1e9 == pytest.approx(gmacs, rel=0.02), source  # its GFLOPS are rounded


@pytest.mark.parametrize("name,params,tol,gmacs,source", OTHER, ids=[t[0] for t in OTHER])
def test_other_published_counts(name, params, tol, gmacs, source):
    net = build(name)
    assert abs(net.params - params) <= tol, source
    assert net.macs / 1e9 == pytest.approx(gmacs, rel=0.02), source


def test_transformer_base_closed_form():
    """Vaswani et al. 2017 give only "65 M" for the base model; check the exact count from its shape.

    Shared 37,000 x 512 embedding (source, target and pre-softmax projection tied), 6 encoder layers
    (self-attention: 4 projections with bias; FFN 512-2048-512 with biases; 2 layer norms) and 6 decoder
    layers (self- and cross-attention, FFN, 3 layer norms). The paper's 65 M is 3% above this count.
    """
    d, f, v, n = 512, 2048, 37_000, 6
    attn = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    enc = attn + ffn + 2 * 2 * d
    dec = 2 * attn + ffn + 3 * 2 * d
    net = build("transformer_base")
    assert net.params == v * d + n * enc + n * dec == 63_082_496
    assert net.params == pytest.approx(65e6, rel=0.03)
    # QK^T and AV per head are weight-free batched matmuls: counted apart from linear layers
    assert net.matmul_macs > 0
    net64 = build("transformer_base", src_len=64, tgt_len=32)
    assert net64.params == net.params and net64.macs < net.macs


def test_zoo_has_the_required_models():
    required = {"vgg13", "vgg16", "vgg19", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
                "densenet121", "densenet161", "densenet201", "inception_v3", "inception_v4",
                "mobilenet_v2", "yolov3", "transformer_base"}
    assert required <= set(names())


@pytest.mark.parametrize("name", names())
def test_every_registered_model_builds_for_each_of_its_datasets(name):
    e = entry(name)
    assert e.name == name and e.family and e.description
    assert e.default_dataset in e.datasets and set(e.datasets) <= set(DATASETS) | {"native"}
    for ds in e.datasets:
        net = build(name, dataset=ds)
        assert net.params > 0 and net.macs > 0 and net.layers
        if ds in DATASETS:  # an image data set: its channels and classes, or the classes asked for
            c, _, k = DATASETS[ds]
            assert net.input_shape[0] == c and net.num_classes == k
            assert build(name, dataset=ds, num_classes=7).num_classes == 7
    with pytest.raises(ValueError, match="supports datasets|takes its own input only"):
        build(name, dataset="mnist")


def test_a_model_is_one_registered_builder():
    from models.nets.registry import ENTRIES

    @register("test_tiny", family="test", description="one linear layer (test only)")
    def _tiny(*, dataset, num_classes):
        c, s, k = dataset_input(dataset, num_classes)
        net = Net("test_tiny", (c, s, s), k)
        net.linear(Tensor(c * s * s, 1, 1, False), k, name="fc")
        return net

    try:
        assert "test_tiny" in names() and entry("test_tiny").builder is _tiny
        assert build("test_tiny", dataset="cifar10").params == 3 * 32 * 32 * 10 + 10
        with pytest.raises(ValueError, match="registered twice"):
            register("test_tiny", family="test", description="again")(_tiny)
    finally:
        del ENTRIES["test_tiny"]
    assert "test_tiny" not in names()


@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("batch", [1, 3])
def test_lowering_invariants(name, batch):
    """Forward, input- and weight-gradient GEMMs of a layer do the same MACs; shapes are positive."""
    net = build(name)
    ops = net.training_ops(batch)
    assert set(ops.phase) <= set(PHASES)
    g = ops.mask("fwd", "igrad", "wgrad")
    for col in (ops.M, ops.K, ops.N, ops.repeat):
        assert col.dtype.kind == "i"
        assert (col[g] > 0).all()
        assert (col[~g] == 0).all()
    assert (ops.vec_elems[~g] > 0).all()
    for li in np.unique(ops.layer[g]):
        sel = g & (ops.layer == li)
        macs = ops.macs[sel]
        assert (macs == macs[0]).all(), net.layers[li].name
    # a layer reading the network input has no input gradient; every other GEMM layer has one
    first = {i for i, l in enumerate(net.layers) if not l.needs_igrad}
    igrad_layers = set(ops.layer[ops.phase == "igrad"].tolist())
    gemm_layers = {i for i, l in enumerate(net.layers) if l.is_gemm}
    assert igrad_layers == gemm_layers - first
    assert first, "some layer must read the network input"
    # forward MACs scale with the batch and equal the per-sample count times the batch
    fwd = ops.phase == "fwd"
    assert ops.macs[fwd].sum() == batch * (net.macs + net.aux_macs + net.matmul_macs)
    # the weight update touches every trainable parameter exactly once (tied weights included)
    per_param = 3 + 2 * OPTIMIZER_STATE[ops.optimizer]
    assert ops.vec_elems[ops.phase == "update"].sum() == net.params * per_param
    # only forward rows stash activations
    assert (ops.stash_bytes[~(fwd | (ops.phase == "fwd_vec"))] == 0).all()


def test_gradient_gemm_shapes_follow_the_convention():
    """Linear layer with batch m, k inputs, n outputs: fwd (m,k,n), igrad (m,n,k), wgrad (k,m,n)."""
    net = build("vgg16")
    ops = net.training_ops(8)
    fc = next(i for i, l in enumerate(net.layers) if l.name == "classifier.3")
    rows = {p: (ops.M[j], ops.K[j], ops.N[j]) for j, p in enumerate(ops.phase) if ops.layer[j] == fc}
    assert rows["fwd"] == (8, 4096, 4096)
    assert rows["igrad"] == (8, 4096, 4096)
    conv = next(i for i, l in enumerate(net.layers) if l.name == "features.2")  # 64->64, 3x3, 224x224
    rows = {p: (ops.M[j], ops.K[j], ops.N[j]) for j, p in enumerate(ops.phase)
            if ops.layer[j] == conv and p in ("fwd", "igrad", "wgrad")}
    assert rows == {"fwd": (8 * 224 * 224, 576, 64), "igrad": (8 * 224 * 224, 64, 576),
                    "wgrad": (576, 8 * 224 * 224, 64)}


def test_depthwise_conv_is_grouped():
    net = build("mobilenet_v2")
    dw = next(l for l in net.layers if l.name == "features.2.dw")
    # 96 channels, stride 2 from 112x112 to 56x56, one 3x3 filter per channel
    assert dw.gemm == (56 * 56, 9, 1, 96)
    assert dw.params == 96 * 9


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_STATE))
def test_weight_update_traffic_grows_with_optimizer_state(optimizer):
    net = build("resnet18")
    ops = net.training_ops(2, optimizer=optimizer)
    upd = ops.vec_elems[ops.phase == "update"].sum()
    assert upd == net.params * (3 + 2 * OPTIMIZER_STATE[optimizer])


@pytest.mark.parametrize("dataset,classes", [("cifar10", 10), ("cifar100", 100)])
def test_cifar_inputs(dataset, classes):
    for name in ["vgg16", "resnet50", "densenet121", "mobilenet_v2"]:
        net = build(name, dataset=dataset)
        assert net.input_shape == (3, 32, 32)
        assert net.layers[-1].out[0] == classes
        assert net.params > 0 and net.macs > 0


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="unknown model 'nope'.*resnet50"):
        build("nope")
    with pytest.raises(ValueError, match="dataset"):
        build("resnet50", dataset="mnist")
    with pytest.raises(ValueError, match="batch"):
        build("resnet18").training_ops(0)
    with pytest.raises(ValueError, match="optimizer"):
        build("resnet18").training_ops(2, optimizer="lion")


def test_a_model_with_one_native_input_says_so_when_given_a_dataset():
    """The message read "model 'yolov3' supports datasets native"."""
    with pytest.raises(ValueError, match="takes its own input only") as e:
        build("yolov3", dataset="cifar10")
    assert "supports datasets native" not in str(e.value)
