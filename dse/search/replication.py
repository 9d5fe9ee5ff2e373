"""Adaptive seed replication: seeds where they matter.

A study with ``seeds_min < seeds_max`` trains ``seeds_min`` surrogate seeds for every training setting it
samples, and, before the setting's points enter the study, adds one seed at a time, up to ``seeds_max``,
while one of its points is on the front of the study's points so far (by the means) or within noise of it
(not clearly dominated by the paired-seed test, :mod:`dse.search.noise`) -- the racing idea for noisy
objectives: the settings far from the front stop early, the ones that compete for it get the seeds. A point
is never re-scored after it entered; a setting that stopped early had no point on the front by the means,
each dominated by a point that stays, so every point of the final front rests on ``seeds_max`` seeds.

A trial's accuracy is the mean over the seeds its setting has then, and the trial records how many
(``seeds`` and ``<metric>_se`` among its metrics, the per-seed values as its ``per_seed`` attribute). The
seeds are ``first_seed``, ``first_seed + 1``, ...; every run goes to the surrogate cache, so seeds trained
before (by another study, an earlier run) cost nothing when asked for, but a setting starts from the seeds the
study's own trials of it reached (a later joint trial of the same setting; the hybrid's retry of a setting
cut short), never from what the cache holds: a warm cache changes no result. The worker that claims a
setting trains its extra seeds; an interrupted setting is retried, its finished seeds read from the cache.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from dse.search.noise import needs_seeds
from dse.search.pareto import Point

__all__ = ["start_seeds", "race"]

T = TypeVar("T")


def start_seeds(spec, known: int = 0) -> int:
    """The seeds to start a setting with: ``seeds_min``, or as many as the study's own trials of the setting
    reached already (``known``: a later joint trial of it; the hybrid's retry of a setting cut short; a joint
    trial that failed records none, so its retry starts at ``seeds_min`` and reads its seeds from the cache),
    up to ``seeds_max``. Not what the surrogate cache holds: a cache warmed by another study (or an earlier
    run) changed which seeds a trial recorded, so the same file and seed gave other results (those seeds still
    cost nothing when asked for)."""
    if not spec.adaptive:
        return spec.seeds
    return max(spec.seeds, min(int(known), spec.seeds_max))


def race(spec, evaluate_at: Callable[[int], tuple[T, list[Point]]], points: Callable[[], list[Point]],
         start: int) -> tuple[T, int]:
    """Evaluate a setting on ``start`` seeds, then on one more while it needs them (its candidate points are
    on the front of ``points()`` or within noise of it) and ``seeds_max`` allows. ``evaluate_at(n)`` returns
    the evaluation on n seeds and the setting's candidate points; returns the last evaluation and its n."""
    n = start
    while True:
        out, candidates = evaluate_at(n)
        if n >= spec.seeds_max or not needs_seeds(candidates, points(), spec.metrics, spec.directions):
            return out, n
        n += 1
