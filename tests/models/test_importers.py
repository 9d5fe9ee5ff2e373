"""Custom workloads: ONNX models and SCALE-Sim topologies lowered like zoo models."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from accel import Hardware, gemm_cost
from models import zoo
from models.importers import load_topology, to_scalesim
from repo_scripts import load_script

onnx = pytest.importorskip("onnx")  # in the test extra; CI always has it
from onnx import TensorProto, helper, numpy_helper  # noqa: E402 - only once importorskip has found onnx

DATA = Path(__file__).resolve().parents[1] / "data"
COLUMNS = ("layer", "phase", "M", "K", "N", "repeat", "vec_elems", "stash_bytes")


def _exporter():
    return load_script(DATA / "onnx" / "make_resnet18.py")


@pytest.fixture(scope="module")
def resnet18_onnx(tmp_path_factory):
    mod = _exporter()
    out = {}
    for ds in ("imagenet", "cifar10"):
        p = tmp_path_factory.mktemp("onnx") / f"resnet18_{ds}.onnx"
        model = mod.build(ds)
        onnx.checker.check_model(model)
        onnx.save(model, p)
        out[ds] = p
    return out


@pytest.mark.parametrize("dataset", ["imagenet", "cifar10"])
def test_onnx_resnet18_has_the_zoo_parameters_macs_and_training_ops(resnet18_onnx, dataset):
    ours = zoo.build("resnet18", dataset=dataset)
    net = zoo.build(str(resnet18_onnx[dataset]))
    assert net.params == ours.params and net.macs == ours.macs
    if dataset == "imagenet":  # torchvision's published figures, independently of the zoo
        assert net.params == 11_689_512
        assert net.macs == pytest.approx(1.81e9, rel=0.01)
    assert net.num_classes == ours.num_classes and net.input_shape == ours.input_shape
    a, b = ours.training_ops(16), net.training_ops(16)
    for c in COLUMNS:
        assert np.array_equal(getattr(a, c), getattr(b, c)), c


def _graph(nodes, inits, in_shape, out_name, out_shape, path: Path) -> Path:
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
                          initializer=[numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in inits])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_onnx_unsupported_op_is_one_line_naming_it(tmp_path):
    p = _graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                helper.make_node("Resize", ["y", "", "scales"], ["z"], name="up")],
               [("w", (8, 3, 3, 3)), ("scales", (4,))], [1, 3, 8, 8], "z", None, tmp_path / "m.onnx")
    with pytest.raises(ValueError) as e:
        zoo.build(str(p))
    msg = str(e.value)
    assert "Resize" in msg and "'up'" in msg and "\n" not in msg


def test_onnx_linear_and_concat_and_bias_add(tmp_path):
    """A tiny branchy model: conv -> (relu, sigmoid) -> concat -> pool -> flatten -> MatMul + bias Add."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Sigmoid", ["c"], ["s"], name="sig"),
             helper.make_node("Concat", ["r", "s"], ["cat"], name="cat", axis=1),
             helper.make_node("AveragePool", ["cat"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fcw"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "fcb"], ["y"], name="bias")]
    p = _graph(nodes, [("w", (6, 3, 3, 3)), ("b", (6,)), ("fcw", (12 * 4 * 4, 5)), ("fcb", (5,))],
               [2, 3, 16, 16], "y", [2, 5], tmp_path / "branchy.onnx")
    net = zoo.build(str(p))
    assert net.params == 6 * 27 + 6 + 192 * 5 + 5
    assert net.macs == 8 * 8 * 27 * 6 + 192 * 5
    assert net.num_classes == 5
    assert [l.kind for l in net.layers] == ["conv", "act", "act", "concat", "pool", "linear", "eltwise"]


def test_onnx_parameters_are_the_initializers_elements(tmp_path):
    """Found by probing: a weight used by two convolutions counted twice (and updated twice); a Gemm's bias C
    counted N elements whatever its shape (and when it was an activation); BatchNormalization over a
    (batch, tokens, features) tensor counted the features, where ONNX normalizes axis 1 (the tokens)."""
    shared = _graph([helper.make_node("Conv", ["x", "w"], ["a"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                     helper.make_node("Conv", ["a", "w"], ["y"], name="c2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                    [("w", (4, 4, 3, 3))], [1, 4, 6, 6], "y", None, tmp_path / "shared.onnx")
    net = zoo.build(str(shared))
    ops = net.training_ops(2)
    assert net.params == 144 and (ops.phase == "update").sum() == 1 and (ops.phase == "wgrad").sum() == 2
    gemm = _graph([helper.make_node("Gemm", ["x", "w1", "c1"], ["h"], name="g1", transB=1),
                   helper.make_node("Gemm", ["h", "w2", "h"], ["y"], name="g2")],
                  [("w1", (10, 48)), ("c1", (1,)), ("w2", (10, 10))], [1, 48], "y", None, tmp_path / "gemm.onnx")
    assert zoo.build(str(gemm)).params == 480 + 1 + 100  # a (1,) bias: 1 element; an activation C: none
    bn = _graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                 helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"], name="bn")],
                [("w", (6, 5)), ("s", (4,)), ("b", (4,)), ("m", (4,)), ("v", (4,))], [1, 4, 6], "y", None,
                tmp_path / "bn.onnx")
    assert zoo.build(str(bn)).params == 30 + 2 * 4


def test_onnx_a_sum_needs_an_input_gradient_when_any_operand_does(tmp_path):
    """An Add or Concat whose first operand is the network input took the input's "no gradient" for the whole
    op: the same network with the operands swapped cost 1,200 backward vector elements instead of 3,300."""
    def build(order, name):
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                 helper.make_node("Add", order(["x", "c"]), ["a"], name="add"),
                 helper.make_node("Concat", order(["x", "a"]), ["cat"], name="cat", axis=1),
                 helper.make_node("Conv", ["cat", "w2"], ["y"], name="conv2", kernel_shape=[1, 1])]
        return zoo.build(str(_graph(nodes, [("w", (3, 3, 3, 3)), ("w2", (2, 6, 1, 1))], [1, 3, 5, 5], "y", None,
                                    tmp_path / name)))
    a, b = build(list, "xfirst.onnx"), build(lambda v: v[::-1], "xlast.onnx")
    oa, ob = a.training_ops(4), b.training_ops(4)
    back = [int(o.vec_elems[o.phase == "bwd_vec"].sum()) for o in (oa, ob)]
    assert back[0] == back[1] == 3300


@pytest.mark.parametrize("case, message", [
    ("prelu", r"node 'p' \(PRelu\): PRelu's slope must be an initializer"),
    ("pool1d", r"node 'p' \(MaxPool\): only 2-D pooling"),
    ("tokens", r"node 'c' \(Concat\): only concatenation over channels"),
    ("empty", r"the file is empty, not an ONNX model"),
])
def test_onnx_input_it_cannot_read_is_one_line_naming_the_node(tmp_path, case, message):
    """Found by probing: a PRelu whose slope is an activation was an internal KeyError; 1-D pooling a bare
    unpacking error; a Concat over the tokens of a (batch, tokens, features) tensor was taken for channels."""
    p = tmp_path / f"{case}.onnx"
    if case == "prelu":
        _graph([helper.make_node("Conv", ["x", "w"], ["c"], name="c", kernel_shape=[1, 1]),
                helper.make_node("PRelu", ["c", "x"], ["y"], name="p")], [("w", (3, 3, 1, 1))], [1, 3, 4, 4],
               "y", None, p)
    elif case == "pool1d":
        _graph([helper.make_node("MaxPool", ["x"], ["h"], name="p", kernel_shape=[2]),
                helper.make_node("MatMul", ["h", "w"], ["y"], name="mm")], [("w", (7, 2))], [1, 3, 8], "y", None, p)
    elif case == "tokens":
        _graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                helper.make_node("Concat", ["h", "h"], ["y"], name="c", axis=1)], [("w", (8, 8))], [1, 16, 8],
               "y", None, p)
    else:
        p.write_bytes(b"")
    with pytest.raises(ValueError, match=message) as e:
        zoo.build(str(p))
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_onnx_asymmetric_padding_is_refused(tmp_path):
    p = _graph([helper.make_node("Conv", ["x", "w"], ["y"], name="c", kernel_shape=[3, 3], pads=[0, 0, 1, 1])],
               [("w", (4, 3, 3, 3))], [1, 3, 8, 8], "y", None, tmp_path / "pad.onnx")
    with pytest.raises(ValueError, match="asymmetric padding"):
        zoo.build(str(p))


HW = [Hardware(rows=16, cols=16, dataflow="ws"), Hardware(rows=32, cols=8, dataflow="os"),
      Hardware(rows=64, cols=64, dataflow="is")]


def _cycles(ops, hw, phases=("fwd", "igrad", "wgrad")) -> dict:
    out = {}
    for ph in phases:
        m = ops.phase == ph
        out[ph] = float(gemm_cost(ops.M[m], ops.K[m], ops.N[m], ops.repeat[m], hw=hw).compute_cycles.sum())
    return out


def _same_forward(a, b) -> None:
    """Two lowerings run the same forward GEMMs: the same MACs, and the same compute cycles on every array."""
    assert a.macs[a.phase == "fwd"].sum() == b.macs[b.phase == "fwd"].sum()
    for hw in HW:
        assert _cycles(a, hw, ("fwd",)) == _cycles(b, hw, ("fwd",))


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", "transformer_base"])
def test_scalesim_gemm_round_trip_gives_identical_compute_cycles(tmp_path, model):
    """The topology of a batch-8 step, read back as a workload and lowered at batch 1, runs the same forward
    GEMMs (groups and attention heads as separate rows): identical compute cycles on every array."""
    net = zoo.build(model, dataset=None if model == "transformer_base" else "cifar10")
    p = tmp_path / f"{model}.csv"
    p.write_text(to_scalesim(net, batch=8, layout="gemm"))
    back = load_topology(p)
    _same_forward(net.training_ops(8), back.training_ops(1))


def test_scalesim_per_sample_topology_lowers_like_the_zoo_model(tmp_path):
    """Convolutions fold the batch into M, so a batch-1 topology lowered at batch 8 is the zoo's batch-8 step:
    forward, input-gradient and weight-gradient GEMMs alike."""
    net = zoo.build("resnet18", dataset="cifar10")
    p = tmp_path / "r18.csv"
    p.write_text(to_scalesim(net, batch=1))
    a, b = net.training_ops(8), load_topology(p).training_ops(8)
    for hw in HW:
        assert _cycles(a, hw) == _cycles(b, hw)


def test_scalesim_conv_layout_round_trip(tmp_path):
    net = zoo.build("resnet18", dataset="imagenet")
    p = tmp_path / "r18conv.csv"
    p.write_text(to_scalesim(net, layout="conv"))
    rows = list(csv.reader(io.StringIO(p.read_text())))
    assert rows[0][:8] == ["Layer name", " IFMAP Height", " IFMAP Width", " Filter Height", " Filter Width",
                           " Channels", " Num Filter", " Strides"]
    assert rows[1][:8] == ["conv1", " 230", " 230", " 7", " 7", " 3", " 64", " 2"]  # padding folded in
    back = load_topology(p)
    a, b = net.training_ops(4), back.training_ops(4)
    for hw in HW:
        assert _cycles(a, hw) == _cycles(b, hw)


def test_scalesim_conv_layout_writes_a_depthwise_convolution_as_one_dp_row(tmp_path):
    """A depthwise convolution is one row named ``..._DP``, which SCALE-Sim (and dse) read as one single-channel
    convolution per channel: the reloaded network runs the same forward GEMMs as the original (before, one row
    per channel, each read back as a layer of its own with an input gradient)."""
    net = zoo.build("mobilenet_v2", dataset="cifar10")
    p = tmp_path / "mnv2.csv"
    p.write_text(to_scalesim(net, layout="conv"))
    dw = [l for l in net.layers if l.kind == "conv" and l.conv[7] > 1]
    rows = p.read_text().splitlines()
    assert dw and sum("_DP," in r for r in rows) == len(dw) and len(rows) == 1 + len(
        [l for l in net.layers if l.kind in ("conv", "linear")])
    _same_forward(net.training_ops(4), load_topology(p).training_ops(4))


def test_scalesim_conv_layout_writes_unequal_strides_and_pads_with_a_stride_width(tmp_path):
    """The convolution layout refused a layer whose strides differ per axis, which dse reads back (a ``Stride
    width`` column): written now, padding folded per axis, and the same forward GEMMs read back."""
    from models.graph import Net, Tensor

    net = Net("t", (3, 17, 23), 5)
    y = net.conv(Tensor(3, 17, 23, grad=False), 8, (3, 5), stride=(2, 3), padding=(1, 0), name="c1")
    net.conv(y, 5, 3, name="c2")
    p = tmp_path / "t.csv"
    p.write_text(to_scalesim(net, layout="conv"))
    assert p.read_text().splitlines()[:2] == [", ".join(
        ["Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width", "Channels", "Num Filter",
         "Strides", "Stride width"]) + ",", "c1, 19, 23, 3, 5, 3, 8, 2, 3,"]
    _same_forward(net.training_ops(2), load_topology(p).training_ops(2))


def test_scalesim_rows_as_scalesim_reads_them_and_headers_checked(tmp_path):
    """SCALE-Sim's sample files: a comment after the last comma, a row of empty cells, indented names, a row
    without its trailing comma, a ``DP`` (depthwise) layer. An empty cell shifted the later values one column
    left in silence, and any header of 8 cells counted as the convolution layout (a file without a header lost
    its first layer; a 9th ``Sparsity`` column was read as the width stride)."""
    head = "Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
    p = tmp_path / "mnet.csv"
    p.write_text(head + ",,,,,,,,\nConv1, 34, 34, 3, 3, 3, 32, 2,\n\tConv2_DP, 18, 18, 3, 3, 32, 1, 1,#dw\n"
                 "Conv3,16,16,1,1,32,64,1\n")
    net = load_topology(p)
    assert [l.name for l in net.layers] == ["Conv1", "Conv2_DP", "Conv3"]
    assert [l.gemm[:3] for l in net.layers] == [(16 * 16, 27, 32), (16 * 16, 9, 1), (16 * 16, 32, 64)]
    assert net.layers[1].conv[7] == 32 and net.layers[1].out == (32, 16, 16)  # 32 groups of 1 channel, 1 filter
    cases = {
        head + "c1, 32, , 3, 3, 3, 16, 1, 1,\n": r"bad.csv:2: no value for IFMAP Width",
        "c1, 32, 32, 3, 3, 3, 16, 1,\nc2, 30, 30, 3, 3, 16, 16, 1,\n": r"bad.csv: the first row 'c1, 32, .*' is not "
                                                                       r"a header",
        head.replace("Strides,", "Strides, Sparsity,") + "c1, 5, 5, 3, 3, 2, 6, 1, 2:4,\n":
            r"header column 9 is 'Sparsity', a column dse does not read",
        head.replace("Num Filter", "Filters") + "c1, 5, 5, 3, 3, 2, 6, 1,\n":
            r"header column 7 is 'Filters', where the conv layout has 'Num Filter'",
        head + "c1, 8, 8, 3, 3, 2, 4, 1, 1, 99,\n": r"bad.csv:2: 10 values where the header has 8 columns",
        "Layer, M, N, K, comment,\ng1, 4, 5, 6, 7,\n": r"header column 5 is 'comment', a column dse does not read",
        "Layer, M, N, K,\ng1, 64, , 32,\n": r"bad.csv:2: no value for N",
    }
    bad = tmp_path / "bad.csv"
    for text, message in cases.items():
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            load_topology(bad)
    # a width stride named in the header, SCALE-Sim's own header (write_topo_file) too
    for h in (head.replace("Strides,", "Strides, Stride width,"),
              "Layer name,IFMAP height,IFMAP width,Filter height,Filter width,Channels,Num filter,Stride height,"
              "Stride width,\n"):
        bad.write_text(h + "c, 17, 23, 3, 5, 3, 5, 2, 3,\n")
        assert load_topology(bad).layers[0].out == (5, 8, 7)


def test_scalesim_documented_example_and_bad_rows(tmp_path):
    # the layout of SCALE-Sim's topology files (a trailing comma on each row)
    p = tmp_path / "alexnet_part.csv"
    p.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
                 "Strides,\nConv1, 227, 227, 11, 11, 3, 96, 4,\nConv2, 31, 31, 5, 5, 96, 256, 1,\n")
    net = load_topology(p)
    assert [l.gemm[:3] for l in net.layers] == [(55 * 55, 11 * 11 * 3, 96), (27 * 27, 5 * 5 * 96, 256)]
    assert net.layers[0].needs_igrad is False and net.layers[1].needs_igrad is True
    bad = tmp_path / "bad.csv"
    bad.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
                   "Strides,\nConv1, 227, 227, 11, x, 3, 96, 4,\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: Filter Width"):
        load_topology(bad)


@pytest.fixture
def run(cli):
    return cli


def test_cli_models_onnx_topology_and_scalesim_format(run, tmp_path, resnet18_onnx):
    r = run("models", "--onnx", str(resnet18_onnx["imagenet"]), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["params"] == 11_689_512 and s["layers"] == 21
    r = run("models", "resnet18", "--ops", "--format", "scalesim", "--batch", "2")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert [c.strip() for c in rows[0][:4]] == ["Layer", "M", "N", "K"]
    assert [c.strip() for c in rows[1][:4]] == ["conv1", str(2 * 112 * 112), "64", "147"]
    topo = tmp_path / "r18.csv"
    topo.write_text(r.stdout)
    r = run("models", "--topology", str(topo), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["layers"] == 21
    r = run("models", "--onnx", str(topo))
    assert r.returncode == 2 and "--onnx" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_batched_scalesim_export_says_how_to_write_one_to_read_back(run, tmp_path):
    """The documented `dse models NET --ops --format scalesim` writes M at --batch (32): read back as a workload,
    a topology is one sample, so its figures came out 32x the model's without a word."""
    r = run("models", "resnet18", "--ops", "--format", "scalesim")
    assert r.returncode == 0 and "M holds the batch of 32" in r.stderr and "--batch 1" in r.stderr
    one = run("models", "resnet18", "--ops", "--format", "scalesim", "--batch", "1")
    assert one.returncode == 0 and one.stderr == ""
    topo = tmp_path / "r18.csv"
    topo.write_text(one.stdout)
    back = json.loads(run("models", "--topology", str(topo), "--json").stdout)
    assert back["macs"] == json.loads(run("models", "resnet18", "--json").stdout)["macs"]


def test_workload_file_in_a_configuration(run, tmp_path, monkeypatch):
    """A configuration names a topology relative to itself; `dse evaluate` costs it like a zoo model."""
    (tmp_path / "nets").mkdir()
    net = zoo.build("resnet18", dataset="cifar10")
    (tmp_path / "nets" / "r18.csv").write_text(to_scalesim(net, batch=1))
    cfg = tmp_path / "c.toml"
    cfg.write_text('[workload]\nmodels = ["nets/r18.csv", "resnet18"]\ndataset = "cifar10"\nbatch = 16\n'
                   'dataset_size = 1000\nepochs = 1\n[schedule]\ngp_fraction = 0.0\n')
    monkeypatch.chdir("/")  # the file is found relative to the configuration, not the working directory
    r = run("evaluate", str(cfg), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [m["model"] for m in out["models"]] == [str(tmp_path / "nets" / "r18.csv"), "resnet18"]
    missing = tmp_path / "m.toml"
    missing.write_text('[workload]\nmodels = ["nope.onnx"]\n')
    r = run("evaluate", str(missing))
    assert r.returncode == 2 and "workload.models" in r.stderr and "nope.onnx" in r.stderr


def test_broken_pipe_ends_quietly_with_exit_0():
    for args in (["models", "resnet50", "--ops"],
                 ["models", "resnet50", "--ops", "--format", "scalesim", "--batch", "1"]):
        with subprocess.Popen([sys.executable, "-m", "dse.cli", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) as p:
            p.stdout.readline()
            p.stdout.close()  # the reader goes away, as `| head -1` does
            err = p.stderr.read().decode()
            assert p.wait() == 0 and err == ""
