"""``dse models``: the workload zoo, a zoo model's training ops, a workload file's summary."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from dse.cli.output import echo_json, echo_table
from dse.errors import UsageError
from models.graph import OPTIMIZER_STATE
from models.nets.registry import DATASETS

__all__ = ["models_cmd"]


def models_cmd(
    ctx: typer.Context = None,  # type: ignore[assignment]  (None: called from Python, options as given)
    name: Optional[str] = typer.Argument(None, metavar="NAME",
                                         help="A zoo model, or a workload file (.csv SCALE-Sim topology, .onnx "
                                              "model); without it, list the whole zoo."),
    dataset: Optional[str] = typer.Option(
        None, "--dataset", "-d",
        help="Input set-up: " + ", ".join(f"{n} ({c}x{s}x{s}, {k} classes)" for n, (c, s, k) in DATASETS.items())
             + ". "
             "Default: each model's own (299x299 for Inception, 416x416 for YOLOv3)."),
    onnx_file: Optional[Path] = typer.Option(None, "--onnx", metavar="FILE",
                                             help="An ONNX model instead of NAME (shapes inferred)."),
    topology: Optional[Path] = typer.Option(None, "--topology", metavar="FILE.csv",
                                            help="A SCALE-Sim topology (convolution or GEMM layout) instead "
                                                 "of NAME."),
    ops: bool = typer.Option(False, "--ops", help="Print NAME's training ops (GEMMs as M K N repeat, "
                                                  "vector ops as elements moved) instead of its summary."),
    batch: int = typer.Option(32, "--batch", "-b", min=1, help="Batch size for --ops."),
    optimizer: str = typer.Option("sgd_momentum", "--optimizer",
                                  help="Optimizer whose state the weight update reads and writes "
                                       f"({', '.join(OPTIMIZER_STATE)}), for --ops."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f",
        help="table, json, or with --ops also scalesim (the forward GEMMs at --batch in SCALE-Sim's "
             "Layer, M, N, K layout; --batch 1 for a file dse reads back as a workload) or scalesim-conv "
             "(SCALE-Sim's convolution layout, per sample)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table (--format json)."),
) -> None:
    """The workload zoo: name, input, GEMM layers, parameters and forward MACs per sample.

    MACs count the multiply-accumulates of conv and linear layers per sample (torchvision's "GFLOPS"
    convention); attention's weight-free matmuls are reported separately as matmul_macs.
    """
    from dse.config.values import check_number
    from dse.config.workload import check_net
    from models import zoo

    check_number(batch, "--batch")
    if not ops:
        from dse.cli.options import refuse_unused

        refuse_unused(ctx, {"batch": "--batch", "optimizer": "--optimizer"}, "applies to --ops only")

    if dataset is not None and dataset not in DATASETS:
        raise UsageError(f"--dataset: {dataset!r} is not a data set; choose one of {', '.join(DATASETS)}")
    formats = ("table", "json", "scalesim", "scalesim-conv")
    fmt = fmt or ("json" if json_out else "table")
    if fmt not in formats:
        raise UsageError(f"--format: {fmt!r}; choose one of {', '.join(formats)}")
    if fmt.startswith("scalesim") and not ops:
        raise UsageError(f"--format {fmt}: only with --ops (it writes the training step's forward GEMMs)")
    given = [v for v in (name, onnx_file, topology) if v is not None]
    if len(given) > 1:
        raise UsageError("models: give one of NAME, --onnx FILE, --topology FILE.csv")
    for opt, path, suffix in (("--onnx", onnx_file, ".onnx"), ("--topology", topology, ".csv")):
        if path is not None:
            if path.suffix.lower() != suffix:
                raise UsageError(f"{opt}: expected a {suffix} file, got {str(path)!r}")
            name = str(path)

    def _build(n: str):
        try:
            net = zoo.build(n, dataset=dataset)
        except ValueError as e:
            raise UsageError(str(e)) from None
        return check_net(net, n)

    if name is None:
        if ops:
            raise UsageError("--ops needs a model NAME; see `dse models` for the list")
        rows, left = [], []
        for n in zoo.names():
            e = zoo.entry(n)
            if dataset is not None and dataset not in e.datasets:
                left.append(n)
                continue
            rows.append(_build(n).summary())
        if left:  # on standard error: the table (or JSON) stays what it was
            typer.echo(f"note: not listed, since they do not take --dataset {dataset}: {', '.join(left)}", err=True)
        if fmt == "json":
            echo_json(rows)
        else:
            echo_table(
                [dict(r, params_M=r["params"] / 1e6, GMACs=r["macs"] / 1e9) for r in rows],
                ["name", "input", "classes", "layers", "params_M", "GMACs"],
                floatfmt="{:.3f}",
            )
        return
    net = _build(name)
    if not ops:
        s = net.summary()
        echo_json(s) if fmt == "json" else echo_table([s])
        return
    from models.graph import OPTIMIZER_STATE

    if optimizer not in OPTIMIZER_STATE:
        raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZER_STATE)}; got {optimizer!r}")
    if fmt.startswith("scalesim"):
        from models.importers import to_scalesim

        try:
            sys.stdout.write(to_scalesim(net, batch=batch, layout="conv" if fmt == "scalesim-conv" else "gemm"))
        except ValueError as e:
            raise UsageError(f"--format {fmt}: {e}") from None
        if fmt == "scalesim" and batch > 1:  # M holds the batch; dse reads a topology as one sample
            typer.echo(f"note: M holds the batch of {batch}, as SCALE-Sim runs a training step's products; as a dse "
                       "workload (workload.models, dse layer --topology) a topology is one sample, so write it with "
                       "--batch 1 for that", err=True)
        return
    recs = net.training_ops(batch, optimizer=optimizer).to_records()
    if fmt == "json":
        echo_json(recs)
    else:
        echo_table(recs, ["layer", "name", "kind", "phase", "M", "K", "N", "repeat", "macs", "vec_elems",
                          "stash_bytes"])
