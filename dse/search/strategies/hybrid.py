"""The hybrid co-search: Optuna samples training knobs; the cheap hardware model searches hardware.

A joint sampler spends a training-surrogate run (seconds) on every trial to learn about hardware it could
have enumerated for microseconds. The hybrid strategy (:class:`Hybrid`, a
:class:`dse.search.strategies.base.Strategy`)
splits the two; one step is one training setting:

1. an *outer* Optuna study, stored beside the main one as ``<name>.training`` (same storage, sampler and
   directions; its metric names say "best <metric> over the setting's hardware sub-front"), samples only
   the training knobs; the outer trial is the setting's *claim*: a setting already trained is not trained
   again (its earlier result is told to the sampler), and one being trained by another worker is left to it;
2. the surrogate runs once for them (cached);
3. the hardware space is searched by the vectorized model (:func:`dse.evaluation.evaluator.hardware_metrics`):
   exhaustively when its grid has at most ``inner_points`` points, otherwise on ``inner_points`` random
   points (seeded); impossible hardware is skipped;
4. the feasible hardware sub-front (non-dominated in the study's objectives, the training metrics held
   fixed) is thinned to at most ``front_size`` points (the ones that hold the most of its hypervolume) and
   enters the main study in one batch, as ordinary complete trials recorded exactly as the joint objective
   records them (the same :func:`dse.search.study.trial_record` of the same evaluation ``dse evaluate`` runs), so
   ``pareto``, ``plot`` and ``export`` work unchanged and an export reproduces to the last digit;
5. the outer trial is told, per objective, the best value the sub-front reached.

The budget counts main-study trials, as for a joint search, and is met exactly by several workers
(``dse run --workers N``, ``dse worker`` on many machines): each batch is admitted trial by trial by
:meth:`dse.search.runner.Runner.admit`. A study may also give a *training* budget, ``[study] runs``: the
surrogate runs its settings may rest on (a setting on n seeds counts n, its replicates included), so that
adaptive seeds (:mod:`dse.search.replication`) are spent within the budget rather than on top of it. A setting
is started only while the runs the finished settings hold, plus ``seeds_max`` for each setting being trained
(by any worker, claimed earlier), leave ``seeds_max`` for it: the budget is never exceeded and the last
setting can still get every seed it needs. When no further setting fits the run ends, whatever the trial
budget says. The outer trial runs inside Optuna's ``optimize``, so on PostgreSQL a
dead worker's setting stops beating and is retried by another worker (on one machine: by process id).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
import warnings
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from accel import Hardware, HardwareArray
from dse.errors import INTERNAL_ERROR_ATTR, UsageError
from dse.evaluation import metrics as registry
from dse.evaluation.evaluator import evaluate, evaluate_hardware, hardware_metrics, training_metrics
from dse.search.hvi import HVI_MAX_SETTINGS, HVI_STARTUP, HviSelector
from dse.search.replication import race, start_seeds
from dse.search.runguard import INTERRUPTED, derive_seed, owner, queue
from dse.search.samplers import make_sampler
from dse.search.storage import HELPER_ATTR
from dse.search.strategies.base import Option, Strategy, importance_sample
from models.surrogate import SurrogateConfig

if TYPE_CHECKING:
    import optuna

    from dse.search.runner import Runner
    from dse.search.studyfile import StudySpec

__all__ = ["Hybrid", "hardware_candidates", "hardware_of", "training_config", "violation", "sub_front", "costed_points",
           "TRAINING_SUFFIX", "MAX_REPEATS", "training_runs", "fits", "points_before_training"]

#: the outer study's name is the main study's plus this
TRAINING_SUFFIX = ".training"

#: training settings in a row that bring nothing new before the run ends (the space is exhausted)
MAX_REPEATS = 50

#: seconds a worker waits before it looks again whether settings other workers are training left room in the
#: run budget (as the runner polls for the last trials of the trial budget)
WAIT_S = 0.5
#: at most this long (seconds) a worker waits for an earlier claim's training knobs to be set before comparing,
#: when the claim's worker cannot be seen from here (another machine's, or not recorded yet)
CLAIM_WAIT_S = 10.0
#: the same for a claim whose worker is alive on this machine (a loaded machine may hold it back for seconds;
#: giving up on it early lets two workers train one setting); a dead one's is not waited for
CLAIM_LIVE_WAIT_S = 60.0
#: sampler = "grid" or "hvi": choices made again when another worker queued the chosen setting meanwhile
CHOOSE_TRIES = 3



def _knob_values(knob) -> list | None:
    """All values of a finite knob (None when it is continuous)."""
    return knob.values() if knob.finite else None


def _whole_grid(spec: StudySpec, max_points: int) -> bool:
    """Whether the hardware search is the whole grid (finite, at most ``max_points`` points), the same for
    every training setting."""
    grids = [_knob_values(k) for n, k in spec.space.searched() if n.startswith("hardware.")]
    return all(g is not None for g in grids) and math.prod(len(g) for g in grids) <= max_points


def hardware_candidates(spec: StudySpec, *, max_points: int, seed: int) -> list[dict[str, Any]]:
    """Hardware knob assignments (parameter name -> value) to search: the whole grid if it is finite and
    has at most ``max_points`` points, else ``max_points`` random points."""
    knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("hardware.")]
    rng = np.random.default_rng(seed)
    grids = [_knob_values(k) for _, k in knobs]
    if _whole_grid(spec, max_points):
        return [dict(zip([n for n, _ in knobs], combo)) for combo in itertools.product(*grids)]
    out = []
    for _ in range(max_points):
        p = {}
        for (n, k), g in zip(knobs, grids):
            if g is not None:
                p[n] = g[rng.integers(len(g))]
            elif k.log:
                v = math.exp(rng.uniform(math.log(k.low), math.log(k.high)))
                p[n] = int(round(v)) if k.integer else v
            else:
                v = rng.uniform(k.low, k.high)
                p[n] = int(round(v)) if k.integer else v
        out.append(p)
    return out


def hardware_of(spec: StudySpec, params: dict) -> Hardware | None:
    """The candidate accelerator for hardware knob values ``params`` (None if it is impossible)."""
    hw = {**spec.base.hardware.to_dict(), **spec.space.split(params, section="hardware").get("hardware", {})}
    try:
        return Hardware.from_dict(hw)
    except (ValueError, TypeError):
        return None


def _thin(vals: np.ndarray, maxi: list[bool], reference: list[float] | None, k: int) -> np.ndarray:
    """Which ``k`` of the non-dominated objective vectors ``vals`` (rows) to keep: the least hypervolume
    contributors are dropped, a quarter of the surplus at a time (SMS-EMOA's reduction, batched), in the box
    of ``reference`` (the study's) widened just past the points' worst values, so that every point, also one
    beyond the study's reference, has a volume of its own. Objectives with one value (a setting's training
    metrics) are left out. Row indices, in their original order."""
    import moocore

    n = len(vals)
    if n <= k:
        return np.arange(n)
    x = np.where(maxi, -vals, vals)  # minimised
    if not np.isfinite(x).all():  # no volume to measure: evenly along the first objective that varies
        col = next((c for c in range(x.shape[1]) if np.nanmax(x[:, c]) > np.nanmin(x[:, c])), 0)
        order = np.argsort(x[:, col], kind="stable")
        return np.sort(order[np.unique(np.round(np.linspace(0, n - 1, k)).astype(int))])
    varied = x.max(axis=0) > x.min(axis=0)
    x = x[:, varied]
    if not x.shape[1]:  # every point the same: the first k
        return np.arange(k)
    worst = x.max(axis=0) + 1e-3 * (x.max(axis=0) - x.min(axis=0))
    ref = worst if reference is None else np.maximum(np.where(maxi, -np.asarray(reference), reference)[varied],
                                                     worst)
    keep = np.arange(n)
    while len(keep) > k:
        c = moocore.hv_contributions(x[keep], ref=ref)
        keep = np.delete(keep, np.argsort(c, kind="stable")[:max(1, (len(keep) - k) // 4)])
    return keep


def training_config(spec: StudySpec, tparams: dict):
    """The base configuration with the training knob values ``tparams`` (no hardware knob) on the study's
    first ``seeds_min`` surrogate seeds: what the surrogate trains for one training setting (the
    replication, :mod:`dse.search.replication`, may add seeds)."""
    training = {**spec.base.training.to_dict(), **spec.space.split(tparams, section="training").get("training", {})}
    return spec.seeded(replace(spec.base, training=SurrogateConfig.from_dict(training)))


def violation(spec: StudySpec, metrics: dict[str, np.ndarray]) -> np.ndarray:
    """Per point, the summed violation of the study's constraints (0: feasible); ``metrics``: arrays (H,)."""
    n = len(next(iter(metrics.values())))
    viol = np.zeros(n)
    for c in spec.constraints:
        viol += np.maximum(0.0, c.violation(metrics[c.metric]))
    return viol


def sub_front(spec: StudySpec, metrics: dict[str, np.ndarray], front_size: int | None,
              reference: list[float] | None = None) -> tuple[np.ndarray, list[float]]:
    """What the hybrid enters for one training setting whose metrics over the hardware points are
    ``metrics`` (arrays (H,)): the indices of the feasible non-dominated points, thinned to at most
    ``front_size`` (None: not thinned) by dropping the least hypervolume contributors in the box of
    ``reference`` (the study's hypervolume reference point, :func:`dse.search.study.hv_reference`; None: the
    points' own worst values), or the least-violating point when none is feasible; and per objective the best
    value they reach (what the outer study is told)."""
    import moocore

    maxi = [d == "maximize" for d in spec.directions]
    viol = violation(spec, metrics)
    idx = np.flatnonzero(viol <= 0)
    if len(idx):
        vals = np.column_stack([metrics[m][idx] for m in spec.metrics])
        nd = moocore.is_nondominated(vals, maximise=maxi)
        idx, vals = idx[nd], vals[nd]
        if front_size is not None:
            idx = idx[_thin(vals, maxi, reference, front_size)]
    else:  # nothing feasible: enter the least-violating point, so the study records why
        idx = np.array([int(np.argmin(viol))])
    best = [float(np.max(metrics[m][idx]) if mx else np.min(metrics[m][idx])) for m, mx in zip(spec.metrics, maxi)]
    return idx, best


def costed_points(spec, study, *, max_settings: int = 24, seed: int = 0, sample: int | None = None):
    """The hardware points a hybrid study costed, rebuilt: for up to ``max_settings`` of its trained
    settings, every hardware candidate (the grid, or ``inner_points`` samples) costed with the vectorized
    model; with ``sample``, only that many of those points, drawn at random (seed ``seed``) before any is
    costed (24 settings x 8,192 candidates: 2.5 s instead of 27 s for a sample of 1,000). Returns (knob
    columns, metric columns, number of settings, number of points of which the columns are a sample)."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE" and t.values]
    settings: dict[tuple, object] = {}
    for t in trials:
        tp = tuple(sorted((k, v) for k, v in t.params.items() if not k.startswith("hardware.")))
        settings.setdefault(tp, t)
    picked = list(settings.items())
    if len(picked) > max_settings:
        rng = np.random.default_rng(seed)
        picked = [picked[i] for i in sorted(rng.choice(len(picked), max_settings, replace=False))]
    cands = hardware_candidates(spec, max_points=spec.inner_points, seed=seed)
    xs: dict[str, list] = {}
    ys: dict[str, list] = {m: [] for m in spec.metrics}
    hws, keep = [], []
    for c in cands:  # the hardware does not depend on the training knobs: built once
        try:
            hws.append(spec.configuration({**dict(picked[0][0]), **c}).hardware if picked else None)
            keep.append(c)
        except (ValueError, TypeError):
            continue
    n = len(picked) * len(hws)
    idx = importance_sample(n, sample, seed)
    for i, (tp, t) in enumerate(picked if hws else []):
        at = idx[idx // len(hws) == i] % len(hws)  # this setting's points in the sample
        if not len(at):
            continue
        metrics = t.user_attrs.get("metrics", {})
        cfg = spec.configuration({**dict(tp), **keep[0]})
        hm = hardware_metrics(cfg, HardwareArray.from_list([hws[j] for j in at]),
                              float(metrics.get("gp_fraction", 0.0)))
        for m in spec.metrics:
            ys[m].append(hm[m] if m in hm else np.full(len(at), float(metrics.get(m, np.nan))))
        for k, v in dict(tp).items():
            xs.setdefault(k, []).append(np.array([v] * len(at), dtype=object))
        for k in keep[0]:
            xs.setdefault(k, []).append(np.array([keep[j][k] for j in at], dtype=object))
    X = {k: np.concatenate(v) for k, v in xs.items()}
    Y = {m: np.concatenate(v).astype(float) for m, v in ys.items() if v}
    return X, Y, len(picked), n


class Hybrid(Strategy):
    """The hybrid strategy (see the module's docstring)."""

    name = "hybrid"
    summary = ("Optuna samples training knobs; the hardware model searches hardware exhaustively or on "
               "thousands of points per trained setting")
    options = (
        Option("inner_points", int, 4096, low=1, high=1_000_000,
               help="hardware points costed per training setting when the hardware grid is larger"),
        Option("front_size", int, 8, low=1, high=1000,
               help="at most this many sub-front points of each setting enter the study as trials"),
        Option("runs", int, None, low=1, high=1_000_000,
               help="training budget: surrogate runs the trained settings may rest on (a setting on n seeds "
                    "counts n); the run ends when no further setting fits, before the trial budget if need be"),
    )
    stop_reason = (f"the hybrid search stopped early: {MAX_REPEATS} training settings in a row brought no "
                   "hardware point that is not in the study already (the space is exhausted for this budget)")

    @classmethod
    def validate(cls, spec) -> None:
        if spec.base.parallel is not None:
            raise UsageError("study.strategy: the hybrid strategy costs hardware points on one accelerator; a "
                             "study with a [parallel] table needs strategy = \"joint\"")
        if spec.sampler == "hvi":
            grids = [(n, _knob_values(k)) for n, k in spec.space.searched() if n.startswith("training.")]
            for n, g in grids:
                if g is None:
                    raise UsageError(f"space.{n}: sampler = \"hvi\" chooses among the grid of training settings; "
                                     "give this range a step or use a list of choices")
            size = math.prod(len(g) for _, g in grids) if grids else 0
            if not grids or size > HVI_MAX_SETTINGS:
                raise UsageError(f"study.sampler: \"hvi\" scores every training setting of the grid, which has "
                                 f"{size} (allowed: 1 to {HVI_MAX_SETTINGS}); choose another sampler (auto)")
            # what it cannot know before training: a constraint on a training metric, an adaptive schedule's GP
            # fraction (it costs each setting at the fraction the knob requests)
            trained_only = [c.metric for c in spec.constraints if c.metric not in registry.per_hardware()]
            if trained_only:
                raise UsageError(f"study.sampler: \"hvi\" cannot tell before training whether a setting meets the "
                                 f"constraint on the training metric {trained_only[0]!r}; choose another sampler "
                                 "(auto)")
            base = spec.base.training.to_dict()
            if any({**base, **spec.space.split(g, section="training").get("training", {})}.get("adaptive")
                   for g in training_grid(spec)):
                raise UsageError("study.sampler: \"hvi\" costs each training setting before training at the GP "
                                 "fraction it requests; an adaptive schedule (training.adaptive = true) sets it "
                                 "while training: choose another sampler (auto)")
        if spec.runs is not None and spec.runs < spec.seeds_max:
            raise UsageError(f"study.runs: {spec.runs} surrogate runs cannot hold one setting on its "
                             f"{spec.seeds_max} seeds (seeds_max); give at least {spec.seeds_max}, or no runs "
                             "(the trial budget alone)")

    @classmethod
    def helper_studies(cls, study_name: str) -> list[str]:
        return [f"{study_name}{TRAINING_SUFFIX}"]

    @classmethod
    def run_summary(cls, spec, study) -> str | None:
        """How many training settings were trained, and how many of them have points in the study (a setting
        trained when the budget was already met enters none: its training trial says so)."""
        import optuna

        try:
            outer = optuna.load_study(study_name=f"{spec.name}{TRAINING_SUFFIX}", storage=study._storage)
        except KeyError:
            return None
        trials = outer.get_trials(deepcopy=False)
        # by setting: one trained again to enter the rest of its points (finish_of) counts once
        trained = {_key(t.params) for t in trials if t.state.name == "COMPLETE" and t.user_attrs.get("trained")}
        entered = {t.user_attrs.get("training_trial") for t in study.get_trials(deepcopy=False)
                   if t.state.name == "COMPLETE"}
        n_in = len({_key(t.params) for t in trials if t.number in entered} & trained)
        used, _ = training_runs(spec, trials)
        bad = len({_key(t.params) for t in trials if t.user_attrs.get("diverged")})
        out = (f"{len(trained)} training settings trained on {used} surrogate runs"
               + (f" (with the runs of {bad} more that diverged)" if bad else "")
               + (f" (run budget {spec.runs}{'' if fits(spec, used) else ', spent'})"
                  if spec.runs is not None else "")
               + f", {n_in} of them with points in the study")
        if n_in < len(trained):
            out += (f"; {len(trained) - n_in} entered none (budget reached, or every point already in the study: "
                    f"marked entered_points = 0 in the study {spec.name}{TRAINING_SUFFIX})")
        return out

    @classmethod
    def covered(cls, spec, study) -> str | None:
        import optuna

        try:
            outer = optuna.load_study(study_name=f"{spec.name}{TRAINING_SUFFIX}", storage=study._storage)
        except KeyError:
            return None
        trials = outer.get_trials(deepcopy=False)
        if points_left(trials):
            return None  # a resumed run enters the rest of a sub-front the trial budget cut (on no new run)
        if spec.runs is not None:
            used, _ = training_runs(spec, trials)
            if not fits(spec, used):
                return budget_spent(spec, used)
        if spec.sampler in ("grid", "hvi") and not {_key(g) for g in training_grid(spec)} - taken_settings(trials):
            return GRID_DONE
        return None

    @classmethod
    def importance_points(cls, spec, study, sample: int):
        """The hardware points the hybrid costed, rebuilt (:func:`costed_points`; a sample of ``sample``): the
        stored trials are each setting's feasible sub-front only (a knob whose best value costs nothing, such
        as DRAM bandwidth, sits at that value in every one of them)."""
        return costed_points(spec, study, sample=sample)

    def __init__(self, spec: StudySpec, runner: Runner) -> None:
        from dse.search.study import close_storage, open_storage

        super().__init__(spec, runner)
        self.train_knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("training.")]
        store = self._store = open_storage(runner.url, heartbeat=runner.heartbeat)
        try:
            self._open_outer(spec, runner, store)
        except BaseException:
            with contextlib.suppress(Exception):  # the refusal is the error to report
                close_storage(store)
            raise

    def storages(self) -> list:
        return [self._store]

    def _open_outer(self, spec: StudySpec, runner: Runner, store) -> None:
        """The rest of :meth:`__init__`: the outer study of training settings on ``store``, its sampler or the
        strategy's own selection, and the strategy's state."""
        import optuna

        from dse.search.study import distribution

        name = f"{spec.name}{TRAINING_SUFFIX}"
        outer = optuna.create_study(storage=store, study_name=name, directions=spec.directions,
                                    load_if_exists=True)
        if HELPER_ATTR not in outer.user_attrs:  # no dse study file opens it as its own (a study named X.training)
            outer.set_user_attr(HELPER_ATTR, spec.name)
        if outer.metric_names is None:
            with warnings.catch_warnings():  # experimental since Optuna 3.2, stable in use
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                outer.set_metric_names([f"best {m}" for m in spec.metrics])
            outer.set_user_attr("description", f"internal to the dse study {spec.name!r} (hybrid strategy): one "
                                "trial per training setting trained by the surrogate; its values are the best "
                                "each objective reached over the setting's hardware sub-front, whose points "
                                f"are trials of {spec.name!r}")
        self.grid = None
        self.hvi: HviSelector | None = None
        if spec.sampler in ("grid", "hvi") and runner.sampler is not None:
            raise UsageError(f"sampler: the hybrid strategy chooses the training settings itself with sampler = "
                             f"\"{spec.sampler}\"; give no sampler instance with it")
        if spec.sampler == "hvi":
            # the setting of highest expected hypervolume improvement, enqueued (dse.search.hvi); seeded by worker
            # and history as a named sampler is
            seed = derive_seed(spec.seed, 1000 * runner.worker, len(outer.trials))
            self.hvi = HviSelector(training_grid(spec), self._hvi_points, spec.directions, runner.reference,
                                   training_columns(spec), startup=spec.startup_trials or HVI_STARTUP)
            self.hvi_rng = np.random.default_rng(seed)
            self._hvi_index = {_key(g): i for i, g in enumerate(self.hvi.settings)}
            self._steps_memo: dict = {}  # per-step costs by predictor, for self._hvi_hw (hardware_metrics)
            self._hvi_hw: tuple[list[dict], HardwareArray | None] | None = None
            sampler = optuna.samplers.RandomSampler(seed=seed)
        elif spec.sampler == "grid":
            # the grid of training settings in a seeded order; each is proposed once, then the run ends
            self.grid = training_grid(spec)
            np.random.default_rng(spec.seed).shuffle(self.grid)
            sampler = optuna.samplers.RandomSampler(seed=spec.seed)
        else:
            # a named sampler is seeded by worker and history, so that a resumed run does not replay the first
            # run's samples (an injected instance keeps its own seed: dse.search.samplers)
            sampler = make_sampler(spec, derive_seed(spec.seed, 1000 * runner.worker, len(outer.trials)),
                                   runner.sampler)
        self.outer = optuna.load_study(storage=store, study_name=name, sampler=sampler)
        self.dists = {n: distribution(k) for n, k in spec.space.searched()}
        self.repeats = 0  # consecutive training settings that brought nothing new
        self.errors = 0  # how many of them in a row failed with an error
        self.failed = None  # the error the latest setting failed with
        self._hw_grid: tuple[list[dict], HardwareArray | None] | None = None
        self.entered = 0
        self.spent = False  # the run budget ([study] runs) holds no further setting
        self.grid_done = False  # sampler = "grid" or "hvi": every training setting of the grid has been searched
        self.requeued = False  # settings cut short by an earlier run queued again (once, at the first step)
        self.waited = False  # the last setting was turned away: settings claimed earlier held the run budget
        #: sampler = "grid" or "hvi": the strategy chooses each setting and queues it, marked with ``me``
        self.chooses = self.grid is not None or self.hvi is not None
        self.me = owner()
        self.lost = False  # the last trial found no queued setting left (another worker took this one's)

    # -- one step: one training setting ------------------------------------------------------------------
    def step(self) -> bool:
        import optuna
        from optuna.trial import TrialState

        from dse.search.study import optimize_one, recover_dead_workers

        recover_dead_workers(self.outer)
        if not self.requeued:
            self.requeued = True
            self._requeue_cut_settings()
        if self.spec.runs is not None:
            if self.runner.heartbeat:  # a setting another machine's dead worker held: failed (and retried) now,
                optuna.storages.fail_stale_trials(self.outer)  # not only when this worker trains next
            trials = self.outer.get_trials(deepcopy=False)
            used, busy = training_runs(self.spec, trials)
            # a setting queued for this worker that holds runs already (a retry of one cut short) needs only the
            # rest of its seeds: it may fit where a new setting does not
            # (a queued trial's parameters wait in its fixed_params; one queued to enter the rest of a sub-front,
            # finish_of, trains no new seed: it needs no room)
            held = max((self.spec.seeds_max if "finish_of" in t.user_attrs else
                        held_runs(trials, t.system_attrs.get("fixed_params", t.params)) for t in trials
                        if t.state == TrialState.WAITING and self._mine(t)),
                       default=0)
            if not fits(self.spec, used, held=held):
                self.spent = True
                return False  # no further setting fits the run budget
            if not fits(self.spec, used, busy, held=held):
                time.sleep(WAIT_S)  # settings being trained elsewhere may leave room: wait for them
                return True
        if self.chooses and not self._queued_for_this_worker():
            todo = self._next_setting()
            if todo is not None:
                # marked as this worker's: another worker that sees it waiting chooses and queues its own, so
                # that each pops one queued setting (the oldest first) and none is left to the outer sampler
                queue(self.outer, todo, by=self.me)
            elif not self.outer.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                self.grid_done = True
                return False  # every training setting of the grid has been searched
            # else the last settings wait in the queue, queued by another worker (on another machine, perhaps
            # dead; Optuna's heartbeat retry keeps the queued_by of the trial it retries): this trial takes one
        self.entered = 0
        self.waited = self.lost = False
        self.failed = None
        optimize_one(self.outer, self._setting)
        if self.lost:  # another worker took the queued setting first: nothing trained; choose again
            return True
        if self.waited:  # turned away by the run budget: not a fruitless setting; look again shortly
            time.sleep(WAIT_S)
            return True
        self.repeats = 0 if self.entered else self.repeats + 1
        self.errors = self.errors + 1 if self.failed else 0
        return self.repeats < MAX_REPEATS

    def queues(self) -> list:
        return [self.outer]

    def _queued_for_this_worker(self) -> bool:
        """Whether a training setting waits in the outer queue that this worker's next trial may take without
        choosing one: one this worker queued (its earlier choice, or a setting cut short that it queued
        again), or one queued by no one in particular (no ``queued_by``). A setting another worker queued is
        that worker's to take."""
        from optuna.trial import TrialState

        return any(self._mine(t) for t in self.outer.get_trials(deepcopy=False, states=(TrialState.WAITING,)))

    def _mine(self, t) -> bool:
        """Whether this worker may take the queued trial ``t``: one it queued, or one queued by no one."""
        return t.user_attrs.get("queued_by") in (None, self.me)

    def _next_setting(self) -> dict | None:
        """The training setting the strategy chooses itself (``sampler = "grid"``: the next of the seeded order;
        ``"hvi"``: :meth:`dse.search.hvi.HviSelector.next`), not one taken already (trained, being trained,
        queued, or failed with a reason of its own); None when every setting is taken.

        Choosing takes a moment (``hvi`` scores every setting, a few seconds the first time), and two workers
        choosing from the same trained settings choose alike: a choice that another worker queued or took
        meanwhile is made again on the new listing (up to :data:`CHOOSE_TRIES` times), instead of being queued
        and then turned away as being trained elsewhere."""
        trials = self.outer.get_trials(deepcopy=False)
        for _ in range(CHOOSE_TRIES):
            choice = self._choose(trials)
            trials = self.outer.get_trials(deepcopy=False)
            if choice is None or _key(choice) not in taken_settings(trials):
                break
        return choice

    def _choose(self, trials) -> dict | None:
        """:meth:`_next_setting` on one listing of the outer study's ``trials``."""
        from optuna.trial import TrialState

        from dse.search.study import load_points

        taken = taken_settings(trials)
        if self.grid is not None:
            return next((g for g in self.grid if _key(g) not in taken), None)
        index = self._hvi_index
        trained: dict[int, list[float]] = {}
        for t in trials:  # a setting's training objectives: what its outer trial was told (the same everywhere)
            i = index.get(_key(t.params))
            if t.state == TrialState.COMPLETE and i is not None and i not in trained:
                trained[i] = [t.values[c] for c in self.hvi.training]
        front = [p.values for p in load_points(self.runner.study, self.spec) if p.feasible]
        i = self.hvi.next(trained, {index[k] for k in taken if k in index},
                          np.array(front, dtype=np.float64).reshape(-1, len(self.spec.metrics)), self.hvi_rng)
        return None if i is None else self.hvi.settings[i]

    def _hvi_points(self, i: int) -> np.ndarray:
        """Setting ``i``'s feasible sub-front before training (:func:`points_before_training`), for
        ``sampler = "hvi"``, on one set of hardware candidates for every setting."""
        if self._hvi_hw is None:  # one set of candidates for every setting (a sample when the grid is larger)
            self._hvi_hw = self._candidates(self.spec.seed)
        return points_before_training(self.spec, self.hvi.settings[i], *self._hvi_hw, self.runner.reference,
                                      self._steps_memo)

    def _requeue_cut_settings(self) -> None:
        """Queue again, once, each setting whose training an interruption or a fault cut short in an earlier run
        (its outer trial failed with no reason of its own, marked ``cut_short``) and that no other trial has
        taken since: a resumed run finishes it from the seeds it reached (``held_runs``; their runs read from the
        cache), instead of leaving those runs counted with no point entered (a sampler seldom proposes one
        setting twice). A dead worker's setting is not marked: the dead-worker recovery (or Optuna's heartbeat)
        queues its retry.

        And each setting whose sub-front the trial budget cut (its latest complete outer trial marked
        ``points_left``: a run that reached its budget with part of the sub-front not entered), unless a trial
        of it waits or runs: queued with ``finish_of``, it is costed again from the cache and enters the rest,
        so that a run resumed with a larger budget holds the points one longer run would."""
        from optuna.trial import TrialState

        trials = self.outer.get_trials(deepcopy=False)
        taken = taken_settings(trials)
        for t in trials:
            if (t.state.name == "FAIL" and t.user_attrs.get("cut_short") and not t.user_attrs.get("fail_reason")
                    and _key(t.params) not in taken):
                queue(self.outer, t.params, by=self.me, retry_of=t.number)
                taken.add(_key(t.params))
        busy = {_key(t.system_attrs.get("fixed_params") or t.params) for t in trials
                if t.state in (TrialState.WAITING, TrialState.RUNNING)}
        for t in points_left(trials):
            if _key(t.params) not in busy:
                queue(self.outer, t.params, by=self.me, finish_of=t.number)

    def _settled_claims(self, number: int) -> list:
        """The outer study's trials once every earlier claim still running has all its training knobs: another
        worker's trial exists before the sampler has set its knobs (multivariate TPE takes milliseconds), and a
        claim compared before its knobs are set would let two workers train one setting. A claim whose worker
        died (on this machine) is not waited for; one whose worker is alive here, for at most CLAIM_LIVE_WAIT_S;
        one whose worker cannot be told from here (another machine's, or not recorded yet), CLAIM_WAIT_S."""
        from optuna.trial import TrialState

        from dse.search.runguard import owner_alive

        start = time.monotonic()
        while True:
            trials = self.outer.get_trials(deepcopy=False)
            alive = [owner_alive(t.user_attrs.get("worker", "")) for t in trials if t.state == TrialState.RUNNING
                     and t.number < number and len(t.params) < len(self.train_knobs)]
            waited = time.monotonic() - start
            if not any(a is True and waited <= CLAIM_LIVE_WAIT_S or a is None and waited <= CLAIM_WAIT_S
                       for a in alive):
                return trials
            time.sleep(0.01)

    def _setting(self, ot: optuna.Trial) -> list[float]:
        ot.set_user_attr("worker", owner())  # first: a worker waiting on this claim sees it is alive
        import optuna
        from optuna.trial import TrialState

        from dse.search.study import TrialFailed, is_fault, load_points, suggest
        from models.surrogate.evaluation import SurrogateDiverged

        spec, runner = self.spec, self.runner
        stored = self.outer._storage.get_trial(ot._trial_id)  # what the queue gave it: fixed_params, finish_of
        if self.chooses and "fixed_params" not in stored.system_attrs:
            # not popped from the queue: no queued setting was left for this trial (another worker took the one
            # this worker queued); the outer sampler would propose a setting here, which this strategy does not
            # search. Nothing is trained, and step() chooses again
            self.lost = True
            ot.set_user_attr("fail_reason", "the setting this worker queued was taken by another worker first; "
                             "it chose again")
            raise optuna.TrialPruned("queued setting taken by another worker")
        tparams = {n: suggest(ot, n, k) for n, k in self.train_knobs}
        same = [t for t in self._settled_claims(ot.number) if t.number != ot.number and t.params == tparams]
        done = [t for t in same if t.state == TrialState.COMPLETE]
        # queued to enter the points of its sub-front a trial budget cut (_requeue_cut_settings): trained
        # already, on purpose
        finish_of = stored.user_attrs.get("finish_of")
        # (the trial it finishes: its seeds are the ones to cost again, so that the rest of the same sub-front
        # is entered, from the cache, on no new run)
        finish = next((t for t in done if t.number == finish_of and "seeds" in t.user_attrs), None)
        if done and finish is None:  # trained already: tell the sampler its result again, train nothing
            ot.set_user_attr("same_as", done[0].number)
            return list(done[0].values)
        bad = [t for t in same if t.state == TrialState.FAIL and t.user_attrs.get("diverged")]
        if bad:  # diverged already: fails again with the same reason, trains nothing (a fruitless proposal)
            ot.set_user_attr("same_as", bad[0].number)
            ot.set_user_attr("diverged", True)
            ot.set_user_attr("fail_reason", bad[0].user_attrs["fail_reason"])
            raise TrialFailed(bad[0].user_attrs["fail_reason"])
        busy = [t for t in same if t.state == TrialState.RUNNING and t.number < ot.number]
        if busy:
            ot.set_user_attr("fail_reason", f"being trained by another worker (training trial {busy[0].number})")
            raise optuna.TrialPruned("claimed by another worker")
        if spec.runs is not None and finish is None:  # another worker may have claimed the room step() saw:
            trials = self.outer.get_trials(deepcopy=False)             # earlier claims first
            used, earlier = training_runs(spec, trials, before=(ot.datetime_start, ot.number))
            if not fits(spec, used, earlier, held=held_runs(trials, tparams)):
                self.waited = True
                ot.set_user_attr("budget_wait", True)
                ot.set_user_attr("fail_reason", f"the run budget ({spec.runs} surrogate runs) was held by settings "
                                 "claimed earlier")
                raise optuna.TrialPruned("run budget held by earlier claims")
        ot.set_user_attr("trained", True)
        try:
            base = training_config(spec, tparams)
            with self.guard.raising():  # a signal stops the training at once
                # trains (or reads the cache) for these training knobs, with the controls the metrics need, on
                # seeds_min seeds, and more while a point of the setting is on the front or within noise of it
                def at(n):
                    ot.set_user_attr("seeds", n)  # before training: a failed or cut setting still counts its runs
                    # (a finish costs the hardware candidates of the trial it finishes: a sample is seeded by it)
                    return self._costed(spec.seeded(base, n), ot.number if finish is None else finish.number)

                if finish is not None:
                    n = int(finish.user_attrs["seeds"])
                    (sur, gpf, keep, metrics, idx, best), _ = at(n)
                else:
                    (sur, gpf, keep, metrics, idx, best), n = race(
                        spec, at, lambda: load_points(runner.study, spec),
                        start_seeds(spec, held_runs(same, tparams)))  # (a retry: the seeds it reached)
        except (ValueError, TypeError, FloatingPointError, SurrogateDiverged) as e:
            ot.set_user_attr("fail_reason", f"{type(e).__name__}: {e}")
            if isinstance(e, SurrogateDiverged):
                ot.set_user_attr("diverged", True)  # not proposed for training again (above)
            raise
        except KeyboardInterrupt:
            _mark_cut(ot)  # failed with no reason: queued again first when the run resumes
            raise
        except Exception as e:
            if is_fault(e):  # a full disk, an unusable cache: the run stops and says so; the setting, failed
                self.guard.record_fault(e)  # without a reason, is queued again first when the run resumes
                _mark_cut(ot)
                raise
            self.failed = f"{type(e).__name__}: {e}"  # a bug or an unforeseen input: record it, the search
            ot.set_user_attr("fail_reason", self.failed)  # goes on
            ot.set_user_attr(INTERNAL_ERROR_ATTR, True)
            raise
        if sur is None:
            ot.set_user_attr("fail_reason", "no possible hardware point")
            raise TrialFailed("no possible hardware point")
        try:  # its points costed and entered: cut short here too, the setting is queued again on resume
            runner.refresh()
            entered = runner.tracker.keys
            if finish is not None:  # points pruned when other workers met the budget were never entered
                entered = {_key(t.params) for t in runner.study.get_trials(deepcopy=False)
                           if t.state != TrialState.PRUNED}
            fresh = [i for i in idx if _key({**tparams, **keep[i]}) not in entered]
            new = fresh[:runner.remaining()]
            self.entered = self._enter([{**tparams, **keep[i]} for i in new], sur, gpf, ot.number, n)
            if len(fresh) > self.entered:  # the trial budget held no more: a resumed run enters the rest
                ot.set_user_attr("points_left", len(fresh) - self.entered)
        except KeyboardInterrupt:
            _mark_cut(ot)
            raise
        except Exception as e:
            if is_fault(e):
                self.guard.record_fault(e)
                _mark_cut(ot)
            else:
                self.failed = f"{type(e).__name__}: {e}"
                ot.set_user_attr("fail_reason", self.failed)
            raise
        ot.set_user_attr("entered_points", self.entered)  # 0: trained, but no point of it is in the study
        if not self.entered:
            ot.set_user_attr("not_entered", "the budget was reached before its points could enter" if fresh else
                             "every point of its sub-front was in the study already")
        return best

    def _costed(self, cfg, setting: int):
        """The setting ``cfg`` (on its seeds) trained and costed on the hardware candidates: (its evaluation,
        GP fraction, the candidates, their metrics, the indices of the points it would enter), and those
        points as :class:`~dse.search.pareto.Point` for the replication's test."""
        from dse.search.study import candidate

        spec = self.spec
        sur = evaluate(cfg, metrics=spec.needed_metrics)
        gpf = sur["metrics"]["gp_fraction"]
        keep, arr = self._candidates(spec.seed + setting)
        if arr is None:
            return (None, gpf, keep, {}, np.array([], int), []), []
        hm = hardware_metrics(cfg, arr, gpf)
        # the training metrics (accuracy figures, gp_fraction) hold for every hardware point
        metrics = {**{k: np.full(len(keep), float(v)) for k, v in sur["metrics"].items() if k not in hm}, **hm}
        idx, best = sub_front(spec, metrics, spec.front_size, self.runner.reference)
        feasible = bool(violation(spec, {m: metrics[m][idx] for m in metrics}).max() <= 0) if len(idx) else False
        record = registry.seed_record(sur["surrogate"])
        points = [candidate({"values": [metrics[m][i] for m in spec.metrics],
                             "user_attrs": {"metrics": {}, "per_seed": record},
                             "constraints": [0.0 if feasible else 1.0]}, {}, number=-1 - k)
                  for k, i in enumerate(idx)]
        return (sur, gpf, keep, metrics, idx, best), points

    def _candidates(self, seed: int) -> tuple[list[dict], HardwareArray | None]:
        """The possible hardware points to search (knob values, and their accelerators as one array); the
        whole grid is built once per run, sampled points per setting."""
        if self._hw_grid is not None:
            return self._hw_grid
        keep, hws = [], []
        for c in hardware_candidates(self.spec, max_points=self.spec.inner_points, seed=seed):
            h = hardware_of(self.spec, c)
            if h is not None:
                hws.append(h)
                keep.append(c)
        out = (keep, HardwareArray.from_list(hws) if hws else None)
        if _whole_grid(self.spec, self.spec.inner_points):
            self._hw_grid = out
        return out

    def _enter(self, points: list[dict], sur: dict, gpf: float, setting: int, seeds: int) -> int:
        """Enter ``points`` (knob values) in the main study in one batch; returns how many were admitted."""
        if not points:
            return 0
        import optuna
        from optuna.trial import TrialState

        from dse.search.study import CONSTRAINTS_ATTR, trial_record

        spec, runner = self.spec, self.runner
        st, sid = runner.study._storage, runner.study._study_id
        training = training_metrics(sur["surrogate"], gpf)
        templates = []
        for params in points:  # every point costed first, so that its trial is running for milliseconds
            cfg = spec.seeded(spec.configuration(params), seeds)
            out = evaluate_hardware(cfg, gpf)  # what `dse evaluate` runs for it: exports reproduce exactly
            rec = trial_record(spec, cfg, {"metrics": {**out["metrics"], **training}, "models": out["models"],
                                           "surrogate": sur["surrogate"]})
            templates.append((optuna.trial.create_trial(
                state=TrialState.RUNNING, params=params, distributions={n: self.dists[n] for n in params},
                user_attrs={**rec["user_attrs"], "worker": owner(), "training_trial": setting},
                system_attrs={CONSTRAINTS_ATTR: rec["constraints"]}), rec["values"]))
        made = []
        admitted = 0
        with self.guard.holding():  # a signal now stops the run after the batch: no point left RUNNING
            for template, values in templates:
                tid = st.create_new_trial(sid, template_trial=template)
                if runner.heartbeat:
                    st.record_heartbeat(tid)  # a worker dying now leaves a trial other machines can retry
                made.append((tid, st.get_trial_number_from_id(tid), values))
            runner.refresh()
            for tid, number, values in made:
                try:
                    if runner.tracker.counting_before(number) < runner.budget:
                        st.set_trial_state_values(tid, TrialState.COMPLETE, values)
                        admitted += 1
                    else:
                        st.set_trial_user_attr(tid, "fail_reason", "budget reached by other workers")
                        st.set_trial_state_values(tid, TrialState.PRUNED)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass  # taken for a dead worker's by another process (and queued again): it counts once
        return admitted

    def figures(self) -> dict:
        trials = self.outer.get_trials(deepcopy=False)
        out = {"surrogate_runs": len({_key(t.params) for t in trials if t.user_attrs.get("trained")}),
               "training_runs": training_runs(self.spec, trials)[0]}
        if self.spent:
            out["stop_reason"] = budget_spent(self.spec, out["training_runs"])
        elif self.grid_done:
            out["stop_reason"] = GRID_DONE
        elif self.repeats >= MAX_REPEATS and self.errors >= self.repeats:  # not an exhausted space: an error
            out["stop_reason"] = (f"the hybrid search stopped: its last {self.errors} training settings failed "
                                  f"with an error (the last: {self.failed}); their training trials keep the reason")
        return out


GRID_DONE = ("the hybrid search ended: it has searched every training setting of the grid (sampler = \"grid\" or "
             "\"hvi\"), each once")


def points_before_training(spec, tparams: dict, keep: list[dict], arr: HardwareArray | None,
                           reference: list[float], steps_memo: dict | None = None) -> np.ndarray:
    """The feasible sub-front of the training setting ``tparams`` before it is trained (``sampler = "hvi"``):
    the hardware candidates ``keep`` (their accelerators ``arr``) costed at the GP fraction the setting requests
    (the surrogate's realized fraction, what the setting is costed at once trained, differs by the rounding of
    whole steps), thinned as :func:`sub_front` thins in the box of ``reference``, the training objectives left
    at 0 (the selector fills them in); the study's constraints are on hardware metrics (:meth:`Hybrid.validate`).
    Objective values (points, objectives); none when no candidate is possible or feasible, or the setting cannot
    be costed (its training will say why)."""
    empty = np.zeros((0, len(spec.metrics)))
    if arr is None:
        return empty
    try:
        cfg = training_config(spec, tparams)
        gpf = 0.0 if cfg.training.scheme == "bp" else float(cfg.training.gp_fraction)
        hm = hardware_metrics(cfg, arr, gpf, steps_memo=steps_memo)
    except (ValueError, TypeError, FloatingPointError):  # an impossible combination of knobs, say
        return empty
    metrics = {**{m: np.zeros(len(keep)) for m in spec.metrics if m not in hm}, **hm}
    idx, _ = sub_front(spec, metrics, spec.front_size, reference)
    if not len(idx) or violation(spec, {m: metrics[m][idx] for m in metrics}).max() > 0:
        return empty
    return np.column_stack([metrics[m][idx] for m in spec.metrics])


def training_grid(spec) -> list[dict]:
    """Every training setting of the space (the hybrid's grid), in the space's order."""
    knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("training.")]
    return [dict(zip([n for n, _ in knobs], combo)) for combo in itertools.product(*[k.values() for _, k in knobs])]


