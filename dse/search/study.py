"""Studies in Optuna's storages: storage URLs, samplers, opening a study (checked against its file), the
joint objective, dead-worker recovery, and reading trials back as plain data.

The public API is :mod:`dse` (``dse.load_study``, ``dse.run``, ``dse.open_study``); this module is the
layer under it, under the runner (:mod:`dse.search.runner`) and under the strategies::

    from dse.search.studyfile import load_study
    from dse.search.study import open_study, load_points
    from dse.search.runner import run_study
    spec = load_study("studies/quickstart.toml")
    run_study(spec)                            # its strategy; creates or resumes; stops at spec.trials
    points = load_points(open_study(spec, create=False), spec)   # every complete trial as plain data

Storage: a SQLite file beside the study file (``<name>.db``) unless a URL is given (``--storage`` or the
``DSE_STORAGE`` environment variable): ``sqlite:///path.db``, ``postgresql://user:pw@host/db`` (Optuna's
RDB storage) or ``journal:///path.log`` (Optuna's journal file, for several processes on one machine).

Every trial records as user attributes: ``metrics`` (all of them, not only the objectives), ``models`` (the
per-model breakdown), ``surrogate`` (the training surrogate's figures), ``config`` (the full configuration,
what ``dse export`` writes), and ``fail_reason`` for a failed trial. Constraints go through Optuna 5's
``Trial.set_constraint``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import warnings
import weakref
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import optuna
from optuna.trial import TrialState

from dse.config.space import Bundle, Choice, Range
from dse.errors import INTERNAL_ERROR_ATTR, StudyWarning, UsageError
from dse.evaluation import metrics as registry
from dse.evaluation.evaluator import evaluate, evaluate_hardware
from dse.search import runguard
from dse.search.identity import MODEL_FROM_ATTR, identity_change, model_change, relative_paths, with_current_files
from dse.search.pareto import Point
from dse.search.rdb import FastRDBStorage
from dse.search.replication import race, start_seeds
from dse.search.samplers import GRID_NONE, make_sampler, trial_point
from dse.search.storage import (
    HELPER_ATTR,
    SafeJournalFileBackend,
    mask_url,
    normalize_url,
    readable_copy,
    repair_journal,
    storage_fault,
)
from models.surrogate import CACHE_VERSION as SURROGATE_VERSION

if TYPE_CHECKING:
    from dse.search.studyfile import StudySpec

__all__ = ["open_study", "open_storage", "close_study", "close_storage", "suggest", "distribution",
           "trial_objective", "evaluate_trial", "counts_toward_budget",
           "load_points", "points_of", "point_of", "trial_record", "storage_url", "mask_url", "hv_reference",
           "TrialFailed", "RunResult", "FINISHED"]

#: trial states that have ended (whether they count toward the budget is decided by :func:`counts_toward_budget`)
FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


class TrialFailed(Exception):
    """A trial that cannot be evaluated (an impossible configuration); recorded as FAIL with its reason."""


def storage_url(spec: StudySpec, storage: str | None = None, *, journal: bool = False) -> str:
    """``storage``, else ``DSE_STORAGE``, else a file beside the study file: SQLite (``<name>.db``), or a
    journal file (``<name>.journal``) when several local processes share the study (``journal``)."""
    url = storage or os.environ.get("DSE_STORAGE")
    if url:
        return url
    if spec.path is not None and spec.path.parts[1:2] in (("proc",), ("dev",)):  # bash's <(...), /dev/stdin
        raise UsageError(f"--storage: the study file was read from {spec.path}, not from a folder where its "
                         "storage can go beside it; give --storage (or DSE_STORAGE), or save the study file")
    folder = spec.path.parent if spec.path is not None else Path.cwd()
    db, log = folder / (spec.name + ".db"), folder / (spec.name + ".journal")
    if (journal and not db.exists()) or (log.exists() and not db.exists()):
        return f"journal:///{log}"
    return f"sqlite:///{db}"  # an existing SQLite study stays where it is (WAL mode serves several processes)


def default_heartbeat(url: str) -> int | None:
    """Heartbeats (seconds) for server storages, where workers may sit on other machines; local workers are
    watched by process id instead (see :func:`recover_dead_workers`)."""
    return 5 if re.match(r"^(postgresql|mysql)", url) else None


def open_storage(url: str, *, heartbeat: int | None = None):
    try:
        if url.startswith("journal:///"):
            from optuna.storages.journal import JournalStorage

            # like SQLite URLs: journal:///relative.log, journal:////absolute/path.log
            path = url[len("journal:///"):]
            if not path:
                raise UsageError("--storage: a journal URL needs a file: journal:///FILE.log")
            repair_journal(path)  # a record torn by a crash or a full disk: dropped, saying so
            return JournalStorage(SafeJournalFileBackend(path))
        if re.match(r"^sqlite(\+\w+)?://", url) and url.split("://", 1)[1].split("?", 1)[0] in ("", "/", "/:memory:"):
            raise UsageError(f"--storage: {url} names no file (an in-memory database keeps no study); a SQLite "
                             "URL needs one: sqlite:///FILE.db")
        if not re.match(r"^(sqlite|postgresql|postgresql\+\w+|mysql|mysql\+\w+)://", url):
            raise UsageError(f"--storage: {mask_url(url)!r} is not a storage URL; use sqlite:///FILE.db, "
                             "postgresql://USER:PASSWORD@HOST/DB or journal:///FILE.log")
        kwargs: dict[str, Any] = {}
        if heartbeat:
            kwargs = dict(heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                          heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                              max_retry=3))
        # a pooled connection is checked before use: one a server restart closed is replaced, not failed on
        engine_kwargs = {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True} \
            if url.startswith("postgresql") else None
        if url.startswith("sqlite"):
            engine_kwargs = {"connect_args": {"timeout": 60}}  # wait for a concurrent writer's lock
        st = _rdb_storage(normalize_url(url), engine_kwargs, kwargs)
        # a storage dropped without close_storage closes its pooled connections when it is collected, rather
        # than leaving each to the driver's finalizer (psycopg: a ResourceWarning per connection)
        weakref.finalize(st, _dispose, st.engine, os.getpid())
        if url.startswith("sqlite"):
            _fast_sqlite(st)
        return st
    except UsageError:
        raise
    except Exception as e:  # sqlalchemy / driver errors: unreachable server, corrupt file, missing driver
        fault = storage_fault(e, url, connection=False)
        if fault is not None:  # disk full, read-only, permission
            raise fault from None
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        reason = mask_url(reason, url)
        if isinstance(e, ImportError):  # Optuna: "Failed to import DB access module", from the driver's error
            missing = getattr(e.__cause__, "name", None) or getattr(e, "name", None) or "its driver"
            # the postgres extra installs psycopg 3, SQLAlchemy's driver for a plain postgresql:// URL; a URL that
            # names another driver (postgresql+psycopg2://, mysql+pymysql://) needs that one
            pkg = {"psycopg2": "psycopg2-binary", "MySQLdb": "mysqlclient"}.get(missing, missing)
            extra = ("pip install 'dse[postgres]'" if missing == "psycopg" or url.split("://")[0] == "postgresql"
                     else f"pip install {pkg}" if missing != "its driver" else "install it")
            raise UsageError(f"storage {mask_url(url)} cannot be used: the database driver {missing} is not "
                             f"installed; {extra}") from None
        hint = ""
        if "file is not a database" in reason or "malformed" in reason:
            hint = " (the SQLite file is corrupt or not a database: move it away to start afresh)"
        raise UsageError(f"storage {mask_url(url)} cannot be used: {reason}{hint}") from None


def close_storage(storage) -> None:
    """Close a storage's pooled database connections now rather than when the garbage collector finds them
    (an RDB storage keeps a pool: on PostgreSQL, server connections held open). A journal file holds none.
    The storage stays usable: its next use connects again. Safe to call twice. A connection another thread
    is using at that moment is not closed (SQLAlchemy's ``Engine.dispose``): it is left to the collector."""
    backend = getattr(storage, "_backend", storage)  # Optuna wraps an RDB storage in its trial cache
    if isinstance(backend, optuna.storages.RDBStorage):
        backend.remove_session()
        backend.engine.dispose()


def _dispose(engine, pid: int) -> None:
    """``engine``'s pool emptied; its connections closed only in the process that opened them (a forked child
    that inherited them must not close the parent's server sessions)."""
    engine.dispose(close=os.getpid() == pid)


def close_study(study: optuna.Study) -> None:
    """:func:`close_storage` for the storage of an Optuna study (:func:`open_study`'s or any other)."""
    close_storage(study._storage)


def _rdb_storage(url: str, engine_kwargs, kwargs, attempts: int = 6):
    """Optuna's RDB storage; retried when another process is creating the same fresh database at the same
    moment (both create the schema: one of them fails on a unique constraint or a lock)."""
    import sqlalchemy.exc

    for i in range(attempts):
        try:
            # Optuna's, reading and creating trials faster
            return FastRDBStorage(url, engine_kwargs=engine_kwargs, **kwargs)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as e:
            transient = isinstance(e, sqlalchemy.exc.IntegrityError) or "locked" in str(e) \
                or "already exists" in str(e)
            if not transient or i == attempts - 1:
                raise
            time.sleep(0.2 * (i + 1))


def _fast_sqlite(storage) -> None:
    """Write-ahead logging with synchronous=NORMAL: a commit costs microseconds instead of an fsync, and
    the database stays consistent across crashes (a power cut may lose the last trials, not corrupt it)."""
    import sqlalchemy

    def on_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    sqlalchemy.event.listen(storage.engine, "connect", on_connect)
    storage.engine.dispose()  # pooled connections made before the listener reconnect with the pragmas


def open_study(spec: StudySpec, storage: str | None = None, *, create: bool = True, seed: int | None = None,
               heartbeat: int | None = None, accept_changes: bool = False, sampler: Any = None) -> optuna.Study:
    """Create or load the study ``spec.name`` in its storage, checked against the file it was made from.

    The study stores ``spec.identity()`` (strategy, base configuration, space, objectives, constraints,
    surrogate seeds) as the user attribute ``dse_study_file``; opening it with a spec whose identity differs
    raises :class:`UsageError` naming the first change, unless ``accept_changes`` (``--accept-changes``):
    then the stored identity becomes the new one and the study goes on (its earlier trials are kept and
    judged by the new constraints). The metric names are set on the study (optuna-dashboard shows them).
    ``sampler``: an Optuna sampler instance to use instead of the file's (:mod:`dse.search.samplers`).
    """
    url = storage_url(spec, storage)
    if not create and url.startswith("sqlite:///") and ":memory:" not in url \
            and not Path(url[len("sqlite:///"):]).exists():
        raise UsageError(f"study {spec.name!r} has no storage yet ({mask_url(url)} does not exist); run "
                         "`dse run` first")
    if not create:
        url = readable_copy(url)  # a SQLite study on a read-only file system: read a private snapshot
    # the sampler first: its own errors (an optional package missing) are not the storage's. A study opened to
    # read never samples: it gets a plain sampler, so viewing a 'gp' study needs no torch
    s = spec.seed if seed is None else seed
    smp = make_sampler(spec, s, sampler) if create or sampler is not None else optuna.samplers.RandomSampler(seed=s)
    st = open_storage(url, heartbeat=heartbeat)
    try:
        study = _study_on(st, spec, url, smp, create=create, accept_changes=accept_changes)
    except BaseException:
        with contextlib.suppress(Exception):  # the study's own error is the one to report
            close_storage(st)  # a refused study leaves no connection behind
        raise
    return study


_QUIET = {"depth": 0, "level": None}
_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def optuna_quiet():
    """Optuna's log at ERROR while any dse work runs (failures are recorded with their reason instead), its
    level as it was once the last one ends: a notebook's own Optuna studies keep logging as the user set them.
    The level is global, so overlapping calls (threads) share one quiet period: the first sets it, the last
    puts it back."""
    with _QUIET_LOCK:
        if _QUIET["depth"] == 0:
            _QUIET["level"] = optuna.logging.get_verbosity()
            optuna.logging.set_verbosity(optuna.logging.ERROR)
        _QUIET["depth"] += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET["depth"] -= 1
            if _QUIET["depth"] == 0:
                optuna.logging.set_verbosity(_QUIET["level"])


def _study_on(st, spec: StudySpec, url: str, smp, *, create: bool, accept_changes: bool) -> optuna.Study:
    with optuna_quiet():
        return _study_quiet(st, spec, url, smp, create=create, accept_changes=accept_changes)


def _study_quiet(st, spec: StudySpec, url: str, smp, *, create: bool, accept_changes: bool) -> optuna.Study:
    try:
        if create:
            study = optuna.create_study(storage=st, study_name=spec.name, directions=spec.directions,
                                        load_if_exists=True, sampler=smp)
        else:
            study = optuna.load_study(storage=st, study_name=spec.name, sampler=smp)
    except KeyError:
        raise UsageError(f"study {spec.name!r} is not in {mask_url(url)}; run `dse run` first") from None
    except ValueError as e:
        raise UsageError(f"study {spec.name!r} in {mask_url(url)}: {e}") from None
    except Exception as e:  # storage errors surface on first use
        fault = storage_fault(e, url, connection=False)
        if fault is not None:
            raise fault from None
        reason = mask_url(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__, url)
        raise UsageError(f"storage {mask_url(url)} cannot be used: {reason}") from None
    stored = [d.name.lower() for d in study.directions]
    if stored != spec.directions:
        raise UsageError(f"study {spec.name!r} in {mask_url(url)} has objectives directed {stored}, the file "
                         f"says {spec.directions}; use another [study] name for a different search")
    check_identity(study, spec, url, create=create, accept_changes=accept_changes)
    check_model(study, spec, url, create=create, accept_changes=accept_changes)
    return study


def read_spec(spec: StudySpec, study: optuna.Study) -> StudySpec:
    """``spec`` with the strategy the stored study was run with, where only that differs (``dse run FILE
    --strategy S`` on a file naming another; :func:`open_study` reads such a study): its views (the training
    summary, the end reason, the importance sample) are that strategy's."""
    stored = (study.user_attrs.get(IDENTITY_ATTR) or {}).get("strategy")
    if not isinstance(stored, str) or stored == spec.strategy:
        return spec
    try:
        return spec.with_overrides(strategy=stored)
    except UsageError as e:
        if str(e).startswith("--strategy:"):  # a strategy this dse does not have: the file's
            return spec
        # the file's other fields do not suit it as a run would need (its sampler): reading needs none of them
        return replace(spec, strategy=stored)


def check_model(study: optuna.Study, spec: StudySpec, url: str, *, create: bool, accept_changes: bool) -> None:
    """A study whose stored figures another version of dse's models computed (:func:`model_change`): a run
    is refused (its new trials would not compare with the stored ones), unless ``accept_changes``, which
    records from which trial on this dse's models hold; a read command warns (:class:`StudyWarning`)."""
    if not create:
        change = model_change(study, 0, url=url, spec=spec)
        if change:
            warnings.warn(StudyWarning(
                f"study {spec.name!r} holds figures this dse does not reproduce ({change}): another version of "
                "dse's models, or of a file the study names, computed them; dse show and dse export recompute a "
                "trial's figures with this one"), stacklevel=2)
        return
    change = model_change(study, int(study.user_attrs.get(MODEL_FROM_ATTR, 0)), url=url, spec=spec)
    if change is None:
        return
    if not accept_changes:
        raise UsageError(
            f"study {spec.name!r} in {mask_url(url)} holds figures this dse does not reproduce ({change}): another "
            "version of dse's models, or of a file the study names, computed them, and new trials would not compare "
            "with them; give [study] name a new value to start a new study, or add to this one anyway: dse run "
            "--accept-changes (from Python: dse.run(spec, accept_changes=True))")
    study.set_user_attr(MODEL_FROM_ATTR, len(study.get_trials(deepcopy=False)))


def check_identity(study: optuna.Study, spec: StudySpec, url: str, *, create: bool, accept_changes: bool
                   ) -> None:
    """Refuse (or, with ``accept_changes``, record) a spec whose identity differs from the stored one."""
    attrs = study.user_attrs
    owner = attrs.get(HELPER_ATTR) or (
        "another study" if str(attrs.get("description", "")).startswith("internal to the dse study") else None)
    if owner:  # a strategy's own study (the hybrid's X.training): a study file of that name would run trials in it
        raise UsageError(f"study {spec.name!r} in {mask_url(url)} is the hybrid strategy's own study of "
                         f"{owner if owner == 'another study' else repr(owner)}; give [study] name another value")
    now = spec.identity()
    old = attrs.get(IDENTITY_ATTR)
    if old is not None and spec.path is not None:  # files it names as absolute paths (before they were relative)
        old = relative_paths(old, spec.relative_files())
    legacy = False
    if old is not None and "file contents" in now and "file contents" not in old:
        # made before studies recorded the content of the files they name: taken as they are now, and recorded
        old, legacy = {**old, "file contents": now["file contents"]}, True
    if old is not None and not (create or accept_changes):
        # a read-only look: a list of choices stored with a choice twice (refused in files since) reads as once
        def once(v):
            return [json.loads(x) for x in dict.fromkeys(json.dumps(e, sort_keys=True) for e in v)]
        old = {**old, "space": {n: once(v) if isinstance(v, list) else v for n, v in old.get("space", {}).items()}}
    if old is not None:
        change = identity_change(old, now)
        stored = old.get("strategy")
        if change and not accept_changes and stored != spec.strategy and \
                identity_change({**old, "strategy": spec.strategy}, now) is None:
            # only the strategy differs: a run given --strategy made it (the file names another). A read command
            # reads it with its own strategy (read_spec); a run would mix two searches, and --accept-changes would
            # turn it into a study of the file's strategy
            if not create:
                return
            raise UsageError(
                f"study {spec.name!r} in {mask_url(url)} holds trials of strategy {stored!r}, not {spec.strategy!r} "
                f"(the file's [study] strategy, or dse run --strategy): to resume it, give dse run --strategy "
                f"{stored} (from Python: dse.run(spec, strategy={stored!r})) or name strategy = \"{stored}\" in "
                f"the file's [study] table; to search with {spec.strategy!r}, give [study] name a new value")
        if change and not accept_changes:
            stored_size = ((old.get("base") or {}).get("workload") or {}).get("dataset_size")
            if change.startswith("base.workload.dataset_size:") and stored_size is not None and \
                    "dataset_size" not in (spec.raw.get("workload") or {}):
                # the file is as it was: dse's default for a named dataset changed (DATASET_SIZES)
                change += (f"; the file names no dataset_size, and dse's default for a named dataset is now its "
                           f"training-set size: to read the study as it was made, write dataset_size = "
                           f"{stored_size} in the file's [workload] table")
            raise UsageError(
                f"study {spec.name!r} in {mask_url(url)} was made from a different study file ({change}); "
                "give [study] name a new value to start a new study, or continue this one with the file as it "
                "is now: dse run --accept-changes (from Python: dse.run(spec, accept_changes=True))")
        if not change and not legacy:
            return
        fixed = [(n, why) for n in now["space"] if n in old.get("space", {})
                 and (why := _fixed_by_optuna(old["space"][n], now["space"][n]))]
        if fixed:
            raise UsageError(
                f"study {spec.name!r} in {mask_url(url)} was made from a different study file ({change}); "
                f"{fixed[0][1]} of space.{fixed[0][0]} cannot change within a study (Optuna fixes a knob's "
                "kind, a list's choices and a range's scale), so give [study] name a new value to start a new study")
        clash = _distribution_clash(study, spec) if change else None
        if clash:  # an earlier accepted change left trials whose parameter Optuna now cannot extend
            raise UsageError(
                f"study {spec.name!r} in {mask_url(url)} was made from a different study file ({change}); "
                f"space.{clash[0]} cannot take its new values in this study, whose trials sampled it otherwise "
                f"({clash[1]}), so give [study] name a new value to start a new study")
    if not (create or accept_changes):
        return  # a read-only look at a study made before studies remembered their file
    clash = _distribution_clash(study, spec) if old is None else None
    if clash:  # made before studies remembered their file, by a file that searched a knob otherwise
        raise UsageError(
            f"study {spec.name!r} in {mask_url(url)} was made from a study file it did not record; space.{clash[0]} "
            f"cannot take the file's values in this study, whose trials sampled it otherwise ({clash[1]}), so give "
            "[study] name a new value to start a new study")
    study.set_user_attr(IDENTITY_ATTR, now)
    if study.metric_names != spec.metrics:
        with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(spec.metrics)
    study.set_user_attr("description", describe(spec))


def _distribution_clash(study: optuna.Study, spec: StudySpec) -> tuple[str, str] | None:
    """The first searched knob of ``spec`` whose distribution Optuna refuses beside one a trial of ``study``
    sampled it with (a list of choices changed, a list made a range, a range's log scale or number type), as
    ``(name, Optuna's reason)``; None when every stored trial is compatible."""
    from optuna.distributions import check_distribution_compatibility

    new = {n: distribution(k) for n, k in spec.space.searched()}
    seen: set[tuple[str, str]] = set()
    for t in study.get_trials(deepcopy=False):
        for n, d in t.distributions.items():
            if n not in new or (n, repr(d)) in seen:
                continue
            seen.add((n, repr(d)))
            try:
                check_distribution_compatibility(d, new[n])
            except ValueError as e:
                return n, str(e)
    return None


def _fixed_by_optuna(old, now) -> str | None:
    """What of a searched knob changed between two identities' ``space`` entries (a list of choices, a range's
    table) that Optuna refuses for a parameter its trials already have, or None: a list's choices, a list
    made a range or back, a range's log scale, an integer range made a float one or back. (A fixed value on
    either side: no stored distribution to clash with, or none needed.)"""
    if isinstance(old, list) and isinstance(now, list):
        return "the choices" if old != now else None
    if isinstance(old, list) != isinstance(now, list) and isinstance(old, (list, dict)) \
            and isinstance(now, (list, dict)):
        return "the kind (a list of choices or a range)"
    if isinstance(old, dict) and isinstance(now, dict):
        if bool(old.get("log")) != bool(now.get("log")):
            return "the scale (log or linear)"

        def integer(r):
            return all(isinstance(r.get(k), int) for k in ("low", "high")) and isinstance(r.get("step", 1), int)
        if integer(old) != integer(now):
            return "the number type (integer or float range)"
    return None


#: the study user attribute holding :meth:`StudySpec.identity`
IDENTITY_ATTR = "dse_study_file"
#: the study user attribute holding the budget its last run aimed at (``dse run --trials/--runs`` may differ
#: from the file's): ``{"trials": N, "runs": N or None}``
BUDGET_ATTR = "dse_budget"


def record_budget(study: optuna.Study, trials: int, runs: int | None) -> None:
    """Store the budget a run aims at, so that ``dse status`` shows it rather than the file's."""
    want = {"trials": int(trials), "runs": None if runs is None else int(runs)}
    if study.user_attrs.get(BUDGET_ATTR) != want:
        study.set_user_attr(BUDGET_ATTR, want)


#: the study user attribute holding why its last run ended before its trial budget (a strategy with nothing left
#: to propose: the hybrid's spent run budget, an exhausted space), or None: ``dse status`` says so afterwards
ENDED_ATTR = "dse_ended_early"


def record_end(study: optuna.Study, reason: str | None) -> None:
    """Store why a run of ``study`` ended before its trial budget (None: it did not, or it runs now)."""
    if study.user_attrs.get(ENDED_ATTR) != reason:
        study.set_user_attr(ENDED_ATTR, reason)


def ended_early(study: optuna.Study) -> str | None:
    """Why the study's last run ended before its trial budget (:func:`record_end`), or None."""
    reason = study.user_attrs.get(ENDED_ATTR)
    return reason if isinstance(reason, str) and reason else None


def run_budget(spec: StudySpec, study: optuna.Study) -> StudySpec:
    """``spec`` with the budget the study's last run aimed at (its trials and, hybrid, its surrogate runs);
    ``spec`` as it is for a study run before studies recorded it, or when the file can no longer hold the
    recorded budget (a run budget below a ``seeds_max`` raised since: the next run takes the file's anyway)."""
    b = study.user_attrs.get(BUDGET_ATTR)
    if not isinstance(b, dict):
        return spec
    try:
        return spec.with_overrides(trials=b.get("trials"), runs=b.get("runs"))
    except UsageError:
        return spec


def describe(spec: StudySpec) -> str:
    """One line about a study, stored with it (optuna-dashboard shows user attributes)."""
    units = ", ".join(f"{o.direction} {registry.get(o.metric).label()}" for o in spec.objectives)
    cons = ", ".join(f"{i}: {c}" for i, c in enumerate(spec.constraints)) or "none"
    return f"dse study ({spec.strategy} strategy): objectives {units}; constraints {cons}"


def hv_reference(spec: StudySpec) -> list[float]:
    """The hypervolume reference point, in objective order: ``[hypervolume]`` in the study file, else each
    metric's default (:mod:`dse.evaluation.metrics`: a fixed value, or a factor times the reference accelerator's
    plain-BP figure)."""
    ref = []
    base = None
    for o in spec.objectives:
        m = registry.get(o.metric)
        if o.metric in spec.hv_reference:
            ref.append(spec.hv_reference[o.metric])
        elif m.hv_reference is not None:
            ref.append(m.hv_reference)
        else:
            if base is None:  # the reference accelerator running plain BP
                cfg = replace(spec.base, hardware=spec.base.reference, training=spec.base.training.replace(
                    scheme="bp"), parallel=None)
                base = evaluate_hardware(cfg, 0.0)["metrics"]
            ref.append(m.hv_baseline_factor * base[o.metric])
    return ref


def distribution(knob) -> optuna.distributions.BaseDistribution:
    """The Optuna distribution of a searched knob (the one place knobs map to Optuna's types)."""
    D = optuna.distributions
    if isinstance(knob, Choice):
        return D.CategoricalDistribution(list(knob.choices))
    if isinstance(knob, Bundle):
        return D.CategoricalDistribution(knob.labels())
    assert isinstance(knob, Range)
    if knob.integer:
        return D.IntDistribution(int(knob.low), int(knob.high), step=int(knob.step or 1), log=knob.log)
    return D.FloatDistribution(knob.low, knob.high, step=knob.step, log=knob.log)


def suggest(trial: optuna.Trial, name: str, knob) -> Any:
    """Ask ``trial`` for the value of a searched knob (its Optuna distribution: :func:`distribution`)."""
    d = distribution(knob)
    if isinstance(d, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, list(d.choices))
    if isinstance(d, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, d.low, d.high, step=d.step, log=d.log)
    return trial.suggest_float(name, d.low, d.high, step=d.step, log=d.log)


def counts_toward_budget(t, retried: set[int]) -> bool:
    """Whether a trial counts toward the budget (or will): complete, running, waiting, or a genuine failure
    -- not a trial retried after its worker died, an interrupted one, or a pruned budget overflow."""
    if t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING):
        return True
    if t.state == TrialState.FAIL:
        # a genuine failure records its reason; one without (stopped by a signal before or after the
        # objective's own handler, or whose worker died) does not count
        reason = t.user_attrs.get("fail_reason", "")
        return t.number not in retried and bool(reason) and not reason.startswith("interrupted")
    return False


