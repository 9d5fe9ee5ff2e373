"""Printing for the command line: JSON and aligned plain-text tables (a leaf: the commands import it).

Tables follow :mod:`dse.results.formats` (integers without ``.0``, missing values as ``-``). A table given a
``width`` (:func:`terminal_width`: ``COLUMNS``, else the terminal's, else 80) fits it: headers wrap onto
several lines at ``.``, ``_``, spaces and before a ``[unit]``, and columns that still do not fit are left out
from the right (the caller names them).
"""

from __future__ import annotations

import shutil

import typer

from dse.config.values import json_text
from dse.results.formats import name_pieces, wrap_name

__all__ = ["echo_json", "echo_table", "fit_table", "terminal_width"]

GAP = 2


def echo_json(obj) -> None:
    typer.echo(json_text(obj, indent=2))


def terminal_width() -> int:
    """The width to fit: ``COLUMNS`` when set, else the terminal's, else 80 (as ``shutil`` decides)."""
    return max(20, shutil.get_terminal_size((80, 24)).columns)


def fit_table(headers: list[str], cells: list[list[str]], numeric: list[bool], width: int | None = None,
              drop: bool = True) -> tuple[list[str], list[int]]:
    """The lines of an aligned table no wider than ``width`` (None: as wide as it is), and the indices of
    the columns left out (from the right; never the first) because even with wrapped headers they did not
    fit (``drop=False``: none is left out; the table is then as narrow as wrapped headers make it)."""
    n = len(headers)
    cellw = [max([len(r[i]) for r in cells] or [0]) for i in range(n)]
    minw = [max(cellw[i], *(len(p.rstrip()) for p in name_pieces(headers[i]))) for i in range(n)]
    w = [max(cellw[i], len(headers[i])) for i in range(n)]
    keep = list(range(n))

    def total():
        return sum(w[i] for i in keep) + GAP * (len(keep) - 1)

    if width is not None:
        while total() > width:
            shrinkable = [i for i in keep if w[i] > minw[i]]
            if shrinkable:  # narrow the column with the most to give: its header takes one more line
                i = max(shrinkable, key=lambda j: (w[j] - minw[j], -j))
                w[i] = max(minw[i], max(len(x) for x in wrap_name(headers[i], w[i] - 1)))
            elif drop and len(keep) > 1:
                keep.pop()
            else:
                break
    wrapped = {i: wrap_name(headers[i], w[i]) for i in keep}
    depth = max(len(v) for v in wrapped.values())
    out = []

    def line(vals):
        return "  ".join(v.rjust(w[i]) if numeric[i] else v.ljust(w[i]) for v, i in zip(vals, keep)).rstrip()

    for k in range(depth):  # headers bottom-aligned, as the values below them
        out.append(line([(wrapped[i][k - depth + len(wrapped[i])] if k >= depth - len(wrapped[i]) else "")
                         for i in keep]))
    out.append(line(["-" * w[i] for i in keep]))
    out += [line([r[i] for i in keep]) for r in cells]
    return out, [i for i in range(n) if i not in keep]


def echo_table(rows: list[dict], columns: list[str] | None = None, floatfmt: str | None = None,
               headers: dict[str, str] | None = None, width: int | None = None, drop: bool = True) -> list[str]:
    """Print rows of dicts as an aligned plain-text table (pipe- and diff-friendly); ``headers`` renames
    columns, ``width`` fits the table (returns the columns left out)."""
    from dse.results.formats import fmt_number, is_missing

    if not rows:
        typer.echo("(none)")
        return []
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    headers = headers or {}

    def fmt(v):
        if floatfmt is not None and isinstance(v, float) and not is_missing(v) and v != int(v):
            return floatfmt.format(v)
        return fmt_number(v)

    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    numeric = [all((isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)) or is_missing(r.get(c))
                   for r in rows) for c in columns]
    lines, dropped = fit_table([headers.get(c, c) for c in columns], cells, numeric, width, drop)
    for ln in lines:
        typer.echo(ln)
    return [columns[i] for i in dropped]


def echo_unit_table(rows: list[dict], units: dict[str, str], names: dict[str, str] | None = None,
                    columns: list[str] | None = None) -> list[str]:
    """:func:`echo_table` with a unit in the header of every column that has one (``units``: column ->
    unit; ``names`` renames a column): the columns of one unit that takes SI prefixes share one prefix
    (``energy [kJ]``, every step time in ms or every one in s); headers wrap to narrow the table toward the
    terminal's width, no column is left out."""
    from dse.results.formats import is_missing, si_scale

    if not rows:
        return echo_table(rows)
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    names = names or {}
    scaled = [dict(r) for r in rows]
    headers = {}
    by_unit = {}
    for c in columns:
        if units.get(c):
            by_unit.setdefault(units[c], []).extend(r.get(c) for r in rows)
    scales = {u: si_scale(vals, u) for u, vals in by_unit.items()}
    for c in columns:
        unit = units.get(c, "")
        if unit:
            div, unit = scales[unit]
            if div != 1.0:
                for r in scaled:
                    v = r.get(c)
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and not is_missing(v):
                        r[c] = v / div
        headers[c] = f"{names.get(c, c)} [{unit}]" if unit else names.get(c, c)
    return echo_table(scaled, columns, headers=headers, width=terminal_width(), drop=False)


#: whether a signal interrupted the command outside a run's own handling (dse.cli.app says "dse: interrupted"
#: unless the command said it in its own words: :func:`interruption_told`)
SIGNALLED = {"pending": False}


def interruption_told() -> None:
    """The command has said it was interrupted (dse run, dse worker): no second line."""
    SIGNALLED["pending"] = False