def training_columns(spec) -> list[int]:
    """The indices of the study's objectives that are training metrics (one value per training setting)."""
    hw = set(registry.per_hardware())
    return [k for k, m in enumerate(spec.metrics) if m not in hw]


def taken_settings(trials) -> set:
    """The training settings a grid walk has taken: trained or being trained (complete, running, waiting), or
    failed with a reason of their own (a diverged or impossible setting). Not one whose training a fault or a
    dead worker cut short (failed with no reason: trained again), nor a pruned proposal (another worker's claim,
    or a wait for the run budget), which took nothing; nor one queued and failed unrun when a run ended
    ("interrupted: ...")."""
    from optuna.trial import TrialState

    # a queued trial's setting is its fixed_params (WAITING: no params yet; RUNNING: perhaps some of them)
    return {_key(t.system_attrs.get("fixed_params") or t.params) for t in trials
            if t.state in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING)
            or (t.state == TrialState.FAIL and t.user_attrs.get("fail_reason")
                and not t.user_attrs["fail_reason"].startswith(INTERRUPTED))}


def points_left(outer_trials) -> list:
    """The outer trials whose sub-front the trial budget cut and no later trial of their setting finished: each
    setting's latest complete trained trial, when it is marked ``points_left``."""
    latest = {_key(t.params): t for t in outer_trials if t.state.name == "COMPLETE" and t.user_attrs.get("trained")}
    return [t for t in latest.values() if t.user_attrs.get("points_left")]