def failed_count(study: optuna.Study) -> int:
    """Genuinely failed trials (impossible configurations, errors), not retried or interrupted ones."""
    trials = study.get_trials(deepcopy=False)
    retried = runguard.retried(trials)
    return sum(1 for t in trials if t.state == TrialState.FAIL and counts_toward_budget(t, retried))


def budget_state(study: optuna.Study) -> dict:
    """Trials that count toward the budget: ``done`` (complete or genuinely failed), ``active`` (running or
    waiting), and ``waiting`` alone."""
    trials = study.get_trials(deepcopy=False)
    retried = runguard.retried(trials)
    counted = [t for t in trials if counts_toward_budget(t, retried)]
    done = sum(t.state in FINISHED for t in counted)
    waiting = sum(t.state == TrialState.WAITING for t in counted)
    return {"done": done, "active": len(counted) - done, "waiting": waiting}


def trial_objective(spec: StudySpec, runner) -> Callable[[optuna.Trial], list[float]]:
    """The joint objective: sample every knob, evaluate, record. ``runner`` (:class:`dse.search.runner.Runner`)
    admits the trial within the budget."""

    def objective(trial: optuna.Trial) -> list[float]:
        trial.set_user_attr("worker", runguard.owner())
        guard = runguard.current
        try:  # (whatever this raises is recorded as the trial's reason: a failure without one would not count)
            sys_attrs = trial.study._storage.get_trial_system_attrs(trial._trial_id)
            if GRID_NONE in sys_attrs and "grid_id" not in sys_attrs:  # (a heartbeat retry copies the mark)
                # the grid sampler found no point left for it: nothing to evaluate
                trial.set_user_attr("fail_reason", "no grid point left for it: another worker took the last one "
                                                   "it could have")
                raise optuna.TrialPruned("no grid point left")
            # exact budget with several workers: a trial runs only if fewer than `budget` counting trials precede
            # it; a retry too (the trial it replaces no longer counts, but one admitted meanwhile may, or the
            # trial retried may never have been admitted: its worker died before it asked)
            if not runner.admit(trial.number):
                trial.set_user_attr("fail_reason", "budget reached by other workers")
                raise optuna.TrialPruned("budget reached")
            with guard.raising():  # a signal stops the trial here, never inside Optuna's bookkeeping
                return evaluate_trial(trial, spec)
        except KeyboardInterrupt:
            trial.set_user_attr("fail_reason", "interrupted (Ctrl-C or SIGTERM)")
            raise
        except (TrialFailed, optuna.TrialPruned):
            raise
        except Exception as e:
            if is_fault(e):  # a full disk, an unusable cache: the run stops and says so
                guard.record_fault(e)
                try:
                    trial.set_user_attr("fail_reason", f"interrupted by a fault: {type(e).__name__}: {e}")
                except Exception:  # the storage itself may be the fault
                    pass
                raise
            trial.set_user_attr("fail_reason", f"{type(e).__name__}: {e}")  # a bug or an unforeseen input:
            trial.set_user_attr(INTERNAL_ERROR_ATTR, True)  # record it, the study goes on
            raise

    return objective


