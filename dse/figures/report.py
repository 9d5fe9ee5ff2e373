"""One self-contained HTML report of a study, to mail to a colleague.

Everything is inside the one file: the figures of :func:`dse.figures.plots.make_plots` as PNG data URIs, the
tables (status, hypervolume reference point, the front, failures), the study file itself, the versions of
the tools and the git commit of the code that wrote it. No script, no style sheet, no font is fetched.
"""

from __future__ import annotations

import base64
import html
import platform
import subprocess
import tempfile
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from dse.results.formats import fmt_number

__all__ = ["build_report", "provenance"]

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 80em;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.5em; text-align: right; }
th { background: #f3f3f3; } td.t, th.t { text-align: left; }
table.sortable th { cursor: pointer; } th[data-sort="up"]::after { content: " \\25B2"; }
th[data-sort="down"]::after { content: " \\25BC"; }
pre { background: #f7f7f7; padding: 0.8em; overflow-x: auto; font-size: 0.85em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; }
.scroll { overflow-x: auto; }
"""


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def provenance() -> dict:
    """Versions of Python and the packages that shape the results, and the git commit of this code."""
    root = Path(__file__).resolve().parents[2]  # the checkout (dse/figures/report.py)
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in ("dse", "optuna", "numpy", "scipy", "moocore", "pandas", "matplotlib", "seaborn", "mnist1d"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    out["git commit"] = checkout_commit(root)
    return out


def checkout_commit(root: Path) -> str:
    """The commit of the git checkout whose top folder is ``root``; "unknown" when ``root`` is not the top of
    a checkout (an installed dse lives in site-packages, which may sit inside another project's repository:
    that repository's commit is not dse's)."""
    top = _git(root, "rev-parse", "--show-toplevel")
    commit = _git(root, "rev-parse", "HEAD") if top and Path(top).resolve() == root.resolve() else None
    if commit is None:
        return "unknown (not a git checkout of dse: see the dse version)"
    dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit + (" (with uncommitted changes)" if dirty else "")


def _table(rows: list[dict], columns: list[str] | None = None, headers: dict | None = None) -> str:
    if not rows:
        rows = [{"": "(none)"}]
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    headers = headers or {}
    num = {c: all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows)
           for c in columns}
    head = "".join(f'<th class="{"" if num[c] else "t"}">{html.escape(headers.get(c, c))}</th>' for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="{"" if num[c] else "t"}">{html.escape(fmt_number(r.get(c)))}</td>'
                                    for c in columns) + "</tr>" for r in rows)
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


#: sorts a table.sortable by the column whose header is clicked (numbers by value, data-v; again: reversed)
_SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var up = th.getAttribute('data-sort') !== 'up';
      t.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-sort'); });
      th.setAttribute('data-sort', up ? 'up' : 'down');
      var rows = Array.from(t.tBodies[0].rows);
      rows.sort(function (a, b) {
        var x = a.cells[i].getAttribute('data-v'), y = b.cells[i].getAttribute('data-v');
        var nx = parseFloat(x), ny = parseFloat(y), c;
        if (x === '' || y === '') { c = (x === '') - (y === ''); return c; }
        c = (isNaN(nx) || isNaN(ny)) ? x.localeCompare(y) : nx - ny;
        return up ? c : -c;
      });
      rows.forEach(function (r) { t.tBodies[0].appendChild(r); });
    });
  });
});
"""


def _front_table(spec, rows: list[dict], columns: list[str], short: bool = False) -> str:
    """A front as a sortable table: the printed table's headers and cells (units, SI prefixes; ``short``:
    knobs by field name, the full name in the header's tooltip), each cell's raw value in ``data-v`` for
    sorting."""
    from dse.results.formats import is_missing
    from dse.results.views import display_table

    if not rows:
        return _table([])
    headers, cells, numeric = display_table(spec, rows, columns, short)
    head = "".join(f'<th class="{"" if n else "t"}" title="{html.escape(c)}">{html.escape(h)}</th>'
                   for c, h, n in zip(columns, headers, numeric))
    body = []
    for r, line in zip(rows, cells):
        tds = []
        for c, text, n in zip(columns, line, numeric):
            v = r.get(c)
            raw = "" if is_missing(v) else repr(v) if n else str(v)
            tds.append(f'<td class="{"" if n else "t"}" data-v="{html.escape(raw)}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    return (f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def build_report(spec, study, out: Path, *, storage: str | None = None, option: str = "--out",
                 noise_aware: bool = False) -> Path:
    """Write the HTML report of ``study`` (described by ``spec``) to ``out``; returns ``out``. A path that
    cannot be written is a one-line UsageError naming ``option`` (:mod:`dse.config.outputs`). ``noise_aware``:
    the front's tables hold the noise-aware front only (:func:`dse.search.noise.noise_aware_front`; the figures
    still draw the plain front)."""
    from dse.config.outputs import writing
    from dse.figures.plots import make_plots
    from dse.results.views import (
        front_rows,
        hv_source,
        left_out_note,
        proxy_note,
        status_summary,
        table_columns,
        unit_of,
    )
    from dse.search.noise import accuracy_objectives, noise_aware_front
    from dse.search.pareto import front
    from dse.search.study import hv_reference, load_points

    pts = load_points(study, spec)
    f = front(pts, spec.directions)
    aware = noise_aware_front(pts, spec.metrics, spec.directions) if accuracy_objectives(spec.metrics) else None
    plain_size = len(f)
    if noise_aware and aware is not None:
        f = list(aware)
    sign = -1 if spec.directions[0] == "maximize" else 1
    f.sort(key=lambda p: (sign * p.values[0], p.number))
    status = status_summary(spec, storage, study=study)
    parts: list[str] = []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = f"dse study report: {spec.name}"
    parts.append(f"<h1>{html.escape(title)}</h1>")
    parts.append(f'<p class="note">Written {now} by <code>dse report</code> from '
                 f"<code>{html.escape(str(spec.path or '(no file)'))}</code>. Accuracy figures are the training "
                 f"surrogate's on its proxy task{'s' if spec.base.training.tasks else ''} "
                 f"({html.escape(', '.join(spec.base.training.tasks or (spec.base.training.task,)))}), not the "
                 "zoo model's.</p>")

    parts.append("<h2>Status</h2>")
    st = [{"item": k, "value": (", ".join(f"{a} {b}" for a, b in v.items() if b) if isinstance(v, dict) and
                                k == "trials" else "; ".join(v) if isinstance(v, list) else v)}
          for k, v in status.items() if k != "failures"]
    st += [{"item": "sampler", "value": spec.sampler},  # (the strategy is in the status already)
           {"item": "seed", "value": spec.seed}, {"item": "surrogate seeds per setting",
            "value": (f"{spec.seeds} to {spec.seeds_max} (more near the front)" if spec.adaptive else str(spec.seeds))
            + (f", from seed {spec.first_seed}" if spec.first_seed else "")}]
    parts.append(_table([{k: (v if not isinstance(v, (list, dict)) else str(v)) for k, v in r.items()}
                         for r in st]))

    parts.append("<h2>Objectives and hypervolume reference point</h2>")
    ref = hv_reference(spec)
    rows = []
    for o, r in zip(spec.objectives, ref):
        rows.append({"objective": o.metric, "direction": o.direction, "unit": unit_of(o.metric),
                     "reference point": r, "where the reference comes from": hv_source(spec, o.metric)})
    parts.append(_table(rows))
    parts.append(f'<p class="note">Hypervolume of the feasible front against this point: '
                 f"{status['hypervolume']:.6g} (product of the objectives' units); constraints: "
                 f"{html.escape('; '.join(status['constraints']) or 'none')}.</p>")

    parts.append("<h2>Figures</h2>")
    with tempfile.TemporaryDirectory(prefix="dse-report-") as tmp:
        files = make_plots(study, spec, Path(tmp), formats=("png",))  # embedded as PNG: no SVG drawn
        if not files:
            parts.append('<p class="note">No figure: the study has no complete trial yet.</p>')
        for p in files:
            parts.append(f"<h3>{html.escape(p.stem)}</h3>" + _img(p, f"{spec.name} {p.stem}"))

    if noise_aware and aware is not None:
        parts.append(f"<h2>The noise-aware front ({len(f)} distinguishable of the {plain_size} Pareto-optimal of "
                     f"{status['feasible']} feasible trials)</h2>")
        parts.append('<p class="note">Only the front points whose place rests on more than accuracy noise (the '
                     "paired-seed test, <code>dse pareto --noise-aware</code>); the figures above draw the plain "
                     "front.</p>")
    else:
        parts.append(f"<h2>The front ({len(f)} Pareto-optimal of {status['feasible']} feasible trials)</h2>")
        if noise_aware:
            parts.append('<p class="note">--noise-aware: no objective is an accuracy figure, so there is no '
                         "accuracy noise to respect: this is the plain front.</p>")
    rows = front_rows(spec, f)
    shown, left = table_columns(spec, rows) if rows else ([], {"constant": {}, "empty": [], "other": []})
    parts.append(_front_table(spec, rows, shown, short=True))
    note = left_out_note(left).replace("--columns all shows every column", "the full table below has them")
    parts.append(f'<p class="note">The objectives, constraint metrics and knobs that vary on the front; click a '
                 "header to sort (a knob by its field name; hover for the full one). "
                 f"{html.escape(note + '. ' if note else '')}"
                 f"{html.escape(proxy_note(spec, rows))}</p>")
    if rows:
        parts.append(f"<details><summary>The full table: every metric and knob ({len(rows[0])} columns)"
                     f"</summary>{_front_table(spec, rows, list(rows[0]))}</details>")
    if aware is not None and not noise_aware:
        parts.append(f'<p class="note">{len(aware)} of them are distinguishable by the paired-seed test '
                     "(<code>dse pareto --noise-aware</code>, <code>dse report --noise-aware</code>); "
                     "<code>_se</code> columns: the standard error of an accuracy figure over its "
                     "<code>seeds</code>.</p>")

    parts.append("<h2>Failed and pruned trials</h2>")
    parts.append(_table([{"reason": r, "trials": n} for r, n in
                         sorted(status["failures"].items(), key=lambda x: -x[1])]))

    parts.append("<h2>The study file</h2>")
    text = spec.path.read_text() if spec.path is not None and Path(spec.path).is_file() else str(spec.raw)
    parts.append(f"<pre>{html.escape(text)}</pre>")

    parts.append("<h2>Versions</h2>")
    parts.append(_table([{"component": k, "version": v} for k, v in provenance().items()]))

    doc = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
           f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts) + f"\n<script>{_SORT_JS}</script>"
           "\n</body></html>\n")
    out = Path(out)
    with writing(out, option) as tmp:  # all or nothing; an existing report is replaced only by a whole one
        tmp.write_text(doc, encoding="utf-8")
    return out
