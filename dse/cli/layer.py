"""``dse layer``: cost one GEMM or convolution on one accelerator configuration.

The lead registers it with ``app.command("layer")(layer)``; the function is plain and typer-annotated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from accel import DATAFLOW_NAMES
from accel.dataflow import DATAFLOWS
from dse.config.values import json_text
from dse.errors import UsageError
from dse.results.formats import fmt_number, fmt_with_unit

__all__ = ["layer"]

#: Hardware field -> the command-line option that sets it (for error messages)
_OPTION_OF = {
    "rows": "--rows", "cols": "--cols", "dataflow": "--dataflow", "ifmap_kb": "--ifmap-kb",
    "filter_kb": "--filter-kb", "ofmap_kb": "--ofmap-kb", "bandwidth_gbps": "--bandwidth",
    "clock_ghz": "--clock-ghz", "word_bytes": "--word-bytes", "acc_bytes": "--acc-bytes",
}


def _gemm_shape(gemm, conv, stride, pad):
    """``((M, K, N), description, im2col geometry or None)`` of the layer given on the command line."""
    if (gemm is None) == (conv is None):
        raise UsageError("--gemm/--conv: give exactly one of --gemm M K N or --conv H W C M R S")
    if stride < 1:
        raise UsageError(f"--stride: must be an integer >= 1, got {stride}")
    if pad < 0:
        raise UsageError(f"--pad: must be an integer >= 0, got {pad}")
    if gemm is not None:
        m, k, n = gemm
        if min(gemm) < 1:
            raise UsageError(f"--gemm: M K N must be integers >= 1, got {m} {k} {n}")
        return (m, k, n), f"GEMM A[{m} x {k}] @ B[{k} x {n}]", None
    from accel.gemm import Im2col

    h, w, c, f, r, s = conv
    if min(conv) < 1:
        raise UsageError(f"--conv: H W C M R S must be integers >= 1, got {' '.join(map(str, conv))}")
    if r > h + 2 * pad or s > w + 2 * pad:
        raise UsageError(f"--conv: the filter ({r}x{s}) must fit the padded input ({h + 2 * pad}x{w + 2 * pad}); "
                         f"raise --pad or shrink the filter")
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    desc = (f"conv {h}x{w}x{c} -> {f} filters {r}x{s} stride {stride} pad {pad}: output {p}x{q}; "
            f"im2col GEMM M={p * q} K={r * s * c} N={f}; DRAM reads the raw {h}x{w}x{c} input")
    geo = Im2col(*(np.array([v]) for v in (1, h, w, c, r, s, stride, stride, pad, pad, 1)))
    return (p * q, r * s * c, f), desc, geo


def _hardware(**kw):
    from accel import Hardware

    try:
        return Hardware(**kw)
    except ValueError as exc:
        msg = str(exc)
        field = msg.split(":", 1)[0]
        raise UsageError(f"{_OPTION_OF.get(field, field)}:{msg.split(':', 1)[1]}" if ":" in msg else msg) from None


def _tech(path):
    """The technology table of ``--tech`` (the format of a configuration's ``technology``), else the default."""
    if path is None:
        return None
    from accel import load_tech

    try:
        return load_tech(path)
    except OSError as e:
        raise UsageError(f"--tech: cannot read {path} ({e.strerror})") from None
    except ValueError as e:
        raise UsageError(f"--tech: {e}") from None


def _result(desc, mkn, hw, geo, tech=None) -> dict:
    from accel import area_mm2, gemm_cost

    m, k, n = mkn
    r = gemm_cost([m], [k], [n], hw=hw, im2col=geo, tech=tech)
    one = lambda a: float(a[0])  # noqa: E731 - local shorthand
    return {
        "layer": desc,
        "M": m, "K": k, "N": n,
        "hardware": hw.to_dict(),
        "macs": one(r.macs),
        "compute_cycles": one(r.compute_cycles),
        "stall_cycles": one(r.stall_cycles),
        "total_cycles": one(r.total_cycles),
        "utilization": one(r.utilization),
        "time_s": one(r.time_s),
        "sram_reads": {op: one(v) for op, v in r.sram_reads.items()},
        "sram_writes": {op: one(v) for op, v in r.sram_writes.items()},
        "dram_bytes": {op: one(v) for op, v in r.dram_bytes.items()},
        "dram_read_bytes": one(r.dram_read_bytes),
        "dram_write_bytes": one(r.dram_write_bytes),
        "rf_bytes": one(r.rf_bytes),
        "interpe_bytes": one(r.interpe_bytes),
        "energy_pj": {c: one(v) for c, v in r.energy_pj.items()},
        "area_mm2": float(area_mm2(hw, tech)),
    }


def layer(
    ctx: typer.Context = None,  # type: ignore[assignment]  (None: called from Python, options as given)
    gemm: Annotated[Optional[tuple[int, int, int]], typer.Option(
        "--gemm", metavar="M K N",
        help="A GEMM A[M x K] @ B[K x N]: M output rows (e.g. batch*pixels), K the reduction, "
             "N output columns.")] = None,
    conv: Annotated[Optional[tuple[int, int, int, int, int, int]], typer.Option(
        "--conv", metavar="H W C M R S",
        help="A convolution: input H x W with C channels, M filters of R x S (with --stride, --pad); the array "
             "runs its im2col GEMM (P*Q, R*S*C, M), DRAM reads the raw input.")] = None,
    stride: Annotated[int, typer.Option("--stride", help="Convolution stride (output floor((H+2*pad-R)/s)+1).")] = 1,
    pad: Annotated[int, typer.Option(
        "--pad", help="Convolution zero padding on each side (not fetched from DRAM).")] = 0,
    rows: Annotated[int, typer.Option("--rows", help="PE array rows.")] = 32,
    cols: Annotated[int, typer.Option("--cols", help="PE array columns.")] = 32,
    dataflow: Annotated[str, typer.Option(
        "--dataflow", help="Dataflow: " + ", ".join(f"{d.name} ({d.description})" for d in DATAFLOWS)
                           + ", or all (a table of every dataflow).")] = "os",
    word_bytes: Annotated[int, typer.Option("--word-bytes", help="Bytes per operand word (2 = bf16, 1 = int8).")] = 2,
    acc_bytes: Annotated[int, typer.Option(
        "--acc-bytes", help="Bytes per accumulator / partial sum (>= word bytes).")] = 4,
    ifmap_kb: Annotated[float, typer.Option(
        "--ifmap-kb", help="Ifmap (A operand) SRAM in KiB, double-buffered.")] = 64.0,
    filter_kb: Annotated[float, typer.Option(
        "--filter-kb", help="Filter (B operand) SRAM in KiB, double-buffered.")] = 64.0,
    ofmap_kb: Annotated[float, typer.Option(
        "--ofmap-kb", help="Ofmap (output / partial sums) SRAM in KiB, double-buffered.")] = 64.0,
    bandwidth: Annotated[float, typer.Option("--bandwidth", metavar="GBPS", help="DRAM bandwidth in GB/s.")] = 25.6,
    clock_ghz: Annotated[float, typer.Option("--clock-ghz", help="Accelerator clock in GHz.")] = 1.0,
    tech: Annotated[Optional[Path], typer.Option(
        "--tech", metavar="FILE", help="A technology table (TOML, the format of a configuration's technology and "
                                       "of accel/data/tech_default.toml) instead of the default 45 nm one.")] = None,
    topology: Annotated[Optional[Path], typer.Option(
        "--topology", metavar="FILE", help="Every layer of a SCALE-Sim topology (.csv) or ONNX model (.onnx): "
                                           "its forward GEMMs costed one by one, with a total row (instead of "
                                           "--gemm/--conv).")] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", help="With --topology: samples per GEMM (SCALE-Sim "
                                                             "runs 1).")] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON instead of a table.")] = False,
) -> None:
    """Cost one GEMM or convolution (or, with --topology, every layer of a network) on one systolic-array
    configuration: cycles, traffic, energy."""
    from dse.config.values import LIMITS, check_number

    for opt, v in (("--rows", rows), ("--cols", cols), ("--ifmap-kb", ifmap_kb), ("--filter-kb", filter_kb),
                   ("--ofmap-kb", ofmap_kb), ("--bandwidth", bandwidth), ("--clock-ghz", clock_ghz),
                   ("--stride", stride), ("--pad", pad), ("--word-bytes", word_bytes), ("--acc-bytes", acc_bytes),
                   *(("--gemm", x) for x in gemm or ()), *(("--conv", x) for x in conv or ())):
        check_number(v, opt, "bandwidth_gbps" if opt == "--bandwidth" else None)
    from dse.cli.options import refuse_unused

    if topology is None:
        refuse_unused(ctx, {"batch": "--batch"}, "applies to --topology only (a --gemm's M or a --conv's output "
                                                   "pixels hold the samples)")
    if conv is None:
        refuse_unused(ctx, {"stride": "--stride", "pad": "--pad"}, "applies to --conv only")
    table = _tech(tech)
    if topology is not None:
        if gemm is not None or conv is not None:
            raise UsageError("--topology: give either --topology FILE or --gemm/--conv, not both")
        check_number(batch, "--batch")
        if batch < 1:
            raise UsageError(f"--batch: samples per GEMM, at least 1, got {batch}")
        if dataflow == "all":
            raise UsageError("--dataflow: with --topology name one dataflow")
        hw = _hardware(rows=rows, cols=cols, dataflow=dataflow, word_bytes=word_bytes, acc_bytes=acc_bytes,
                       ifmap_kb=ifmap_kb, filter_kb=filter_kb, ofmap_kb=ofmap_kb, bandwidth_gbps=bandwidth,
                       clock_ghz=clock_ghz)
        _topology(topology, hw, table, batch, as_json)
        return
    mkn, desc, geo = _gemm_shape(gemm, conv, stride, pad)
    h, w, _, _, r, s_ = conv or (1,) * 6
    unpadded = ((h - r) // stride + 1) * ((w - s_) // stride + 1) if r <= h and s_ <= w else 0
    if conv is not None and mkn[0] > LIMITS["conv"] >= unpadded:  # the padding alone makes the output too large
        raise UsageError(f"--pad: {pad:,} pads the {h}x{w} input to {h + 2 * pad:,}x{w + 2 * pad:,}, an im2col "
                         f"GEMM of M = {mkn[0]:,} rows (at most {LIMITS['conv']:,}); use a smaller --pad")
    for v in mkn:  # a convolution as its im2col GEMM
        check_number(v, "--gemm" if gemm is not None else "--conv")
    if dataflow not in DATAFLOW_NAMES + ("all",):
        raise UsageError(f"--dataflow: must be one of {', '.join(DATAFLOW_NAMES)} or all; got {dataflow!r}")
    flows = DATAFLOW_NAMES if dataflow == "all" else (dataflow,)
    hws = {df: _hardware(rows=rows, cols=cols, dataflow=df, word_bytes=word_bytes, acc_bytes=acc_bytes,
                         ifmap_kb=ifmap_kb, filter_kb=filter_kb, ofmap_kb=ofmap_kb, bandwidth_gbps=bandwidth,
                         clock_ghz=clock_ghz) for df in flows}
    results = {df: _result(desc, mkn, hw, geo, table) for df, hw in hws.items()}
    if as_json:
        typer.echo(json_text(results[dataflow] if dataflow != "all" else
                              {"layer": desc, "dataflows": results}, indent=2))
        return
    from rich.console import Console

    console = Console()
    console.print(f"[bold]{desc}[/bold]")
    console.print(f"{rows}x{cols} {'/'.join(f.upper() for f in flows)} array, SRAM {ifmap_kb:g}/{filter_kb:g}/"
                  f"{ofmap_kb:g} KiB, {word_bytes}-byte words, {acc_bytes}-byte accumulators, DRAM {bandwidth:g} "
                  f"GB/s, {clock_ghz:g} GHz, area {results[flows[0]]['area_mm2']:.3f} mm^2")
    if dataflow == "all":
        _spread_table(console, results)
    else:
        _one_table(console, results[dataflow])


def _spread_table(console, results: dict) -> None:
    """The three dataflows side by side: cycles, DRAM bytes, energy by component, ratio to the best."""
    from rich.table import Table

    flows = list(results)
    best = min(results[f]["energy_pj"]["total"] for f in flows)
    t = Table(title="across dataflows")
    t.add_column("quantity")
    for f in flows:
        t.add_column(f.upper(), justify="right")
    t.add_row("total cycles", *(fmt_number(results[f]["total_cycles"]) for f in flows))
    t.add_row("utilization", *(f"{results[f]['utilization']:.1%}" for f in flows))
    for op in ("ifmap", "filter", "ofmap"):
        t.add_row(f"DRAM bytes {op}", *(fmt_with_unit(results[f]["dram_bytes"][op], "B", 4) for f in flows))
    for c in ("mac", "rf", "interpe", "sram", "dram", "leakage", "total"):
        t.add_row(f"energy {c}", *(fmt_with_unit(results[f]["energy_pj"][c], "pJ", 4) for f in flows))
    t.add_row("energy / best", *(f"{results[f]['energy_pj']['total'] / best:.2f}x" for f in flows))
    console.print(t)
    spread = max(results[f]["energy_pj"]["total"] for f in flows) / best
    lowest = min(flows, key=lambda f: results[f]["energy_pj"]["total"])
    console.print(f"lowest energy: {lowest.upper()}; spread (highest / lowest) {spread:.2f}x")


def _one_table(console, result: dict) -> None:
    from rich.table import Table

    t = Table(title="time")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    for key in ("macs", "compute_cycles", "stall_cycles", "total_cycles"):
        t.add_row(key.replace("_", " "), fmt_number(result[key]))
    t.add_row("utilization", f"{result['utilization']:.2%}")
    t.add_row("time", fmt_with_unit(result["time_s"], "s", 4))
    console.print(t)
    t = Table(title="memory accesses")
    for c in ("operand", "SRAM reads (words)", "SRAM writes (words)", "DRAM traffic"):
        t.add_column(c, justify="right" if c != "operand" else "left")
    for op in ("ifmap", "filter", "ofmap"):
        t.add_row(op, fmt_number(result["sram_reads"][op]), fmt_number(result["sram_writes"][op]),
                  fmt_with_unit(result["dram_bytes"][op], "B", 4))
    console.print(t)
    console.print(f"in the PEs: {fmt_with_unit(result['rf_bytes'], 'B', 4)} register-file traffic, "
                  f"{fmt_with_unit(result['interpe_bytes'], 'B', 4)} between neighbours")
    t = Table(title="energy")
    t.add_column("component")
    t.add_column("energy", justify="right")
    t.add_column("share", justify="right")
    total = result["energy_pj"]["total"]
    for c, v in result["energy_pj"].items():
        t.add_row(c, fmt_with_unit(v, "pJ", 4), f"{v / total:.1%}" if total else "-")
    console.print(t)


def topology_rows(path: Path, hw, tech=None, batch: int = 1) -> list[dict]:
    """Per forward GEMM of the network in ``path`` (a SCALE-Sim topology or an ONNX model), its cost on
    ``hw`` (each op alone, no leakage; a convolution as SCALE-Sim costs it, its im2col matrix read from DRAM,
    where :func:`dse.results.views.layer_table` and a training step fetch the raw input), and a last row
    ``total`` summing them (utilization: MACs over the array's peak in the total cycles)."""
    from accel import gemm_cost
    from models import importers

    if not importers.is_file_model(str(path)):
        raise UsageError(f"--topology: {path}: a SCALE-Sim topology (.csv) or an ONNX model (.onnx)")
    try:
        net = importers.load(str(path))
    except FileNotFoundError:
        raise UsageError(f"--topology: {path}: no such file") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"--topology: {e}") from None
    from dse.config.workload import check_net

    check_net(net, f"--topology {path}")  # sizes the models compute with exactly
    ops = net.training_ops(batch, word_bytes=hw.word_bytes)
    fwd = np.flatnonzero(ops.phase == "fwd")
    recs = ops.to_records()
    c = gemm_cost(ops.M[fwd], ops.K[fwd], ops.N[fwd], ops.repeat[fwd], hw=hw, tech=tech, include_leakage=False)
    rows = []
    for j, i in enumerate(fwd):
        r = recs[i]
        rows.append({"layer": r["name"], "M": int(ops.M[i]), "K": int(ops.K[i]), "N": int(ops.N[i]),
                     "repeat": int(ops.repeat[i]), "macs": int(r["macs"]), "cycles": int(c.total_cycles[j]),
                     "utilization": float(c.utilization[j]), "time_s": float(c.total_cycles[j]) / (hw.clock_ghz * 1e9),
                     "dram_bytes": int(c.dram_read_bytes[j] + c.dram_write_bytes[j]),
                     **{f"energy_j_{k}": float(v[j]) * 1e-12 for k, v in c.energy_pj.items() if k != "leakage"}})
    total = {"layer": "total"}
    for k in rows[0] if rows else ():
        if k not in ("layer", "M", "K", "N", "repeat", "utilization"):
            total[k] = sum(r[k] for r in rows)
    if rows:
        total["utilization"] = total["macs"] / (total["cycles"] * hw.rows * hw.cols) if total["cycles"] else 0.0
        rows.append(total)
    return rows