def _mark_cut(ot) -> None:
    """Mark a setting's outer trial as cut short by an interruption or a fault (the storage may be the fault)."""
    try:
        ot.set_user_attr("cut_short", True)
    except Exception:  # the storage itself: the setting is then not queued again, only re-proposed by chance
        pass


def budget_spent(spec, used: int) -> str:
    """The stop reason of a run its run budget ended, ``used`` runs held."""
    return (f"the hybrid search ended at its run budget: {used} of {spec.runs} surrogate runs (study.runs) are "
            f"held by its settings, and a further setting may need {spec.seeds_max}")


def fits(spec, used: int, busy: int = 0, held: int = 0) -> bool:
    """Whether one more setting fits the run budget beside ``used`` runs held and ``busy`` settings being
    trained, each of which (and the new one) may take ``seeds_max``; ``held``: the runs the setting holds
    already (a retry of one cut short: counted in ``used``, found in the cache), which it does not need again."""
    return used + busy * spec.seeds_max + max(spec.seeds_max - held, 0) <= spec.runs


def _held_by_setting(outer_trials) -> dict[tuple, int]:
    """Setting (its key) -> the surrogate runs it holds: the most seeds any of its finished trained trials
    recorded (``seeds`` is recorded before each evaluation, so a setting that failed or was cut short counts
    the seeds it reached; its retry finds them in the cache and counts once with it)."""
    held: dict[tuple, int] = {}
    for t in outer_trials:
        if t.state.is_finished() and t.user_attrs.get("trained") and "seeds" in t.user_attrs:
            k = _key(t.params)
            held[k] = max(held.get(k, 0), int(t.user_attrs["seeds"]))
    return held


def held_runs(outer_trials, params: dict) -> int:
    """The surrogate runs the training setting ``params`` holds already (as :func:`training_runs` counts)."""
    return _held_by_setting(outer_trials).get(_key(params), 0)


def training_runs(spec, outer_trials, before: tuple | None = None) -> tuple[int, int]:
    """The run budget's bookkeeping over the outer study's trials: the surrogate runs the trained settings
    hold, and how many settings are being trained.

    A setting (its parameters) holds the most seeds any of its finished trials recorded (``seeds`` is recorded
    before each evaluation, so a setting that failed or was cut short counts the seeds it reached; its retry
    finds them in the cache and counts once with it). Every running trial may take ``seeds_max``; with
    ``before`` = (start time, number) of a trial, only the running trials claimed earlier count."""
    from optuna.trial import TrialState

    busy = sum(before is None or (t.datetime_start or datetime.max, t.number) < before
               for t in outer_trials if t.state == TrialState.RUNNING)
    return sum(_held_by_setting(outer_trials).values()), busy


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))
