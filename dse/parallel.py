"""Several local worker processes on one study (``dse run --workers N``).

The parent creates the study, starts N ``dse worker`` processes on the same storage (by default a journal
file beside the study file, Optuna's recommendation for several processes on one machine), shows one
progress display by polling the storage, and supervises: a worker that dies (SIGKILL, a crash) is
replaced, and the survivors retry its running trial (see :func:`dse.study.recover_dead_workers`), so the
budget is met exactly. Ctrl-C or SIGTERM stops every worker cleanly (completed trials are kept).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from dse.errors import UsageError
from dse.pareto import front, hypervolume
from dse.study import (RunResult, budget_state, default_heartbeat, failed_count, hv_reference, load_points,
                       mask_url, open_study, recover_dead_workers, storage_url)
from dse.studyfile import StudySpec

__all__ = ["run_workers"]


def _spawn(spec: StudySpec, url: str, index: int, budget: int, logdir: str) -> subprocess.Popen:
    """A `dse worker` process with the run's effective settings (command-line overrides included). Its own
    session: Ctrl-C reaches the parent, which stops every worker once; stderr goes to a file (a pipe read
    only at exit could fill up and block the worker)."""
    cmd = [sys.executable, "-m", "dse.cli", "worker", str(spec.path), "--storage", url, "--index", str(index),
           "--trials", str(budget), "--sampler", spec.sampler, "--seed", str(spec.seed), "--joint", "--quiet"]
    env = dict(os.environ)
    env.pop("DSE_STORAGE", None)
    err = open(os.path.join(logdir, f"worker-{index}.log"), "w+")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True)
    p.errlog = err  # type: ignore[attr-defined]
    return p


def _stderr(p: subprocess.Popen) -> str:
    p.errlog.seek(0)  # type: ignore[attr-defined]
    text = p.errlog.read().strip()  # type: ignore[attr-defined]
    p.errlog.close()  # type: ignore[attr-defined]
    return text


def run_workers(spec: StudySpec, *, workers: int, storage: str | None = None, timeout: float | None = None,
                quiet: bool = False, poll: float = 0.5, max_restarts: int | None = None) -> RunResult:
    if spec.path is None:
        raise ValueError("run_workers needs a study read from a file (workers load it by path)")
    url = storage_url(spec, storage, journal=True)
    study = open_study(spec, url, create=True, heartbeat=default_heartbeat(url))
    budget = spec.trials
    ref = hv_reference(spec)
    logdir = tempfile.mkdtemp(prefix="dse-workers-")
    procs = {i: _spawn(spec, url, i, budget, logdir) for i in range(workers)}
    next_index = workers
    restarts = 0
    max_restarts = 3 * workers if max_restarts is None else max_restarts
    interrupted = False
    errors: list[str] = []
    t0 = time.monotonic()
    bar = None
    if not quiet:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("front {task.fields[front]}  HV {task.fields[hv]}  workers {task.fields[w]}"),
                       TimeElapsedColumn(), console=Console(stderr=True))
        bar.start()
        task = bar.add_task(spec.name, total=budget, front=0, hv="-", w=workers)

    def stop_all(sig=signal.SIGINT):
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(sig)
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    old = signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    last_done = -1
    try:
        while True:
            if timeout is not None and time.monotonic() - t0 > timeout:
                stop_all()
                break
            for i, p in list(procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                err = _stderr(p)
                del procs[i]
                if rc not in (0, 130):
                    errors.append(f"worker {i} exited with {rc}" + (f": {err.splitlines()[-1]}" if err else ""))
                    if rc == 2:  # bad input: every worker would fail the same way
                        stop_all()
                        msg = err.splitlines()[-1] if err else f"worker {i} rejected its input"
                        raise UsageError(msg.removeprefix("dse: error: "))
                    recover_dead_workers(study)
                    if budget_state(study)["done"] < budget and restarts < max_restarts:
                        procs[next_index] = _spawn(spec, url, next_index, budget, logdir)
                        next_index += 1
                        restarts += 1
            b = budget_state(study)
            if bar is not None and b["done"] != last_done:
                pts = load_points(study, spec)
                bar.update(task, completed=min(b["done"], budget), front=len(front(pts, spec.directions)),
                           hv=f"{hypervolume(pts, spec.directions, ref):.4g}", w=len(procs))
                last_done = b["done"]
            if not procs:
                break
            time.sleep(poll)
    except KeyboardInterrupt:
        interrupted = True
        stop_all()
    finally:
        signal.signal(signal.SIGTERM, old)
        if bar is not None:
            bar.stop()
        shutil.rmtree(logdir, ignore_errors=True)
    pts = load_points(study, spec)
    b = budget_state(study)
    return RunResult(finished=b["done"], budget=budget, complete=len(pts), front=len(front(pts, spec.directions)),
                     hypervolume=hypervolume(pts, spec.directions, ref), interrupted=interrupted,
                     storage=mask_url(url), failed=failed_count(study), worker_errors=errors,
                     restarts=restarts)
