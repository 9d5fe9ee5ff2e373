"""The one runner every strategy runs under: the budget, signals, retries of dead workers' trials, heartbeats,
timeouts and progress (:func:`run_study`); what a strategy works with (:class:`Runner`); the incremental budget
count (:class:`BudgetTracker`) and the running front (:class:`ProgressFront`).

A strategy (:mod:`dse.search.strategies`) decides *what to try next* and enters the results in the study;
``run_study`` calls its ``step`` until the budget is met. Both strategies run unchanged in one process, in
``dse run --workers N`` and in ``dse worker`` on any machine.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.trial import TrialState

from dse.search.noise import noise_figures
from dse.search.pareto import ProgressFront, front, recent_gain
from dse.search.runguard import derive_seed, guarded, owner, retry_of
from dse.search.strategies import strategy_class
from dse.search.study import (
    RunResult,
    check_cache,
    close_storage,
    close_study,
    counts_toward_budget,
    failed_count,
    hv_reference,
    load_points,
    mask_url,
    open_study,
    optimize_one,
    optuna_quiet,
    point_of,
    record_budget,
    record_end,
    recover_dead_workers,
    storage_url,
    trial_objective,
)

if TYPE_CHECKING:
    from dse.search.studyfile import StudySpec

__all__ = ["Runner", "BudgetTracker", "ProgressFront", "run_study", "RECOVER_EVERY_S"]


class BudgetTracker:
    """Counts a study's trials toward its budget incrementally: each refresh reads only the trials that are
    new or were still running, never the whole study (a study's cost per trial must not grow with it); more
    than ``READ_ONE_BY_ONE`` new ones are read in one listing (on a database, Optuna's trial cache lists only
    the trials it has not seen finished)."""

    def __init__(self, study: optuna.Study) -> None:
        self._storage, self._sid = study._storage, study._study_id
        self._counts: list[bool | None] = []  # per trial number: counts toward the budget (None: running)
        self._open: dict[int, int] = {}  # number -> trial id, trials RUNNING or WAITING
        self._waiting: set[int] = set()
        self._fail_reasons: dict[int, bool] = {}  # FAIL trials: number -> whether it counts before retries
        self._retried: set[int] = set()
        self.done = 0
        self.failed = 0
        self.new_complete: list[optuna.trial.FrozenTrial] = []
        #: the parameters of every trial seen (as sorted tuples): what has been entered already
        self.keys: set[tuple] = set()

    def _settle(self, t: optuna.trial.FrozenTrial) -> None:
        n = t.number
        self._waiting.discard(n)
        if t.state in (TrialState.RUNNING, TrialState.WAITING):
            self._open[n] = t._trial_id
            self._counts[n] = None
            if t.state == TrialState.WAITING:
                self._waiting.add(n)
            return
        self._open.pop(n, None)
        c = counts_toward_budget(t, self._retried)
        self._counts[n] = c
        if c:
            self.done += 1
            self.failed += t.state == TrialState.FAIL
        if t.state == TrialState.COMPLETE:
            self.new_complete.append(t)

    #: new trials read one at a time before the rest are read in one listing
    READ_ONE_BY_ONE = 16

    def refresh(self) -> dict:
        st = self._storage
        fresh = []
        while True:  # the trials numbered from the last one seen on (numbers are dense; no count of the study,
            try:     # which some storages compute by listing every trial)
                tid = st.get_trial_id_from_study_id_trial_number(self._sid, len(self._counts))
            except KeyError:
                break
            if len(fresh) == self.READ_ONE_BY_ONE:  # many new ones (a resumed run's first look, another worker's
                # batch): one listing reads the rest into Optuna's trial cache, which then answers
                st.get_all_trials(self._sid, deepcopy=False)  # (a study of 10^4 trials: 2 s, not 50 s)
            self._counts.append(None)
            fresh.append(st.get_trial(tid))
        n = len(self._counts)
        for t in fresh:  # a retry un-counts the failed trial it repeats
            self.keys.add(tuple(sorted(t.params.items())))
            k = retry_of(t)
            if k is not None and k not in self._retried:
                self._retried.add(k)
                if k < len(self._counts) and self._counts[k]:
                    self._counts[k] = False
                    self.done -= 1
                    self.failed -= 1
        for number, tid in list(self._open.items()):
            t = st.get_trial(tid)
            if t.state != TrialState.RUNNING or number in self._waiting:
                self._settle(t)
        for t in fresh:
            self._settle(t)
        active = len(self._open)
        return {"done": self.done, "active": active, "waiting": len(self._waiting), "n": n}

    def counting_before(self, number: int) -> int:
        """Trials numbered below ``number`` that count (or will: running ones) toward the budget."""
        after = sum(1 for c in self._counts[number:] if c is None or c)
        return self.done + len(self._open) - after


def progress_bar(fields: str, **kw):
    """A rich progress bar for a run (on standard error): the study's name, the bar, finished/budget,
    ``fields`` (a format of the task's fields, e.g. the front and hypervolume), the elapsed time and an
    estimate of the time remaining (rich's, from the recent rate of finished trials)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(fields),
                    TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True),
                    **kw)


class Runner:
    """What a strategy works with: the main study, its budget and the tracker that counts toward it."""

    def __init__(self, spec: StudySpec, study: optuna.Study, url: str, budget: int, worker: int,
                 heartbeat: int | None, sampler: Any = None) -> None:
        self.spec, self.study, self.url, self.budget = spec, study, url, budget
        self.worker, self.heartbeat = worker, heartbeat
        #: an Optuna sampler instance injected through the Python API (None: the study file's sampler)
        self.sampler = sampler
        self.tracker = BudgetTracker(study)
        self.state = self.tracker.refresh()
        self.objective = trial_objective(spec, self)
        #: the study's hypervolume reference point (costs the reference accelerator once per run)
        self.reference = hv_reference(spec)

    def refresh(self) -> dict:
        self.state = self.tracker.refresh()
        return self.state

    def remaining(self) -> int:
        """Trials that may still be entered (the budget minus trials done or running)."""
        return max(0, self.budget - self.state["done"] - self.state["active"])

    def admit(self, number: int) -> bool:
        """Whether trial ``number`` is within the budget: fewer than ``budget`` counting trials precede it
        (trial numbers are assigned atomically by the storage, so several workers agree)."""
        self.refresh()
        return self.tracker.counting_before(number) < self.budget


#: seconds between two searches for dead workers' trials in a run (also once before the run starts)
RECOVER_EVERY_S = 1.0


def run_study(spec: StudySpec, *, storage: str | None = None, trials: int | None = None,
              timeout: float | None = None, progress: Callable[[dict], None] | None = None, worker: int = 0,
              heartbeat: int | None = None, poll: float = 0.5,
              stop: Callable[[optuna.Study], bool] | None = None, strategy: str | None = None,
              accept_changes: bool = False, sampler: Any = None) -> RunResult:
    """Run (or resume) ``spec`` with its strategy until ``trials`` (default ``spec.trials``) trials are done.

    Done means complete or genuinely failed (an impossible configuration, an error): a trial interrupted by
    Ctrl-C/SIGTERM does not count, and one whose worker died is retried and counts once. Several processes
    (``worker`` = 0, 1, ...) on one machine or many can run this on one study: the budget is met exactly.

    ``progress(figures)`` is called after each step with ``finished``, ``budget``, ``front``,
    ``hypervolume`` (the study's, every process's trials) and ``last`` ((number, state) of the latest trial
    this process completed since the previous call, or None). The sampler's seed is
    ``spec.seed + 1000 * worker + done-so-far``: deterministic for a given history, and a resumed run does not
    replay the first run's samples.
    ``heartbeat`` (seconds; RDB storages) lets any machine detect a dead worker's trial and retry it.
    ``stop(study)``, checked before each step, ends the run early when it returns True. ``strategy``
    overrides the spec's; ``accept_changes`` continues a study made from a different version of the file
    (see :func:`dse.search.study.open_study`). ``sampler``: an Optuna sampler instance instead of the file's
    (the Python API's injection point; :mod:`dse.search.samplers`).
    """
    budget = trials or spec.trials
    if strategy is not None:
        spec = spec.with_overrides(strategy=strategy)
    url = storage_url(spec, storage)
    check_cache()
    probe = open_study(spec, url, create=True, heartbeat=heartbeat, accept_changes=accept_changes)
    opened = [probe]
    try:
        with optuna_quiet():
            return _run_on(spec, probe, opened, url, budget, worker, heartbeat, timeout, progress, stop, sampler,
                           poll)
    finally:
        for st in opened:  # pooled database connections closed now, not when the collector finds them
            with contextlib.suppress(Exception):  # the run's own error, if any, is the one to report
                if isinstance(st, optuna.Study):
                    close_study(st)
                else:
                    close_storage(st)


def _run_on(spec: StudySpec, probe: optuna.Study, opened: list, url: str, budget: int, worker: int,
            heartbeat: int | None, timeout: float | None, progress, stop, sampler, poll: float) -> RunResult:
    """:func:`run_study` on the study ``probe`` opened (every study and storage it opens goes into ``opened``)."""
    name = spec.strategy
    recover_dead_workers(probe)
    record_budget(probe, budget, spec.runs)
    record_end(probe, None)  # running now: an earlier run's early end no longer describes the study
    done = BudgetTracker(probe).refresh()["done"]
    study = open_study(spec, url, create=True, seed=derive_seed(spec.seed, 1000 * worker, done),
                       heartbeat=heartbeat, sampler=sampler)
    opened.append(study)
    runner = Runner(spec, study, url, budget, worker, heartbeat, sampler=sampler)
    strat = strategy_class(name)(spec, runner)
    opened.extend(strat.storages())
    ref = runner.reference
    fr = ProgressFront(spec, ref)
    interrupted = exhausted = False
    t0 = time.monotonic()

    me = owner()

    def report():
        for t in runner.tracker.new_complete:
            p = point_of(t, spec)
            if p is not None:
                fr.add(p)
        # this process's own latest trial (each records its owner): others' trials finish in between
        mine = [t for t in runner.tracker.new_complete if t.user_attrs.get("worker") == me]
        last = mine[-1] if mine else None
        runner.tracker.new_complete = []
        if progress is not None:
            progress({"finished": min(budget, runner.state["done"]), "budget": budget, "front": len(fr.points),
                      "hypervolume": fr.hypervolume,
                      "last": (last.number, last.state.name) if last is not None else None})

    try:
        with guarded(url) as guard:  # SIGINT/SIGTERM stop the run between Optuna's bookkeeping steps
            for queued in (study, *strat.queues()):
                guard.watch(queued)
            strat.guard = guard
            recovered = time.monotonic()
            while timeout is None or time.monotonic() - t0 < timeout:
                guard.check()
                if time.monotonic() - recovered >= RECOVER_EVERY_S:  # a search lists the running trials:
                    recover_dead_workers(study)                       # not once per trial of a fast study
                    recovered = time.monotonic()
                if heartbeat:
                    optuna.storages.fail_stale_trials(study)
                b = runner.refresh()
                report()
                if b["done"] >= budget or (stop is not None and stop(study)):
                    break
                if b["waiting"]:  # a dead worker's trial, queued again: evaluate it (any strategy); False when
                    more = optimize_one(study, runner.objective)  # the sampler stopped (its grid's last point)
                elif b["done"] + b["active"] >= budget:
                    time.sleep(poll)  # the last trials run elsewhere: wait for them (or for their retry)
                    continue
                else:
                    more = strat.step()
                guard.check()  # a fault the step met, or a signal during the bookkeeping
                if not more:  # nothing left to propose: an early end unless the step met the budget too
                    exhausted = runner.refresh()["done"] < budget
                    break
            runner.refresh()
            report()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        strat.close(interrupted)
    figures = strat.figures()
    if not interrupted:  # why it ended before its budget, for `dse status` later (None: it did not)
        record_end(study, (figures.get("stop_reason") or strat.stop_reason) if exhausted else None)
    pts = load_points(study, spec)
    recent = recent_gain(pts, spec.directions, ref)
    fr = front(pts, spec.directions)
    return RunResult(finished=runner.refresh()["done"], budget=budget, complete=len(pts),
                     front=len(fr), hypervolume=recent["hypervolume"], recent=recent, **noise_figures(spec, pts, fr),
                     interrupted=interrupted, storage=mask_url(url), failed=failed_count(study),
                     exhausted=exhausted, strategy=name, **figures,
                     covered=None if exhausted or interrupted else strat.covered(spec, study))