def _topology(path: Path, hw, tech, batch: int, as_json: bool) -> None:
    rows = topology_rows(path, hw, tech, batch)
    if as_json:
        typer.echo(json_text(rows, indent=2))
        return
    from dse.cli.output import echo_table, terminal_width
    from dse.results.formats import si_scale

    typer.echo(f"{path.name}: {len(rows) - 1} forward GEMMs, batch {batch}, on a {hw.rows}x{hw.cols} "
               f"{hw.dataflow.upper()} array ({hw.bandwidth_gbps:g} GB/s DRAM, {hw.clock_ghz:g} GHz); each op "
               "costed alone, without leakage")
    cols = ["layer", "M", "K", "N", "macs", "cycles", "utilization", "time_s", "dram_bytes", "energy_j_total",
            "energy_j_dram"]
    heads = {}
    for col, (name, unit) in {"time_s": ("time", "s"), "dram_bytes": ("dram", "B"),
                              "energy_j_total": ("energy", "J"), "energy_j_dram": ("energy_dram", "J")}.items():
        div, u = si_scale([r[col] for r in rows], unit)
        heads[col] = f"{name} [{u}]"
        for r in rows:
            r[col] = r[col] / div
    echo_table([{c: r.get(c) for c in cols} for r in rows], cols, headers=heads, width=terminal_width())
