"""``dse surrogate``: run the training surrogate alone and print its phase timeline.

The lead registers it with ``app.command("surrogate")(surrogate)``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from dse.config.values import json_text
from dse.errors import UsageError
from models.schemes.registry import CONTROLS
from models.surrogate.config import TASKS

__all__ = ["surrogate", "load_config", "load_configs"]


def load_config(path: Optional[Path]):
    """The ``[training]`` table of ``path`` as a SurrogateConfig (None: the committed default).
    Raises UsageError with a one-line message naming the field and what is allowed."""
    configs = load_configs(path)
    if len(configs) != 1:
        raise UsageError(f"{path}: training.tasks: one task here (got {len(configs)})")
    return configs[0]


def load_configs(path: Optional[Path], tasks: Optional[list[str]] = None):
    """One SurrogateConfig per task: ``tasks`` (``--task``, repeated) if given, else the table's ``tasks`` list or
    its ``task`` (each knob the table does not give takes the task's default). UsageError naming the field."""
    from models.surrogate import load_training_table
    from models.surrogate.multitask import task_configs

    where = str(path) if path is not None else "--task"
    try:
        table = load_training_table(path) if path is not None else {}
        return task_configs(table, tasks or None)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}" if not str(exc).startswith(where) else str(exc)) from None


def _file_int(doc: dict, key: str, path, low: int, default: int) -> int:
    """The configuration file's top-level ``key`` (an integer >= ``low``), else ``default``."""
    v = doc.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise UsageError(f"{path}: {key}: an integer >= {low}, got {v!r}")
    return v


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def surrogate(
    config: Optional[Path] = typer.Argument(
        None,
        help="TOML file whose [training] table sets the surrogate's knobs (missing keys take the task's defaults, "
        "then the committed default ADA-GP setting's; `tasks = [...]` runs several tasks). Without it: the "
        "committed default ADA-GP setting (studies/surrogate-default.toml).",
        show_default=False,
    ),
    task: Optional[list[str]] = typer.Option(
        None, "--task", help=f"Proxy task ({', '.join(TASKS)}), with its tuned network and budget unless the "
        "file gives them; repeat it to run several tasks and compare their ranking of the scheme and its controls.",
        show_default=False,
    ),
    seeds: Optional[int] = typer.Option(
        None, "--seeds", help="Number of paired seeds (S..S+N-1) to train and average (default: the file's "
        "`seeds`, as a configuration `dse export` wrote holds it, else 3).", min=1, show_default=False),
    first_seed: Optional[int] = typer.Option(
        None, "--first-seed", help="First seed S (seeds S..S+N-1), e.g. to check on seeds nobody tuned on "
        "(default: the file's `first_seed`, else 0).", min=0, show_default=False,
    ),
    jobs: Optional[int] = typer.Option(
        None, "--jobs", help="Processes that train the runs not in the cache (default: the number of cores); "
        "the figures do not depend on it.", show_default=False,
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the result as JSON (accuracies in percent 0-100, differences in points, gp_fraction 0-1) "
        "instead of tables; with several tasks, each task's result under `tasks` and the rank agreement.",
    ),
) -> None:
    """Train the surrogate (scheme, its plain-BP reference and its controls -- {controls} -- on paired seeds)
    and print accuracy, accuracy drop, the gains over each control, GP fraction, the prediction's quality and
    the phase timeline.

    Results are cached by their knobs under $DSE_CACHE_DIR (default $XDG_CACHE_HOME/dse, else ~/.cache/dse)."""
    from dse.config.values import check_number

    configs = load_configs(config, task)
    doc = {}
    if config is not None:  # a study file: its [space] is searched by dse run, not here
        from dse.config.schema import load_toml

        doc = load_toml(config)
        if isinstance(doc.get("space"), dict):
            typer.echo(f"note: {config} is a study file: dse surrogate trains its base [training] setting, not the "
                       "settings its [space] searches (dse run does)", err=True)
    # a configuration `dse export` wrote names the seeds its figures rest on: the same ones by default
    if seeds is None:
        seeds = _file_int(doc, "seeds", config, 1, 3)
    if first_seed is None:
        first_seed = _file_int(doc, "first_seed", config, 0, 0)
    check_number(seeds, "--seeds")
    check_number(first_seed + seeds - 1, "--first-seed", "seed")  # the last seed is a NumPy seed too
    if seeds < 1:
        raise UsageError(f"--seeds: an integer >= 1 (got {seeds})")
    if first_seed < 0:
        raise UsageError(f"--first-seed: an integer >= 0 (got {first_seed})")
    from models.surrogate.evaluation import default_jobs, runs_per_seed
    from models.surrogate.multitask import evaluate_tasks

    if jobs is None:
        jobs = default_jobs()
    if jobs < 1:
        raise UsageError(f"--jobs: an integer >= 1 (got {jobs})")
    seed_list = range(first_seed, first_seed + seeds)
    if json_out:
        both = evaluate_tasks(configs, seeds=seed_list, jobs=jobs)
        out = both.results[0].to_dict() if len(configs) == 1 else both.to_dict()
        sys.stdout.write(json_text(out, indent=2) + "\n")
        return

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as progress:
        bar = progress.add_task("training", total=sum(runs_per_seed(c) for c in configs) * seeds)

        def tick(done, total, label):
            progress.update(bar, completed=done, total=total, description=label)

        both = evaluate_tasks(configs, seeds=seed_list, progress=tick, jobs=jobs)
    for res in both.results:
        _print_result(console, res.config, res.to_dict(), seed_list)
    for pair in both.rank_agreement():
        rho = pair["spearman"]
        console.print(f"rank agreement {pair['tasks'][0]} / {pair['tasks'][1]} over "
                      f"{', '.join(pair['settings'])} (Spearman, mean accuracies): "
                      + ("undefined (fewer than 3 settings or a tie)" if rho is None else f"{rho:+.2f}"))