def is_fault(e: BaseException) -> bool:
    from dse.search.storage import fault_of
    from models.surrogate import CacheError

    return isinstance(e, CacheError) or fault_of(e) is not None


def evaluate_trial(trial: optuna.Trial, spec: StudySpec) -> list[float]:
    """Sample every knob of ``spec`` on ``trial``, evaluate the configuration and record it; its values."""
    params = {name: suggest(trial, name, knob) for name, knob in spec.space.searched()}
    try:
        cfg = spec.configuration(params)
    except (ValueError, TypeError) as e:
        reason = f"impossible configuration: {e}"
        trial.set_user_attr("fail_reason", reason)
        raise TrialFailed(reason) from None
    # study files have no [schedule]: the surrogate always runs, on the study's seeds (more near the front)
    def at(n: int):
        c = spec.seeded(cfg, n)
        r = trial_record(spec, c, evaluate(c, metrics=spec.needed_metrics))
        return r, [candidate(r, params)]

    try:
        rec, _ = race(spec, at, lambda: load_points(trial.study, spec),
                      start_seeds(spec, seeds_reached(trial.study, params) if spec.adaptive else 0))
    except TrialFailed as e:
        trial.set_user_attr("fail_reason", str(e))
        raise
    for k, v in rec["user_attrs"].items():
        trial.set_user_attr(k, v)
    trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR, rec["constraints"])
    return rec["values"]


