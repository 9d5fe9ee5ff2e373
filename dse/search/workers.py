"""Several local worker processes on one study (``dse run --workers N``).

The parent creates the study, starts N ``dse worker`` processes on the same storage (by default a journal
file beside the study file, Optuna's recommendation for several processes on one machine), shows one
progress display by polling the storage, and supervises: a worker that dies (SIGKILL, a crash) is
replaced, and the survivors retry its running trial (see :func:`dse.search.study.recover_dead_workers`), so the
budget is met exactly. Ctrl-C or SIGTERM stops every worker cleanly (completed trials are kept).

Workers run in their own sessions (process groups) and end with the parent whatever happens: the parent
stops them on every way out (a second Ctrl-C included), and each watches its parent's process id, so that
one whose parent was killed stops too. ``--workers`` is refused above :func:`max_workers`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from dse.errors import UsageError
from dse.search.noise import noise_figures
from dse.search.pareto import front, recent_gain
from dse.search.runguard import drop_queued
from dse.search.runner import BudgetTracker, ProgressFront
from dse.search.strategies import strategy_class
from dse.search.study import (
    RunResult,
    check_cache,
    close_study,
    default_heartbeat,
    failed_count,
    hv_reference,
    load_points,
    mask_url,
    open_study,
    optuna_quiet,
    point_of,
    record_budget,
    recover_dead_workers,
    storage_url,
)
from dse.search.studyfile import StudySpec

__all__ = ["run_workers", "max_workers"]

#: workers allowed per core by default (each is a process training surrogates)
WORKERS_PER_CORE = 4


def max_workers() -> int:
    """The most workers ``run_workers`` starts: ``DSE_MAX_WORKERS``, else 4 per core."""
    env = os.environ.get("DSE_MAX_WORKERS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise UsageError(f"DSE_MAX_WORKERS: must be an integer >= 1, got {env!r}")
        return int(env)
    return WORKERS_PER_CORE * (os.cpu_count() or 1)


def _spawn(spec: StudySpec, url: str, index: int, budget: int, logdir: str) -> subprocess.Popen:
    """A `dse worker` process with the run's effective settings (command-line overrides included). Its own
    session: Ctrl-C reaches the parent, which stops every worker once; stderr goes to a file (a pipe read
    only at exit could fill up and block the worker)."""
    cmd = [sys.executable, "-m", "dse.cli", "worker", str(spec.path), "--index", str(index),
           "--trials", str(budget), "--sampler", spec.sampler, "--seed", str(spec.seed), "--strategy",
           spec.strategy, "--quiet"] + (["--runs", str(spec.runs)] if spec.runs is not None else [])
    env = dict(os.environ)
    # the storage through the environment, not the command line: a process list shows every argument (a
    # PostgreSQL URL's password) to any user of the machine
    env["DSE_STORAGE"] = url
    env["DSE_PARENT_PID"] = str(os.getpid())  # the worker stops when this process is gone
    err = open(os.path.join(logdir, f"worker-{index}.log"), "w+")
    try:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                             start_new_session=True)
    except OSError as e:  # out of processes or memory
        err.close()
        raise UsageError(f"--workers: could not start worker {index} ({e.strerror or e}); use fewer workers") \
            from None
    except BaseException:  # anything else (a Ctrl-C while starting): the log file is not left open
        err.close()
        raise
    p.errlog = err  # type: ignore[attr-defined]
    return p


def _stderr(p: subprocess.Popen) -> str:
    p.errlog.seek(0)  # type: ignore[attr-defined]
    text = p.errlog.read().strip()  # type: ignore[attr-defined]
    p.errlog.close()  # type: ignore[attr-defined]
    return text


def _check_file_is_spec(spec: StudySpec) -> None:
    """Worker processes read the study file, with the run's budget, sampler, seed, strategy and runs on their
    command line (:func:`_spawn`): a spec changed in code in any other way would be silently replaced by the
    file's, so it is refused, naming what differs."""
    from dataclasses import fields

    from dse.search.studyfile import load_study

    if spec.path is None:
        raise UsageError("spec: built in code, without a study file for worker processes to read; write it to a "
                         "file, or run with workers=1")
    if not spec.path.is_file():  # bash's <(...): read once, gone
        raise UsageError(f"{spec.path}: the study file is not a regular file (a pipe?); worker processes read it "
                         "again: save it to a file, or run with one worker")
    again = load_study(spec.path).with_overrides(trials=spec.trials, sampler=spec.sampler, seed=spec.seed,
                                                 strategy=spec.strategy, workers=spec.workers, runs=spec.runs)
    differ = [f.name for f in fields(spec) if f.compare and getattr(spec, f.name) != getattr(again, f.name)]
    if "options" in differ:
        differ.remove("options")
        differ += [k for k in spec.options if spec.options[k] != again.options.get(k)]
    if differ:
        raise UsageError(f"spec: differs from its file {spec.path} in {', '.join(differ)}; worker processes read "
                         "the file: write the change into it, or run with workers=1")


