"""Optuna samplers by name, one registry: the study file's ``sampler`` choices and ``dse run --sampler`` read
it. Each entry builds a sampler for a study spec and a seed. The Python API also takes any Optuna
``BaseSampler`` instance instead of a name (``dse.run(spec, sampler=optuna.samplers.GPSampler())``); such an
instance is used as given, with its own seed: a run resumed with an instance seeded alike may propose what
the first run proposed (give it a new seed), whereas a named sampler is seeded by worker and history.

**Adding a sampler**: one function here and one line in :data:`SAMPLERS`. Optuna is imported when a sampler
is built, not with this module, so that a study file is validated without importing it.
"""

from __future__ import annotations

import copy
import functools
import warnings
from contextlib import contextmanager
from typing import Any, Callable

__all__ = ["SAMPLERS", "make_sampler", "check_sampler", "grid_untried", "trial_point", "GRID_NONE"]


@contextmanager
def _quiet(optuna):
    """Optuna's "experimental" notice (NSGA-III, QMC): stable in use here, and not the user's concern."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


def _nsga2(spec, seed: int):
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed, population_size=spec.population or 20)


def _nsga3(spec, seed: int):
    import optuna

    with _quiet(optuna):
        return optuna.samplers.NSGAIIISampler(seed=seed, population_size=spec.population or 20)


def _tpe(spec, seed: int):
    import optuna

    # the constant liar (Optuna's default since 5.0, named here): workers asking while others run are steered
    # away from the running trials' points
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True,
                                      n_startup_trials=spec.startup_trials or 10)


def _random(spec, seed: int):
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _qmc(spec, seed: int):
    import optuna

    with _quiet(optuna):
        return optuna.samplers.QMCSampler(seed=seed, scramble=True, warn_independent_sampling=False)


def _auto(spec, seed: int):
    from dse.search.auto_sampler import AutoRuleSampler

    return AutoRuleSampler(seed=seed, population=spec.population, startup=spec.startup_trials or 10)


def _gp(spec, seed: int):
    try:  # Optuna imports torch only when the sampler first samples: check it now, with a message
        import torch  # noqa: F401
    except Exception as e:  # not installed, or installed but broken
        from dse.errors import UsageError

        why = "is not installed" if isinstance(e, ModuleNotFoundError) else f"cannot be imported ({e})"
        raise UsageError(f"sampler 'gp': Optuna's GPSampler needs torch, which {why} (pip install torch; no GPU "
                         "needed), or choose another sampler") from None
    import optuna

    # Gaussian-process regression with (log) expected hypervolume improvement for several objectives; reads the
    # constraints the trials set (Trial.set_constraint), like the other samplers
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=spec.startup_trials or 10,
                                     warn_independent_sampling=False)


def _hvi(spec, seed: int):
    # the hybrid strategy's own choice of training settings (dse.search.hvi), which it enqueues: its outer study
    # samples nothing itself. Refused here for the joint strategy (checked when the run starts, so that a file's
    # `sampler = "hvi"` may run with `dse run --strategy hybrid`)
    if spec.strategy != "hybrid":
        from dse.errors import UsageError

        raise UsageError("study.sampler: \"hvi\" chooses the hybrid strategy's training settings (strategy = "
                         "\"hybrid\" or dse run --strategy hybrid); the joint strategy needs an Optuna sampler "
                         "(auto, tpe, ...)")
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def grid_untried(names: list[str], points, trials) -> list[int]:
    """The indices of ``points`` (value tuples of the knobs ``names``) that no trial of ``trials`` has tried:
    tried means complete, or failed for a reason of its own -- not a trial interrupted or whose worker died
    (its point is retried), nor one pruned (a budget overflow, a claim). A trial's point is its values, or
    those it was queued with (a retry before its values are suggested)."""
    from optuna.trial import TrialState

    tried = set()
    for t in trials:
        p = trial_point(t)
        if not all(n in p for n in names):
            continue
        reason = t.user_attrs.get("fail_reason", "")
        if t.state == TrialState.COMPLETE or (
                t.state == TrialState.FAIL and reason and not reason.startswith("interrupted")):
            tried.add(tuple(p[n] for n in names))
    return [i for i, p in enumerate(points) if tuple(p) not in tried]


def trial_point(t) -> dict:
    """The values of trial ``t``: those it was queued with (``fixed_params``), then those suggested."""
    return {**t.system_attrs.get("fixed_params", {}), **t.params}


#: the system attribute marking a grid trial that found no point left for it (pruned before it suggests)
GRID_NONE = "grid_none"


def _grid(spec, seed: int):
    import datetime

    import optuna
    from optuna.trial import TrialState

    from dse.search import runguard

    if spec.strategy == "hybrid":
        # the hybrid walks its grid of training settings itself and enters the hardware points: the main study's
        # sampler never proposes (a queued retry has its values), and a grid sampler over the whole space
        # would build every training x hardware point (12 million for a large grid, seconds at each open)
        return optuna.samplers.RandomSampler(seed=seed)

    class StudyGridSampler(optuna.samplers.GridSampler):
        """Optuna's grid sampler, with a point counted as tried by its values over the trials that count
        (:func:`grid_untried`), not by the ``grid_id`` its trial was given: Optuna numbers the points by a
        shuffle that follows the sampler's seed and gives the first trials the point of their trial number
        unchecked, so a resumed run or another worker (dse seeds named samplers by worker and history)
        repeated points and took untried ones as tried; and an interrupted trial, never evaluated, counted
        as tried.

        A trial takes the untried points in the grid's order (the study seed's shuffle, the same for every
        worker and run), skipping those that live running trials and queued retries hold (their values or
        ``grid_id``; a dead worker's trial failed for a retry not queued yet, too) and one for each earlier
        running trial that has not taken its point yet: workers asking at once, each from its own reading of
        the study, take different points. A point held by a trial whose worker died is taken over (that trial
        is failed as interrupted, so that it is not retried as well). Before it asks for a trial, the joint
        strategy reads :meth:`outlook`: it waits while every untried point is held (a live worker's running
        trial ends it, or fails and is retried) and stops once none is left untried; a trial that still finds
        no point for it (another worker took the last one meanwhile) is marked :data:`GRID_NONE` and pruned
        before it suggests anything (the objective does): no point is evaluated twice."""

        def before_trial(self, study, trial) -> None:
            # (Optuna's private attributes _all_grids, _param_names, _search_space: optuna>=5,<6)
            fixed = trial.system_attrs.get("fixed_params", {})
            if "grid_id" in trial.system_attrs or all(n in fixed for n in self._param_names):
                return  # a retry or a queued trial: its point is given
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            free, ahead, gone = self._choice(trials, trial.number, fixed)
            if ahead < len(free):  # (earlier trials choosing at this moment take the first ones by this rule)
                gid = free[ahead]
                holder = next((t for t in gone.values() if self._holds(t) == gid), None)
                if holder is None or runguard.fail_orphan(
                        study, holder, f"{runguard.INTERRUPTED}: its worker died while running it; its grid point "
                                       f"was taken over by trial {trial.number}"):
                    study._storage.set_trial_system_attr(trial._trial_id, "search_space", self._search_space)
                    study._storage.set_trial_system_attr(trial._trial_id, "grid_id", gid)
                    return
            # no point for it (or another process recovered the dead holder first): pruned by the objective
            study._storage.set_trial_system_attr(trial._trial_id, GRID_NONE, True)

        def outlook(self, study) -> str:
            """What a new trial would find: ``"free"`` (a point for it), ``"wait"`` (every untried point is
            held, by a live worker's running trial, a queued retry, or trials choosing now) or ``"done"`` (no
            point left untried)."""
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            untried = grid_untried(self._param_names, self._all_grids, trials)
            if not untried:
                return "done"
            free, ahead, _ = self._choice(trials, None, {}, untried)
            return "free" if ahead < len(free) else "wait"

        def held_elsewhere(self, study) -> list[tuple[int, str]]:
            """(number, owner record) of the running trials holding an untried point whose process this machine
            cannot see (another host's, by its record): nothing here can tell whether they will end."""
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            untried = set(grid_untried(self._param_names, self._all_grids, trials))
            return [(t.number, t.user_attrs.get("worker", "")) for t in trials
                    if t.state == TrialState.RUNNING and self._holds(t) in untried
                    and runguard.owner_alive(t.user_attrs.get("worker", "")) is None]

        def _choice(self, trials, number: int | None, fixed: dict,
                    untried: list[int] | None = None) -> tuple[list[int], int, dict]:
            """(the free points, in order, that have the ``fixed`` values; how many running trials numbered
            below ``number`` (None: any) are choosing theirs now; the running trials whose worker is gone)."""
            gone = self._gone(trials, number)
            live = [t for t in trials if t.number not in gone]
            # (a retry queued with some of its values only -- its worker died while they were suggested --
            # takes a point that has them)
            free = [i for i in self._free(live, untried)
                    if all(self._all_grids[i][k] == fixed[n] for k, n in enumerate(self._param_names) if n in fixed)]
            # (a retry choosing with some values fixed counts as one ahead although it takes a point that has
            # them, not necessarily the first: the count errs toward skipping a point, never toward sharing one)
            ahead = sum(1 for t in live if t.state == TrialState.RUNNING and (number is None or t.number < number)
                        and self._holds(t) is None and GRID_NONE not in t.system_attrs)
            return free, ahead, gone

        def _holds(self, t) -> int | None:
            """The grid point trial ``t`` holds: its ``grid_id``, else the index of its values (None: none yet)."""
            if "grid_id" in t.system_attrs:
                return t.system_attrs["grid_id"]
            p = trial_point(t)
            if not all(n in p for n in self._param_names):
                return None
            return self._index.get(tuple(p[n] for n in self._param_names))

        @functools.cached_property
        def _index(self) -> dict:
            return {tuple(p): i for i, p in enumerate(self._all_grids)}

        @staticmethod
        def _gone(trials, me: int | None) -> dict:
            """Running trials (other than ``me``) whose worker is gone (:func:`runguard.worker_gone`), by number."""
            now = datetime.datetime.now()
            return {t.number: t for t in trials
                    if t.state == TrialState.RUNNING and t.number != me and runguard.worker_gone(t, now)}

        def _free(self, trials, untried: list[int] | None = None) -> list[int]:
            """Untried points, in order, less those that running and waiting trials hold, and those of dead
            workers' trials failed for a retry that is not queued yet (a recovery fails, then queues: for
            :data:`runguard.ORPHAN_GRACE_S` after the failure, in case the recovering process dies between)."""
            retried = runguard.retried(trials)
            now = datetime.datetime.now()
            held = set()
            for t in trials:
                if t.state in (TrialState.RUNNING, TrialState.WAITING) or (
                        t.state == TrialState.FAIL and t.number not in retried
                        and runguard.RETRIED in t.user_attrs.get("fail_reason", "")
                        and t.datetime_complete is not None
                        and (now - t.datetime_complete).total_seconds() < runguard.ORPHAN_GRACE_S):
                    h = self._holds(t)
                    if h is not None:
                        held.add(h)
            if untried is None:  # (the untried points of these trials, when the caller has them already)
                untried = grid_untried(self._param_names, self._all_grids, trials)
            return [i for i in untried if i not in held]

        def _get_unvisited_grid_ids(self, study) -> list[int]:  # (Optuna's is_exhausted reads it)
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            return grid_untried(self._param_names, self._all_grids, trials)

        def after_trial(self, study, trial, state, values) -> None:
            # the grid is done when no point is left untried once this trial ends as it does (a queued retry
            # included: Optuna's own rule left the grid open after a queued trial took its last point); while
            # points are held by other trials the joint strategy waits (outlook), it does not stop: a holder
            # may yet fail and be retried
            trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
            done = copy.copy(trial)
            done.state = state
            if not grid_untried(self._param_names, self._all_grids,
                                [done if t.number == trial.number else t for t in trials]):
                study.stop()

    # the study's own seed, not the worker's: one order of the grid for every worker and resumed run
    return StudyGridSampler(spec.space.grid(), seed=spec.seed)


#: name -> factory(spec, seed) -> an Optuna sampler
SAMPLERS: dict[str, Callable[[Any, int], Any]] = {
    "nsga2": _nsga2, "nsga3": _nsga3, "tpe": _tpe, "auto": _auto, "random": _random, "qmc": _qmc, "grid": _grid,
    "gp": _gp, "hvi": _hvi,
}


#: the [study] options a sampler reads -> the samplers that read it (the others ignore it: dse run names it)
SAMPLER_OPTIONS: dict[str, tuple[str, ...]] = {
    "population": ("nsga2", "nsga3", "auto"),
    "startup_trials": ("tpe", "auto", "gp", "hvi"),
}


def make_sampler(spec, seed: int, sampler: Any = None):
    """The sampler for ``spec``: ``sampler`` when it is an Optuna sampler instance (injected through the Python
    API; used as given, with its own seed), else the registry's entry for ``spec.sampler``, seeded with
    ``seed``."""
    if sampler is not None:
        check_sampler(sampler)
        return sampler
    return SAMPLERS[spec.sampler](spec, seed)


def check_sampler(sampler: Any) -> None:
    """``UsageError`` unless ``sampler`` is an Optuna sampler instance."""
    import optuna

    from dse.errors import UsageError

    if not isinstance(sampler, optuna.samplers.BaseSampler):
        raise UsageError(f"sampler: an optuna.samplers.BaseSampler instance, or a name in the study file "
                         f"({', '.join(SAMPLERS)}); got {sampler!r}")
