"""``evaluate``: the surrogate's answer for one configuration over paired seeds, with its controls, cached.

For each seed five runs share the initialization and the batch order: plain BP (cached by the BP knobs
only, so every scheme setting reuses it), the configured scheme, and its three controls (``null``,
``null_momentum``, ``truncated``), each replaying the scheme's exact BP/GP step mask (a caller that needs
no control figure names fewer: ``evaluate(..., controls=())``). Each run is cached
as a small JSON file under ``cache_dir()/surrogate/v<N>/``, keyed by a hash of its knobs and seed; a cache
hit reads five files per seed and imports nothing heavy (no data set, no threadpoolctl, no mnist1d). A run
another process is training (a study's other worker) is waited for and read, not trained twice.
``jobs=N`` trains the runs that are not cached in N processes (BP and the scheme first, each control once
the scheme run whose mask it replays is done); every run is a deterministic function of its knobs and seed,
so the figures are those of one process.

A run that diverged (a non-finite loss, or a test accuracy at chance) is kept in the means, which are then
not a usable figure: the result names the seeds (``diverged_seeds``), ``dse surrogate`` says so, and a
study's trial on such a setting fails with the reason (:class:`SurrogateDiverged`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from models.schemes.registry import CONTROLS, GAIN_KEYS
from models.surrogate.config import SurrogateConfig
from models.surrogate.stats import mean, std
from models.surrogate.tasks import cache_dir, cache_error

__all__ = ["SurrogateResult", "SurrogateDiverged", "evaluate", "cached_run", "cached_seeds", "runs_per_seed",
           "default_jobs", "CACHE_VERSION", "CONTROLS", "GAIN_KEYS"]

#: Bump when a change to the training code changes results or the stored runs' fields, so that old cache
#: entries are not reused. 3: the controls null_momentum and truncated, the large-batch quality probe. 4: the
#: local heads' step capped at their stability limit (``models.schemes.local.head_lr``), and ``diverged`` counts
#: a run that ends at chance.
CACHE_VERSION = 4

# CONTROLS (the controls every scheme is reported against, in this order) and GAIN_KEYS (the result key of each
# control's accuracy difference; ``predictor_gain`` is the one against ``null``) come from the schemes' name
# table, models.schemes.registry: a light leaf, so that a cache hit still imports nothing heavy.
#: quality figures of the scheme's run (means over post-warm-up BP steps; None for a scheme with no prediction)
QUALITY_KEYS = ("cos", "relerr", "cos_large", "cos_large_bp", "loss_decrease", "loss_decrease_bp")


#: Bump when a change to one network's code changes its results (its runs only are then recomputed; the
#: key of a network not listed here is as before). resnet 2: the stride-1 stem, the batch norm on the centred map.
NETWORK_VERSIONS = {"resnet": 2}


def _key(kind: str, knobs: dict[str, Any], seed: int) -> str:
    payload = {"v": CACHE_VERSION, "kind": kind, "knobs": knobs, "seed": seed}
    if knobs.get("network") in NETWORK_VERSIONS:
        payload["network_v"] = NETWORK_VERSIONS[knobs["network"]]
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(kind: str, key: str) -> Path:
    return cache_dir() / "surrogate" / f"v{CACHE_VERSION}" / kind / f"{key}.json"


#: what every cached run holds (what ``train_run`` returns), and the keys that must be finite numbers
_RUN_KEYS = ("accuracy", "diverged", "steps", "warmup_steps", "gp_fraction", "phases", "cos", "relerr", "epochs",
             "network_params", "predictor_params", "wall_s")
_NUMERIC = ("accuracy", "steps", "warmup_steps", "gp_fraction", "wall_s")


#: the key of a stored run's checksum (of the rest of the entry): a run edited or damaged after it was stored,
#: still valid JSON, is retrained instead of read (runs stored before it was written have none and are checked
#: by their shape and ranges alone)
CHECK_KEY = "check"


def _checksum(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != CHECK_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _valid(entry: Any, kind: str | None = None, seed: int | None = None) -> bool:
    """Whether a stored run can be used: a run's keys, finite numbers in their ranges (accuracy 0-100, GP
    fraction 0-1, warm-up within the steps, BP/GP phases covering the steps), its own seed and scheme those it
    was stored under, and its checksum (when it has one) its content's."""
    if not isinstance(entry, dict) or any(k not in entry for k in _RUN_KEYS) or not isinstance(entry["diverged"], bool):
        return False
    if not (all(isinstance(entry[k], (int, float)) and not isinstance(entry[k], bool)
                and math.isfinite(entry[k]) for k in _NUMERIC) and isinstance(entry["phases"], list)):
        return False
    if not (0 <= entry["accuracy"] <= 100 and 0 <= entry["gp_fraction"] <= 1 and entry["wall_s"] >= 0
            and entry["steps"] >= 0 and 0 <= entry["warmup_steps"] <= entry["steps"]):
        return False
    try:
        if sum(int(n) for k, n in entry["phases"]) != entry["steps"] or any(
                k not in ("bp", "gp") or int(n) < 1 for k, n in entry["phases"]):
            return False
    except (TypeError, ValueError):
        return False
    if (seed is not None and entry.get("seed", seed) != seed) or \
            (kind is not None and entry.get("scheme", kind) != kind):
        return False
    return CHECK_KEY not in entry or entry[CHECK_KEY] == _checksum(entry)


