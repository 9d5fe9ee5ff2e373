"""The strategy interface: one base class, as Optuna has one per sampler or storage.

A strategy decides *what to try next* and enters the results in the study; everything else -- the budget,
signals, retries of dead workers' trials, heartbeats, timeouts, progress -- is the shared runner's
(:func:`dse.search.runner.run_study`). What a strategy declares, so that generic code needs no knowledge of
it:

* ``name``: the value of ``[study] strategy``; ``summary``: one line for ``--help``;
* ``options``: the ``[study]`` options it adds (:class:`Option`: name, type, default, bounds, help); the study
  file reads them into ``StudySpec.options`` and ``spec.<option>`` reads them back;
* ``validate(spec)``: refuse a study it cannot run (a ``UsageError`` naming the field);
* ``helper_studies(name)``: the names of the other Optuna studies it keeps beside the main one;
* ``importance_points(spec, study, sample)``: the points parameter importance is computed over (None: the study's
  trials, with Optuna's fANOVA), at most ``sample`` of them drawn by :func:`importance_sample`;
* ``stop_reason``: what the run summary says when :meth:`Strategy.step` returned False (unless the run's
  ``figures()`` give a ``stop_reason`` of their own, or, for a run on several workers, whose figures stay in
  the workers, :meth:`Strategy.ended` reads one from the study).

At run time ``__init__(spec, runner)`` (the runner: the open main study, its budget, the storage URL),
``step()`` (one unit of work; False when nothing is left to propose), ``figures()`` (extra figures for the
run's result), ``queues()`` (the helper studies it queues trials in: the ones this process queued and did not
start are failed when the run ends) and ``close(interrupted)``. ``step`` must enter at most
``runner.remaining()`` trials and, for an exact budget under several workers, check each new trial with
``runner.admit``. Under several workers each runs its own ``step()`` on the shared storage: a strategy that
chooses points itself and enqueues them must expect another worker to choose the same point meanwhile (the
hybrid strategy marks what it queues, chooses again when its choice was taken, and compares each claim with
the earlier running ones before it trains).

This module is a leaf: strategies import it, and it imports nothing of Optuna.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Option", "Strategy", "importance_sample"]


def importance_sample(n: int, sample: int | None, seed: int = 0):
    """The indices, in order, of the points importance is computed over: all ``n``, or a random ``sample`` of
    them (seed ``seed``, without replacement) when there are more (the hybrid's costed points, a joint study's
    complete trials)."""
    import numpy as np

    if sample is None or n <= sample:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, sample, replace=False))


@dataclass(frozen=True)
class Option:
    """A ``[study]`` option a strategy adds: its name, type (int, float, str), default and bounds."""

    name: str
    type: type
    default: Any
    low: float | None = None
    high: float | None = None
    help: str = ""


class Strategy:
    """Base class of search strategies (see the module's docstring)."""

    name: str = ""
    #: one line for ``dse run --help``: what the strategy samples
    summary: str = ""
    options: tuple[Option, ...] = ()
    #: what the run summary prints when the strategy ran out of proposals before the budget
    stop_reason: str = "the strategy has nothing left to propose"

    @classmethod
    def validate(cls, spec) -> None:
        """Raise ``UsageError`` (naming the field) when ``spec`` cannot run with this strategy."""

    @classmethod
    def helper_studies(cls, study_name: str) -> list[str]:
        """Names of the Optuna studies this strategy keeps beside the main study ``study_name``."""
        return []

    @classmethod
    def covered(cls, spec, study) -> str | None:
        """Why more trials of ``spec``'s search would run nothing new, read from the stored ``study`` (its
        space searched, its training budget spent), or None: the stopping signal then does not ask for a larger
        budget, even when the run reached its trial budget exactly."""
        return None

    @classmethod
    def ended(cls, spec, study) -> str:
        """Why a run of ``spec`` that ended before its trial budget ended, read from the stored ``study`` (what
        ``dse run --workers N`` prints: the workers' own figures are not returned to it, the reason they
        recorded is: :func:`dse.search.study.record_end`)."""
        from dse.search.study import ended_early

        return cls.covered(spec, study) or ended_early(study) or cls.stop_reason

    @classmethod
    def run_summary(cls, spec, study) -> str | None:
        """One line of the strategy's own bookkeeping for ``dse run``'s summary (None: nothing to add)."""
        return None

    @classmethod
    def importance_points(cls, spec, study, sample: int):
        """``(knob columns, metric columns, settings, points)`` to compute parameter importance over (the
        columns a random sample of at most ``sample`` of the ``points``), or None for the study's own trials
        (fANOVA)."""
        return None

    def __init__(self, spec, runner) -> None:
        self.spec, self.runner = spec, runner
        #: the run's :class:`dse.search.runguard.Guard` (set by the runner): work a signal may cut short runs
        #: inside ``self.guard.raising()``
        self.guard = None

    def queues(self) -> list:
        """The Optuna studies beside the main one that this strategy queues trials in: the WAITING trials this
        process queued there are failed when its run ends (``dse.search.runguard.drop_queued``), as the main
        study's are."""
        return []

    def storages(self) -> list:
        """The storages this strategy opened itself; the run closes them when it ends
        (:func:`dse.search.study.close_storage`)."""
        return []

    def step(self) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def figures(self) -> dict[str, Any]:
        return {}

    def close(self, interrupted: bool) -> None:
        pass