#: The trial system attribute holding the constraint values, a list in the order of the study's
#: constraints (<= 0 when satisfied). Optuna reads this format as ``trial.constraints`` = {"0": ..., ...}
#: and optuna-dashboard (0.21) shows feasibility only from it, not from Optuna 5's named
#: ``Trial.set_constraint`` keys; the constraints' names are in the study's ``description``.
CONSTRAINTS_ATTR = "constraints"


#: what a trial records per model besides the registry's metrics
MODEL_FIELDS = ("model", "step_ms_scheme_bp", "step_ms_gp")


def seeds_reached(study: optuna.Study, params: dict) -> int:
    """The most surrogate seeds a complete trial of ``study`` with the training knobs of ``params`` recorded
    (0: none): a later joint trial of the same setting starts there (its accuracy the same figure)."""
    knobs = {n: v for n, v in params.items() if n.startswith("training.")}
    return max((int(t.user_attrs.get("metrics", {}).get("seeds", 0))
                for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if all(t.params.get(n) == v for n, v in knobs.items())), default=0)


def trial_record(spec: StudySpec, cfg, out: dict) -> dict:
    """What a trial stores for an evaluation ``out`` of configuration ``cfg`` (:func:`dse.evaluation.evaluator.evaluate`
    or the hybrid's batch): its objective ``values``, ``user_attrs`` (metrics, per-model figures, surrogate
    figures, the full configuration) and ``constraints`` (violations in the study's order, <= 0 when
    satisfied)."""
    metrics = out["metrics"]
    missing = [m for m in spec.needed_metrics if m not in metrics]
    if missing:
        raise TrialFailed(f"metric {missing[0]} was not computed")
    # per model: every registered metric its row carries (speedup, energy_j, ...) and its step times
    names = set(registry.names())
    attrs = {"metrics": metrics,
             "models": [{k: v for k, v in r.items() if k in names or k in MODEL_FIELDS}
                        for r in out["models"]]}
    if out.get("surrogate") is not None:
        attrs["surrogate"] = {k: v for k, v in out["surrogate"].items() if isinstance(v, (int, float, str, bool))}
        attrs["surrogate"]["cache_version"] = SURROGATE_VERSION  # (a study made by another proxy is told apart)
        record = registry.seed_record(out["surrogate"])
        if record is not None:  # the values behind the means, for the paired-seed test (dse.search.noise)
            attrs["per_seed"] = record
    attrs["config"] = cfg.to_dict()
    return {"values": [metrics[m] for m in spec.metrics], "user_attrs": attrs,
            "constraints": [float(c.violation(metrics[c.metric])) for c in spec.constraints]}


