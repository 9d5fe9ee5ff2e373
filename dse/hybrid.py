"""The hybrid co-search: Optuna samples training knobs; the cheap hardware model searches hardware.

A joint sampler spends a training-surrogate run (seconds) on every trial to learn about hardware it could
have enumerated for microseconds. The hybrid strategy splits the two:

1. an *outer* Optuna study (stored beside the main one as ``<name>.training``, same sampler and seed) samples
   only the training knobs;
2. the surrogate runs once for them (cached);
3. the hardware space is searched by the vectorized model (:func:`dse.evaluate.hardware_metrics`):
   exhaustively when its grid has at most ``inner_points`` points, otherwise on ``inner_points`` random
   points (seeded); impossible hardware is skipped;
4. the feasible hardware sub-front (non-dominated in the study's objectives, the training metrics held
   fixed) is thinned to at most ``front_size`` points (evenly along the first hardware objective) and
   enters the main study as ordinary trials -- enqueued with their parameters and evaluated by the same
   objective as a joint search (the surrogate is a cache hit), so ``pareto``, ``plot`` and ``export``
   work unchanged;
5. the outer study is told, per objective, the best value the sub-front reached (what these training
   knobs make possible).

The budget counts main-study trials, as for a joint search; ``dse status`` and the benchmark count
surrogate runs as distinct training settings.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from typing import Any, Callable

import moocore
import numpy as np
import optuna

from accel import Hardware, HardwareArray
from dse.evaluate import HARDWARE_METRICS, evaluate, hardware_metrics
from dse.space import Bundle, Choice, Range
from dse.runguard import derive_seed, guarded, queue
from dse.study import (RunResult, _objective, _sampler, _storage, _suggest, budget_state, check_cache,
                       failed_count, hv_reference, load_points, mask_url, open_study, progress_callback,
                       recover_dead_workers, storage_url)
from dse.pareto import front, hypervolume
from dse.studyfile import StudySpec
from models.surrogate import SurrogateConfig

__all__ = ["run_hybrid", "hardware_candidates"]

#: training settings in a row that bring nothing new before the run ends (the space is exhausted)
_MAX_REPEATS = 50



def _knob_values(knob) -> list | None:
    """All values of a finite knob (None when it is continuous)."""
    if isinstance(knob, (Choice, Bundle)):
        return knob.values()
    if isinstance(knob, Range):
        try:
            return knob.values()
        except Exception:  # noqa: BLE001 - continuous
            return None
    return None


def hardware_candidates(spec: StudySpec, *, max_points: int, seed: int) -> list[dict[str, Any]]:
    """Hardware knob assignments (parameter name -> value) to search: the whole grid if it is finite and
    has at most ``max_points`` points, else ``max_points`` random points."""
    knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("hardware.")]
    rng = np.random.default_rng(seed)
    grids = [_knob_values(k) for _, k in knobs]
    if all(g is not None for g in grids) and math.prod(len(g) for g in grids) <= max_points:
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


def _hardware(spec: StudySpec, params: dict) -> Hardware | None:
    """The candidate accelerator for hardware knob values ``params`` (None if it is impossible)."""
    hw = {**spec.base.hardware.to_dict(), **spec.space.split(params, section="hardware").get("hardware", {})}
    try:
        return Hardware.from_dict(hw)
    except (ValueError, TypeError):
        return None


def _thin(idx: np.ndarray, key: np.ndarray, k: int) -> np.ndarray:
    if len(idx) <= k:
        return idx
    order = idx[np.argsort(key[idx], kind="stable")]
    picks = np.unique(np.round(np.linspace(0, len(order) - 1, k)).astype(int))
    return order[picks]


def run_hybrid(spec: StudySpec, *, storage: str | None = None, trials: int | None = None,
               timeout: float | None = None, progress: Callable[[dict], None] | None = None,
               inner_points: int | None = None, front_size: int | None = None,
               stop: Callable[[optuna.Study], bool] | None = None) -> RunResult:
    """Run (or resume) ``spec`` with the hybrid strategy until ``trials`` main-study trials are done
    (or ``stop(main_study)`` returns True, checked before each training setting)."""
    budget = trials or spec.trials
    inner_points = inner_points or spec.inner_points
    front_size = front_size or spec.front_size
    url = storage_url(spec, storage)
    check_cache()
    main = open_study(spec, url, create=True)  # its trials are all enqueued: its sampler is never asked
    recover_dead_workers(main)
    train_knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("training.")]
    outer_store = _storage(url)
    outer_name = f"{spec.name}.training"
    outer = optuna.create_study(storage=outer_store, study_name=outer_name, directions=spec.directions,
                                load_if_exists=True)
    for t in outer.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        outer.tell(t.number, state=optuna.trial.TrialState.FAIL)  # left by an interrupted run
    # seeded by the history's length, so that a resumed run does not replay the first run's samples
    if spec.sampler == "grid":
        # the grid of training settings, in a seeded order; each is asked once (enqueued), then the run ends
        grid = [dict(zip([n for n, _ in train_knobs], combo))
                for combo in itertools.product(*[k.values() for _, k in train_knobs])]
        np.random.default_rng(spec.seed).shuffle(grid)
        outer = optuna.load_study(storage=outer_store, study_name=outer_name,
                                  sampler=optuna.samplers.RandomSampler(seed=spec.seed))
    else:
        grid = None
        outer = optuna.load_study(storage=outer_store, study_name=outer_name,
                                  sampler=_sampler(spec, derive_seed(spec.seed, len(outer.trials))))
    ref = hv_reference(spec)
    objective = _objective(spec, budget)
    maxi = np.array([d == "maximize" for d in spec.directions])
    hw_metrics = [m for m in spec.metrics if m in HARDWARE_METRICS]
    interrupted = False
    t0 = time.monotonic()
    entered = {_key(t.params) for t in main.get_trials(deepcopy=False)}
    repeats = 0  # consecutive training settings that brought nothing new

    callback = progress_callback(spec, budget, ref, progress)
    try:
        with guarded(url) as guard:
            guard.watch(main)
            while budget_state(main)["done"] < budget:
                guard.check()
                if timeout is not None and time.monotonic() - t0 > timeout:
                    break
                if stop is not None and stop(main):
                    break
                if grid is not None:
                    if len(outer.trials) >= len(grid):
                        repeats = _MAX_REPEATS  # every training setting of the grid has been searched
                        break
                    outer.enqueue_trial(grid[len(outer.trials)])
                ot = outer.ask()
                tparams = {n: _suggest(ot, n, k) for n, k in train_knobs}
                training = {**spec.base.training.to_dict(),
                            **spec.space.split(tparams, section="training").get("training", {})}
                try:
                    cfg = replace(spec.base, training=SurrogateConfig.from_dict(training), seeds=spec.seeds)
                    with guard.raising():  # a signal stops the training at once
                        sur = evaluate(cfg)  # trains (or reads the cache) once for these training knobs
                except (ValueError, TypeError, FloatingPointError) as e:
                    ot.set_user_attr("fail_reason", f"{type(e).__name__}: {e}")
                    outer.tell(ot, state=optuna.trial.TrialState.FAIL)
                    repeats += 1
                    if repeats >= _MAX_REPEATS:
                        break
                    continue
                gpf = sur["metrics"]["gp_fraction"]
                cands = hardware_candidates(spec, max_points=inner_points, seed=spec.seed + len(outer.trials))
                hws, keep = [], []
                for c in cands:
                    h = _hardware(spec, c)
                    if h is not None:
                        hws.append(h)
                        keep.append(c)
                if not hws:
                    ot.set_user_attr("fail_reason", "no possible hardware point")
                    outer.tell(ot, state=optuna.trial.TrialState.FAIL)
                    repeats += 1
                    if repeats >= _MAX_REPEATS:
                        break
                    continue
                arr = HardwareArray.from_list(hws)
                hm = hardware_metrics(cfg, arr, gpf)
                # the training metrics (accuracy figures, gp_fraction) hold for every hardware point
                metrics = {**{k: np.full(len(hws), float(v)) for k, v in sur["metrics"].items()
                              if k not in hm}, **hm}
                viol = np.zeros(len(hws))  # summed constraint violation per hardware point (0: feasible)
                for c in spec.constraints:
                    viol += np.maximum(0.0, c.violation(metrics[c.metric]))
                idx = np.flatnonzero(viol <= 0)
                if len(idx):
                    vals = np.column_stack([metrics[m][idx] for m in spec.metrics])
                    nd = moocore.is_nondominated(vals, maximise=maxi.tolist())
                    idx = idx[nd]
                    key = metrics[hw_metrics[0]] if hw_metrics else np.zeros(len(hws))
                    idx = _thin(idx, key, front_size)
                else:  # nothing feasible: enter the least-violating point, so the study records why
                    idx = np.array([int(np.argmin(viol))])
                best = [float(np.max(metrics[m][idx]) if mx else np.min(metrics[m][idx]))
                        for m, mx in zip(spec.metrics, maxi)]
                # a setting proposed again: enter only hardware points not in the study yet
                new = [i for i in idx if _key({**tparams, **keep[i]}) not in entered]
                new = new[:budget - budget_state(main)["done"]]
                for i in new:
                    queue(main, {**tparams, **keep[i]})  # failed if the run stops before running it
                    entered.add(_key({**tparams, **keep[i]}))
                if new:
                    main.optimize(objective, n_trials=len(new), catch=(Exception,), callbacks=[callback],
                                  gc_after_trial=False)
                    guard.check()
                outer.tell(ot, best)
                repeats = 0 if new else repeats + 1
                if repeats >= _MAX_REPEATS:  # the sampler keeps proposing settings whose sub-fronts are all entered
                    break
    except KeyboardInterrupt:
        interrupted = True
        for t in outer.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            outer.tell(t.number, state=optuna.trial.TrialState.FAIL)
    pts = load_points(main, spec)
    return RunResult(finished=budget_state(main)["done"], budget=budget, complete=len(pts),
                     front=len(front(pts, spec.directions)), hypervolume=hypervolume(pts, spec.directions, ref),
                     interrupted=interrupted, storage=mask_url(url), failed=failed_count(main),
                     surrogate_runs=len(outer.trials), exhausted=repeats >= _MAX_REPEATS)


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))
