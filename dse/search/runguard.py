"""What keeps a run's storage consistent whatever stops it: signals, dead workers, queued trials, faults.

- :class:`Guard` (installed for a run by :func:`guarded`): SIGINT and SIGTERM set a flag while Optuna does its
  bookkeeping (asking for a trial, recording its result: the innermost frame of Optuna or of dse is Optuna's,
  or dse's journal backend that Optuna calls) and raise ``KeyboardInterrupt`` in the objective's own work
  (:meth:`Guard.raising` makes that explicit), in dse's own code between trials, or when a deferred signal is
  delivered again 0.2 s later (:meth:`Guard.check` raises it at once). A trial is therefore never left RUNNING
  without its owner's record, and a second Ctrl-C cannot break Optuna's own code.
- :func:`queue`: enqueue a trial marked with the process that queued it; :func:`drop_queued` fails this
  process's WAITING trials when its run ends, and :func:`orphans` finds RUNNING and WAITING trials that no
  live process owns (the owner died, or a RUNNING trial has no owner record and is older than
  :data:`ORPHAN_GRACE_S`).
- :meth:`Guard.record_fault`: an objective records a storage or cache fault and re-raises it; the run
  raises it again after Optuna's bookkeeping (which would otherwise record it as one more failed trial).
- :func:`watch_parent`: a ``dse worker`` started by ``dse run --workers`` stops (as on SIGTERM) when its
  parent is gone, whatever ended the parent.
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import threading
import time
from contextlib import contextmanager

from dse.errors import UsageError

__all__ = ["Guard", "guarded", "queue", "drop_queued", "orphans", "owner", "owner_alive",
           "ORPHAN_GRACE_S", "INTERRUPTED", "watch_parent", "derive_seed"]

#: a RUNNING trial without an owner record is taken as abandoned once it is this old (seconds): a live worker
#: records itself within milliseconds of creating the trial
ORPHAN_GRACE_S = 30.0
#: fail reasons beginning with this do not count toward the budget (see ``dse.search.study.counts_toward_budget``)
INTERRUPTED = "interrupted"
#: the end of the reason a dead worker's trial is failed with when a retry of it is queued
RETRIED = "retried as a new trial"

_HOST = socket.gethostname()


def derive_seed(*parts: int) -> int:
    """A sampler seed from a study seed and offsets (worker index, trials done): their sum modulo 2**32,
    what NumPy and Optuna accept, so that a seed near 2**32 works on every resume."""
    return sum(int(p) for p in parts) % 2**32


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux), so that a reused process id is not
    mistaken for the worker that died; "" where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner() -> str:
    """``host:pid:start`` of this process."""
    return f"{_HOST}:{os.getpid()}:{_start_time(os.getpid())}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_alive(record: str) -> bool | None:
    """Whether the process of an owner record is alive: True/False for this machine, None when the record
    is missing, malformed or names another machine (nothing can be told from here)."""
    parts = (record or "").split(":")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    if parts[0] != _HOST:
        return None
    pid, start = int(parts[1]), parts[2]
    if pid == os.getpid():
        return start == _start_time(pid) or not start
    return _pid_alive(pid) and (not start or _start_time(pid) == start)


# -- interrupts and faults --------------------------------------------------------------------------------
class Guard:
    """One run's signals and faults (see the module docstring)."""

    #: seconds after which a deferred signal is delivered again (Optuna's bookkeeping takes milliseconds)
    REDELIVER_S = 0.2

    def __init__(self) -> None:
        self.pending = False
        self._holding = 0  # inside holding(): a signal is only recorded
        self._timer: threading.Timer | None = None
        self._closed = False
        self.fault: BaseException | None = None
        self.studies: list = []

    def _handler(self, signum, frame) -> None:
        self.pending = True
        if self._closed or self._holding:  # the run is cleaning up (failing its queued trials), or a batch of
            return                         # writes must finish once begun: the run's next check() stops it
        if not _in_optuna(frame):  # the objective's own work, dse's loops: stop here
            raise KeyboardInterrupt
        # inside Optuna's bookkeeping (asking, telling, recording attributes): deliver it again shortly, so
        # that it stops the run once the bookkeeping is over even if no one calls check()
        if not self._closed and (self._timer is None or not self._timer.is_alive()):
            self._timer = threading.Timer(self.REDELIVER_S, self._redeliver, (signum,))
            self._timer.daemon = True
            self._timer.start()

    def _redeliver(self, signum) -> None:
        if not self._closed:
            os.kill(os.getpid(), signum)

    def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()

    @contextmanager
    def raising(self):
        """The objective's own work: a signal already received raises on entry; one that comes inside raises
        at once, unless it lands in Optuna's bookkeeping the work calls (a parameter being stored, say), where
        it is deferred and delivered again 0.2 s later, so that no trial is left half-recorded."""
        self.check()
        yield

    @contextmanager
    def holding(self):
        """Writes that must finish once begun (a batch of trials entered in the study, each created RUNNING then
        told): a signal inside is recorded, not raised; the run stops at its next :meth:`check`, after the step."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1

    def check(self) -> None:
        """Raise KeyboardInterrupt if a signal came while it was deferred, or the fault an objective met."""
        if self.fault is not None:
            raise self.fault
        if self.pending:
            raise KeyboardInterrupt

    def record_fault(self, e: BaseException) -> None:
        if self.fault is None:
            self.fault = e

    def watch(self, study):
        """Fail ``study``'s WAITING trials queued by this process when the run ends."""
        self.studies.append(study)
        return study


