"""Options and arguments shared by the study commands (a leaf: the command modules import it)."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["STUDY_ARG", "ACCEPT_OPT", "STORAGE_OPT", "load_spec", "refuse_unused"]

STUDY_ARG = typer.Argument(..., metavar="STUDY.toml",
                           help="Study file (TOML): workload, search space, objectives, constraints.")
ACCEPT_OPT = typer.Option(False, "--accept-changes",
                          help="Continue a study although its file changed since the study was made (space, "
                               "objectives, constraints, strategy, base configuration): the study then "
                               "follows the file as it is now; earlier trials are kept and judged by its "
                               "constraints. Without it such a run stops with exit code 2.")
STORAGE_OPT = typer.Option(None, "--storage", envvar="DSE_STORAGE",
                           help="Storage URL (sqlite:///FILE.db, postgresql://USER:PW@HOST/DB, "
                                "journal:///FILE.log). Default: the study's file beside the study file: "
                                "<name>.db (SQLite), or <name>.journal (a journal file, what runs on several "
                                "workers make). "
                                "Env: DSE_STORAGE.")


def load_spec(study_file: Path):
    """The study file, validated (exit 2 with a one-line message when it is not valid)."""
    from dse.search.studyfile import load_study

    return load_study(study_file)


def refuse_unused(ctx: typer.Context, options: dict[str, str], why: str) -> None:
    """UsageError naming the first of ``options`` (parameter name -> its option, e.g. ``{"batch": "--batch"}``)
    given on the command line although this invocation does not use it (``why``: what it applies to); nothing
    without a command line (``ctx`` None: the command function called from Python)."""
    from dse.errors import UsageError

    if ctx is None:
        return
    for name, opt in options.items():
        src = ctx.get_parameter_source(name)
        if src is not None and src.name == "COMMANDLINE":
            raise UsageError(f"{opt}: {why}; this command does not use it, so leave it out")