def _load(path: Path, kind: str | None = None, seed: int | None = None) -> Optional[dict[str, Any]]:
    """A cached run, or None: absent, unreadable, or damaged (not JSON, not a run's shape, a figure out of its
    range, another seed's or scheme's, or not its checksum: discarded, so that the run is recomputed; only the
    file found damaged, not one another process stored since)."""
    try:
        fh = path.open()
    except OSError:
        return None
    with fh:
        inode = os.fstat(fh.fileno()).st_ino
        try:
            entry = json.load(fh)
        except (OSError, ValueError):
            entry = None
    if entry is not None and _valid(entry, kind, seed):
        entry.pop(CHECK_KEY, None)  # the run as trained
        return entry
    try:
        if os.stat(path).st_ino == inode:
            path.unlink()
    except OSError:
        pass
    return None


def _store(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w") as fh:
            json.dump({**data, CHECK_KEY: _checksum(data)}, fh)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):  # a full disk: the part written is not left behind
            tmp.unlink()
        raise cache_error(path, e) from e


class SurrogateDiverged(RuntimeError):
    """A setting whose training diverged on some seed: its mean figures are not a usable figure."""


@dataclass(frozen=True)
class SurrogateResult:
    """What one configuration costs in accuracy. Accuracies in percent (0-100), differences in points."""

    config: SurrogateConfig
    seeds: tuple[int, ...]
    #: per seed: {"bp": run, "scheme": run, "null": run, "null_momentum": ..., "truncated": ...}
    runs: tuple[dict[str, Any], ...]
    cached: bool = False
    wall_s: float = 0.0  # wall time of this call
    compute_s: float = field(default=0.0)  # summed wall time of the training runs (as stored)
    #: the controls that ran (every one unless the caller asked for fewer): the figures of the others are absent
    controls: tuple[str, ...] = CONTROLS

    def _values(self, role: str, key: str) -> list[float]:
        return [float(r[role][key]) for r in self.runs]

    @property
    def accuracy(self) -> float:
        return mean(self._values("scheme", "accuracy"))

    @property
    def accuracy_bp(self) -> float:
        return mean(self._values("bp", "accuracy"))

    @property
    def accuracy_null(self) -> float:
        return mean(self._values("null", "accuracy"))

    @property
    def accuracy_drop(self) -> float:
        return self.accuracy_bp - self.accuracy

    @property
    def predictor_gain(self) -> float:
        return self.accuracy - self.accuracy_null

    def gain_vs(self, control: str) -> float:
        """Mean over seeds of the scheme's accuracy minus the control's (points)."""
        return self.accuracy - mean(self._values(control, "accuracy"))

    @property
    def gp_fraction(self) -> float:
        return mean(self._values("scheme", "gp_fraction"))

    @property
    def diverged_runs(self) -> list[tuple[int, str]]:
        """``(seed, role)`` of every run that diverged (a non-finite loss, or a test accuracy at chance)."""
        return [(s, role) for s, r in zip(self.seeds, self.runs) for role in ("bp", "scheme", *self.controls)
                if r[role]["diverged"]]

    @property
    def diverged_seeds(self) -> list[int]:
        """The seeds on which any run of this result diverged (its means include them)."""
        return sorted({s for s, _ in self.diverged_runs})

    def check_converged(self) -> None:
        """Raise :class:`SurrogateDiverged`, naming the seeds and runs, if any run diverged."""
        bad = self.diverged_runs
        if bad:
            runs = ", ".join(f"{role if role != 'scheme' else self.config.scheme} on seed {s}" for s, role in bad)
            raise SurrogateDiverged(f"the training surrogate diverged ({runs}; proxy {self.config.proxy}): "
                                    "its mean accuracy is not a usable figure")

    def to_dict(self) -> dict[str, Any]:
        acc = self._values("scheme", "accuracy")
        bp = self._values("bp", "accuracy")
        ctrl = {c: self._values(c, "accuracy") for c in self.controls}
        gp = self._values("scheme", "gp_fraction")
        drop = [b - a for a, b in zip(acc, bp)]
        gains = {c: [a - n for a, n in zip(acc, ctrl[c])] for c in self.controls}
        per_seed = []
        for s, r in zip(self.seeds, self.runs):
            m = r["scheme"]
            one = {
                "seed": s,
                "accuracy": m["accuracy"],
                "accuracy_bp": r["bp"]["accuracy"],
                **{f"accuracy_{c}": r[c]["accuracy"] for c in self.controls},
                "accuracy_drop": r["bp"]["accuracy"] - m["accuracy"],
                **{GAIN_KEYS[c]: m["accuracy"] - r[c]["accuracy"] for c in self.controls},
                "gp_fraction": m["gp_fraction"],
                **{k: m.get(k) for k in QUALITY_KEYS},
                "diverged": m["diverged"],
                "phases": m["phases"],
                "epochs": m["epochs"],
            }
            per_seed.append(one)
        first = self.runs[0]["scheme"]
        out = {
            "config": self.config.to_dict(),
            # every accuracy below is the proxy's: this task and network after this many epochs
            "proxy": {"task": self.config.task, "network": self.config.network, "epochs": self.config.epochs,
                      "label": self.config.proxy},
            "scheme": self.config.scheme,
            "seeds": list(self.seeds),
            "controls": list(self.controls),
            "accuracy": mean(acc),
            "accuracy_std": std(acc),
            "accuracy_bp": mean(bp),
            "accuracy_bp_std": std(bp),
        }
        for c in self.controls:
            out[f"accuracy_{c}"] = mean(ctrl[c])
            out[f"accuracy_{c}_std"] = std(ctrl[c])
        out["accuracy_drop"] = mean(drop)
        out["accuracy_drop_std"] = std(drop)
        for c in self.controls:
            out[GAIN_KEYS[c]] = mean(gains[c])
            out[f"{GAIN_KEYS[c]}_std"] = std(gains[c])
        out["gp_fraction"] = mean(gp)
        out["gp_fraction_std"] = std(gp)
        # seeds on which a run diverged (non-finite loss or accuracy at chance): the means above include them
        out["diverged_seeds"] = self.diverged_seeds
        out["diverged_runs"] = [{"seed": s, "run": role} for s, role in self.diverged_runs]
        for k in QUALITY_KEYS:
            v = [r["scheme"].get(k) for r in self.runs]
            v = [x for x in v if x is not None]
            out[k] = mean(v) if v else None
            out[f"{k}_std"] = std(v) if v else None
        out.update({
            "steps": first["steps"],
            "warmup_steps": first["warmup_steps"],
            "predictor_params": first["predictor_params"],
            "network_params": first["network_params"],
            "timeline": first["epochs"],
            "per_seed": per_seed,
            "cached": self.cached,
            # the BLAS kernels its runs were trained with (a run cached before runs recorded it: "not recorded")
            "blas": ", ".join(sorted({run.get("blas") or "not recorded" for r in self.runs for run in r.values()})),
            "wall_s": self.wall_s,
            "compute_s": self.compute_s,
        })
        return out


