"""The command line (typer), one module per command group over the public Python API: :mod:`.study` (run,
worker, status, pareto, plot, export), :mod:`.views` (show, init, report, compare, sweep), :mod:`.evaluate`,
:mod:`.layer`, :mod:`.pipeline`, :mod:`.surrogate`, :mod:`.models`; two leaves they share: :mod:`.options`
and :mod:`.output`; the app and the entry point ``main``: :mod:`.app`."""

from dse.cli.app import app, main

__all__ = ["app", "main"]