def candidate(rec: dict, params: dict, number: int = -1) -> Point:
    """A trial record (:func:`trial_record`) not entered yet, as a :class:`Point` (for the replication's test)."""
    return Point(number=number, values=tuple(float(v) for v in rec["values"]), metrics=rec["user_attrs"]["metrics"],
                 params=dict(params), feasible=all(v <= 0 for v in rec["constraints"]), config={},
                 per_seed=rec["user_attrs"].get("per_seed"))


def point_of(t: optuna.trial.FrozenTrial, spec: StudySpec) -> Point | None:
    """A complete trial as a :class:`Point` (None for any other). Feasibility is judged by the study's
    constraints (the spec, which :func:`open_study` checked against the study) on the trial's metrics."""
    if t.state != TrialState.COMPLETE or t.values is None:
        return None
    metrics = dict(t.user_attrs.get("metrics", {}))
    if not metrics:  # nothing recorded beside Optuna's values (not a trial dse made): its values stand
        values = tuple(float(v) for v in t.values)
    elif all(m in metrics for m in spec.metrics):  # the study's objectives now, even after --accept-changes
        values = tuple(float(metrics[m]) for m in spec.metrics)  # swapped one for another of the same direction
    else:  # it did not record an objective the study has now: it cannot be placed on the front
        return None
    if all(c.metric in metrics for c in spec.constraints):
        feasible = all(c.violation(metrics[c.metric]) <= 0 for c in spec.constraints)
    else:
        feasible = all(v <= 0 for v in t.constraints.values())
    return Point(number=t.number, values=values, metrics=metrics,
                 params=dict(t.params), feasible=feasible,
                 config=dict(with_current_files(t.user_attrs.get("config", {}), spec)),
                 per_seed=t.user_attrs.get("per_seed"))


