"""Noise on the accuracy axis: the paired-seed test, the noise-aware front, and which settings need more seeds.

Every accuracy metric of a study (:func:`dse.evaluation.metrics.seeded`: ``accuracy``, ``accuracy_drop``,
``accuracy_drop_worst``, ``predictor_gain``) is a mean over surrogate seeds; a trial keeps the per-seed values
behind it (the user attribute ``per_seed``: ``{"seeds": [...], metric: [...]}``, on :class:`~dse.search.pareto.Point` as
``per_seed``). Two points are compared on the seeds they share (*paired*: the same initialization and batch
order), which cancels most of the seed-to-seed variation two settings have in common.

**The test.** For an accuracy objective, the difference between points ``p`` and ``q`` is the mean over
their common seeds of ``p_s - q_s``; its standard error is the sample std of those differences over the
square root of their number. With fewer than two common seeds there is no paired estimate, and the
unpaired one stands in: a pooled within-setting std ``s`` of the metric (over every setting of the study with
at least two seeds) times ``sqrt(1/n_p + 1/n_q)``; with no setting of two seeds, the difference is taken as
undecided. Two points of one training setting have identical per-seed values: their accuracy is an exact tie.
A difference counts as real when it exceeds :data:`Z` standard errors. The test assumes the seeds are
independent draws and the differences roughly normal; with 3 seeds the standard error itself is uncertain
(2 degrees of freedom), so a front point that survives it is a screen, not a proof.

**Clearly dominated** (:func:`clearly_dominated`): another point is at least as good in every objective, and
in each accuracy objective either an exact tie or better by more than Z standard errors of the difference
(and strictly better somewhere). A point on the plain front (by its means), or not clearly dominated, is *on
the front or within noise of it*: the adaptive replication (:func:`needs_seeds`) gives such a setting more
seeds. (The plain front is checked on its own because the test compares two points on the seeds they share,
while the front compares means over every seed each has: a point can be clearly dominated on two shared
seeds and still be on the front by its means.)

**Noise-aware front** (:func:`noise_aware_front`): the plain front's points whose place rests on more than
noise. A front point is left out when another point is at least as good in every other objective, strictly
better in one of them, and worse in accuracy by no more than Z standard errors of the difference: the two
are the same within noise in accuracy, and the other is better elsewhere. The noise-aware front is a subset
of the plain front; its points are *distinguishable*.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dse.evaluation import metrics as registry
from dse.search.pareto import Point, front

__all__ = ["Z", "accuracy_objectives", "Noise", "clearly_dominated",
           "needs_seeds", "noise_aware_front", "noise_figures"]

#: the margin, in standard errors of the paired difference, beyond which an accuracy difference is real
Z = 1.0


def accuracy_objectives(metrics: Sequence[str]) -> list[int]:
    """Indices of the objectives that are seeded (accuracy) metrics."""
    seeded = set(registry.seeded())
    return [i for i, m in enumerate(metrics) if m in seeded]


class Noise:
    """The paired-seed test over a set of points (the pooled std for the unpaired fallback comes from them)."""

    def __init__(self, points: Sequence[Point], metrics: Sequence[str], directions: Sequence[str]):
        self.metrics = list(metrics)
        self.sign = np.array([1.0 if d == "maximize" else -1.0 for d in directions])
        self.acc = accuracy_objectives(self.metrics)
        self.pooled: dict[str, float | None] = {}
        for i in self.acc:
            m = self.metrics[i]
            recs = _distinct([p.per_seed for p in points if p.per_seed and m in p.per_seed
                              and len(p.per_seed[m]) >= 2], m)
            dof = sum(len(r[m]) - 1 for r in recs)
            ss = sum(float(np.var(r[m], ddof=1)) * (len(r[m]) - 1) for r in recs)
            self.pooled[m] = math.sqrt(ss / dof) if dof > 0 else None

    def advantage(self, p: Point, q: Point, i: int) -> tuple[float, float | None]:
        """How much better ``p`` is than ``q`` in accuracy objective ``i`` (in its better direction), and the
        standard error of that difference (0.0 for an exact tie of one setting; None: undecided)."""
        m = self.metrics[i]
        sign = self.sign[i]
        a, b = p.per_seed, q.per_seed
        if not a or not b or m not in a or m not in b:
            return sign * (p.values[i] - q.values[i]), None
        va, vb = dict(zip(a["seeds"], a[m])), dict(zip(b["seeds"], b[m]))
        common = [s for s in va if s in vb]
        d = np.array([va[s] - vb[s] for s in common], dtype=np.float64) * sign
        if len(common) >= 2:
            return float(d.mean()), float(np.std(d, ddof=1) / math.sqrt(len(common)))
        if len(common) == len(va) == len(vb) == 1 and d[0] == 0.0:
            return 0.0, 0.0  # one seed each, the same value: one setting
        s = self.pooled[m]
        diff = sign * (p.values[i] - q.values[i])
        return diff, (None if s is None else s * math.sqrt(1 / len(va) + 1 / len(vb)))

    def clearly_better(self, q: Point, p: Point, i: int) -> bool:
        """``q`` at least as good as ``p`` in accuracy objective ``i`` beyond doubt: an exact tie, or better by
        more than Z standard errors."""
        adv, se = self.advantage(q, p, i)
        if se is None:
            return False
        if se == 0.0:
            return adv >= 0.0
        return adv > Z * se

    def within_noise_below(self, p: Point, q: Point, i: int) -> bool:
        """``p`` better than ``q`` in accuracy objective ``i`` by no more than Z standard errors (or worse)."""
        adv, se = self.advantage(p, q, i)
        if se is None:
            return adv <= 0.0
        return adv <= Z * se


def _distinct(records: list[dict], m: str) -> list[dict]:
    seen, out = set(), []
    for r in records:
        key = (tuple(r["seeds"]), tuple(r[m]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def clearly_dominated(p: Point, points: Sequence[Point], noise: Noise) -> bool:
    """Whether a feasible point of ``points`` clearly dominates ``p`` (see the module's docstring)."""
    others = [q for q in points if q.feasible and q.number != p.number]
    if not others:
        return False
    acc = noise.acc
    maxi = noise.sign
    x = np.array([q.values for q in others], dtype=np.float64) * maxi
    mine = np.asarray(p.values, dtype=np.float64) * maxi
    rest = [j for j in range(len(mine)) if j not in acc]
    geq = (x[:, rest] >= mine[rest]).all(axis=1) if rest else np.ones(len(others), bool)
    for k in np.flatnonzero(geq):
        q = others[k]
        if not all(noise.clearly_better(q, p, i) for i in acc):
            continue
        strictly = (x[k, rest] > mine[rest]).any() if rest else False
        if strictly or any(noise.advantage(q, p, i)[0] > 0 for i in acc):
            return True
    return False


def needs_seeds(candidates: Sequence[Point], points: Sequence[Point], metrics: Sequence[str],
                directions: Sequence[str]) -> bool:
    """Whether one of a setting's ``candidates`` (its feasible points, with its per-seed record) is on the
    front of ``points`` plus them, or within noise of it: the setting then earns another seed."""
    feas = [c for c in candidates if c.feasible]
    if not feas or not accuracy_objectives(metrics):
        return False
    pool = [q for q in points if q.feasible] + feas
    on_front = {p.values for p in front(pool, list(directions))}
    if any(c.values in on_front for c in feas):  # on the front by its means, whatever the shared seeds say
        return True
    noise = Noise(pool, metrics, directions)
    return any(not clearly_dominated(c, pool, noise) for c in feas)


def noise_aware_front(points: Sequence[Point], metrics: Sequence[str], directions: Sequence[str]) -> list[Point]:
    """The plain front's points whose place on it rests on more than accuracy noise (module docstring)."""
    plain = front(list(points), list(directions))
    acc = accuracy_objectives(metrics)
    if not acc or len(plain) < 2:
        return plain
    feas = [q for q in points if q.feasible]
    noise = Noise(feas, metrics, directions)
    if all(noise.pooled[metrics[i]] is None for i in acc) and all(
            not q.per_seed or metrics[i] not in q.per_seed or list(q.per_seed[metrics[i]]) == [q.values[i]]
            for q in feas for i in acc):
        # no point rests on two seeds (and each one-seed value is its point's): a difference is an exact tie or
        # undecided, so "within noise below" is "no better", and a point shadowed so would be dominated: the
        # front is the plain one (saves a pass over every pair, 5 s on a front of 2,239 points of 2x10^4)
        return plain
    return _unshadowed(plain, feas, noise)


def _unshadowed(plain: list[Point], feas: list[Point], noise: Noise) -> list[Point]:
    """The points of ``plain`` no point of ``feas`` shadows within accuracy noise (see the module docstring)."""
    acc, maxi = noise.acc, noise.sign
    rest = [j for j in range(len(maxi)) if j not in acc]
    x = np.array([q.values for q in feas], dtype=np.float64).reshape(len(feas), -1) * maxi
    keep = []
    for p in plain:
        mine = np.asarray(p.values, dtype=np.float64) * maxi
        geq = (x[:, rest] >= mine[rest]).all(axis=1) & (x[:, rest] > mine[rest]).any(axis=1) \
            if rest else np.zeros(len(feas), bool)
        shadowed = any(feas[k].number != p.number and all(noise.within_noise_below(p, feas[k], i) for i in acc)
                       for k in np.flatnonzero(geq))
        if not shadowed:
            keep.append(p)
    return keep


def noise_figures(spec, pts: list[Point], fr: list[Point]) -> dict:
    """With an accuracy objective: how many front points are distinguishable (the noise-aware front,
    :mod:`dse.search.noise`) and the fewest seeds a front point rests on."""
    if not accuracy_objectives(spec.metrics) or not fr:
        return {}
    seeds = [int(p.metrics.get("seeds", 0)) for p in fr]
    return {"distinguishable": len(noise_aware_front(pts, spec.metrics, spec.directions)),
            "front_seeds": (min(seeds), max(seeds))}
