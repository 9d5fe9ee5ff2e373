"""``dse pipeline``: time one training step of a pipeline schedule over several accelerators.

Two ways in: explicit per-stage times (``--tf --tb --tw [--comm] [--tp]``, any unit, the same for all), or a
zoo model cut into balanced stages on an accelerator (``--model`` and the hardware options; times in ms).
A thin layer over :mod:`accel.pipeline` and :mod:`dse.evaluation.multi_accelerator`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from accel import DATAFLOW_NAMES
from accel.pipeline import SCHEDULES
from dse.config.values import json_text
from dse.errors import UsageError
from models.nets.registry import DATASETS
from models.schemes import PREDICTING

__all__ = ["pipeline", "explicit_steps", "model_steps"]


#: the options that describe the accelerator a --model is costed on (parameter name -> option)
MODEL_OPTIONS = {"dataset": "--dataset", "batch": "--batch", "rows": "--rows", "cols": "--cols",
                 "dataflow": "--dataflow", "sram_kb": "--sram-kb", "bandwidth": "--bandwidth",
                 "clock_ghz": "--clock-ghz", "link_gbps": "--link-gbps", "link_latency_us": "--link-latency-us",
                 "replicas": "--replicas"}


#: the schedules that run several model chunks per device (--chunks)
CHUNKED = ", ".join(n for n, s in SCHEDULES.items() if s.chunked)


def _schedules(text: str, chunks: int = 1) -> list[str]:
    """The schedules named (``all``: every schedule that runs ``chunks`` model chunks per device)."""
    if text == "all":
        return [n for n, s in SCHEDULES.items() if s.chunked == (chunks > 1)]
    names = [s.strip() for s in text.split(",") if s.strip()]
    for n in names:
        if n not in SCHEDULES:
            raise UsageError(f"--schedule: {n!r} is not a schedule; choose from {', '.join(SCHEDULES)} "
                             "(a comma-separated list, or all)")
    if not names:
        raise UsageError("--schedule: name at least one schedule")
    return names


def _summary(name: str, bp, gp, gp_fraction: float, samples_per_step: int | None, unit: str) -> dict:
    """Figures of one schedule: its BP step, its GP step (if any) and the mix at ``gp_fraction``."""
    period = (1 - gp_fraction) * bp.span + gp_fraction * (gp.span if gp is not None else 0.0)
    busy = (1 - gp_fraction) * sum(bp.busy) + gp_fraction * (sum(gp.busy) if gp is not None else 0.0)
    out = {"schedule": name, "unit": unit, "gp_fraction": gp_fraction, "period": period,
           "bubble_rate": 1 - busy / (bp.stages * period) if period > 0 else 0.0,
           "speedup_vs_bp_steps": bp.span / period if period > 0 else 0.0,
           "bp_step": bp.to_dict(), "gp_step": gp.to_dict() if gp is not None else None}
    if samples_per_step:
        scale = 1e-3 if unit == "ms" else 1.0
        out["throughput"] = samples_per_step / (period * scale)
    return out


def explicit_steps(stages: int, microbatches: int, tf: float, tb: float, tw: float, *, comm: float = 0.0,
                   schedule: str = "1f1b", chunks: int = 1, gp_fraction: float = 0.0, tp: float = 0.0):
    """(BP step, GP step or None) of equal stages with the given times."""
    from accel.pipeline import StageCosts, simulate

    costs = StageCosts.uniform(stages, tf, tb, tw, comm=comm, chunks=chunks, P=tp)
    bp = simulate(costs, schedule, microbatches)
    gp = simulate(costs, schedule, microbatches, gp=True) if gp_fraction > 0 else None
    return bp, gp


def model_steps(cfg, schedule: str, gp_fraction: float):
    """(BP step, GP step or None, ModelPipeline) of ``cfg``'s first model in its ``[parallel]`` pipeline;
    times in seconds. The BP step is plain BP, or the BP phase of ``cfg``'s gradient scheme when
    ``gp_fraction > 0``; the GP step is that scheme's."""
    from accel.pipeline import pipeline_job
    from dse.evaluation.multi_accelerator import model_stages

    par = cfg.parallel
    mp = model_stages(cfg, cfg.workload.models[0])
    kw = dict(n_steps=1, samples_per_step=cfg.workload.batch, replicas=par.replicas, link=par.link)
    scheme = cfg.training.scheme if gp_fraction > 0 else "bp"
    bp = pipeline_job(mp, schedule, par.microbatches, scheme=scheme, gp_fraction=0.0, **kw).step["bp"]
    gp = pipeline_job(mp, schedule, par.microbatches, scheme=scheme, gp_fraction=1.0, **kw).step["gp"] \
        if gp_fraction > 0 else None
    return bp, gp, mp