def _knobs(cfg: SurrogateConfig, kind: str, replay_from) -> dict[str, Any]:
    """What a run depends on: BP the BP knobs; a control the BP knobs, ``true_output_grad``, ``warmup``
    and the step mask it replays (so every scheme with the same fixed schedule shares its controls);
    any other run every knob."""
    if kind == "bp":
        return cfg.bp_key()
    if kind in CONTROLS and replay_from is not None:
        mask = hashlib.sha256(json.dumps(replay_from["phases"]).encode()).hexdigest()[:32]
        return {**cfg.bp_key(), "true_output_grad": cfg.true_output_grad, "warmup": cfg.warmup, "mask": mask}
    knobs = cfg.to_dict()
    knobs.pop("tasks", None)  # a run trains cfg.task alone
    return knobs


#: the longest a process waits for another's training of the same run before it trains the run itself (seconds)
LOCK_WAIT_S = 600.0
_LOCK_POLL_S = 0.05


@contextmanager
def _training_lock(path: Path):
    """Held while this process trains the run stored at ``path``: another process (a study's other worker)
    missing the same run in the cache waits for it, then reads it, instead of training it a second time (at a
    study's start every worker misses the same plain-BP run). An advisory ``flock`` on ``<run>.lock`` beside
    the run, removed once the run is stored. No lock, the run simply trained as without one, where ``flock``
    does not exist (Windows) or fails (a file system without locks), the lock file cannot be made, or another
    process has held it for :data:`LOCK_WAIT_S` (hung or stopped). Whoever takes the lock reads the cache
    again first."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    lock = path.with_suffix(".lock")
    fh = _acquire(lock, fcntl)
    if fh is None:
        yield
        return
    try:
        yield
    finally:
        try:
            lock.unlink()
        except OSError:
            pass
        fh.close()  # releases the lock


def _acquire(lock: Path, fcntl) -> Any:
    """``lock`` opened and locked, or None (see :func:`_training_lock`). A lock taken on a file its holder
    has meanwhile removed (the holder stored the run, or failed) is let go and taken again on the file now
    at ``lock``, so that two processes never train under two files."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            fh = lock.open("a")
        except OSError:  # an unwritable cache: _store says so, with what to do
            return None
        try:
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        fh.close()
                        return None
                    time.sleep(_LOCK_POLL_S)
        except OSError:  # no locks on this file system (ENOLCK, EOPNOTSUPP, ...)
            fh.close()
            return None
        except BaseException:  # interrupted while waiting: the lock file is the holder's to remove
            fh.close()
            raise
        try:
            if os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino:
                return fh
        except OSError:  # removed by its holder
            pass
        fh.close()


