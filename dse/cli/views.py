"""``dse show``, ``dse init``, ``dse report``: what a researcher looks at (thin: the work is in dse.results.views,
dse.figures.report and the study API)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import List, Optional

import typer

from dse.cli.options import STORAGE_OPT, STUDY_ARG, load_spec
from dse.config.values import json_text
from dse.errors import UsageError

#: the commands this module adds to `dse`
COMMANDS = ("show", "init", "report", "compare", "sweep")
FORMATS = ("table", "csv", "json")


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise UsageError(f"--format: {fmt!r}; choose one of {', '.join(FORMATS)}")


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    if rows:
        cols = list(dict.fromkeys(k for r in rows for k in r))
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def show(
    study_file: Path = STUDY_ARG,
    trial: int = typer.Argument(..., metavar="TRIAL", help="Trial number (as `dse pareto` lists them)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Only this model of the workload."),
    layers: bool = typer.Option(False, "--layers", help="Also the per-layer, per-phase table (one plain-BP "
                                                        "training step on the trial's accelerator)."),
    fmt: str = typer.Option("table", "--format", "-f",
                            help="table, csv (the per-layer table with --layers, else the per-model table) "
                                 "or json (everything)."),
    storage: Optional[str] = STORAGE_OPT,
) -> None:
    """One trial in depth: its knobs, every metric with its unit, the per-model breakdown (step times per
    phase, DRAM traffic, energy by component) and, with --layers, every op of one plain-BP training step (cycles,
    utilization, stalls, DRAM bytes, energy by component)."""
    _check_format(fmt)
    spec = load_spec(study_file)
    from dse.results.formats import si_scale
    from dse.results.views import find_trial, frozen_trial_detail, unit_of

    if trial < 0:
        raise UsageError(f"TRIAL: must be a trial number >= 0, got {trial}")
    import dse

    with dse.open_study(spec, storage=storage) as study:
        t = find_trial(study.optuna, trial)
    d = frozen_trial_detail(t, spec, model=model, layers=layers)  # the breakdown holds no connection
    if fmt == "json":
        typer.echo(json_text(d, indent=2, default=float))
        return
    layer_rows = [{"model": m, **r} for m, rows in d.get("layers", {}).items() for r in rows]
    if fmt == "csv":
        if "models" not in d:
            raise UsageError(f"TRIAL: trial {trial} is {d['state']} ({d['reason']}); it has no table")
        typer.echo(_csv(layer_rows if layers else d["models"]).rstrip("\n"))
        return
    from dse.cli.output import echo_table, echo_unit_table

    objectives = dict(zip(spec.metrics, spec.directions))
    head = f"trial {trial}: {d['state']}"
    if "feasible" in d:
        head += ", feasible" if d["feasible"] else ", violates a constraint"
    typer.echo(head)
    if "reason" in d:
        typer.echo(f"reason: {d['reason']}")
    typer.echo("")
    typer.echo("knobs (as sampled; the measured GP fraction is the metric gp_fraction below)")
    echo_table([{"knob": k, "value": str(v)} for k, v in d["params"].items()])
    if "metrics" not in d:
        return
    typer.echo("")
    rows = []
    metrics = d["metrics"]
    spread = any(f"{m}_se" in metrics for m in metrics)
    for m, v in metrics.items():
        if m == "seeds" or (m.endswith("_se") and m[:-3] in metrics):
            continue
        roles = [f"objective ({objectives[m]})"] if m in objectives else []
        roles += [f"constraint {c.bounds()}: {'met' if d['constraints'][str(c)] <= 0 else 'violated'}"
                  for c in spec.constraints if c.metric == m]
        role = "; ".join(roles)
        div, unit = si_scale([v], unit_of(m))  # 1.1e5 J as 110 kJ
        row = {"metric": m, "value": v / div if isinstance(v, (int, float)) else v}
        if spread:
            se = metrics.get(f"{m}_se")
            row["±"] = se / div if isinstance(se, (int, float)) else None
        rows.append({**row, "unit": unit, "role": role})
    sur = d.get("surrogate", {})
    seeds = ("" if "seeds" not in metrics else "; one surrogate seed, no spread" if metrics["seeds"] == 1 else
             f"; mean of {metrics['seeds']} surrogate seeds, ± the standard error of the mean")
    tasks = sur.get("tasks") or d["config"]["training"].get("tasks")
    who = (f"tasks {tasks if isinstance(tasks, str) else ','.join(tasks)} (accuracy, accuracy_drop, "
           "predictor_gain: the first's; accuracy_drop_worst: the worst task's)" if tasks else
           f"task {sur.get('task', d['config']['training'].get('task', '?'))}")
    typer.echo(f"metrics (accuracy figures: the training surrogate on its proxy {who}, not the zoo model{seeds})")
    echo_table(rows, floatfmt="{:.5g}")
    typer.echo("")
    typer.echo("per model (time per step for plain BP on the reference, and this design's BP-phase and "
               "GP-phase steps; DRAM traffic per step; the job's energy by component)")
    from dse.evaluation.evaluator import energy_components

    parts = energy_components(d["models"])  # one accelerator's (mac ... leakage), several's (dynamic, link ...)
    names = {"speedup_same_hw": "same_hw", "step_ms_bp_ref": "step_ref", "step_ms_scheme_bp": "step_bp",
             "step_ms_gp": "step_gp", "dram_gb_per_step_scheme_bp": "dram_bp", "dram_gb_per_step_gp": "dram_gp",
             "energy_j": "energy", **{f"energy_j_{k}": k for k in parts}}
    units = {"speedup": "x", "speedup_same_hw": "x", "step_ms_bp_ref": "ms", "step_ms_scheme_bp": "ms",
             "step_ms_gp": "ms", "dram_gb_per_step_scheme_bp": "GB", "dram_gb_per_step_gp": "GB", "energy_j": "J",
             **{f"energy_j_{k}": "J" for k in parts}}
    echo_unit_table([{c: r.get(c) for c in ["model", *units]} for r in d["models"]], units, names,
                    columns=["model", *units])
    if layers:
        typer.echo("")
        typer.echo("per layer and phase (one plain-BP step; each op costed alone: the step's schedule adds "
                   "activation-stash stalls and leakage)")
        cols = ["model", "layer", "name", "kind", "phase", "M", "K", "N", "repeat", "macs", "cycles",
                "utilization", "stall_cycles", "time_us", "dram_bytes", "energy_pj_mac", "energy_pj_sram",
                "energy_pj_dram"]
        units = {"time_us": "us", "dram_bytes": "B", "energy_pj_mac": "pJ", "energy_pj_sram": "pJ",
                 "energy_pj_dram": "pJ"}
        names = {"time_us": "time", "dram_bytes": "dram", "energy_pj_mac": "mac", "energy_pj_sram": "sram",
                 "energy_pj_dram": "dram_energy"}
        echo_unit_table([{c: r[c] for c in cols} for r in layer_rows], units, names, columns=cols)


#: the presets `dse init` copies: files of the installed package (dse/presets/, which link to the checkout's
#: studies/ and become copies in a wheel or sdist: pyproject.toml's package data)
TEMPLATES = ("quickstart", "zoo", "predictors")


def _templates() -> dict[str, Path]:
    """Template name -> study file."""
    root = Path(__file__).resolve().parents[1] / "presets"  # dse/cli/views.py -> dse/presets
    return {name: root / f"{name}.toml" for name in TEMPLATES}


def init(
    file: Path = typer.Argument(..., metavar="FILE.toml",
                                help="The study file to write (it must not exist, unless --force)."),
    template: str = typer.Option("quickstart", "--template", "-t",
                                 help="quickstart (one CNN, hybrid search, 4 objectives), zoo (every zoo model, "
                                      "geometric-mean speed-up) or predictors (gradient schemes and predictor "
                                      "shapes)."),
    force: bool = typer.Option(False, "--force", help="Overwrite FILE if it exists."),
) -> None:
    """Write a commented study file to start from (a copy of a preset, named after FILE); then
    `dse run FILE.toml`."""
    temps = {k: v for k, v in _templates().items() if v.is_file()}  # the presets this checkout has
    if not temps:
        raise UsageError(f"--template: no preset found in {Path(__file__).resolve().parents[1] / 'presets'}; "
                         "this installation of dse lacks its package data: install it again")
    if template not in temps:
        raise UsageError(f"--template: {template!r}; choose one of {', '.join(temps)}")
    src = temps[template]
    if file.suffix != ".toml":
        raise UsageError(f"FILE: a study file ends in .toml, got {str(file)!r}")
    import re
    import tomllib

    from dse.config.outputs import check_file, writing
    from dse.config.values import check_name
    from dse.search.studyfile import spec_from_dict

    name = check_name(file.stem, "FILE")  # the study's name names its storage files beside it
    check_file(file, "FILE")
    if file.exists() and not force:
        raise UsageError(f"FILE: {file} exists; choose another name or pass --force")
    # the name as a TOML basic string (JSON's escaping is TOML's)
    text = re.sub(r'(?m)^(name\s*=\s*)"[^"]*"', lambda m: m.group(1) + json.dumps(name), src.read_text(),
                  count=1)
    # the path as the user gave it (the commands below run from where they ran dse init); its name if the path
    # holds a character a comment line cannot
    given = str(file) if str(file).isprintable() else file.name
    header = (f"# Started from the {template} template by `dse init`; run it with `dse run {given}`,\n"
              f"# then `dse pareto {given}`, `dse show {given} TRIAL`, `dse report {given}`.\n")
    spec_from_dict(tomllib.loads(header + text), path=file.resolve())  # the template must stay a valid study
    with writing(file, "FILE") as tmp:  # an existing file is replaced only by a complete, valid one
        tmp.write_text(header + text, encoding="utf-8")
    typer.echo(str(file))


def report(
    study_file: Path = STUDY_ARG,
    out: Optional[Path] = typer.Option(None, "--out", "-o", metavar="FILE.html",
                                       help="Where to write it (default: <name>-report.html beside the study "
                                            "file)."),
    storage: Optional[str] = STORAGE_OPT,
    noise_aware: bool = typer.Option(False, "--noise-aware",
                                     help="The front's tables hold only the points distinguishable by the "
                                          "paired-seed test (as dse pareto --noise-aware); the figures still "
                                          "draw the plain front."),
) -> None:
    """One self-contained HTML file to mail to a colleague: status, objectives and the hypervolume
    reference point, the figures (embedded), the front, failures, the study file, versions and git commit."""
    from dse.config.outputs import check_file

    if out is not None:
        check_file(out, "--out", suffixes=(".html", ".htm"))
    spec = load_spec(study_file)
    path = out or (study_file.resolve().parent / f"{spec.name}-report.html")
    check_file(path, "--out")  # before the figures are drawn
    import dse

    with dse.open_study(spec, storage=storage) as study:
        typer.echo(str(study.report(path, noise_aware=noise_aware, _option="--out")))


def _emit_rows(rows: list[dict], fmt: str) -> None:
    from dse.cli.output import echo_unit_table

    if fmt == "json":
        typer.echo(json_text(rows, indent=2))
    elif fmt == "csv":
        typer.echo(_csv(rows).rstrip("\n"))
    else:
        from dse.results.formats import knob_unit
        from dse.results.views import unit_of

        cols = list(dict.fromkeys(k for r in rows for k in r))
        echo_unit_table([{c: r.get(c) for c in cols} for r in rows], {c: unit_of(c) or knob_unit(c) for c in cols},
                        columns=cols)


def compare(
    study_files: List[Path] = typer.Argument(..., metavar="STUDY.toml",
                                             help="Two or more study files, each read from the storage `dse status` "
                                                  "reads it from (its own file beside it, or $DSE_STORAGE when set; "
                                                  "studies of one name are told apart by their files)."),
    objectives: Optional[str] = typer.Option(
        None, "--objectives", metavar="M1,M2[,...]",
        help="Metrics to compare on (default: the objectives every study shares, in the first study's order)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, csv or json."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE.png",
                                        help="Also draw the fronts overlaid, one colour per study."),
) -> None:
    """Fronts of several studies on the same objectives: hypervolume at one common reference point (per
    objective the least demanding of the studies' own), and how many of each study's front points another's
    front dominates."""
    from dse.results.compare import compare_studies
    from dse.results.views import label_of

    _check_format(fmt)
    if plot is not None:
        plot = _figure_path(plot, "--plot")
    specs = [load_spec(f) for f in study_files]
    objs = [m.strip() for m in objectives.split(",") if m.strip()] if objectives else None
    res = compare_studies(specs, objs, option="--objectives")
    objs, directions = res["objectives"], res["directions"]
    if plot is not None:
        from dse.config.outputs import writing
        from dse.figures.charts import compare_figure

        fronts = {n: {"values": f.values} for n, f in res["fronts"].items()}
        with writing(plot, "--plot") as tmp:
            compare_figure(fronts, objs, directions, [label_of(m, d) for m, d in zip(objs, directions)],
                           res["reference"], tmp)
        typer.echo(f"figure: {plot}", err=True)
    if fmt == "json":
        typer.echo(json_text({k: v for k, v in res.items() if k != "fronts"} | {
            "fronts": {n: [{"trial": p.number, **dict(zip(objs, p.values))} for p in f.points]
                       for n, f in res["fronts"].items()}}, indent=2))
        return
    if fmt == "table":
        typer.echo("objectives: " + ", ".join(f"{label_of(m, d)}" for m, d in zip(objs, directions)))
        typer.echo("common hypervolume reference: " + ", ".join(f"{m}={r:.4g}" for m, r in
                                                               zip(objs, res["reference"])))
    _emit_rows(res["studies"], fmt)
    for note in res["notes"]:  # (json: in the object)
        typer.echo(f"note: {note}", err=True)


def _figure_path(path: Path, option: str) -> Path:
    """The figure file ``path`` names (a name without a suffix gets .png, as matplotlib would), checked
    before any work: a format matplotlib writes, a place a file can be written."""
    from dse.config.outputs import check_file
    from dse.figures.charts import figure_suffixes

    return check_file(path, option, suffixes=figure_suffixes(), default=".png")


def sweep(
    config: Path = typer.Argument(..., metavar="CONFIG.toml",
                                  help="A configuration (what `dse export` writes)."),
    knob: List[str] = typer.Option(..., "--knob", "-k", metavar="SECTION.FIELD=V1,V2,...",
                                   help="A knob and its values, e.g. hardware.rows=16,32,64,128 (once or twice)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, csv or json."),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE.png",
                                        help="Also draw every metric against the first knob (one line per "
                                             "value of the second)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress lines."),
) -> None:
    """Vary one or two knobs around a configuration: every metric at every combination, as a table and
    optionally a line plot."""
    from dse.config.configuration import load_configuration
    from dse.evaluation.sweep import parse_knob, sweep as run_sweep
    from dse.results.views import label_of

    _check_format(fmt)
    if plot is not None:
        plot = _figure_path(plot, "--plot")
    knobs = [parse_knob(k) for k in knob]
    cfg = load_configuration(config)

    def progress(i, n, row):
        if not quiet:
            typer.echo(f"sweep {i}/{n}: " + ", ".join(f"{k}={row[k]}" for k in row if "." in k), err=True)

    rows = run_sweep(cfg, knobs, base_dir=config.resolve().parent, progress=progress)
    if plot is not None:
        from dse.figures.charts import sweep_figure

        names = [k for k in rows[0] if "." in k]
        metrics = [m for m in rows[0] if m not in names]
        from dse.config.outputs import writing

        with writing(plot, "--plot") as tmp:
            sweep_figure(rows, names, metrics, {m: label_of(m) for m in metrics}, tmp)
        typer.echo(f"figure: {plot}", err=True)
    _emit_rows(rows, fmt)