def _scaled(step, k: float):
    """A step's times multiplied by ``k`` (seconds to milliseconds)."""
    from dataclasses import replace

    from accel.pipeline import OpRecord

    return replace(step, makespan=step.makespan * k, span=step.span * k,
                   busy=tuple(b * k for b in step.busy), idle=tuple(b * k for b in step.idle),
                   timeline=tuple(OpRecord(r.device, r.kind, r.mb, r.chunk, r.start * k, r.end * k)
                                  for r in step.timeline))


def pipeline(
    stages: Annotated[int, typer.Option("--stages", "-p", help="Pipeline stages (one accelerator each).")] = 4,
    microbatches: Annotated[int, typer.Option("--microbatches", "-m", help="Micro-batches per step.")] = 8,
    schedule: Annotated[str, typer.Option(
        "--schedule", "-s", help=f"{', '.join(SCHEDULES)}; a comma-separated list, or "
                                 "all (every schedule that runs --chunks model chunks per device).")] = "1f1b",
    chunks: Annotated[int, typer.Option("--chunks", "-v", help=f"Model chunks per device (for {CHUNKED}).")] = 1,
    tf: Annotated[Optional[float], typer.Option(
        "--tf", help="Forward time of one micro-batch per stage (any unit, the same for every time).")] = None,
    tb: Annotated[Optional[float], typer.Option("--tb", help="Input-gradient time per micro-batch per stage.")] = None,
    tw: Annotated[Optional[float], typer.Option("--tw", help="Weight-gradient time per micro-batch per stage.")] = None,
    comm: Annotated[float, typer.Option("--comm", help="Link transfer time of one micro-batch's activations "
                                                       "(or gradients) between neighbouring stages.")] = 0.0,
    tp: Annotated[float, typer.Option("--tp", help="Predictor work per micro-batch in a GP step (with --tf).")] = 0.0,
    gp_fraction: Annotated[float, typer.Option(
        "--gp-fraction", help="Share of steps that are GP steps of --scheme (0-1): reports the GP step and the "
                              "mix.")] = 0.0,
    scheme: Annotated[Optional[str], typer.Option(
        "--scheme", help=f"With --model and --gp-fraction: the gradient scheme ({', '.join(PREDICTING)}; default: "
                         "the configuration's default, adagp).")] = None,
    model: Annotated[Optional[str], typer.Option(
        "--model", help="A zoo model, cut into balanced stages on the accelerator "
                        "(instead of --tf/--tb/--tw).")] = None,
    dataset: Annotated[Optional[str], typer.Option(
        "--dataset", help=f"With --model: {', '.join(DATASETS)} (default: the model's own).")] = None,
    batch: Annotated[int, typer.Option("--batch", "-b", help="With --model: samples per step (all micro-batches "
                                                            "of all replicas).")] = 32,
    rows: Annotated[int, typer.Option("--rows", help="PE array rows (with --model).")] = 32,
    cols: Annotated[int, typer.Option("--cols", help="PE array columns (with --model).")] = 32,
    dataflow: Annotated[str, typer.Option("--dataflow", help=f"{', '.join(DATAFLOW_NAMES)} (with --model).")] = "os",
    sram_kb: Annotated[float, typer.Option("--sram-kb", help="KiB of each of the three SRAMs (with --model).")] = 64.0,
    bandwidth: Annotated[float, typer.Option("--bandwidth", metavar="GBPS", help="DRAM GB/s (with --model).")] = 25.6,
    clock_ghz: Annotated[float, typer.Option("--clock-ghz", help="Clock in GHz (with --model).")] = 1.0,
    link_gbps: Annotated[float, typer.Option("--link-gbps", help="Link GB/s between stages (with --model).")] = 50.0,
    link_latency_us: Annotated[float, typer.Option("--link-latency-us",
                                                   help="Link latency in microseconds (with --model).")] = 5.0,
    replicas: Annotated[int, typer.Option("--replicas", "-d", help="Data-parallel replicas (with --model).")] = 1,
    width: Annotated[int, typer.Option("--width", help="Columns of the ASCII Gantt chart (0: none).")] = 96,
    trace: Annotated[Optional[Path], typer.Option(
        "--trace", help="Write the (first schedule's) BP step as Chrome trace-event JSON (Perfetto, "
                        "chrome://tracing).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    ctx: typer.Context = None,  # type: ignore[assignment]  (None: called from Python, options as given)
) -> None:
    """Time one training step of pipeline schedules: makespan, span, bubble rate, idle time and peak
    activations per stage, an ASCII Gantt chart; with --gp-fraction also the GP step of a gradient scheme
    (with --tf/--tb/--tw: forward and predictor only, no backward, no backward messages; with --model: the
    scheme's own ops) and the mix."""
    from accel.pipeline import chrome_trace, gantt
    from dse.config.outputs import check_file, writing
    from dse.config.values import check_number

    for opt, v, field in (("--stages", stages, None), ("--microbatches", microbatches, None),
                          ("--chunks", chunks, None), ("--tf", tf, None), ("--tb", tb, None), ("--tw", tw, None),
                          ("--comm", comm, None), ("--tp", tp, None), ("--gp-fraction", gp_fraction, None),
                          ("--batch", batch, None), ("--rows", rows, None), ("--cols", cols, None),
                          ("--sram-kb", sram_kb, "ifmap_kb"), ("--bandwidth", bandwidth, "bandwidth_gbps"),
                          ("--clock-ghz", clock_ghz, None), ("--link-gbps", link_gbps, None),
                          ("--link-latency-us", link_latency_us, None), ("--replicas", replicas, None),
                          ("--width", width, None)):
        check_number(v, opt, field)  # finite, and small enough that no time, count or chart size overflows
    names = _schedules(schedule, chunks)
    if schedule == "all" and (left := [n for n in SCHEDULES if n not in names]):
        typer.echo(f"note: --schedule all: {', '.join(left)} left out (for "
                   + ("one model chunk per device: --chunks 1)" if chunks > 1 else
                      "several model chunks per device: --chunks 2 or more)"), err=True)
    if trace is not None:
        check_file(trace, "--trace")
    if not 0.0 <= gp_fraction <= 1.0:
        raise UsageError(f"--gp-fraction: must be in [0, 1], got {gp_fraction}")
    if chunks > 1 and stages < 2:  # as [parallel] refuses it (dse.config.parallel)
        raise UsageError("--stages: model chunks interleave across devices and need at least 2 stages, got 1 (on "
                         "one device use --chunks 1)")
    if width and width < 10:
        raise UsageError(f"--width: at least 10 columns (0 for no chart), got {width}")
    if scheme is not None and (model is None or gp_fraction == 0):
        raise UsageError("--scheme: give it with --model and --gp-fraction > 0 (the scheme's GP step is costed "
                         "from the model's ops; explicit --tf/--tb/--tw times have no scheme)")
    explicit = [o for o, v in (("--tf", tf), ("--tb", tb), ("--tw", tw)) if v is not None]
    results, steps = [], []
    if model is None:
        if len(explicit) != 3:
            raise UsageError("--tf/--tb/--tw: give all three per-stage times (or --model to cost a zoo model)")
        from dse.cli.options import refuse_unused

        refuse_unused(ctx, MODEL_OPTIONS, "applies to --model only (explicit --tf/--tb/--tw times have no accelerator)")
        if gp_fraction == 0:
            refuse_unused(ctx, {"tp": "--tp"}, "the predictor's work in a GP step, which needs --gp-fraction > 0")
        for n in names:
            try:
                bp, gp = explicit_steps(stages, microbatches, tf, tb, tw, comm=comm, schedule=n, chunks=chunks,
                                        gp_fraction=gp_fraction, tp=tp)
            except ValueError as e:
                raise UsageError(_option(str(e))) from None
            results.append(_summary(n, bp, gp, gp_fraction, None, "time"))
            steps.append((n, bp, gp))
        header = (f"{stages} stages, {microbatches} micro-batches, F {tf:g} B {tb:g} W {tw:g} comm {comm:g}"
                  + (f", P {tp:g}" if gp_fraction > 0 else ""))
        unit = "time"
    else:
        if explicit:
            raise UsageError(f"{explicit[0]}: give either --model or explicit times, not both")
        cfg = _model_config(model, dataset, batch, rows, cols, dataflow, sram_kb, bandwidth, clock_ghz, stages,
                            microbatches, names[0], chunks, link_gbps, link_latency_us, replicas, scheme)
        header = ""
        for n in names:
            from dataclasses import replace

            try:
                c = replace(cfg, parallel=replace(cfg.parallel, schedule=n)) if n != names[0] else cfg
                bp, gp, mp = model_steps(c, n, gp_fraction)
            except (ValueError, UsageError) as e:  # a [parallel] field's message, named as its option
                raise UsageError(_option(str(e).removeprefix("parallel."))) from None
            bp, gp = _scaled(bp, 1e3), (_scaled(gp, 1e3) if gp is not None else None)
            r = _summary(n, bp, gp, gp_fraction, batch, "ms")
            r["stage_starts"], r["stage_imbalance"] = list(mp.starts), mp.imbalance
            r["F_ms"], r["B_ms"], r["W_ms"] = ([x * 1e3 for x in getattr(mp.bp, f)] for f in "FBW")
            results.append(r)
            steps.append((n, bp, gp))
            header = (f"{model} (batch {batch}, micro-batches of {mp.microbatch}) on {stages} x {rows}x{cols} "
                      f"{dataflow.upper()}, {replicas} replica(s); stages start at layers "
                      f"{', '.join(map(str, mp.starts))} (imbalance {mp.imbalance:.3f}); times in ms")
        unit = "ms"
    if trace is not None:
        with writing(trace, "--trace") as tmp:
            tmp.write_text(json_text(chrome_trace(steps[0][1], time_unit=1e-3 if unit == "ms" else 1.0)))
    if as_json:
        typer.echo(json_text(results if len(results) > 1 else results[0], indent=2))
        return
    typer.echo(header)
    from dse.cli.output import echo_unit_table

    rows_out = [{"schedule": r["schedule"], "makespan": r["bp_step"]["makespan"], "span": r["bp_step"]["span"],
                 "bubble": r["bp_step"]["bubble_rate"], "peak_act": max(r["bp_step"]["peak_act"]),
                 **({"peak_act_bytes": max(r["bp_step"]["peak_act_bytes"])} if unit == "ms" else {}),
                 **({"gp_span": r["gp_step"]["span"], "mix_period": r["period"], "mix_bubble": r["bubble_rate"],
                     "mix_speedup": r["speedup_vs_bp_steps"]} if gp_fraction > 0 else {}),
                 **({"throughput": r["throughput"]} if "throughput" in r else {})}
                for r in results]
    t = "ms" if unit == "ms" else "time"  # explicit times: the unit the user gave them in
    echo_unit_table(rows_out, {"makespan": t, "span": t, "gp_span": t, "mix_period": t, "bubble": "0-1",
                               "mix_bubble": "0-1", "peak_act": "micro-batches", "peak_act_bytes": "B",
                               "mix_speedup": "x", "throughput": "samples/s"},
                    {"peak_act_bytes": "peak_act"})
    for n, bp, gp in steps:
        typer.echo("")
        typer.echo(f"{n}: per stage busy {_fmt(bp.busy)}, idle {_fmt(bp.idle)}, peak activations "
                   f"{_fmt(bp.peak_act)} micro-batches")
        if width:
            typer.echo(gantt(bp, width))
            if gp is not None:
                typer.echo(f"{n}, GP step (F forward, P predictor, U update), same time scale:")
                typer.echo(gantt(gp, width, until=max(bp.makespan, gp.makespan)))
    if width:
        typer.echo("\nF forward, B backward (input gradient, or the whole backward), W weight gradient, "
                   "~ all-reduce, U update, . idle; lower case: model chunks after the first")
    if trace is not None:
        typer.echo(f"trace of {steps[0][0]}'s step written to {trace} (open in https://ui.perfetto.dev)")


def _fmt(xs) -> str:
    return "[" + ", ".join(f"{x:.4g}" for x in xs) + "]"


_OPTIONS = {"stages": "--stages", "microbatches": "--microbatches", "chunks": "--chunks", "schedule": "--schedule",
            "tf": "--tf", "tb": "--tb", "tw": "--tw", "comm": "--comm", "tp": "--tp", "link_gbps": "--link-gbps",
            "link_latency_us": "--link-latency-us", "replicas": "--replicas", "parallel.microbatches":
            "--microbatches", "parallel.stages": "--stages"}


def _option(msg: str) -> str:
    """A library message ``field: ...`` with the field named as its command-line option."""
    field, _, rest = msg.partition(":")
    return f"{_OPTIONS[field]}:{rest}" if field in _OPTIONS and rest else msg


def _model_config(model, dataset, batch, rows, cols, dataflow, sram_kb, bandwidth, clock_ghz, stages,
                  microbatches, schedule, chunks, link_gbps, link_latency_us, replicas, scheme=None):
    from accel import Hardware
    from dse.config.configuration import Configuration, check_scheme
    from dse.config.parallel import ParallelConfig, microbatch_size
    from dse.config.workload import Workload
    from models.surrogate import SurrogateConfig

    w = {"models": [model], "batch": batch}
    if dataset is not None:
        if dataset not in DATASETS:
            raise UsageError(f"--dataset: {dataset!r} is not a data set; choose one of {', '.join(DATASETS)}")
        w["dataset"] = dataset
    workload = Workload.from_dict(w, where="--model")
    try:
        hw = Hardware(rows=rows, cols=cols, dataflow=dataflow, ifmap_kb=sram_kb, filter_kb=sram_kb,
                      ofmap_kb=sram_kb, bandwidth_gbps=bandwidth, clock_ghz=clock_ghz)
    except ValueError as e:
        field, _, rest = str(e).partition(":")
        opt = {"ifmap_kb": "--sram-kb", "filter_kb": "--sram-kb", "ofmap_kb": "--sram-kb",
               "bandwidth_gbps": "--bandwidth", "clock_ghz": "--clock-ghz"}.get(field, f"--{field}")
        raise UsageError(f"{opt}:{rest}") from None
    try:
        par = ParallelConfig(stages=stages, microbatches=microbatches, schedule=schedule, chunks=chunks,
                             link_gbps=link_gbps, link_latency_us=link_latency_us, replicas=replicas)
        microbatch_size(batch, par)
    except ValueError as e:
        raise UsageError(_option(str(e))) from None
    training = SurrogateConfig()
    if scheme is not None:
        if scheme not in PREDICTING:
            raise UsageError(f"--scheme: one of {', '.join(PREDICTING)}; got {scheme!r}")
        check_scheme(scheme, "--scheme")
        training = training.replace(scheme=scheme)
    return Configuration(workload=workload, training=training, hardware=hw, parallel=par)