def cached_run(cfg: SurrogateConfig, kind: str, seed: int, cache: bool, replay_from=None):
    """One training run of ``kind`` (a registered scheme name) on ``seed``, from the cache if ``cache`` and
    stored; ``replay_from``: for a control, the run whose BP/GP step mask it replays. Returns (run, hit).
    With ``cache``, a run another process is training is waited for and read (:func:`_training_lock`)."""
    knobs = _knobs(cfg, kind, replay_from)
    path = _path(kind, _key(kind, knobs, seed))
    if not cache:
        return _train(cfg, kind, seed, replay_from), False
    hit = _load(path, kind, seed)
    if hit is not None:
        return hit, True
    with _training_lock(path):
        hit = _load(path, kind, seed)  # trained by another process while this one waited
        if hit is not None:
            return hit, True
        out = _train(cfg, kind, seed, replay_from)
        _store(path, out)
    return out, False


def _train(cfg: SurrogateConfig, kind: str, seed: int, replay_from) -> dict[str, Any]:
    from models.surrogate.train import phases_to_mask, train_run

    replay = phases_to_mask(replay_from["phases"]) if replay_from is not None else None
    return train_run(cfg, kind, seed, replay=replay)


def runs_per_seed(cfg: SurrogateConfig, controls: Sequence[str] = CONTROLS) -> int:
    """Training runs per seed of :func:`evaluate` with these ``controls`` (the progress total is this times
    the number of seeds)."""
    return 2 + len(controls)