surrogate.__doc__ = surrogate.__doc__.format(controls=", ".join(CONTROLS))  # (the registry's)

def _print_result(console, cfg, d, seed_list) -> None:
    """The summary, the first seed's phase timeline and its GP phases."""
    from rich.table import Table

    from models.surrogate.evaluation import CONTROLS, GAIN_KEYS

    summary = Table(title=f"surrogate: {cfg.scheme}, proxy {cfg.proxy} (the proxy's budget), "
                          f"seeds {seed_list[0]}..{seed_list[-1]}" + (" [cached]" if d["cached"] else ""),
                    caption=f"Accuracies are the proxy's ({cfg.proxy}), not a workload's; trained with BLAS "
                            f"{d.get('blas', 'not recorded')} (figures reproduce on the same kernel).")
    for col in ("metric", "mean", "std (over seeds)"):
        summary.add_column(col, justify="right" if col != "metric" else "left")
    rows = [("proxy accuracy (%)", d["accuracy"], d["accuracy_std"]),
            ("proxy accuracy_bp (%)", d["accuracy_bp"], d["accuracy_bp_std"])]
    rows += [(f"proxy accuracy_{c} (%)", d[f"accuracy_{c}"], d[f"accuracy_{c}_std"]) for c in CONTROLS]
    rows += [("accuracy_drop (points)", d["accuracy_drop"], d["accuracy_drop_std"])]
    rows += [(f"{GAIN_KEYS[c]} (points)", d[GAIN_KEYS[c]], d[f"{GAIN_KEYS[c]}_std"]) for c in CONTROLS]
    rows += [("gp_fraction (0-1)", d["gp_fraction"], d["gp_fraction_std"])]
    for name, m, s in rows:
        spec = ".3f" if "fraction" in name else ".2f"
        # one seed has no spread: "-", not a 0.00 that reads as a measured certainty
        summary.add_row(name, format(m, spec), format(s, spec) if len(seed_list) > 1 else "-")
    summary.add_row("cos / relerr vs the minibatch gradient",
                    f"{_fmt(d['cos'], '.3f')} / {_fmt(d['relerr'], '.3f')}", "")
    summary.add_row("cos vs large-batch gradient (pred. / BP)",
                    f"{_fmt(d['cos_large'], '.3f')} / {_fmt(d['cos_large_bp'], '.3f')}", "")
    summary.add_row("probe loss decrease (pred. / BP)",
                    f"{_fmt(d['loss_decrease'], '.2e')} / {_fmt(d['loss_decrease_bp'], '.2e')}", "")
    summary.add_row("predictor params", str(d["predictor_params"]), "")
    summary.add_row("training time of the runs (s, as recorded)", f"{d['compute_s']:.2f}", "")
    console.print(summary)

    tl = Table(title=f"phase timeline, seed {d['seeds'][0]} (warm-up {d['warmup_steps']} of {d['steps']} steps)")
    for col in ("epoch", "GP steps", "post-warm-up", "cos", "relerr", "cos large", "loss decr.", "loss",
                "proxy test acc (%)"):
        tl.add_column(col, justify="right")
    for e in d["timeline"]:
        tl.add_row(str(e["epoch"]), str(e["gp_steps"]), str(e["post_warmup_steps"]), _fmt(e["cos"], ".3f"),
                   _fmt(e["relerr"], ".3f"), _fmt(e.get("cos_large"), ".3f"), _fmt(e.get("loss_decrease"), ".1e"),
                   _fmt(e["loss"], ".3f"), _fmt(e["test_accuracy"]))
    console.print(tl)
    phases = d["per_seed"][0]["phases"]
    lens = [n for k, n in phases if k == "gp"]
    if lens:
        console.print(f"GP phases: {len(lens)}, length min/mean/max {min(lens)}/{sum(lens) / len(lens):.1f}/"
                      f"{max(lens)}; first phases: " + " ".join(f"{k}{n}" for k, n in phases[:12]))
    if d["diverged_seeds"]:
        console.print("[bold red]diverged[/] (non-finite loss or accuracy at chance): "
                      + ", ".join(f"{r['run']} on seed {r['seed']}" for r in d["diverged_runs"])
                      + "; the means above include these seeds and are not a usable figure")
