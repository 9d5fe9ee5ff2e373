"""``dse run``, ``dse status``, ``dse pareto``, ``dse plot``, ``dse export``: studies from the command line."""

from __future__ import annotations

import csv
import io
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from dse.cli.options import ACCEPT_OPT, STORAGE_OPT, STUDY_ARG, load_spec
from dse.cli.output import interruption_told
from dse.config.values import json_text
from dse.errors import INTERNAL_ERROR_ATTR, AllTrialsFailed, UsageError
from dse.results.export import FORMATS
from dse.search.samplers import SAMPLERS
from dse.search.strategies import STRATEGIES, describe_strategies

COMMANDS = ("run", "worker", "status", "pareto", "plot", "export")

#: the --seed option of dse run and dse worker
SEED_HELP = "The study's seed (its samplers derive theirs from it), overriding the file."


def run(
    study_file: Path = STUDY_ARG,
    trials: Optional[int] = typer.Option(None, "--trials", "-n",
                                         help="Trial budget (finished trials), overriding [study] trials."),
    runs: Optional[int] = typer.Option(None, "--runs", help="Training budget of the hybrid strategy: surrogate "
                                       "runs the trained settings may hold (a setting on 3 seeds counts 3), "
                                       "overriding [study] runs."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Stop after this many seconds."),
    sampler: Optional[str] = typer.Option(None, "--sampler",
                                          help=f"{', '.join(SAMPLERS)}, overriding the file."),
    seed: Optional[int] = typer.Option(None, "--seed", help=SEED_HELP),
    strategy: Optional[str] = typer.Option(
        None, "--strategy",
        help=f"{describe_strategies()}, overriding [study] strategy."),
    storage: Optional[str] = STORAGE_OPT,
    workers: Optional[int] = typer.Option(None, "--workers", "-w",
                                          help="Local worker processes sharing the budget, overriding [study] "
                                               "workers (default 1). With more than one the default storage is "
                                               "a journal file <name>.journal beside the study file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    accept_changes: bool = ACCEPT_OPT,
) -> None:
    """Create or resume a study and run it to its trial budget (or, hybrid, to its run budget [study] runs).

    Progress shows the finished trials, the Pareto front's size and its hypervolume. Ctrl-C (or SIGTERM)
    stops cleanly: completed trials are kept, the running one is recorded as failed, and running the same
    command again continues toward the budget. Exit code 130 after an interruption.
    """
    # bounds are checked here and in with_overrides rather than by typer's min=, so that a bad value gets the
    # one-line `dse: error:` message
    if timeout is not None and not timeout >= 0:
        raise UsageError(f"--timeout: must be a number of seconds >= 0, got {timeout:g}")
    spec = load_spec(study_file).with_overrides(trials=trials, sampler=sampler, seed=seed, strategy=strategy,
                                            workers=workers, runs=runs)
    workers = spec.workers
    notes = _unused_options(spec, runs)
    import dse  # after the file is checked: a bad file fails without importing Optuna
    from dse.search.study import close_study, open_study, storage_url

    # open (create) the study first, as the run will: a storage that cannot be used or a sampler this strategy
    # refuses fails in one line, before the notes; then the notes, before the run's hours
    url = storage_url(spec, storage, journal=workers > 1)  # where dse.run puts it (several workers: a journal)
    close_study(open_study(spec, url, create=True, accept_changes=accept_changes))
    for note in notes:
        typer.echo(note, err=True)
    t0 = time.perf_counter()
    if workers > 1:
        res = dse.run(spec, workers=workers, storage=storage, timeout=timeout, quiet=quiet,
                      accept_changes=accept_changes)
    elif quiet:
        res = dse.run(spec, workers=1, storage=storage, timeout=timeout, accept_changes=accept_changes)
    else:
        from dse.search.runner import progress_bar

        with progress_bar("front {task.fields[front]}  HV {task.fields[hv]}", transient=False) as bar:
            console = bar.console
            task = bar.add_task(spec.name, total=spec.trials, front=0, hv="-")

            def progress(f):
                bar.update(task, completed=f["finished"], total=f["budget"], front=f["front"],
                           hv=f"{f['hypervolume']:.4g}")

            res = dse.run(spec, workers=1, storage=storage, timeout=timeout, progress=progress,
                          accept_changes=accept_changes)
            done = min(res["finished"], res["budget"])
            if res.get("exhausted") and done:  # ended before the trial budget: a full bar
                bar.update(task, total=done, completed=done)
            if res["failed"]:
                console.print(f"{res['failed']} trial(s) failed; their reasons: `dse status "
                              f"{study_file}`")
    dt = time.perf_counter() - t0
    done = min(res['finished'], res['budget'])
    count = (f"{done} trials finished ({res['complete']} complete in the study; the search ended before its trial "
             f"budget of {res['budget']}, why: below)" if res.get("exhausted") else
             f"{done}/{res['budget']} trials finished ({res['complete']} complete in the study)")
    typer.echo(f"{spec.name}: {count}, "
               f"front {res['front']}, hypervolume {res['hypervolume']:.6g}, {dt:.1f} s; storage "
               f"{res['storage']}")
    if res.get("recent") is not None:
        from dse.results.views import recent_line

        typer.echo(f"{spec.name}: "
                   f"{recent_line(res['recent'], ended_early=bool(res.get('exhausted')), covered=res.get('covered'))}")
    if "distinguishable" in res:
        lo, hi = res["front_seeds"]
        seeds = f"{lo} surrogate seed{'s' if lo > 1 else ''}" if lo == hi else f"{lo} to {hi} surrogate seeds"
        typer.echo(f"accuracy noise: {res['distinguishable']} of the {res['front']} front points are distinguishable "
                   f"by the paired-seed test (dse pareto --noise-aware); each front point rests on {seeds}")
    from dse.search.strategies import strategy_class

    strat = strategy_class(res.get("strategy", spec.strategy))
    stored = open_study(spec, url, create=False) if res["finished"] or res.get("exhausted") else None
    try:
        if res["complete"]:
            summary = strat.run_summary(spec, stored)
            if summary:
                typer.echo(f"{spec.name}: {summary}")
        if stored is not None:
            from dse.results.views import diverged_settings

            k = len(diverged_settings(spec, stored))
            if k:
                typer.echo(f"{spec.name}: {k} training setting{'s' if k > 1 else ''} diverged on a surrogate seed "
                           "(non-finite loss or accuracy at chance): their trials failed, no front or mean includes "
                           f"them; the seeds and runs: dse status {study_file}")
        if res.get("exhausted"):
            typer.echo(res.get("stop_reason") or strat.ended(spec, stored), err=True)
        if res["interrupted"]:
            typer.echo("interrupted: completed trials are kept; run the same command again to continue", err=True)
            interruption_told()
            raise typer.Exit(130)
        if not res["complete"] and stored is not None:
            _all_failed(spec, stored, study_file)
    finally:  # its database connections (PostgreSQL: server connections)
        if stored is not None:
            close_study(stored)


def _unused_options(spec, runs: Optional[int] = None) -> list[str]:
    """Notes (for standard error) naming the [study] options the file (or --runs) gives that belong to another
    strategy or sampler than the one that runs: they are accepted, since --strategy or --sampler may pick that
    one, but do nothing."""
    from dse.search.samplers import SAMPLER_OPTIONS
    from dse.search.strategies import STRATEGIES
    from dse.search.studyfile import OPTIONS

    notes = []
    given = [n for n in spec.raw.get("study", {}) if n in OPTIONS]
    if runs is not None and "runs" not in given:
        given.append("runs")
    own = {o.name for o in STRATEGIES[spec.strategy].options}
    unused = [n for n in given if n not in own]
    if unused:
        owners = sorted({name for name, s in STRATEGIES.items() for o in s.options if o.name in unused})
        notes.append(f"note: {', '.join(f'study.{n}' for n in unused)}: option{'s' if len(unused) > 1 else ''} of "
                     f"the {' and '.join(owners)} strategy, not used by the {spec.strategy} strategy this run uses")
    for n, readers in SAMPLER_OPTIONS.items():
        if n in spec.raw.get("study", {}) and spec.sampler not in readers:
            notes.append(f"note: study.{n}: an option of the {', '.join(readers)} samplers, not used by the "
                         f"{spec.sampler} sampler this run uses")
    return notes


def _all_failed(spec, study, study_file) -> None:
    """Every trial failed: a one-line error with the most common reason (exit 2; exit 1 when that reason is an
    unexpected error in dse, a bug)."""
    from dse.results.views import strategy_trials

    # with the strategy's helper studies (the hybrid's training settings), whose trials give the reason when
    # none reached the main study
    trials = strategy_trials(spec, study)
    reasons: dict[str, int] = {}
    internal = set()
    for t in trials:
        r = t.user_attrs.get("fail_reason")
        if r and not r.startswith("interrupted"):
            reasons[r] = reasons.get(r, 0) + 1
            if t.user_attrs.get(INTERNAL_ERROR_ATTR):
                internal.add(r)
    top = max(reasons.items(), key=lambda x: x[1]) if reasons else ("no reason recorded", 0)
    if top[0] in internal:  # not the input's fault: an unexpected error in dse (or a package it uses)
        raise AllTrialsFailed(f"study {spec.name}: no trial completed; every one failed, most often ({top[1]} x) "
                              f"with an unexpected error: {top[0]} (a bug: please report it with `dse status "
                              f"{study_file}`'s reasons)")
    raise UsageError(f"study {spec.name}: no trial completed; every one failed, most often ({top[1]} x) with: "
                     f"{top[0]} (all reasons: `dse status {study_file}`)")


def status(study_file: Path = STUDY_ARG, storage: Optional[str] = STORAGE_OPT,
           json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Trials by state, the budget the last run aimed at (--trials/--runs included), the front's size and hypervolume,
    the storage (password masked)."""
    spec = load_spec(study_file)  # first: a bad file fails fast, without importing Optuna
    import dse

    with dse.open_study(spec, storage=storage) as study:
        out = study.status()
    if json_out:
        typer.echo(json_text(out, indent=2))
        return
    for k, v in out.items():
        if k == "hv_gain_last_10pct":  # the last_10pct line says it in words (--json keeps the number)
            continue
        if k == "failures":
            for reason, n in sorted(v.items(), key=lambda x: -x[1])[:10]:
                typer.echo(f"{'failed':12s} {n} x {reason}")
            continue
        if isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items() if b)
        elif isinstance(v, list):
            v = "; ".join(v) or "-"
        elif isinstance(v, float):  # the hypervolume: as the run summary prints it (--json keeps every digit)
            v = f"{v:.6g}"
        typer.echo(f"{k:12s} {v}")


def _emit(rows: list[dict], fmt: str) -> None:
    from dse.cli.output import echo_table

    if fmt == "json":
        typer.echo(json_text(rows, indent=2))
    elif fmt == "csv":
        buf = io.StringIO()
        if rows:
            w = csv.DictWriter(buf, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        typer.echo(buf.getvalue().rstrip("\n"))
    else:
        echo_table(rows, floatfmt="{:.4g}")


FORMAT_CHOICES = ("table", "csv", "json")


#: rows a front table shows unless --limit or --all says otherwise
DEFAULT_ROWS = 20


def pareto(study_file: Path = STUDY_ARG, storage: Optional[str] = STORAGE_OPT,
           fmt: str = typer.Option("table", "--format", "-f", help="table, csv or json."),
           columns: Optional[str] = typer.Option(None, "--columns", "-c", metavar="all|C1,C2,...",
                                                 help="'all': every metric and knob; or only these columns "
                                                      "(metrics, knobs; trial always). Default for the table: "
                                                      "the objectives, constraint metrics and knobs that vary "
                                                      "on the front; csv and json: all."),
           sort: Optional[str] = typer.Option(None, "--sort", metavar="METRIC",
                                              help="Best first in METRIC (its natural direction; default: the "
                                                   "first objective)."),
           limit: Optional[int] = typer.Option(None, "--limit", "-n", metavar="N",
                                               help=f"At most N rows (table default: {DEFAULT_ROWS}; csv and "
                                                    "json: all)."),
           all_rows: bool = typer.Option(False, "--all", "-a", help="Every row of the front."),
           where: Optional[List[str]] = typer.Option(None, "--where", metavar="'NAME<=X'",
                                                     help="Keep rows meeting a condition on a metric or numeric "
                                                          "knob (repeatable)."),
           noise_aware: bool = typer.Option(False, "--noise-aware",
                                            help="Only the front points distinguishable by the paired-seed "
                                                 "test: a point is left out when another is at least as good "
                                                 "in every other objective, better in one, and its accuracy "
                                                 "lead over it is within one standard error."),
           ) -> None:
    """The feasible Pareto-optimal trials, best first in the first objective.

    The table fits the terminal (COLUMNS): it shows the objectives (each accuracy figure followed by its
    standard error, ±, when the trials have several surrogate seeds), the constraint metrics and the knobs
    that vary on the front, with units (energies with SI prefixes); a line under it names what it leaves out.
    gp_fraction (the surrogate's measured GP fraction) and training.gp_fraction (the requested one) are named
    apart; accuracy figures are the training surrogate's on its proxy task. CSV and JSON keep the plain
    names and every column (<metric>_se and seeds among them).
    """
    if fmt not in FORMAT_CHOICES:
        raise UsageError(f"--format: {fmt!r}; choose one of {', '.join(FORMAT_CHOICES)}")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit: must be an integer >= 1, got {limit}")
    if limit is not None and all_rows:
        raise UsageError("--all: give either --all or --limit N, not both")
    spec = load_spec(study_file)
    import dse
    from dse.results.views import display_table, left_out_note, proxy_note, table_columns

    every = columns is not None and columns.strip() == "all"
    cols = [c.strip() for c in columns.split(",") if c.strip()] if columns and not every else None
    with dse.open_study(spec, storage=storage) as study:
        if fmt != "table":
            _emit(study.front_rows(columns=cols, sort=sort, limit=limit, where=where or [], noise_aware=noise_aware),
                  fmt)
            return
        rows = study.front_rows(columns=cols, sort=sort, where=where or [], noise_aware=noise_aware)
        why = "" if rows else _why_none(study.status(), where or [])
    left = {"constant": {}, "empty": [], "other": []}
    shown = list(rows[0]) if rows else []
    if rows and cols is None and not every:
        shown, left = table_columns(spec, rows)
    n = len(rows) if all_rows else (limit or DEFAULT_ROWS)
    hidden = max(0, len(rows) - n)
    rows = rows[:n]
    from dse.cli.output import fit_table, terminal_width

    width = terminal_width()
    if not rows:
        typer.echo(f"(none: {why})")
    else:
        default = cols is None and not every
        headers, cells, numeric = display_table(spec, rows, shown, short=default)
        lines, dropped = fit_table(headers, cells, numeric, width, drop=default)
        for line in lines:
            typer.echo(line)
        note = left_out_note(left, hidden, len(rows) + hidden, [shown[i] for i in dropped])
        if note:
            _note(note, width)
    _note(proxy_note(spec, rows), width)


def _why_none(status: dict, where: list[str]) -> str:
    """Why a front table has no row, from the study's ``status``: no complete trial, none feasible, or the
    ``where`` conditions pass none of the front."""
    complete = status["trials"].get("complete", 0)
    failed = status["trials"].get("fail", 0)
    if not complete:
        return ("no complete trial yet" + (f"; {failed} failed, `dse status` says why" if failed else
                                           ": run the study first"))
    if status.get("unplaced") == complete:  # the stopping line says it (dse.results.views.status_summary)
        return status["last_10pct"]
    if not status["feasible"]:
        return (f"none of the {complete} complete trials meets the constraints ({'; '.join(status['constraints'])}):"
                " relax them or widen the space")
    return f"none of the {status['front']} front points passes --where {' and '.join(where)}"


def _note(text: str, width: int) -> None:
    """A note on standard error, wrapped to the terminal's width."""
    import textwrap

    typer.echo(textwrap.fill(text, width=width, break_on_hyphens=False), err=True)


def plot(study_file: Path = STUDY_ARG, storage: Optional[str] = STORAGE_OPT,
         out: Optional[Path] = typer.Option(None, "--out", "-o",
                                            help="Folder for the figures (default: <name>-plots beside the "
                                                 "study file)."),
         ) -> None:
    """Seaborn figures, PNG and SVG: each pair of objectives with its 2-D front, the reference accelerator
    and the constraint limits; the front in parallel coordinates; energy by component for chosen points;
    hypervolume history; parameter importance per objective (for a hybrid study, over the hardware points
    it costed)."""
    from dse.config.outputs import check_folder

    spec = load_spec(study_file)  # first: a bad file fails fast, without importing Optuna and seaborn
    folder = check_folder(out or (study_file.resolve().parent / f"{spec.name}-plots"), "--out")
    import dse

    with dse.open_study(spec, storage=storage) as study:  # the figures move in once all are drawn
        files = study.plot(folder, warn=lambda msg: typer.echo(f"warning: {msg}", err=True), _option="--out")
    for f in files:
        typer.echo(str(f))


def export(
    study_file: Path = STUDY_ARG,
    knee: bool = typer.Option(False, "--knee", help="The front's knee: closest to the ideal point after "
                                                    "scaling each objective to [0, 1] over the front."),
    best: Optional[str] = typer.Option(None, "--best", metavar="METRIC",
                                       help="The feasible trial best in METRIC (its natural direction)."),
    where: Optional[List[str]] = typer.Option(None, "--where", metavar="'METRIC<=X'",
                                              help="With --best: a condition on another metric (repeatable)."),
    all_front: bool = typer.Option(False, "--pareto", help="Every configuration on the front."),
    fmt: Optional[str] = typer.Option(None, "--format", "-f",
                                      help="toml (what `dse evaluate` reads), json or csv. Default: the format "
                                           "--out's suffix names, else toml."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
                                       help="Output file, in the format its suffix names (.toml, .json, .csv); "
                                            "with --pareto a folder (no suffix) gets one TOML file per trial. "
                                            "Default: standard output."),
    storage: Optional[str] = STORAGE_OPT,
) -> None:
    """Chosen configurations as files that `dse evaluate` accepts unchanged and reproduces exactly.

    Default selection: --knee.
    """
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"--format: {fmt!r}; choose one of {', '.join(FORMATS)}")
    if sum([knee, best is not None, all_front]) > 1:
        raise UsageError("export: choose one of --knee, --best METRIC, --pareto")
    if where and best is None:
        raise UsageError("--where: only with --best METRIC")
    folder = out is not None and all_front and (out.is_dir() or not out.suffix)
    if out is not None:
        fmt = _export_format(out, fmt, folder)
    fmt = fmt or "toml"
    spec = load_spec(study_file)
    import dse
    from dse.config.outputs import writing
    from dse.results.export import render

    with dse.open_study(spec, storage=storage) as study:
        pts = study.select(best=best, where=where or [], pareto=all_front)
    if folder:
        from dse.results.export import write_folder

        for path in write_folder(pts, spec, out, "--out"):  # every file is written before the first is printed
            typer.echo(str(path))
        return
    text = render(pts, fmt, spec)
    if out is None:
        sys.stdout.write(text)
    else:
        with writing(out, "--out") as tmp:
            tmp.write_text(text, encoding="utf-8")
        typer.echo(str(out))


def _export_format(out: Path, fmt: str | None, folder: bool) -> str:
    """The format ``dse export --out OUT`` writes: the one OUT's suffix names (``--format``, if given, must
    agree), TOML files for a folder; OUT checked for writing before anything is read."""
    from dse.config.outputs import check_file, check_folder

    if folder:
        if fmt not in (None, "toml"):
            raise UsageError(f"--format {fmt}: --out {out} is a folder (one TOML file per trial); name a file "
                             f"ending in .{fmt} for one {fmt.upper()} file")
        check_folder(out, "--out")
        return "toml"
    named = {f".{f}": f for f in FORMATS}.get(out.suffix.lower())
    if named is None:
        raise UsageError(f"--out {out}: its suffix names no format; end the name in "
                         f"{', '.join('.' + f for f in FORMATS)}" + (" (or give a folder without a suffix "
                         "with --pareto)" if not out.suffix else ""))
    if fmt is not None and fmt != named:
        raise UsageError(f"--format {fmt}: --out {out} names {named} by its suffix; drop --format or end the "
                         f"name in .{fmt}")
    check_file(out, "--out")
    return named


def worker(
    study_file: Path = STUDY_ARG,
    storage: Optional[str] = STORAGE_OPT,
    index: int = typer.Option(0, "--index", min=0, help="This worker's index: its sampler seed is the study's "
                                                        "seed + 1000 x index (+ trials done so far)."),
    trials: Optional[int] = typer.Option(None, "--trials", "-n", min=1, help="The shared trial budget "
                                                                           "(default: the file's)."),
    runs: Optional[int] = typer.Option(None, "--runs", help="The hybrid's shared training budget in surrogate "
                                                            "runs (default: the file's [study] runs)."),
    sampler: Optional[str] = typer.Option(None, "--sampler", help=f"{', '.join(SAMPLERS)}, overriding the file."),
    seed: Optional[int] = typer.Option(None, "--seed", help=SEED_HELP),
    heartbeat: Optional[int] = typer.Option(None, "--heartbeat", min=1,
                                            help="Seconds between heartbeats (RDB storages): a trial whose "
                                                 "worker stops beating for 3 intervals is failed and retried. "
                                                 "Default: 5 for PostgreSQL/MySQL, off otherwise (local "
                                                 "workers are watched by process id)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the final line."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help=f"{' or '.join(STRATEGIES)}, overriding "
                                                                    "the file (it must match the study's)."),
    accept_changes: bool = ACCEPT_OPT,
) -> None:
    """Join a study as one worker: run trials until the shared budget is met.

    Both strategies: a hybrid study's workers share its outer study of training settings (each setting is
    trained by one worker) and enter their sub-fronts into the one main study.
    Start it on every machine with the same study file and storage, e.g.
    `dse worker studies/zoo.toml --storage postgresql://USER:PW@HOST/DB --index 3`.
    A trial whose worker dies (SIGKILL, power loss) is retried, so the budget is met exactly.
    """
    from dse.search.runner import run_study
    from dse.search.study import default_heartbeat, storage_url

    if seed is not None and seed < 0:
        raise UsageError(f"--seed: must be an integer >= 0, got {seed}")
    from dse.config.values import check_number

    check_number(index, "--index")
    spec = load_spec(study_file).with_overrides(trials=trials, sampler=sampler, seed=seed, strategy=strategy,
                                                runs=runs)
    url = storage_url(spec, storage)
    hb = heartbeat if heartbeat is not None else default_heartbeat(url)
    if os.environ.get("DSE_PARENT_PID", "").isdigit():  # started by `dse run --workers`: stop with it
        from dse.search.runguard import watch_parent

        watch_parent(int(os.environ["DSE_PARENT_PID"]))

    def progress(f):
        if not quiet and f["last"] is not None:
            typer.echo(f"worker {index}: trial {f['last'][0]} {f['last'][1].lower()}; "
                       f"{f['finished']}/{f['budget']} done, front {f['front']}", err=True)

    res = run_study(spec, storage=url, worker=index, heartbeat=hb, progress=progress,
                    accept_changes=accept_changes)
    done = (f"{res['finished']}/{res['budget']} done" if res["finished"] <= res["budget"] else
            f"{res['finished']} done, the budget of {res['budget']} reached already (--trials sets a larger one)")
    typer.echo(f"worker {index}: {spec.name} {done}, front {res['front']}, "
               f"hypervolume {res['hypervolume']:.6g}; storage {res['storage']}")
    if res.get("exhausted"):  # ended before the budget: say why, as dse run does
        from dse.search.strategies import strategy_class

        typer.echo(f"worker {index}: {res.get('stop_reason') or strategy_class(spec.strategy).stop_reason}", err=True)
    if res["interrupted"]:
        typer.echo(f"worker {index}: interrupted: completed trials are kept; the running one does not count",
                   err=True)
        interruption_told()
        raise typer.Exit(130)