#: packages whose code a signal interrupts at once (the objective's own work, dse's loops)
_OURS = ("dse", "models", "accel")
#: dse's modules that Optuna's bookkeeping calls into (the journal backend writes and reads its records):
#: a signal there is deferred as inside Optuna's own code
_BOOKKEEPING = ("dse.search.storage",)


def _in_optuna(frame) -> bool:
    """Whether the interrupted code is Optuna's bookkeeping: the innermost frame that is Optuna's or ours
    (libraries such as SQLAlchemy in between are skipped) is Optuna's or dse's storage layer. An objective's
    own work, called by Optuna, is ours."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name == "optuna" or name.startswith("optuna.") or name in _BOOKKEEPING:
            return True
        if name.split(".", 1)[0] in _OURS:
            return False
        frame = frame.f_back
    return False


#: the guard of the run in progress in this process (objectives use it; outside a run, a guard that never
#: defers anything: signals keep their usual handlers)
current = Guard()


@contextmanager
def guarded(url: str | None = None):
    """Install a fresh :class:`Guard` for one run: SIGINT/SIGTERM deferred outside the objective's work; at
    the end this process's queued trials are failed, and a storage fault becomes a
    :class:`dse.search.storage.StorageFault` naming ``url``'s file (KeyboardInterrupt propagates)."""
    global current
    from dse.search.storage import storage_fault

    prev, current = current, Guard()
    guard = current
    old = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, guard._handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield guard
    except Exception as e:
        from models.surrogate import CacheError

        if isinstance(e, CacheError):  # names the cache folder and what to do
            raise UsageError(str(e)) from None
        fault = storage_fault(e, url) if url is not None else None
        if fault is not None:
            raise fault from None
        raise
    finally:
        guard.close()
        try:
            for study in guard.studies:
                drop_queued(study)
        finally:
            current = prev
            for sig, h in old.items():
                signal.signal(sig, h)


# -- queued and orphaned trials ----------------------------------------------------------------------------
#: user attributes a dead worker's trial passes to its retry: what it was queued to do (the hybrid's
#: ``finish_of``: enter the rest of an earlier trial's sub-front), not what it did (trained, seeds, worker)
RETRY_KEEPS = ("finish_of",)