def default_jobs() -> int:
    """The cores this process may run on (the default of ``dse surrogate --jobs``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def evaluate(
    config: Optional[SurrogateConfig] = None,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    cache: bool = True,
    progress: Optional[Callable[[int, int, str], None]] = None,
    controls: Sequence[str] = CONTROLS,
    jobs: int = 1,
) -> SurrogateResult:
    """Train ``config`` (default: the committed default ADA-GP setting) on each seed with its BP
    reference and its three controls; ``progress(done, total, label)`` is called after each run.

    ``controls``: the controls to run (default all three, in :data:`CONTROLS` order); a caller that needs
    fewer figures (a search whose metrics need no control) names fewer, and the result then holds no
    figure of the others. A control as the configured scheme (``null``, ``null_momentum``, ``truncated``)
    is the control of the ``adagp`` run with the same knobs (which supplies the step mask; it always runs);
    ``bp`` reports BP as every role. ``jobs``: processes that train the runs not in the cache (1: this
    process); the figures do not depend on it."""
    t0 = time.perf_counter()
    cfg = SurrogateConfig() if config is None else config
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds: at least one seed")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs: an integer >= 1 (got {jobs!r})")
    unknown = [c for c in controls if c not in CONTROLS]
    if unknown:
        raise ValueError(f"controls: unknown control {unknown[0]!r}; allowed: {', '.join(CONTROLS)}")
    controls = tuple(c for c in CONTROLS if c in controls or c == cfg.scheme)
    per_seed = runs_per_seed(cfg, controls)
    total = per_seed * len(seeds)
    gen = "bp" if cfg.scheme == "bp" else ("adagp" if cfg.scheme in CONTROLS else cfg.scheme)
    done = 0
    hits: dict[tuple[int, str], bool] = {}
    got: dict[tuple[int, str], dict[str, Any]] = {}

    def record(s, kind, run, hit):
        nonlocal done
        got[(s, kind)], hits[(s, kind)] = run, hit
        n = per_seed if gen == "bp" else 1  # plain BP stands for every role
        for _ in range(n):
            done += 1
            if progress is not None:
                progress(done, total, f"seed {s}: {kind}")

    # the runs in dependency order: per seed BP and the scheme, then each control (it replays the scheme's mask)
    first = [(s, k) for s in seeds for k in dict.fromkeys(("bp", gen))]
    then = [] if gen == "bp" else [(s, c) for s in seeds for c in controls]
    if jobs == 1:
        for s, k in first + then:
            record(s, k, *cached_run(cfg, k, s, cache, replay_from=got[(s, gen)] if k in controls else None))
    else:
        _run_parallel(cfg, cache, jobs, first, then, gen, controls, got, record)
    runs = []
    for s in seeds:
        bp = got[(s, "bp")]
        if gen == "bp":
            runs.append({"bp": bp, "scheme": bp, **{c: bp for c in controls}})
            continue
        one = {"bp": bp, "scheme": got[(s, gen)], **{c: got[(s, c)] for c in controls}}
        if cfg.scheme in CONTROLS:
            one["scheme"] = one[cfg.scheme]
        runs.append(one)
    counted = {id(r): r for r in got.values()}  # plain BP stands for every role: counted once
    return SurrogateResult(
        config=cfg,
        seeds=seeds,
        runs=tuple(runs),
        cached=all(hits.values()),
        wall_s=time.perf_counter() - t0,
        compute_s=sum(r["wall_s"] for r in counted.values()),
        controls=controls,
    )


def _run_parallel(cfg, cache, jobs, first, then, gen, controls, got, record) -> None:
    """The runs of :func:`evaluate` in ``jobs`` processes: cache hits read here, the rest trained by a pool
    (spawned: no state of this process is shared), each control submitted once its scheme run is done."""
    import multiprocessing

    def lookup(s, k):
        if not cache:
            return None
        return _load(_path(k, _key(k, _knobs(cfg, k, got[(s, gen)] if k in controls else None), s)), k, s)

    todo = []
    for s, k in first:
        hit = lookup(s, k)
        if hit is not None:
            record(s, k, hit, True)
        else:
            todo.append((s, k))
    pending_controls = list(then)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        running = {}

        def submit(s, k):
            replay = got[(s, gen)] if k in controls else None
            running[pool.submit(cached_run, cfg, k, s, cache, replay)] = (s, k)

        def ready_controls():
            nonlocal pending_controls
            still = []
            for s, k in pending_controls:
                if (s, gen) not in got:
                    still.append((s, k))
                    continue
                hit = lookup(s, k)
                if hit is not None:
                    record(s, k, hit, True)
                else:
                    submit(s, k)
            pending_controls = still

        # the scheme runs first: their controls wait for them
        for s, k in sorted(todo, key=lambda sk: sk[1] == "bp"):
            submit(s, k)
        ready_controls()
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                s, k = running.pop(f)
                run, _ = f.result()
                record(s, k, run, False)
            ready_controls()


def cached_seeds(config: SurrogateConfig, seeds: Sequence[int], controls: Sequence[str] = CONTROLS) -> int:
    """How many of ``seeds``, in order, have every run :func:`evaluate` (with these ``controls``) needs in the
    cache: that many seeds cost nothing (a search reuses the seeds an earlier one added). Reads the
    cached runs' files only. A configuration with several ``tasks``: the fewest over its tasks."""
    if config.tasks:
        return min(cached_seeds(c, seeds, controls) for c in config.task_configs())
    cfg = config
    controls = tuple(c for c in CONTROLS if c in controls or c == cfg.scheme)
    n = 0
    for s in seeds:
        if _load(_path("bp", _key("bp", _knobs(cfg, "bp", None), s))) is None:
            break
        if cfg.scheme != "bp":
            gen = "adagp" if cfg.scheme in CONTROLS else cfg.scheme
            main = _load(_path(gen, _key(gen, _knobs(cfg, gen, None), s)))
            if main is None or any(_load(_path(c, _key(c, _knobs(cfg, c, main), s))) is None for c in controls):
                break
        n += 1
    return n