def run_workers(spec: StudySpec, *, workers: int, storage: str | None = None, timeout: float | None = None,
                quiet: bool = False, poll: float = 0.5, max_restarts: int | None = None,
                accept_changes: bool = False) -> RunResult:
    """Run ``spec`` (either strategy) with ``workers`` local ``dse worker`` processes to its budget."""
    _check_file_is_spec(spec)
    limit = max_workers()
    if workers > limit:
        raise UsageError(f"--workers: {workers} is more than {limit} ({WORKERS_PER_CORE} per core on "
                         f"{os.cpu_count() or 1} cores); set DSE_MAX_WORKERS to allow more")
    url = storage_url(spec, storage, journal=True)
    check_cache()
    study = open_study(spec, url, create=True, heartbeat=default_heartbeat(url), accept_changes=accept_changes)
    try:
        with optuna_quiet():
            return _run_on(spec, study, url, workers, timeout, quiet, poll, max_restarts)
    finally:
        with contextlib.suppress(Exception):  # the run's own error, if any, is the one to report
            close_study(study)  # pooled database connections closed now, not when the collector finds them


def _run_on(spec: StudySpec, study, url: str, workers: int, timeout: float | None, quiet: bool, poll: float,
            max_restarts: int | None) -> RunResult:
    """:func:`run_workers` on the study opened."""
    ref = hv_reference(spec)
    tracker, fr = BudgetTracker(study), ProgressFront(spec, ref)
    budget = spec.trials
    record_budget(study, budget, spec.runs)
    # signal handlers can be set in the main thread only: from another one (a notebook's background thread)
    # the run goes on without them (Ctrl-C reaches the main thread, not this loop)
    main = threading.current_thread() is threading.main_thread()
    procs: dict[int, subprocess.Popen] = {}
    next_index = workers
    restarts = 0
    max_restarts = 3 * workers if max_restarts is None else max_restarts
    interrupted = timed_out = False
    errors: list[str] = []
    t0 = time.monotonic()
    bar = None
    if not quiet:
        from dse.search.runner import progress_bar

        bar = progress_bar("front {task.fields[front]}  HV {task.fields[hv]}  workers {task.fields[w]}")
        bar.start()
        task = bar.add_task(spec.name, total=budget, front=0, hv="-", w=workers)

    def stop_all(sig=signal.SIGINT):
        """Stop every worker (SIGINT: each records its running trial as interrupted), SIGKILL after 30 s;
        signals to this process are ignored meanwhile, so that a second Ctrl-C cannot leave one running."""
        held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
        try:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(sig)
            for p in procs.values():
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        finally:
            for s, h in held.items():
                signal.signal(s, h)

    old = signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt())) if main else None
    last_done = -1
    ends: list[int] = []  # the exit codes of the workers that ended
    logdir = tempfile.mkdtemp(prefix="dse-workers-")  # removed on every way out (below)
    try:
        for i in range(workers):
            procs[i] = _spawn(spec, url, i, budget, logdir)
        while True:
            if timeout is not None and time.monotonic() - t0 > timeout:
                stop_all()
                timed_out = True
                break
            for i, p in list(procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                err = _stderr(p)
                del procs[i]
                ends.append(rc)
                if rc not in (0, 130):
                    errors.append(f"worker {i} exited with {rc}" + (f": {err.splitlines()[-1]}" if err else ""))
                    if rc == 2:  # bad input: every worker would fail the same way
                        stop_all()
                        msg = err.splitlines()[-1] if err else f"worker {i} rejected its input"
                        raise UsageError(msg.removeprefix("dse: error: "))
                    recover_dead_workers(study)
                    if tracker.refresh()["done"] < budget and restarts < max_restarts:
                        procs[next_index] = _spawn(spec, url, next_index, budget, logdir)
                        next_index += 1
                        restarts += 1
            b = tracker.refresh()
            for t in tracker.new_complete:
                p = point_of(t, spec)
                if p is not None:
                    fr.add(p)
            tracker.new_complete = []
            if bar is not None and b["done"] != last_done:
                bar.update(task, completed=min(b["done"], budget), front=len(fr.points),
                           hv=f"{fr.hypervolume:.4g}", w=len(procs))
                last_done = b["done"]
            if not procs:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop_all()  # whatever ended the loop: no worker outlives this process
        if main:
            signal.signal(signal.SIGTERM, old)
        done = min(tracker.refresh()["done"], budget)
        # every worker stopped by a signal from outside (Ctrl-C or SIGTERM to the workers): an interruption
        interrupted = interrupted or bool(ends) and all(rc == 130 for rc in ends) and done < budget
        # a worker that ended by itself (exit 0) before the budget: its strategy had nothing left to do (the
        # hybrid's run budget, its grid, an exhausted space), whatever else happened on the way
        exhausted = not (interrupted or timed_out) and 0 in ends and done < budget
        if bar is not None:
            if exhausted and done:
                bar.update(task, total=done, completed=done)  # ended before the trial budget: a full bar
            bar.stop()
        for p in procs.values():
            p.errlog.close()  # type: ignore[attr-defined]
        shutil.rmtree(logdir, ignore_errors=True)
        drop_queued(study)  # retries this process queued for workers that are gone
    pts = load_points(study, spec)
    b = tracker.refresh()
    recent = recent_gain(pts, spec.directions, ref)
    fr = front(pts, spec.directions)
    return RunResult(finished=b["done"], budget=budget, complete=len(pts), front=len(fr),
                     hypervolume=recent["hypervolume"], recent=recent, **noise_figures(spec, pts, fr),
                     interrupted=interrupted, exhausted=exhausted,
                     storage=mask_url(url), failed=failed_count(study), worker_errors=errors,
                     restarts=restarts,
                     covered=None if exhausted or interrupted else strategy_class(spec.strategy).covered(spec, study))
