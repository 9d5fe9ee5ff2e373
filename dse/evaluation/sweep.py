"""Sensitivity: one or two knobs varied around a configuration, every metric at each point.

A knob is ``SECTION.FIELD`` of a configuration file (``training``, ``hardware``, ``reference``,
``workload``, or ``schedule.gp_fraction``), for example ``hardware.rows`` or ``training.gp_fraction``.
Each combination of the given values replaces the configuration's value and is evaluated with
:func:`dse.evaluation.evaluator.evaluate` (the training surrogate runs, cached, only when a training knob changes).
"""

from __future__ import annotations

import itertools
import re
from typing import Any, Callable

from dse.config.configuration import Configuration
from dse.config.values import check_number
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate

__all__ = ["parse_knob", "sweep", "SECTIONS"]

SECTIONS = ("training", "hardware", "reference", "workload", "schedule")
_KNOB = re.compile(r"^\s*([a-z_]+)\.([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.+)$")


def _value(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    return t.strip("'\"")


def parse_knob(text: str) -> tuple[str, str, list]:
    """``'hardware.rows=16,32,64'`` -> ``("hardware", "rows", [16, 32, 64])`` (UsageError naming the
    problem otherwise)."""
    m = _KNOB.match(text)
    if not m:
        raise UsageError(f"--knob: {text!r} is not SECTION.FIELD=V1,V2,... (for example "
                         "hardware.rows=16,32,64)")
    section, name, vals = m.group(1), m.group(2), m.group(3)
    if section not in SECTIONS:
        raise UsageError(f"--knob: {section!r} is not a section; choose one of {', '.join(SECTIONS)}")
    values = [check_number(_value(v), f"--knob {section}.{name}", name) for v in vals.split(",") if v.strip()]
    if not values:
        raise UsageError(f"--knob {section}.{name}: give at least one value")
    if len(set(map(str, values))) != len(values):
        raise UsageError(f"--knob {section}.{name}: a value is given twice")
    return section, name, values


def _with(cfg_doc: dict, section: str, name: str, value) -> dict:
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in cfg_doc.items()}
    if section == "schedule" and name != "gp_fraction":
        raise UsageError(f"--knob schedule.{name}: the schedule section has only gp_fraction")
    d.setdefault(section, {})
    d[section][name] = value
    return d


def sweep(cfg: Configuration, knobs: list[tuple[str, str, list]], *, base_dir=None,
          progress: Callable[[int, int, dict], None] | None = None) -> list[dict]:
    """Every combination of ``knobs`` applied to ``cfg``: one row per point with the knob values (as
    ``SECTION.FIELD``) and every metric, in the order of the combinations (first knob outermost)."""
    if not 1 <= len(knobs) <= 2:
        raise UsageError("--knob: give one or two knobs")
    names = [f"{s}.{n}" for s, n, _ in knobs]
    if len(set(names)) != len(names):
        raise UsageError(f"--knob: {names[0]} is given twice")
    doc = cfg.to_dict()
    combos = list(itertools.product(*[v for _, _, v in knobs]))
    configs = []
    for combo in combos:
        d = doc
        for (s, n, _), v in zip(knobs, combo):
            if s != "schedule" and n not in d.get(s, {}) and s != "workload":
                raise UsageError(f"--knob {s}.{n}: not a field of [{s}] (its fields: "
                                 f"{', '.join(sorted(d.get(s, {})))})")
            d = _with(d, s, n, v)
        try:
            configs.append(Configuration.from_dict(d, base=base_dir))
        except UsageError as e:
            raise UsageError(f"--knob {', '.join(f'{k}={v}' for k, v in zip(names, combo))}: {e}") from None
    rows = []
    for i, (combo, c) in enumerate(zip(combos, configs)):
        out = evaluate(c)
        row = dict(zip(names, combo))
        row.update(out["metrics"])
        rows.append(row)
        if progress is not None:
            progress(i + 1, len(combos), row)
    return rows
