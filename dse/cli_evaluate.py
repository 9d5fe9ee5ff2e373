"""``dse evaluate``: one configuration over one or more zoo models."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from dse.errors import UsageError


def evaluate(
    config: Path = typer.Argument(..., help="Configuration file (TOML): [workload], [training], [hardware], "
                                            "[reference], optional [schedule] gp_fraction; what `dse export` "
                                            "writes."),
    model: Optional[List[str]] = typer.Option(None, "--model", "-m",
                                              help="Evaluate these zoo models (or workload files, .csv "
                                                   "SCALE-Sim topologies / .onnx models) instead of the file's "
                                                   "workload.models (repeatable)."),
    seeds: Optional[int] = typer.Option(None, "--seeds",
                                        help="Surrogate seeds (0..N-1) for the accuracy figures (default: the "
                                             "file's `seeds`, else 3)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: {\"models\": [...], \"summary\": {...}, "
                                                        "\"metrics\": {...}}."),
) -> None:
    """Step time per phase, job time and energy, speed-up against plain BP on the reference accelerator,
    the algorithmic speed-up on the same hardware, energy saving, area and power, per model and overall.

    The GP fraction comes from the training surrogate (cached) unless [schedule] gp_fraction states it.
    """
    from dataclasses import replace

    from dse.cli import echo_json, echo_table
    from dse.evaluate import evaluate as run, load_configuration
    from dse.workload import Workload

    if seeds is not None and not 1 <= seeds <= 10:
        raise UsageError(f"--seeds: must be an integer from 1 to 10, got {seeds}")
    cfg = load_configuration(config)
    if model:  # zoo names or workload files (relative to the working directory); Workload checks them
        d = cfg.workload.to_dict()
        d["models"] = list(model)
        d.pop("model_args", None)
        try:
            cfg = replace(cfg, workload=Workload.from_dict(d))
        except UsageError as e:  # "workload.models: unknown model ..." -> "--model: unknown model ..."
            raise UsageError(f"--model: {str(e).split(': ', 1)[-1]}") from None
    if seeds is not None:
        cfg = replace(cfg, seeds=seeds)
    out = run(cfg)
    if json_out:
        echo_json(out)
        return
    rows = [{
        "model": r["model"],
        "speedup": r["speedup"],
        "same_hw": r["speedup_same_hw"],
        "energy_J": r["energy_j"],
        "saving_%": 100 * r["energy_saving"],
        "step_ms_ref": r["step_ms_bp_ref"],
        "step_ms_bp": r["step_ms_scheme_bp"],
        "step_ms_gp": r["step_ms_gp"],
        "dram_GB_bp": r["dram_gb_per_step_bp"],
        "dram_GB_gp": r["dram_gb_per_step_gp"],
    } for r in out["models"]]
    echo_table(rows, floatfmt="{:.4g}")
    s, m = out["summary"], out["metrics"]
    typer.echo("")
    typer.echo(f"speed-up (geomean) {s['speedup_geomean']:.3f}x vs plain BP on the reference; "
               f"{s['speedup_same_hw_geomean']:.3f}x on the same hardware")
    typer.echo(f"energy {s['energy_j']:.4g} J, saving {100 * s['energy_saving_total']:.1f}% vs the reference; "
               f"area {s['area_mm2']:.3f} mm^2 (reference {s['area_mm2_ref']:.3f}); average power "
               f"{s['power_w']:.3g} W, peak {s['peak_power_w']:.3g} W")
    if cfg.parallel is not None:
        par = cfg.parallel
        typer.echo(f"pipeline: {par.stages} stages x {par.replicas} replica(s) = {par.devices} accelerators, "
                   f"{par.schedule}, {par.microbatches} micro-batches per step; {s['throughput']:.4g} samples/s, "
                   f"bubble {s['bubble_rate']:.3f}, peak activations {s['peak_act_bytes'] / 1e6:.4g} MB per "
                   f"device (energy, average power: the whole system; area, peak power: one accelerator)")
    src = "what-if ([schedule])" if cfg.gp_fraction is not None else "surrogate"
    typer.echo(f"GP fraction {m['gp_fraction']:.3f} of post-warm-up steps ({src}); warm-up {s['warmup']:.2f}")
    if "accuracy" in m:
        typer.echo(f"proxy accuracy {m['accuracy']:.2f}% (drop {m['accuracy_drop']:+.2f} points vs BP, "
                   f"predictor gain {m['predictor_gain']:+.2f} points vs the null control), measured on the "
                   f"proxy {cfg.training.proxy}, not on the zoo models")
