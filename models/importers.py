"""Custom workloads: SCALE-Sim topology files and ONNX models become a :class:`models.graph.Net`.

A network read from a file is lowered to training ops exactly like a zoo model (:meth:`Net.training_ops`),
so every command and study that takes a zoo model name also takes a path ending in ``.csv`` (a SCALE-Sim
topology) or ``.onnx`` (an ONNX model): :func:`models.zoo.build` routes such names here.

SCALE-Sim topologies (both of SCALE-Sim's documented layouts, told apart by the header):

* convolution layout -- ``Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels,
  Num Filter, Strides,`` (an optional ``Stride width``): one convolution per row, per sample, the IFMAP
  already padded (SCALE-Sim has no padding column), so the output is ``(IFMAP - Filter) // Stride + 1``; a
  layer whose name holds ``DP`` is depthwise as SCALE-Sim reads it (one single-channel convolution of
  ``Num Filter`` filters per channel);
* GEMM layout (``scale.py -i gemm``) -- ``Layer, M, N, K,``: one product ``A[M x K] @ B[K x N]`` per row
  (N the filters/output columns, K the reduction), read as a fully connected layer over ``M`` rows per
  sample (tokens, output pixels). A file :func:`to_scalesim` wrote for a batch-B step holds that step's
  products: cost it at batch 1 (for convolutions and linear layers, whose batch folds into ``M``, a
  batch-1 file lowered at batch B gives the same products as the original network at batch B).

The header names the layout, and each of its cells is checked (a column dse does not read, such as SCALE-Sim
v3's ``Sparsity``, is refused rather than ignored); every row holds a value in each column. A row's trailing
empty cells and anything from a cell starting with ``#`` on (a comment) are dropped, as SCALE-Sim drops what
follows a row's last comma.

SCALE-Sim has no vector layers, so a topology lowers to GEMMs and weight updates only; the first row reads
the network input (no input gradient), every later row gets one. :func:`to_scalesim` writes a network's
forward GEMMs in either layout (groups and attention heads one row each, since SCALE-Sim has neither; a
depthwise convolution one ``DP`` row in the convolution layout).

ONNX (read with the ``onnx`` package, shapes inferred by ``onnx.shape_inference`` and checked against
ours node by node): ``Conv``, ``Gemm``, ``MatMul`` with a weight initializer, ``BatchNormalization``,
``MaxPool``/``AveragePool``/``GlobalAveragePool``/``GlobalMaxPool``, ``Add``/``Sum``, ``Concat`` over
channels, activations (``Relu``, ``LeakyRelu``, ``PRelu``, ``Clip``, ``Sigmoid``, ``Tanh``, ``HardSigmoid``,
``HardSwish``, ``Gelu``, ``Elu``, ``Selu``, ``Softplus``, ``Softmax``), and the shape-only ``Flatten``,
``Reshape`` to ``(batch, features)``, ``Dropout`` and ``Identity``. Any other op is a one-line
``ValueError`` naming it. The one graph input that is not an initializer is the network input (a model
with two is refused); its first dimension is the batch. Parameters are the initializers' elements: a weight
used by two layers is counted once (the later layer is tied to the first: its weight gradient is computed,
the update is the owner's); a Gemm's bias ``C`` counts its own elements (none when it is an activation);
``BatchNormalization`` its scale and shift, over ONNX's axis 1 at any rank.
"""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from pathlib import Path

from models.graph import Net, Tensor

__all__ = ["is_file_model", "load", "load_topology", "load_onnx", "to_scalesim", "ONNX_OPS"]

SUFFIXES = (".csv", ".onnx")


def is_file_model(name: str) -> bool:
    """Whether a workload model name is a file (a SCALE-Sim topology or an ONNX model) rather than a zoo name."""
    return str(name).lower().endswith(SUFFIXES)


