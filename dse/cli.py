"""The ``dse`` command line: a thin typer layer over the Python API.

Exit codes: 0 success; 1 an unexpected internal error (a bug: please report it with ``--debug``'s traceback);
2 bad input (a study or configuration file, an option, a storage), with a one-line message; 130 interrupted.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Optional

import typer

from dse import __version__
from dse.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UsageError

app = typer.Typer(
    name="dse",
    help=(
        "Co-design adaptive gradient prediction (ADA-GP) training with DNN training accelerators: "
        "search predictor size, phase-switching thresholds and PE-array/buffer sizing for Pareto fronts "
        "of accuracy, speed-up and energy.\n\n"
        "Exit codes: 0 ok, 1 internal error, 2 bad input (one-line message), 130 interrupted."
    ),
    no_args_is_help=True,
    add_completion=False,
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


def echo_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=False))


def echo_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str = "{:.4g}") -> None:
    """Print rows of dicts as an aligned plain-text table (pipe- and diff-friendly)."""
    if not rows:
        typer.echo("(none)")
        return
    columns = columns or list(rows[0])

    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return floatfmt.format(v)
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r.get(c), (int, float)) or r.get(c, "") is None for r in rows) for c in columns]
    line = lambda vals: "  ".join(v.rjust(w) if n else v.ljust(w)  # noqa: E731
                                  for v, w, n in zip(vals, widths, numeric)).rstrip()
    typer.echo(line(columns))
    typer.echo(line(["-" * w for w in widths]))
    for row in cells:
        typer.echo(line(row))


@app.command("models")
def models_cmd(
    name: Optional[str] = typer.Argument(None, metavar="NAME",
                                         help="A zoo model, or a workload file (.csv SCALE-Sim topology, .onnx "
                                              "model); without it, list the whole zoo."),
    dataset: Optional[str] = typer.Option(
        None, "--dataset", "-d",
        help="Input set-up: imagenet (3x224x224, 1000 classes), cifar10 or cifar100 (3x32x32). "
             "Default: each model's own (299x299 for Inception, 416x416 for YOLOv3)."),
    onnx_file: Optional[Path] = typer.Option(None, "--onnx", metavar="FILE",
                                             help="An ONNX model instead of NAME (shapes inferred)."),
    topology: Optional[Path] = typer.Option(None, "--topology", metavar="FILE.csv",
                                            help="A SCALE-Sim topology (convolution or GEMM layout) instead "
                                                 "of NAME."),
    ops: bool = typer.Option(False, "--ops", help="Print NAME's training ops (GEMMs as M K N repeat, "
                                                  "vector ops as elements moved) instead of its summary."),
    batch: int = typer.Option(32, "--batch", "-b", min=1, help="Batch size for --ops."),
    optimizer: str = typer.Option("sgd_momentum", "--optimizer",
                                  help="Optimizer whose state the weight update reads and writes "
                                       "(sgd, sgd_momentum, adam), for --ops."),
    fmt: Optional[str] = typer.Option(
        None, "--format", "-f",
        help="table, json, or with --ops also scalesim (the forward GEMMs at --batch in SCALE-Sim's "
             "Layer, M, N, K layout) or scalesim-conv (SCALE-Sim's convolution layout, per sample)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table (--format json)."),
) -> None:
    """The workload zoo: name, input, GEMM layers, parameters and forward MACs per sample.

    MACs count the multiply-accumulates of conv and linear layers per sample (torchvision's "GFLOPS" convention); attention's weight-free matmuls are reported separately as matmul_macs.
    """
    from models import zoo
    from dse.values import check_number

    check_number(batch, "--batch")

    formats = ("table", "json", "scalesim", "scalesim-conv")
    fmt = fmt or ("json" if json_out else "table")
    if fmt not in formats:
        raise UsageError(f"--format: {fmt!r}; choose one of {', '.join(formats)}")
    if fmt.startswith("scalesim") and not ops:
        raise UsageError(f"--format {fmt}: only with --ops (it writes the training step's forward GEMMs)")
    given = [v for v in (name, onnx_file, topology) if v is not None]
    if len(given) > 1:
        raise UsageError("models: give one of NAME, --onnx FILE, --topology FILE.csv")
    for opt, path, suffix in (("--onnx", onnx_file, ".onnx"), ("--topology", topology, ".csv")):
        if path is not None:
            if path.suffix.lower() != suffix:
                raise UsageError(f"{opt}: expected a {suffix} file, got {str(path)!r}")
            name = str(path)

    def _build(n: str):
        try:
            return zoo.build(n, dataset=dataset)
        except ValueError as e:
            raise UsageError(str(e)) from None

    if name is None:
        if ops:
            raise UsageError("--ops needs a model NAME; see `dse models` for the list")
        rows = []
        for n in zoo.names():
            e = zoo.entry(n)
            if dataset is not None and dataset not in e.datasets:
                continue
            rows.append(_build(n).summary())
        if fmt == "json":
            echo_json(rows)
        else:
            echo_table(
                [dict(r, params_M=r["params"] / 1e6, GMACs=r["macs"] / 1e9) for r in rows],
                ["name", "input", "classes", "layers", "params_M", "GMACs"],
                floatfmt="{:.3f}",
            )
        return
    net = _build(name)
    if not ops:
        s = net.summary()
        echo_json(s) if fmt == "json" else echo_table([s])
        return
    from models.graph import OPTIMIZER_STATE

    if optimizer not in OPTIMIZER_STATE:
        raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZER_STATE)}; got {optimizer!r}")
    if fmt.startswith("scalesim"):
        from models.importers import to_scalesim

        try:
            sys.stdout.write(to_scalesim(net, batch=batch, layout="conv" if fmt == "scalesim-conv" else "gemm"))
        except ValueError as e:
            raise UsageError(f"--format {fmt}: {e}") from None
        return
    recs = net.training_ops(batch, optimizer=optimizer).to_records()
    if fmt == "json":
        echo_json(recs)
    else:
        echo_table(recs, ["layer", "name", "kind", "phase", "M", "K", "N", "repeat", "macs", "vec_elems",
                          "stash_bytes"])


def _register() -> None:
    """Commands that live in their own modules (one module per command group keeps this file thin)."""
    from dse import cli_evaluate, cli_layer, cli_pipeline, cli_study, cli_surrogate

    app.command("layer")(cli_layer.layer)
    app.command("pipeline")(cli_pipeline.pipeline)
    app.command("surrogate")(cli_surrogate.surrogate)
    app.command("evaluate")(cli_evaluate.evaluate)
    for name in ("run", "worker", "status", "pareto", "plot", "export"):
        app.command(name)(getattr(cli_study, name))
    from dse import cli_views

    for name in cli_views.COMMANDS:
        app.command(name)(getattr(cli_views, name))


_register()


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


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app and maps errors to exit codes."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        rv = app(args=argv, prog_name="dse", standalone_mode=False)
    except SystemExit as e:
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
    except typer.Abort:
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
    except Exception as e:  # noqa: BLE001 - last-resort handler: one line unless --debug
        from models.surrogate.tasks import CacheError

        if isinstance(e, CacheError):  # the surrogate cache cannot be used: names the folder
            if debug or _state["debug"]:
                traceback.print_exc()
            typer.echo(f"dse: error: {e}", err=True)
            sys.exit(EXIT_USAGE)
        if debug or _state["debug"]:
            traceback.print_exc()
        else:
            typer.echo(f"dse: internal error: {type(e).__name__}: {e} (rerun with --debug for the "
                       "traceback)", err=True)
        sys.exit(EXIT_FAILURE)
    sys.exit(rv if isinstance(rv, int) else EXIT_OK)


if __name__ == "__main__":
    main()
