"""``dse surrogate``: run the training surrogate alone and print its phase timeline.

The lead registers it with ``app.command("surrogate")(surrogate)``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from dse.errors import UsageError

__all__ = ["surrogate", "load_config"]


def load_config(path: Optional[Path]):
    """The ``[training]`` table of ``path`` as a SurrogateConfig (None: the committed default).
    Raises UsageError with a one-line message naming the field and what is allowed."""
    from models.surrogate import SurrogateConfig, load_training_table

    if path is None:
        return SurrogateConfig()
    try:
        return SurrogateConfig.from_dict(load_training_table(path))
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}" if not str(exc).startswith(str(path)) else str(exc)) from None


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def surrogate(
    config: Optional[Path] = typer.Argument(
        None,
        help="TOML file whose \\[training] table sets the surrogate's knobs (missing keys take the defaults). "
        "Without it: the committed default ADA-GP setting (studies/surrogate-default.toml).",
        show_default=False,
    ),
    seeds: int = typer.Option(3, "--seeds", help="Number of paired seeds (S..S+N-1) to train and average.", min=1),
    first_seed: int = typer.Option(
        0, "--first-seed", help="First seed S (seeds S..S+N-1), e.g. to check on seeds nobody tuned on.", min=0
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the result as JSON (accuracies in percent 0-100, differences in points, gp_fraction 0-1) "
        "instead of tables.",
    ),
) -> None:
    """Train the surrogate (scheme, its plain-BP reference and its three controls -- null, null_momentum,
    truncated -- on paired seeds) and print accuracy, accuracy drop, the gains over each control, GP
    fraction, the prediction's quality and the phase timeline.

    Results are cached by their knobs under $DSE_CACHE_DIR (default ~/.cache/dse)."""
    cfg = load_config(config)
    if seeds < 1:
        raise UsageError(f"--seeds: an integer >= 1 (got {seeds})")
    if first_seed < 0:
        raise UsageError(f"--first-seed: an integer >= 0 (got {first_seed})")
    from models.surrogate import evaluate
    from models.surrogate.evaluation import CONTROLS, GAIN_KEYS, runs_per_seed

    seed_list = range(first_seed, first_seed + seeds)
    if json_out:
        res = evaluate(cfg, seeds=seed_list)
        sys.stdout.write(json.dumps(res.to_dict(), indent=2) + "\n")
        return

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    console = Console()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=console, transient=True,
    ) as progress:
        task = progress.add_task("training", total=runs_per_seed(cfg) * seeds)

        def tick(done, total, label):
            progress.update(task, completed=done, description=label)

        res = evaluate(cfg, seeds=seed_list, progress=tick)
    d = res.to_dict()

    summary = Table(title=f"surrogate: {cfg.scheme}, proxy {cfg.proxy} (the proxy's budget), "
                          f"seeds {seed_list[0]}..{seed_list[-1]}" + (" [cached]" if d["cached"] else ""),
                    caption=f"Accuracies are the proxy's ({cfg.proxy}), not a workload's.")
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
        summary.add_row(name, format(m, spec), format(s, spec))
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