def load(path: str | Path) -> Net:
    """A network from a ``.csv`` SCALE-Sim topology or an ``.onnx`` model."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{p}: no such workload file (a SCALE-Sim topology .csv or an ONNX model .onnx)")
    if p.suffix.lower() == ".onnx":
        return load_onnx(p)
    return load_topology(p)


# -- SCALE-Sim --------------------------------------------------------------------------------------------
CONV_HEADER = ["Layer name", "IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width", "Channels",
               "Num Filter", "Strides"]
GEMM_HEADER = ["Layer", "M", "N", "K"]


def _ints(path: Path, lineno: int, cells: list[str], names: list[str]) -> list[int]:
    out = []
    for name, c in zip(names, cells):
        try:
            v = int(c)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: {name} must be a positive integer, got {c!r}") from None
        if v < 1:
            raise ValueError(f"{path}:{lineno}: {name} must be a positive integer, got {v}")
        out.append(v)
    return out


#: the header cells a topology's columns may carry, by column (lower case, spaces collapsed): SCALE-Sim's
#: sample files' names and those its ``write_topo_file`` writes ("Stride height", "Stride width")
_CONV_NAMES = [None, ("ifmap height",), ("ifmap width",), ("filter height",), ("filter width",), ("channels",),
               ("num filter", "num filters"), ("strides", "stride", "stride height"), ("stride width",)]
_GEMM_NAMES = [None, ("m",), ("n",), ("k",)]


def _cells(text: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every row that holds a value: cells stripped (a byte-order mark too), the empty
    cells a row ends with dropped (SCALE-Sim ends each row with a comma), and from a cell that starts with
    ``#`` on (a comment, as SCALE-Sim's sample files carry after the last comma)."""
    out = []
    for i, r in enumerate(csv.reader(io.StringIO(text.lstrip("\ufeff")))):
        cells = [c.strip() for c in r]
        cut = next((j for j, c in enumerate(cells) if c.startswith("#")), len(cells))
        cells = cells[:cut]
        while cells and cells[-1] == "":
            cells.pop()
        if cells:
            out.append((i + 1, cells))
    return out


def _layout(p: Path, header: list[str]) -> tuple[str, int]:
    """The header's layout (``"conv"`` or ``"gemm"``) and its number of columns; a ValueError naming the cell
    that is not one of the layout's columns."""
    norm = [" ".join(h.lower().split()) for h in header]
    names, layout = (_GEMM_NAMES, "gemm") if norm[1:4] == ["m", "n", "k"] else (_CONV_NAMES, "conv")
    if layout == "conv" and (len(norm) < 2 or norm[1] != "ifmap height"):
        raise ValueError(f"{p}: the first row {', '.join(header)!r} is not a header of SCALE-Sim's convolution "
                         f"layout ({', '.join(CONV_HEADER)}) or its GEMM layout ({', '.join(GEMM_HEADER)}); a "
                         "topology file starts with one")
    need = 8 if layout == "conv" else 4
    columns = CONV_HEADER + ["Stride width"] if layout == "conv" else GEMM_HEADER
    for j, h in enumerate(norm[1:], start=1):
        if j >= len(names) or h not in names[j]:
            raise ValueError(
                f"{p}: header column {j + 1} is {header[j]!r}, " + (
                    f"where the {layout} layout has {columns[j]!r}" if j < need else
                    f"a column dse does not read (the {layout} layout's columns: {', '.join(columns[:need])}"
                    + (f", optionally {', '.join(columns[need:])}" if columns[need:] else "") +
                    "); remove it: dse would cost the layers without it"))
    if len(norm) < need:
        raise ValueError(f"{p}: the header has {len(norm)} columns; the {layout} layout has {need} "
                         f"({', '.join(CONV_HEADER if layout == 'conv' else GEMM_HEADER)})")
    return layout, len(norm)


