"""Printing for the command line: JSON and aligned plain-text tables (a leaf: the commands import it)."""

from __future__ import annotations

import json

import typer

__all__ = ["echo_json", "echo_table"]


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
    line = lambda vals: "  ".join(v.rjust(w) if n else v.ljust(w)  # noqa: E731 - local row formatter
                                  for v, w, n in zip(vals, widths, numeric)).rstrip()
    typer.echo(line(columns))
    typer.echo(line(["-" * w for w in widths]))
    for row in cells:
        typer.echo(line(row))