def check_cache() -> None:
    """UsageError naming the surrogate cache folder unless this process can write into it."""
    from dse.search.storage import check_writable_dir
    from models.surrogate import cache_dir

    check_writable_dir(cache_dir(), "surrogate cache", "set DSE_CACHE_DIR to a writable folder")


def load_points(study: optuna.Study, spec: StudySpec) -> list[Point]:
    """Every complete trial of ``study`` as a :class:`Point`."""
    return points_of(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), spec)


def points_of(trials, spec: StudySpec) -> list[Point]:
    """The complete ones of ``trials`` (listed already) as :class:`Point` s."""
    pts = (point_of(t, spec) for t in trials if t.state == TrialState.COMPLETE)
    return [p for p in pts if p is not None]


class RunResult(dict):
    """Figures of a run: finished and complete trial counts, front size, hypervolume, interrupted."""


def optimize_one(study: optuna.Study, objective) -> bool:
    """One trial of ``objective`` on ``study`` (its exceptions recorded as the trial's failure); whether the
    search may go on: False once the sampler asked the study to stop (``Study.stop``: Optuna's grid sampler,
    when every point of its grid has been tried, or a brute-force sampler), which ``optimize`` with one trial
    at a time would otherwise forget. A trial that another worker failed meanwhile -- its heartbeat went stale
    while this worker was paused or cut off, and it was retried elsewhere -- cannot be told its result: Optuna
    raises, and the run goes on (the retry counts)."""
    try:
        study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=False)
    except (ValueError, AssertionError) as e:
        # Optuna's refusal to tell a finished trial, as raised or as the AssertionError ("Should not reach.")
        # its own bookkeeping then raises over it
        if not any(isinstance(x, ValueError) and str(x).startswith("Cannot tell a ") for x in (e, e.__context__)):
            raise
    # (Optuna clears the flag when optimize starts and leaves it set when a callback or sampler stopped it)
    return not getattr(study, "_stop_flag", False)