def retry_of(t) -> int | None:
    """The number of the failed trial that trial ``t`` retries (Optuna's heartbeat retry or ours), or None."""
    n = t.system_attrs.get("failed_trial", t.user_attrs.get("retry_of"))
    return None if n is None else int(n)


def retried(trials) -> set[int]:
    """Numbers of failed trials that a trial of ``trials`` retries."""
    return {n for n in map(retry_of, trials) if n is not None}


def queue(study, params: dict, *, by: str | None = None, **user_attrs) -> None:
    """Enqueue a trial with ``params``, marked as queued by this process (``queued_by``: ``by``, by default
    :func:`owner`)."""
    study.enqueue_trial(params, user_attrs={**user_attrs, "queued_by": by or owner()}, skip_if_exists=False)


def _fail(study, t, reason: str) -> bool:
    """Mark trial ``t`` (RUNNING or WAITING) FAIL with ``reason``; False when another process got there
    first."""
    from optuna.trial import TrialState

    st = study._storage
    try:
        # a WAITING trial is claimed first, as Optuna pops one: another process may have popped it since it
        # was listed (and be running it), which this must not fail
        if t.state == TrialState.WAITING and not st.set_trial_state_values(t._trial_id, TrialState.RUNNING):
            return False
        st.set_trial_user_attr(t._trial_id, "fail_reason", reason)
        return st.set_trial_state_values(t._trial_id, TrialState.FAIL)
    except Exception:  # finished meanwhile
        return False


def drop_queued(study) -> int:
    """Fail the WAITING trials this process queued (its run is ending); returns how many."""
    from optuna.trial import TrialState

    me = owner()
    n = 0
    try:
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    except Exception:  # the storage is gone (a fault): nothing can be recorded
        return 0
    for t in waiting:
        if t.user_attrs.get("queued_by") == me:
            n += _fail(study, t, f"{INTERRUPTED}: queued by a run that stopped before running it")
    return n


def orphans(study, grace: float = ORPHAN_GRACE_S) -> tuple[list, list]:
    """(RUNNING trials no live process owns, WAITING trials queued by a dead process) of this machine.

    A RUNNING trial without an owner record counts once it is older than ``grace`` seconds (its creator was
    stopped between creating it and recording itself: killed, or an older version interrupted there).
    """
    from optuna.trial import TrialState

    now = datetime.datetime.now()
    running, waiting = [], []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
        if t.state == TrialState.WAITING:
            if "queued_by" in t.user_attrs and owner_alive(t.user_attrs["queued_by"]) is False:
                waiting.append(t)
            continue
        # called between trials: one of this process is a leftover
        if t.user_attrs.get("worker") == owner() or worker_gone(t, now, grace):
            running.append(t)
    return running, waiting


def worker_gone(t, now: datetime.datetime | None = None, grace: float = ORPHAN_GRACE_S) -> bool:
    """Whether the process running trial ``t`` (RUNNING) is gone: its owner record names a dead process of this
    machine, or it has none and is older than ``grace`` seconds (its creator was stopped before recording
    itself). A trial recorded by another machine's process is never taken for gone (its heartbeat says, on
    PostgreSQL). The age is read against this machine's clock: a recordless trial of a machine whose clock is
    behind looks older than it is (for the milliseconds before its objective records its owner)."""
    record = t.user_attrs.get("worker")
    if record:
        return owner_alive(record) is False
    now = now or datetime.datetime.now()
    return t.datetime_start is not None and (now - t.datetime_start).total_seconds() > grace


def fail_orphan(study, t, reason: str) -> bool:
    return _fail(study, t, reason)


# -- workers of a parent -----------------------------------------------------------------------------------
def watch_parent(pid: int, poll: float = 1.0) -> None:
    """Send this process SIGTERM when its parent ``pid`` is gone (a daemon thread)."""

    def loop():
        while True:
            if os.getppid() != pid:
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(poll)

    threading.Thread(target=loop, daemon=True, name="dse-watch-parent").start()