def load_topology(path: str | Path) -> Net:
    """A network from a SCALE-Sim topology file (convolution or GEMM layout, per sample). The header names the
    layout and its columns (each checked); every row holds a value in each column."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{p}: cannot be read ({e})") from None
    rows = _cells(text)
    if len(rows) < 2:
        raise ValueError(f"{p}: a SCALE-Sim topology needs a header row and at least one layer row")
    header = rows[0][1]
    layout, ncols = _layout(p, header)
    gemm = layout == "gemm"
    net: Net | None = None
    for k, (lineno, r) in enumerate(rows[1:]):
        name = r[0]
        if len(r) != ncols or "" in r:
            missing = [header[j] for j in range(ncols) if j >= len(r) or r[j] == ""]
            raise ValueError(f"{p}:{lineno}: " + (f"no value for {', '.join(missing)}" if missing else
                                                   f"{len(r)} values where the header has {ncols} columns"))
        if gemm:
            m, n, kk = _ints(p, lineno, r[1:4], ["M", "N", "K"])
            x = Tensor(kk, m, 1, grad=k > 0)
            if net is None:
                net = Net(p.stem, x.shape, n, input_desc=f"{m}x{kk} (SCALE-Sim GEMM)")
            net.linear(x, n, bias=False, name=name)
            net.num_classes = n
            continue
        names = CONV_HEADER[1:] + (["Stride width"] if ncols > 8 else [])
        h, w, fh, fw, c, f, sh, *sw = _ints(p, lineno, r[1:], names)
        sw = sw[0] if sw else sh
        if fh > h or fw > w:
            raise ValueError(f"{p}:{lineno}: filter {fh}x{fw} larger than the IFMAP {h}x{w}")
        x = Tensor(c, h, w, grad=k > 0)
        if net is None:
            net = Net(p.stem, x.shape, f, input_desc=f"{c}x{h}x{w}")
        # SCALE-Sim runs a layer whose name holds "DP" as one single-channel convolution per channel (depthwise)
        groups = c if "DP" in name else 1
        net.conv(x, f * groups, (fh, fw), stride=(sh, sw), padding=0, groups=groups, name=name)
        net.num_classes = f * groups
    assert net is not None
    return net


def _gemm_rows(net: Net, batch: int):
    """(layer, name, M, K, N) of every forward GEMM of a training step, one row per group / head."""
    ops = net.training_ops(batch)
    for i in range(len(ops)):
        if ops.phase[i] != "fwd":
            continue
        layer = net.layers[int(ops.layer[i])]
        r = int(ops.repeat[i])
        for g in range(r):
            yield layer, (layer.name if r == 1 else f"{layer.name}#{g}"), int(ops.M[i]), int(ops.K[i]), int(ops.N[i])


def to_scalesim(net: Net, *, batch: int = 1, layout: str = "gemm") -> str:
    """The network's forward GEMMs as a SCALE-Sim topology.

    ``layout="gemm"``: SCALE-Sim's ``Layer, M, N, K`` layout for ``scale.py -i gemm``, at ``batch`` (the
    products a training step's forward pass runs). ``layout="conv"``: the convolution layout, per sample
    (SCALE-Sim's convolution runs have no batch), the padding folded into the IFMAP size (a ``Stride width``
    column when a layer's strides differ per axis); linear layers
    and attention products become 1x1 convolutions over an IFMAP of their rows. A depthwise convolution is
    one row named ``..._DP`` (SCALE-Sim's depthwise rows); other grouped convolutions and multi-head products
    are written one row per group or head. Commas and line breaks in layer names become ``_``, and a ``DP``
    in a name ``Dp`` (SCALE-Sim would read that layer as depthwise).
    """
    lines = []
    if layout == "gemm":
        lines.append(", ".join(GEMM_HEADER) + ",")
        for _, name, m, k, n in _gemm_rows(net, batch):
            lines.append(f"{_row_name(name)}, {m}, {n}, {k},")
    elif layout == "conv":
        rows = []
        for layer, name, m, k, n in _gemm_rows(net, 1):
            name = _row_name(name)
            if layer.kind == "conv":
                c_in, groups = layer.conv[0], layer.conv[7]
                h, w, _, kh, kw, sh, sw, ph, pw, dil = layer.geometry
                depthwise = groups > 1 and groups == c_in  # one row of every channel, named "DP" as SCALE-Sim
                if depthwise and not name.endswith("#0"):   # reads depthwise layers (one per group otherwise)
                    continue
                if dil != 1:
                    raise ValueError(f"layer {layer.name}: SCALE-Sim's convolution layout has no dilation; "
                                     "write the GEMM layout instead")
                if depthwise:
                    name = name[:-2] + "_DP"
                channels = c_in if depthwise else c_in // groups
                rows.append((name, h + 2 * ph, w + 2 * pw, kh, kw, channels, n, sh, sw))
            else:
                rows.append((name, m, 1, 1, 1, k, n, 1, 1))
        width = any(r[7] != r[8] for r in rows)  # a Stride width column only when a layer needs one
        lines.append(", ".join(CONV_HEADER + (["Stride width"] if width else [])) + ",")
        lines += [", ".join(str(v) for v in (r if width else r[:8])) + "," for r in rows]
    else:
        raise ValueError(f"layout must be 'gemm' or 'conv', got {layout!r}")
    return "\n".join(lines) + "\n"


def _row_name(name: str) -> str:
    """A layer's name as a topology row holds it: no comma or line break (they end a cell or a row), no
    ``DP`` (SCALE-Sim reads a layer so named as depthwise; :func:`to_scalesim` adds it to depthwise rows
    only), no leading ``#`` (a comment)."""
    out = "".join("_" if ch in ",\r\n" else ch for ch in name).replace("DP", "Dp")
    return "_" + out[1:] if out.startswith("#") else out


# -- ONNX -------------------------------------------------------------------------------------------------
_ACTIVATIONS = ("Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu",
                "Elu", "Selu", "Softplus")
_SHAPE_ONLY = ("Flatten", "Reshape", "Dropout", "Identity")
#: every ONNX op the importer understands
ONNX_OPS = ("Conv", "Gemm", "MatMul", "BatchNormalization", "MaxPool", "AveragePool", "GlobalAveragePool",
            "GlobalMaxPool", "Add", "Sum", "Concat", "Softmax") + _ACTIVATIONS + _SHAPE_ONLY


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ValueError("reading ONNX models needs the onnx package: pip install 'dse[onnx]' "
                         "(or pip install onnx)") from None
    return onnx


def _onnx_shape(t: Tensor, rank: int) -> tuple[int, ...]:
    """Our per-sample tensor in ONNX's layout without the batch dimension."""
    if rank == 4:
        return t.shape
    if rank == 3:
        return (t.h, t.c)
    return (t.numel,)


def load_onnx(path: str | Path) -> Net:
    """A network from an ONNX model file (the ops in :data:`ONNX_OPS`; shapes inferred and cross-checked)."""
    onnx = _onnx()
    from onnx import numpy_helper, shape_inference

    p = Path(path)
    if p.is_file() and p.stat().st_size == 0:
        raise ValueError(f"{p}: the file is empty, not an ONNX model")
    try:
        model = onnx.load(str(p))
    except Exception as e:  # protobuf raises several types for a file that is not ONNX
        raise ValueError(f"{p}: not a readable ONNX model ({type(e).__name__}: {e})") from None
    try:
        model = shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:
        raise ValueError(f"{p}: ONNX shape inference failed: {str(e).splitlines()[0] if str(e) else e}") from None
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    # Constant nodes (e.g. a Reshape's target shape) count as initializers
    for node in g.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    inits[node.output[0]] = numpy_helper.to_array(a.t)

    def static(vi) -> tuple[int, ...] | None:
        dims = vi.type.tensor_type.shape.dim
        if not dims or any(not d.HasField("dim_value") for d in dims[1:]):
            return None
        return tuple(int(d.dim_value) for d in dims[1:])

    inferred = {vi.name: static(vi) for vi in list(g.value_info) + list(g.output) + list(g.input)}
    inputs = [i for i in g.input if i.name not in inits]
    if not g.node:
        raise ValueError(f"{p}: the graph has no nodes (an empty or non-ONNX file?)")
    if len(inputs) != 1:
        raise ValueError(f"{p}: expected one graph input besides the initializers (the network input), got "
                         f"{len(inputs)}" + (f": {', '.join(i.name for i in inputs)}" if inputs else ""))
    shp = static(inputs[0])
    if shp is None or len(shp) not in (1, 2, 3):
        raise ValueError(f"{p}: input {inputs[0].name!r} needs a static shape (batch, C, H, W) or "
                         "(batch, features) or (batch, tokens, features)")
    if min(shp) < 1:
        raise ValueError(f"{p}: input {inputs[0].name!r} has shape {'x'.join(map(str, shp))} per sample; every "
                         "dimension must be at least 1")
    rank = len(shp) + 1
    if rank == 4:
        x0 = Tensor(*shp, grad=False)
    elif rank == 3:
        x0 = Tensor(shp[1], shp[0], 1, grad=False)
    else:
        x0 = Tensor(shp[0], 1, 1, grad=False)
    net = Net(p.stem, x0.shape, 1, input_desc="x".join(str(d) for d in shp))
    env: dict[str, tuple[Tensor, int]] = {inputs[0].name: (x0, rank)}

    def attrs(node) -> dict:
        return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def where(node) -> str:
        return f"{p}: node {node.name or node.output[0]!r} ({node.op_type})"

    def arg(node, i: int) -> tuple[Tensor, int]:
        name = node.input[i]
        if name not in env:
            raise ValueError(f"{where(node)}: input {name!r} is not an activation the importer knows "
                             "(a constant where an activation is expected?)")
        return env[name]

    def pads2(node, a: dict, kh: int, kw: int, x: Tensor, sh: int, sw: int, dil: int = 1) -> tuple[int, int]:
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            tot = []
            for size, k, s in ((x.h, kh, sh), (x.w, kw, sw)):
                out = -(-size // s)
                tot.append(max(0, (out - 1) * s + dil * (k - 1) + 1 - size))
            if any(t % 2 for t in tot):
                raise ValueError(f"{where(node)}: asymmetric padding ({auto}) is not supported")
            return tot[0] // 2, tot[1] // 2
        if auto == "VALID":
            return 0, 0
        pads = list(a.get("pads", [0, 0, 0, 0]))
        if len(pads) != 4 or pads[0] != pads[2] or pads[1] != pads[3]:
            raise ValueError(f"{where(node)}: asymmetric padding {pads} is not supported")
        return pads[0], pads[1]

    def _onnx_node(node) -> None:
        op, a = node.op_type, attrs(node)
        if op not in ONNX_OPS:
            raise ValueError(f"{where(node)}: op {op} is not supported; the importer reads "
                             f"{', '.join(ONNX_OPS)}")
        name = node.name or node.output[0]
        out_rank = None
        if op == "Conv":
            x, r = arg(node, 0)
            wgt = inits.get(node.input[1])
            if wgt is None or wgt.ndim != 4 or r != 4:
                raise ValueError(f"{where(node)}: only 2-D convolutions with an initializer weight are supported")
            f, _, kh, kw = (int(d) for d in wgt.shape)
            sh, sw = (list(a.get("strides", [1, 1])) + [1, 1])[:2]
            dil = list(a.get("dilations", [1, 1]))
            if dil[0] != dil[1]:
                raise ValueError(f"{where(node)}: unequal dilations {dil} are not supported")
            ph, pw = pads2(node, a, kh, kw, x, sh, sw, dil[0])
            y = net.conv(x, f, (kh, kw), stride=(sh, sw), padding=(ph, pw), dilation=dil[0],
                         groups=int(a.get("group", 1)), bias=len(node.input) > 2 and node.input[2] != "",
                         name=name, tied=tied(node.input[1]))
        elif op in ("Gemm", "MatMul"):
            x, r = arg(node, 0)
            wgt = inits.get(node.input[1])
            if wgt is None or wgt.ndim != 2:
                raise ValueError(f"{where(node)}: only a product with a 2-D weight initializer is supported "
                                 "(a product of two activations, as in attention, is not)")
            if op == "Gemm" and (a.get("transA", 0) or r != 2):
                raise ValueError(f"{where(node)}: Gemm with transA or a non-2-D input is not supported")
            out_f = int(wgt.shape[0] if a.get("transB", 0) else wgt.shape[1])
            if r == 4:
                raise ValueError(f"{where(node)}: a product of a 4-D tensor; Flatten it first")
            y = net.linear(x, out_f, bias=False, name=name, tied=tied(node.input[1]))
            if op == "Gemm" and len(node.input) > 2:  # Gemm's C: a bias initializer's elements are parameters
                bias = params_of(node.input[2:3])  # (an activation C is added in the array: no parameters)
                net.layers[-1] = replace(net.layers[-1], params=net.layers[-1].params + bias)
        elif op == "BatchNormalization":
            x, r = arg(node, 0)  # learned scale and shift over ONNX's axis 1, whatever the rank
            y = net._vector(x, "norm", x, params=params_of(node.input[1:3]), name=name)
        elif op in ("MaxPool", "AveragePool"):
            x, r = arg(node, 0)
            if r != 4 or len(a["kernel_shape"]) != 2:
                raise ValueError(f"{where(node)}: only 2-D pooling of a (batch, C, H, W) tensor is supported")
            if any(d != 1 for d in a.get("dilations", [1, 1])):
                raise ValueError(f"{where(node)}: pooling with dilations {list(a['dilations'])} is not supported")
            kh, kw = a["kernel_shape"]
            sh, sw = (list(a.get("strides", [1, 1])) + [1, 1])[:2]
            if kh != kw or sh != sw:
                raise ValueError(f"{where(node)}: only square pooling windows and strides are supported")
            ph, pw = pads2(node, a, kh, kw, x, sh, sw)
            if ph != pw:
                raise ValueError(f"{where(node)}: unequal pooling pads are not supported")
            y = net.pool(x, kh, sh, ph, ceil_mode=bool(a.get("ceil_mode", 0)), name=name)
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            x, r = arg(node, 0)
            y = net.global_pool(x, name=name)
        elif op in ("Add", "Sum"):
            acts = [n for n in node.input if n in env]
            consts = [n for n in node.input if n in inits]
            if len(acts) + len(consts) != len(node.input) or not acts:
                raise ValueError(f"{where(node)}: inputs must be activations or initializers")
            xs = [env[n][0] for n in acts]
            r = env[acts[0]][1]
            if len(xs) == 1:  # an activation plus a constant: a bias (its elements are parameters)
                y = net._vector(xs[0], "eltwise", xs[0], params=sum(int(inits[c].size) for c in consts),
                                name=name, stash=0)
            else:
                y = net.add(*xs, name=name)
        elif op == "Concat":
            xs = [arg(node, i) for i in range(len(node.input))]
            r = xs[0][1]
            # our channel axis: ONNX's axis 1 of (batch, C, H, W) and (batch, features), the last of
            # (batch, tokens, features)
            if int(a.get("axis", 1)) not in ((2, -1) if r == 3 else (1, 1 - r)):
                raise ValueError(f"{where(node)}: only concatenation over channels (axis 1 of (batch, C, H, W)) or "
                                 "features (the last axis) is supported")
            y = net.concat([t for t, _ in xs], name=name)
        elif op in _ACTIVATIONS or op == "Softmax":
            x, r = arg(node, 0)
            if op == "Softmax":
                y = net.softmax(x, name=name)
            else:
                if op == "PRelu" and node.input[1] not in inits:
                    raise ValueError(f"{where(node)}: PRelu's slope must be an initializer (a learned one), got "
                                     f"the activation {node.input[1]!r}")
                y = net._vector(x, "act", x, name=name,
                                params=int(inits[node.input[1]].size) if op == "PRelu" else 0)
        else:  # shape-only ops
            x, r = arg(node, 0)
            if op in ("Dropout", "Identity"):
                y = x
            elif op == "Flatten":
                if int(a.get("axis", 1)) != 1:
                    raise ValueError(f"{where(node)}: only Flatten with axis 1 is supported")
                y, out_rank = Tensor(x.numel, 1, 1, x.grad), 2
            else:  # Reshape
                target = inits.get(node.input[1])
                if target is None or len(target) != 2 or int(target[1]) not in (-1, x.numel):
                    raise ValueError(f"{where(node)}: only a Reshape to (batch, features) is supported")
                y, out_rank = Tensor(x.numel, 1, 1, x.grad), 2
        out_rank = out_rank or r
        want = inferred.get(node.output[0])
        if want is not None and _onnx_shape(y, out_rank) != want:
            raise ValueError(f"{where(node)}: our shape {_onnx_shape(y, out_rank)} differs from ONNX's "
                             f"inferred {want}" + (
                                 " (with ceil_mode, a window that would start in the right padding is "
                                 "dropped, as the pooling spec and PyTorch do; this onnx's shape inference "
                                 "keeps it)" if a.get("ceil_mode") else ""))
        env[node.output[0]] = (y, out_rank)

    used: set[str] = set()  # weight initializers already owned by a layer (a tensor used twice is tied)

    def tied(name: str) -> bool:
        seen = name in used
        used.add(name)
        return seen

    def params_of(names) -> int:
        return sum(int(inits[n].size) for n in names if n in inits)

    for node in g.node:
        if node.op_type == "Constant":
            continue
        try:
            _onnx_node(node)
        except ValueError as e:  # Net's own checks (shapes that differ, channels not divisible): name the node
            raise (e if str(e).startswith(str(p)) else ValueError(f"{where(node)}: {e}")) from None
    outs = [o.name for o in g.output]
    if not outs or outs[0] not in env:
        raise ValueError(f"{p}: the graph output is not computed by supported nodes")
    net.num_classes = env[outs[0]][0].numel
    if not net.gemm_layers:
        raise ValueError(f"{p}: the model has no Conv, Gemm or MatMul layer to cost")
    return net
