"""The ``dse`` command line: the typer app, its commands (one module per group in :mod:`dse.cli`) and the
entry point that maps errors to exit codes.

Exit codes: 0 success; 1 an unexpected internal error (a bug: please report it with ``--debug``'s traceback);
2 bad input (a study or configuration file, an option, a storage), with a one-line message; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import traceback

import typer

from dse import __version__
from dse.cli import evaluate, layer, pipeline, study, surrogate, views
from dse.cli.models import models_cmd
from dse.cli.output import SIGNALLED
from dse.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, AllTrialsFailed, StudyWarning, UsageError

app = typer.Typer(
    name="dse",
    help=(
        "Co-design adaptive gradient prediction (ADA-GP) training with DNN training accelerators: "
        "search predictor size, phase-switching thresholds and PE-array/buffer sizing for Pareto fronts "
        "of accuracy, speed-up, energy and area.\n\n"
        "Exit codes: 0 ok, 1 internal error (or diverged surrogate runs), 2 bad input (one-line message), "
        "130 interrupted."
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dse {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", envvar="DSE_DEBUG",
                               help="Show full tracebacks for errors (also: DSE_DEBUG=1)."),
) -> None:
    _state["debug"] = debug


# one module per command group; each command is a plain function over the Python API
app.command("models")(models_cmd)
app.command("layer")(layer.layer)
app.command("pipeline")(pipeline.pipeline)
app.command("surrogate")(surrogate.surrogate)
app.command("evaluate")(evaluate.evaluate_cmd)
for _name in study.COMMANDS:
    app.command(_name)(getattr(study, _name))
for _name in views.COMMANDS:
    app.command(_name)(getattr(views, _name))


def _reader_gone() -> None:
    """The reader closed the pipe (`dse ... | head`): end quietly with exit 0, as `cat` and `grep` do.

    Standard output is pointed at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_OK)


def _library_warning(category: type) -> bool:
    """Whether a warning of ``category`` is a library's notice to programmers (Optuna's experimental-feature
    warnings, deprecations), which a ``dse`` user cannot act on."""
    return category.__module__.split(".")[0] == "optuna" or issubclass(category, (DeprecationWarning,
                                                                                  FutureWarning))


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app and maps errors to exit codes."""
    import warnings

    args = list(argv if argv is not None else sys.argv[1:])
    head = args[:args.index("--")] if "--" in args else args
    debug = "--debug" in head
    if debug:  # `dse run s.toml --debug` as `dse --debug run s.toml` (typer's option belongs to the group):
        cut = len(head)  # where a user adds it, after the command; once, however often it is given
        args = ["--debug"] + [a for a in args[:cut] if a != "--debug"] + args[cut:]
    argv = args
    with warnings.catch_warnings():  # restores the warning machinery when main returns (in-process callers)
        shown = warnings.showwarning

        def show(message, category, *args, **kw):  # library notices only with --debug
            if issubclass(category, StudyWarning):
                typer.echo(f"dse: warning: {message}", err=True)
            elif debug or _state["debug"] or not _library_warning(category):
                shown(message, category, *args, **kw)

        warnings.showwarning = show
        previous_hook = threading.excepthook
        threading.excepthook = _thread_hook(previous_hook, debug)
        try:
            with _sigterm_interrupts():
                _main(argv, debug)
        finally:
            threading.excepthook = previous_hook


def _thread_hook(previous, debug: bool):
    """``threading.excepthook`` for a command: Optuna's heartbeat thread (PostgreSQL studies) printed its own
    traceback when the server was lost, beside the one line the run says about it; that one is quiet now
    (unless --debug). Every other thread's exception goes to ``previous``."""

    def hook(args) -> None:
        name = getattr(args.thread, "name", "") or ""
        if not (debug or _state["debug"]) and name.endswith("(_record_heartbeat)"):
            from dse.search.storage import fault_of

            if args.exc_value is not None and fault_of(args.exc_value) is not None:
                return
        previous(args)

    return hook


def _raise_interrupt(signum, frame):
    SIGNALLED["pending"] = True  # typer turns the KeyboardInterrupt into a silent exit 130: _main says it
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM as Ctrl-C for the whole command (a run installs its own, finer handling): cleanups run (no
    temporary file left), exit code 130, "dse: interrupted"; the previous handlers after (in-process callers).
    SIGINT keeps being ignored where it was (a background job)."""
    SIGNALLED["pending"] = False
    sigs = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is signal.default_int_handler
                               else [])
    try:
        old = {s: signal.signal(s, _raise_interrupt) for s in sigs}
    except ValueError:  # not the main thread: signals are the main thread's
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _main(argv: list[str] | None, debug: bool) -> None:
    try:
        rv = app(args=argv, prog_name="dse", standalone_mode=False)
        if rv == EXIT_INTERRUPTED and SIGNALLED["pending"]:  # (unless the command said it in its own words)
            typer.echo("dse: interrupted", err=True)
    except SystemExit:
        # typer turns a broken pipe (EPIPE) into exit 1 after wrapping the streams in PacifyFlushWrapper
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            _reader_gone()
        raise
    except BrokenPipeError:
        _reader_gone()
    except UsageError as e:
        if debug or _state["debug"]:
            traceback.print_exc()
        typer.echo(f"dse: error: {e}", err=True)
        sys.exit(EXIT_USAGE)
    except AllTrialsFailed as e:  # the trials' errors were recorded as they failed: no traceback of this one
        typer.echo(f"dse: internal error: {e}", err=True)
        sys.exit(EXIT_FAILURE)
    except typer.Abort as e:
        if isinstance(e.__context__, EOFError):  # click turns an EOFError into Abort too: a cut file, not Ctrl-C
            err = e.__context__
            if debug or _state["debug"]:
                traceback.print_exception(err)
            else:
                typer.echo(f"dse: internal error: EOFError: {err} (rerun with --debug for the traceback, and "
                           "report it)", err=True)
            sys.exit(EXIT_FAILURE)
        typer.echo("dse: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.TyperException as e:  # unknown option, bad option value, missing argument: one line
        if type(e).__name__ == "NoArgsIsHelpError":  # `dse` alone: the help
            typer.echo(e.format_message())
            sys.exit(EXIT_USAGE)
        if debug or _state["debug"]:
            traceback.print_exc()
        typer.echo(f"dse: error: {' '.join(e.format_message().split())}", err=True)
        sys.exit(getattr(e, "exit_code", EXIT_USAGE))
    except KeyboardInterrupt:
        typer.echo("dse: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # last-resort handler: one line unless --debug
        from models.surrogate.evaluation import SurrogateDiverged
        from models.surrogate.tasks import CacheError

        if isinstance(e, (CacheError, SurrogateDiverged)):  # the cache folder, or the diverged runs, named
            if debug or _state["debug"]:
                traceback.print_exc()
            typer.echo(f"dse: error: {e}", err=True)
            sys.exit(EXIT_USAGE if isinstance(e, CacheError) else EXIT_FAILURE)
        if debug or _state["debug"]:
            traceback.print_exc()
        else:
            typer.echo(f"dse: internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback, "
                       "and report it)", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