def recover_dead_workers(study: optuna.Study) -> list[int]:
    """Fail and retry RUNNING trials that no live worker owns: their worker process on this machine died
    (SIGKILL, OOM, crash), or they have no owner record and are older than
    :data:`dse.search.runguard.ORPHAN_GRACE_S`; fail WAITING trials queued by a process that died.

    This is the local counterpart of Optuna's heartbeats (which need an RDB storage): it works on every
    storage, journal files included, for workers on the same machine. Each such trial is marked FAIL and a
    copy with the same parameters is queued (``retry_of`` = its number; with the attributes of
    :data:`dse.search.runguard.RETRY_KEEPS` it has). Returns the retried numbers.
    Call it between trials (a RUNNING trial of this very process is then a leftover).
    """
    out = []
    running, waiting = runguard.orphans(study)
    for t in running:
        who = t.user_attrs.get("worker")
        # "interrupted ...": not counted toward the budget (its retry is); False: another worker got there first
        if not runguard.fail_orphan(study, t, f"{runguard.INTERRUPTED}: its worker {'(' + who + ') ' if who else ''}"
                                               f"died while running it; {runguard.RETRIED}"):
            continue
        # what the trial was queued to do goes with its retry (Optuna's heartbeat retry keeps every attribute)
        # (its values, or those it was queued with when it died before they were suggested)
        runguard.queue(study, trial_point(t), retry_of=t.number,
                       **{k: t.user_attrs[k] for k in runguard.RETRY_KEEPS if k in t.user_attrs})
        out.append(t.number)
    for t in waiting:
        runguard.fail_orphan(study, t, f"{runguard.INTERRUPTED}: queued by a run that died before running it")
    return out
