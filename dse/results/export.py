"""Selecting configurations from a study and writing them as files ``dse evaluate`` reads back.

An exported configuration is the trial's full configuration (``[workload]``, ``[training]``,
``[hardware]``, ``[reference]``, ``seeds``) plus a ``[meta]`` table (study, trial number, the metrics it
scored) that ``dse evaluate`` ignores; evaluating it reproduces every metric exactly (same surrogate seeds,
same cached or re-trained surrogate, the same deterministic hardware model).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from dse.config.values import json_text
from dse.errors import UsageError
from dse.evaluation import metrics as registry
from dse.search.pareto import Point, best as best_point, front, knee, parse_where
from dse.search.studyfile import StudySpec

__all__ = ["export_points", "render", "to_toml", "write_folder", "FORMATS"]


def export_points(spec: StudySpec, points: list[Point], *, best: str | None = None, where: list[str] = (),
                  pareto: bool = False) -> list[Point]:
    if not points:
        raise UsageError(f"export: study {spec.name!r} has no complete trial to export; run it first "
                         "(dse run), and see `dse status` for failed trials")
    if not any(p.feasible for p in points):
        bounds = "; ".join(str(c) for c in spec.constraints) or "its constraints"
        raise UsageError(f"export: study {spec.name!r} has no feasible trial: none of its {len(points)} "
                         f"complete trials satisfies {bounds}; relax [[constraints]] in the study file or run "
                         "more trials (dse run --trials N)")
    if pareto:
        return sorted(front(points, spec.directions), key=lambda p: p.number)
    if best is not None:
        if best not in registry.REGISTRY:
            raise UsageError(f"--best: unknown metric {best!r}; allowed: {', '.join(registry.names())}")
        conds = [parse_where(w, registry.REGISTRY) for w in where]
        return [best_point(points, best, registry.get(best).direction, conds)]
    return [knee(points, spec.directions)]


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string is JSON-escaped text
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(doc: dict, prefix: str = "") -> str:
    """A minimal TOML writer for plain nested tables of scalars and lists (what configurations hold)."""
    lines = []
    scalars = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    for k, v in scalars.items():
        lines.append(f"{k} = {_value(v)}")
    for k, v in tables.items():
        name = f"{prefix}{k}"
        sub = to_toml(v, prefix=f"{name}.")
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        if sub:
            lines.append(sub)
    return "\n".join(lines)


def _document(p: Point, spec: StudySpec) -> dict:
    doc = dict(p.config)
    doc["meta"] = {"study": spec.name, "trial": p.number, "feasible": p.feasible,
                   # a non-finite figure (none is expected) is left out: `dse evaluate` refuses NaN and inf
                   "metrics": {k: v for k, v in p.metrics.items()
                               if not (isinstance(v, float) and not math.isfinite(v))}}
    return doc


#: the formats :func:`render` writes
FORMATS = ("toml", "json", "csv")


def render(points: list[Point], fmt: str, spec: StudySpec) -> str:
    if fmt == "toml":
        if len(points) != 1:
            raise UsageError("--format toml holds one configuration; use --out FOLDER with --pareto, or "
                             "--format json")
        return f"# {spec.name}, trial {points[0].number}: `dse evaluate` this file to reproduce its metrics\n" \
            + to_toml(_document(points[0], spec)) + "\n"
    if fmt == "json":
        docs = [_document(p, spec) for p in points]
        return json_text(docs[0] if len(docs) == 1 else docs, indent=2) + "\n"
    rows = []
    for p in points:
        r = {"trial": p.number}
        r.update(p.metrics)
        r["first_seed"] = p.config.get("first_seed", 0)  # with seeds: the surrogate seeds its figures rest on
        for section in ("training", "hardware"):
            r.update({f"{section}.{k}": v for k, v in p.config.get(section, {}).items()})
        rows.append(r)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_folder(points: list[Point], spec: StudySpec, out: Path, option: str = "--out") -> list[Path]:
    """One TOML file per point in folder ``out`` (``<study>-trial<N>.toml``), written all or nothing.

    The files are written into a temporary folder beside ``out`` and moved in only once all exist, so an
    interrupted export (Ctrl-C, a full disk, a reader closing the pipe) leaves no partial folder behind; a
    folder that cannot be written is a one-line UsageError naming ``option`` (:mod:`dse.config.outputs`).
    """
    from dse.config.outputs import writing_folder

    out = Path(out)
    names = []
    with writing_folder(out, option) as tmp:
        for p in points:
            name = f"{spec.name}-trial{p.number}.toml"
            (tmp / name).write_text(render([p], "toml", spec))
            names.append(name)
    return [out / n for n in names]
