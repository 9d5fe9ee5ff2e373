"""Pareto fronts, hypervolume and selection of configurations from a study's trials.

Non-dominated sorting and hypervolume come from moocore (a well-kept C library with Python bindings). A
trial is *feasible* when every constraint value it recorded is <= 0 (Optuna's convention); only complete,
feasible trials enter a front, a hypervolume, or an export.

Hypervolume reference point: per objective, ``[hypervolume]`` in the study file, else the metric's
default in :mod:`dse.evaluation.metrics` (for ``energy_j``, ``area_mm2``, ``power_w`` and ``peak_act_bytes`` twice the
reference accelerator's plain-BP figure). Points that do not strictly improve on it in every objective add
nothing to the hypervolume.

Knee: on the front, each objective is scaled to [0, 1] (0 = best value on the front); the knee is the
configuration closest (Euclidean) to the ideal point 0 -- the most balanced compromise.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

import moocore
import numpy as np

from dse.errors import UsageError

__all__ = ["Point", "feasible_points", "front", "hypervolume", "hypervolume_of", "recent_gain", "RECENT_SHARE",
           "ProgressFront", "knee", "best", "parse_where", "COMPARISONS"]


@dataclass(frozen=True)
class Point:
    """A complete trial as plain data: its number, objective values, every metric, knobs, feasibility."""

    number: int
    values: tuple[float, ...]
    metrics: dict
    params: dict
    feasible: bool
    config: dict
    #: the per-seed values of its seeded (accuracy) metrics, ``{"seeds": [...], metric: [...]}`` (None: none)
    per_seed: dict | None = None


def feasible_points(points: list[Point]) -> list[Point]:
    return [p for p in points if p.feasible]


def _matrix(points: list[Point]) -> np.ndarray:
    return np.array([p.values for p in points], dtype=np.float64).reshape(len(points), -1)


def front(points: list[Point], directions: list[str]) -> list[Point]:
    """The feasible non-dominated points (duplicates of one objective vector kept once, lowest number)."""
    pts = sorted(feasible_points(points), key=lambda p: p.number)
    if not pts:
        return []
    mask = moocore.is_nondominated(_matrix(pts), maximise=[d == "maximize" for d in directions])
    seen, out = set(), []
    for p, keep in zip(pts, mask):
        if keep and p.values not in seen:
            seen.add(p.values)
            out.append(p)
    return out


def hypervolume(points: list[Point], directions: list[str], reference: list[float]) -> float:
    """Hypervolume of the feasible points against ``reference`` (0.0 when none improves on it)."""
    pts = feasible_points(points)
    return hypervolume_of(_matrix(pts), directions, reference) if pts else 0.0


def hypervolume_of(x: np.ndarray, directions: list[str], reference: list[float]) -> float:
    """Hypervolume of the objective vectors ``x`` (rows, feasible) against ``reference`` (0.0 when none
    improves on it in every objective)."""
    if not len(x):
        return 0.0
    x = np.asarray(x, dtype=np.float64)
    maxi = np.array([d == "maximize" for d in directions])
    ref = np.asarray(reference, dtype=np.float64)
    better = np.where(maxi, x > ref, x < ref).all(axis=1)
    if not better.any():
        return 0.0
    return float(moocore.hypervolume(x[better], ref=ref, maximise=maxi.tolist()))


#: the share of a study's latest complete trials whose contribution to the hypervolume is reported
RECENT_SHARE = 0.1


def recent_gain(points: list[Point], directions: list[str], reference: list[float],
                share: float = RECENT_SHARE) -> dict:
    """How much the latest ``share`` of the complete trials (by trial number) added to the hypervolume: a
    stopping signal (a converged search adds little in its last tenth, a starved one still adds much).

    Returns ``hypervolume`` (of every point), ``before`` (without the latest ``recent`` points), ``recent``
    (how many points that is: ``ceil(share * len(points))``), ``settings`` (the distinct training settings,
    ``training.*`` knob values, among them: a hybrid study enters many points per setting), ``gain``
    (``hypervolume - before`` as a share of ``hypervolume``; 0.0 when the hypervolume is 0), ``points`` and
    ``feasible`` (how many complete trials, and how many of them meet the constraints)."""
    pts = sorted(points, key=lambda p: p.number)
    k = math.ceil(share * len(pts))
    hv = hypervolume(pts, directions, reference)
    before = hypervolume(pts[:len(pts) - k], directions, reference)
    settings = len({tuple(sorted((n, v) for n, v in p.params.items() if n.startswith("training.")))
                    for p in pts[len(pts) - k:]}) if k else 0
    return {"hypervolume": hv, "before": before, "recent": k, "settings": settings,
            "gain": (hv - before) / hv if hv > 0 else 0.0, "points": len(pts),
            "feasible": sum(1 for p in pts if p.feasible)}


def knee(points: list[Point], directions: list[str]) -> Point:
    f = front(points, directions)
    if not f:
        raise UsageError("export: the study has no feasible complete trial yet; run it (dse run) or relax "
                         "its constraints")
    x = _matrix(f)
    x = np.where(np.array(directions) == "maximize", -x, x)  # minimisation form
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    d = np.linalg.norm((x - lo) / span, axis=1)
    return f[int(np.argmin(d))]


#: the comparison operators a --where condition may use
COMPARISONS = {"<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt, "==": operator.eq}
_WHERE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(<=|>=|==|<|>)\s*([-+0-9.eE]+)\s*$")


def parse_where(text: str, metrics: dict) -> tuple[str, str, float]:
    m = _WHERE.match(text)
    if not m:
        raise UsageError(f"--where: {text!r} is not 'METRIC OP NUMBER' (OP one of <=, >=, <, >, ==), "
                         "for example 'accuracy_drop<=1'")
    name, op, num = m.group(1), m.group(2), m.group(3)
    if name not in metrics:
        raise UsageError(f"--where: unknown metric {name!r}; allowed: {', '.join(metrics)}")
    try:
        return name, op, float(num)
    except ValueError:
        raise UsageError(f"--where: {num!r} is not a number") from None


def check_recorded(records: list[dict], names, option: str, scope: str = "of this study") -> None:
    """UsageError naming ``option`` when no record (a point's metrics, a front row) holds one of ``names`` (a
    metric the study never computed: more trials would not give it), with what it needs; nothing without records."""
    from dse.evaluation import metrics as registry

    for name in names:
        if records and all(r.get(name) is None for r in records):
            m = registry.like(name)
            needs = (f": it needs the surrogate's {' and '.join(m.controls)} control, which a study trains only when "
                     "an objective or constraint needs it" if m is not None and m.controls else "")
            raise UsageError(f"{option}: no trial {scope} recorded {name}{needs}")


def best(points: list[Point], metric: str, direction: str, where: list[tuple[str, str, float]] = ()
         ) -> Point:
    """The feasible point with the best ``metric`` among those meeting every ``where`` condition."""
    records = [p.metrics for p in points]
    check_recorded(records, [metric], "--best")
    check_recorded(records, [m for m, _, _ in where], "--where")
    pts = [p for p in feasible_points(points) if metric in p.metrics
           and all(m in p.metrics and COMPARISONS[op](p.metrics[m], v) for m, op, v in where)]
    if not pts:
        cond = " and ".join(f"{m}{op}{v:g}" for m, op, v in where)
        raise UsageError(f"export: no feasible trial has {metric}" + (f" with {cond}" if cond else "")
                         + "; run more trials or relax the condition")
    key = (lambda p: (-p.metrics[metric], p.number)) if direction == "maximize" else \
        (lambda p: (p.metrics[metric], p.number))
    return min(pts, key=key)


class ProgressFront:
    """The feasible front, kept incrementally as complete trials arrive (the progress display, the
    hypervolume history of ``dse plot``): a point the front dominates costs one comparison, and the
    hypervolume is computed again only when it is asked for after the front changed."""

    def __init__(self, spec, ref: list[float]) -> None:
        self.spec, self.ref = spec, ref
        self.sign = np.array([1.0 if d == "maximize" else -1.0 for d in spec.directions])
        self.points: list[Point] = []
        self._values = np.zeros((0, len(spec.directions)))  # the points' values, maximized (sign applied)
        self._hv: float | None = 0.0

    def add(self, p: Point) -> None:
        if not p.feasible:
            return
        v = self.sign * np.asarray(p.values, dtype=np.float64)
        if np.any(np.all(self._values >= v, axis=1)):  # dominated by, or equal to, a point of the front
            return
        keep = ~(np.all(v >= self._values, axis=1) & np.any(v > self._values, axis=1))
        self.points = [q for q, k in zip(self.points, keep) if k] + [p]
        self._values = np.vstack([self._values[keep], v])
        self._hv = None

    @property
    def hypervolume(self) -> float:
        if self._hv is None:
            self._hv = hypervolume(self.points, self.spec.directions, self.ref)
        return self._hv
