"""``dse evaluate``: one configuration over one or more zoo models."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from dse.errors import UsageError
from dse.results.formats import fmt_with_unit


def evaluate_cmd(
    config: Path = typer.Argument(..., help="Configuration file (TOML): [workload], [training], [hardware], "
                                            "[reference], optional [schedule] gp_fraction; what `dse export` "
                                            "writes."),
    model: Optional[List[str]] = typer.Option(None, "--model", "-m",
                                              help="Evaluate these zoo models (or workload files, .csv "
                                                   "SCALE-Sim topologies / .onnx models) instead of the file's "
                                                   "workload.models (repeatable)."),
    seeds: Optional[int] = typer.Option(None, "--seeds",
                                        help="Surrogate seeds (S..S+N-1) for the accuracy figures (default: the "
                                             "file's `seeds`, else 3)."),
    first_seed: Optional[int] = typer.Option(None, "--first-seed", metavar="S",
                                             help="The first surrogate seed S (default: the file's "
                                                  "`first_seed`, else 0); e.g. 100 re-checks an exported "
                                                  "configuration on seeds no search has seen."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: {\"models\": [...], \"summary\": {...}, "
                                                        "\"metrics\": {...}}."),
) -> None:
    """Step time per phase, job time and energy, speed-up against plain BP on the reference accelerator,
    the algorithmic speed-up on the same hardware, energy saving, area and power, per model and overall.

    The GP fraction comes from the training surrogate (cached) unless [schedule] gp_fraction states it.
    """
    from dataclasses import replace

    from dse.cli.output import echo_json, echo_table, echo_unit_table
    from dse.config.configuration import MAX_FIRST_SEED, MAX_SEEDS, load_configuration
    from dse.config.workload import Workload
    from dse.evaluation.evaluator import evaluate as run

    if seeds is not None and not 1 <= seeds <= MAX_SEEDS:
        raise UsageError(f"--seeds: must be an integer from 1 to {MAX_SEEDS}, got {seeds}")
    if first_seed is not None and not 0 <= first_seed <= MAX_FIRST_SEED:
        raise UsageError(f"--first-seed: must be an integer from 0 to {MAX_FIRST_SEED}, got {first_seed}")
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
    if first_seed is not None:
        cfg = replace(cfg, first_seed=first_seed)
    out = run(cfg)
    if json_out:
        echo_json(out)
        return
    rows = [{
        "model": r["model"],
        "speedup": r["speedup"],
        "same_hw": r["speedup_same_hw"],
        "energy": r["energy_j"],
        "saving": 100 * r["energy_saving"],
        "step_ref": r["step_ms_bp_ref"],
        "step_bp": r["step_ms_scheme_bp"],
        "step_gp": r["step_ms_gp"],
        "dram_bp": r["dram_gb_per_step_scheme_bp"],
        "dram_gp": r["dram_gb_per_step_gp"],
    } for r in out["models"]]
    echo_unit_table(rows, MODEL_UNITS)
    s, m = out["summary"], out["metrics"]
    typer.echo("")
    echo_table(metric_rows(m))  # every metric the registry computed for it, with its unit
    typer.echo("")
    typer.echo(f"peak power {fmt_with_unit(s['peak_power_w'], 'W')}; the reference accelerator running plain BP: "
               f"energy {fmt_with_unit(s['energy_j_ref'], 'J', 4)}, area {fmt_with_unit(s['area_mm2_ref'], 'mm^2', 4)}")
    if cfg.parallel is not None:
        par = cfg.parallel
        typer.echo(f"pipeline: {par.stages} stages x {par.replicas} replica(s) = {par.devices} accelerators, "
                   f"{par.schedule}, {par.microbatches} micro-batches per step (energy, average power: the whole "
                   "system; area, peak power: one accelerator)")
    if cfg.training.scheme == "bp":  # no GP phase: a [schedule] gp_fraction does not apply
        typer.echo("GP fraction 0: training.scheme is bp (plain back-propagation)"
                   + (f"; the [schedule] gp_fraction {cfg.gp_fraction:g} does not apply" if cfg.gp_fraction else ""))
    else:
        src = "what-if ([schedule])" if cfg.gp_fraction is not None else "surrogate"
        typer.echo(f"GP fraction of post-warm-up steps from the {src}; warm-up {s['warmup']:.2f}")
    if out.get("proxy") is not None or "accuracy" in m:
        first, last = cfg.seed_list[0], cfg.seed_list[-1]
        seeds = f"seed {first}" if first == last else f"the mean of seeds {first}..{last}, ± its standard error"
        several = (" (accuracy, accuracy_drop, predictor_gain: the first task's; accuracy_drop_worst: the worst "
                   "task's; <task>_...: each task's)") if cfg.training.tasks else ""
        typer.echo(f"proxy accuracy: the accuracy figures above are measured on the prox{'ies' if several else 'y'} "
                   f"{cfg.training.proxy}{several}, not on the zoo models ({seeds})")


#: the per-model table's units (steps in ms per training step, DRAM traffic in GB per step)
MODEL_UNITS = {"speedup": "x", "same_hw": "x", "energy": "J", "saving": "%", "step_ref": "ms", "step_bp": "ms",
               "step_gp": "ms", "dram_bp": "GB", "dram_gp": "GB"}


def metric_rows(metrics: dict) -> list[dict]:
    """One row per metric present in ``metrics``, in the registry's order: name, value, unit, the value
    SI-prefixed where its unit takes a prefix (110.9 kJ, not 1.109e+05 J); each metric's description:
    :mod:`dse.evaluation.metrics`."""
    from dse.evaluation import metrics as registry
    from dse.results.formats import si_scale

    rows = []
    for x in registry.all_metrics():
        if x.name in metrics:
            v = metrics[x.name]
            div, unit = si_scale([v], x.unit)
            row = {"metric": x.name, "value": v / div if isinstance(v, (int, float)) else v, "unit": unit}
            if f"{x.name}_se" in metrics:  # a mean over seeds: its standard error beside it, in the same unit
                row["±se"] = metrics[f"{x.name}_se"] / div
            rows.append(row)
    for name in registry.extra_figures(metrics):
        like = registry.like(name)  # a proxy task's own figure (several tasks), or the tasks' rank agreement
        rows.append({"metric": name, "value": metrics[name], "unit": like.unit if like is not None else ""})
    return rows
