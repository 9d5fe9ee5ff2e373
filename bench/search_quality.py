"""Search quality against the true front: every method's hypervolume as a share of the exact optimum.

    python bench/search_quality.py --truth [--json] [--study studies/quickstart.toml] [--seeds 0 1 2]
        [--surrogate-seeds N] [--budgets 5 10 25 50 100 200] [--methods ...] [--max-trials N] [--jobs 2]
        [--workers W] [--front-size F] [--out bench/out/search_quality-<study>]

``--truth`` trains every training setting of the study's space on FIXED surrogate seeds, the same for every
setting and every method (``--surrogate-seeds N``: the study's first N seeds; default its ``seeds_min``, one
seed for the quick start; stated in the output as ``surrogate_seeds``), through the normal cached surrogate
(``--jobs`` processes for the cold runs), costs the whole hardware grid (the hybrid's candidates: the grid, or
``inner_points`` samples) for each with the vectorized model (``dse.evaluation.evaluator.hardware_metrics``),
and takes the exact feasible Pareto front and its hypervolume at the study's fixed reference point
(``dse.search.study.hv_reference``). It prints the front's size and hypervolume, the training and the hardware
time separately, and the hardware model's designs per second (a design: one configuration x one model, and one
configuration x one layer).

Then every method searches the same table: each trial's metrics are looked up in it instead of being computed
again (a few points are checked against ``evaluate_hardware`` first, to the last digit), on Optuna's in-memory
storage, with the same samplers (``dse.search.samplers.SAMPLERS``) and the hybrid's own selection of each
setting's sub-front (``dse.search.strategies.hybrid.sub_front``). A *surrogate run* is a distinct training
setting trained; a method's hypervolume at B runs is that of every feasible point it found before its (B+1)-th
setting. Joint methods: Optuna samples every knob (a converged sampler re-proposes trained settings, so at
most ``--max-trials`` trials, by default the study's trial budget, or ``JOINT_TRIALS`` when the study has a
run budget, ``[study] runs``, whose trials then bound nothing). Hybrid: the outer sampler proposes training
settings, each setting's sub-front enters (``front_size``), the outer study is told its best values;
``--workers W`` asks W settings before telling them (as W workers do). ``--seeds``: the search (sampler)
seeds each method runs with, 0..9 by default; mean, sample std, and a one-sided Mann-Whitney U test (scipy)
of each hybrid against the best joint method per budget.

Wall time per method is modelled, not measured end to end: its own sampler and bookkeeping time (measured
here) + the cold training time of each setting it trained (measured in the truth run, one process each) +
the hardware model's time (measured: per joint trial one ``evaluate_hardware``; per hybrid setting the
vectorized grid and one ``evaluate_hardware`` per entered point). Storage costs (SQLite, journal) are not
in it.

The *ceiling*: what choosing B settings could reach at best on this table, by two greedy selections (each
step adds the setting whose sub-front adds the most hypervolume): ``oracle`` knows every setting's trained
accuracy (an upper reference: no search knows it before training), ``expected`` knows every setting's
*expected* accuracy, the additive least-squares fit over all settings of each training objective on one-hot
knob levels, and sees the trained value of what it chose. The gap between them is the luck of the fixed
surrogate seeds: the exact front rests on the settings whose one-seed accuracy happened to be high.

``--json`` prints one JSON object: ``{"truth_hv": ..., "truth_front": ..., "methods": {name: {"5": mean
share over the search seeds, ...}}, "ceiling": {"oracle": {...}, "expected": {...}}, ...}``. CSV of the
curves (per run count) and a plot go to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable

import moocore
import numpy as np

BUDGETS = (5, 10, 25, 50, 100, 200)

#: a joint method's trials at most when the study's budget is in training runs ([study] runs: its trial budget
#: is then set out of the way): the quick start's trial budget before it had a run budget, so the joint rows
#: stay comparable with the published ones
JOINT_TRIALS = 320


def log(*a) -> None:
    print(*a, file=sys.stderr, flush=True)


# -- the truth -------------------------------------------------------------------------------------------------
def training_settings(spec) -> list[dict]:
    knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("training.")]
    return [dict(zip([n for n, _ in knobs], combo)) for combo in itertools.product(*[k.values() for _, k in knobs])]


def train_one(spec, tparams: dict) -> dict:
    """Train (or read from the cache) one training setting; its training metrics and wall seconds."""
    from dse.evaluation import metrics as registry
    from dse.evaluation.evaluator import evaluate
    from dse.search.strategies.hybrid import training_config

    t0 = time.perf_counter()
    try:
        out = evaluate(training_config(spec, tparams), metrics=spec.needed_metrics)
    except (ValueError, TypeError, FloatingPointError) as e:
        return {"params": tparams, "error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
    hw = set(registry.per_hardware())
    return {"params": tparams, "metrics": {k: float(v) for k, v in out["metrics"].items() if k not in hw},
            "gp_fraction": float(out["metrics"]["gp_fraction"]), "seconds": time.perf_counter() - t0,
            "cached": bool(out["surrogate"] and out["surrogate"].get("cached")),
            # the training runs' own wall time as stored when they were trained (plain BP's included)
            "compute_s": float(out["surrogate"]["compute_s"]) if out["surrogate"] else 0.0}


class Truth:
    """Every (training setting, hardware point) of a study's space: objective values, feasibility."""

    def __init__(self, spec, jobs: int = 2) -> None:
        from joblib import Parallel, delayed

        from accel import HardwareArray
        from dse.evaluation.evaluator import hardware_metrics
        from dse.search.pareto import hypervolume_of
        from dse.search.strategies.hybrid import (
            hardware_candidates,
            hardware_of,
            sub_front,
            training_config,
            violation,
        )
        from dse.search.study import hv_reference

        self.spec = spec
        self.settings = training_settings(spec)
        self.train_knobs = list(self.settings[0])
        cands = hardware_candidates(spec, max_points=spec.inner_points, seed=spec.seed)
        self.hw_knobs = list(cands[0])
        self.hw_points, hws = [], []
        for c in cands:
            h = hardware_of(spec, c)
            if h is not None:
                self.hw_points.append(c)
                hws.append(h)
        arr = self.arr = HardwareArray.from_list(hws)
        S, H, K = len(self.settings), len(hws), len(spec.metrics)
        # cold training: the first setting alone (it also trains plain BP, which every setting shares), the rest
        # on `jobs` processes
        t0 = time.perf_counter()
        first = train_one(spec, self.settings[0])
        rest = Parallel(n_jobs=jobs, backend="loky")(delayed(train_one)(spec, p) for p in self.settings[1:])
        self.trained = [first, *rest]
        self.train_wall = time.perf_counter() - t0
        # a setting's cold training cost, from the stored run times: its scheme's runs (plain BP, shared by
        # every setting, is counted once per search: bp_s)
        self.bp_s = _plain_bp_seconds(spec, self.settings[0])
        self.train_seconds = np.array([max(0.0, r.get("compute_s", 0.0) - self.bp_s) for r in self.trained])
        self.cold = sum(not r.get("cached", False) for r in self.trained if "error" not in r)
        self.ref = hv_reference(spec)  # the study's: the hybrid thins each sub-front in its box
        t0, c0 = time.perf_counter(), time.process_time()
        self.values = np.full((S, H, K), np.nan)
        self.feasible = np.zeros((S, H), dtype=bool)
        self.possible = np.zeros(S, dtype=bool)
        self.fronts: list[tuple[np.ndarray, list[float]]] = []  # the hybrid's sub-front of each setting
        self.gp_fraction = np.full(S, np.nan)
        for i, r in enumerate(self.trained):
            if "error" in r:
                self.fronts.append((np.array([], dtype=int), [math.nan] * K))
                continue
            hm = hardware_metrics(training_config(spec, r["params"]), arr, r["gp_fraction"])
            metrics = {**{k: np.full(H, v) for k, v in r["metrics"].items() if k not in hm}, **hm}
            self.values[i] = np.column_stack([metrics[m] for m in spec.metrics])
            self.feasible[i] = violation(spec, metrics) <= 0
            self.possible[i] = True
            self.gp_fraction[i] = r["gp_fraction"]
            self.fronts.append(sub_front(spec, metrics, spec.front_size, self.ref))
        self.hw_seconds, self.hw_cpu = time.perf_counter() - t0, time.process_time() - c0
        self.hw_designs = int(self.possible.sum()) * H
        self.models = len(spec.base.workload.models)
        self.layers = _layers(spec)
        # the exact front: the feasible non-dominated points over every setting
        import moocore

        self.directions = spec.directions
        self.maxi = [d == "maximize" for d in spec.directions]
        pts = self.values[self.feasible]
        nd = moocore.is_nondominated(pts, maximise=self.maxi) if len(pts) else np.zeros(0, dtype=bool)
        self.front = pts[nd]
        self.hv = hypervolume_of(self.front, self.directions, self.ref)
        self.setting_index = {tuple(p[n] for n in self.train_knobs): i for i, p in enumerate(self.settings)}
        self.hw_index = {tuple(c[n] for n in self.hw_knobs): j for j, c in enumerate(self.hw_points)}
        self.eval_hw_s, self.grid_s = self._time_hardware(arr)

    def _time_hardware(self, arr) -> tuple[float, float]:
        """Seconds of one ``evaluate_hardware`` (a joint trial's or an entered point's hardware cost) and of one
        vectorized grid (a hybrid setting's), on the settings' first possible one."""
        from dse.evaluation.evaluator import evaluate_hardware, hardware_metrics
        from dse.search.strategies.hybrid import training_config

        i = int(np.flatnonzero(self.possible)[0])
        gpf = float(self.gp_fraction[i])
        rng = np.random.default_rng(0)
        cfgs = [self.spec.configuration({**self.settings[i], **self.hw_points[j]})
                for j in rng.choice(len(self.hw_points), 20)]
        t0 = time.perf_counter()
        for c in cfgs:
            evaluate_hardware(c, gpf)
        one = (time.perf_counter() - t0) / len(cfgs)
        t0 = time.perf_counter()
        hardware_metrics(training_config(self.spec, self.settings[i]), arr, gpf)
        return one, time.perf_counter() - t0

    def entered(self, i: int) -> np.ndarray:
        """Setting ``i``'s feasible sub-front once trained (what the hybrid enters of it): objective values."""
        idx = self.fronts[i][0]
        idx = idx[self.feasible[i, idx]] if self.possible[i] and len(idx) else np.array([], dtype=int)
        return self.values[i, idx]

    def check(self, n: int = 5, seed: int = 0) -> float:
        """Largest relative difference between the table and ``dse.evaluate``'s path (``evaluate_hardware``
        plus the surrogate's training metrics) on ``n`` random points."""
        from dataclasses import replace

        from dse.evaluation.evaluator import evaluate

        rng = np.random.default_rng(seed)
        worst = 0.0
        ok = np.flatnonzero(self.possible)
        for _ in range(n):
            i, j = int(rng.choice(ok)), int(rng.integers(len(self.hw_points)))
            cfg = replace(self.spec.configuration({**self.settings[i], **self.hw_points[j]}), seeds=self.spec.seeds)
            m = evaluate(cfg, metrics=self.spec.needed_metrics)["metrics"]  # cached surrogate
            got = np.array([m[k] for k in self.spec.metrics])
            worst = max(worst, float(np.max(np.abs(got - self.values[i, j]) / np.maximum(np.abs(got), 1e-300))))
        return worst


def _training_columns(t: Truth) -> list[int]:
    """The objectives that are training metrics (one value per setting, whatever the hardware point)."""
    from dse.search.strategies.hybrid import training_columns

    return training_columns(t.spec)


def _nondominated(t: Truth, x: np.ndarray) -> np.ndarray:
    """The rows of ``x`` (objective values, the study's directions) that no other row dominates."""
    return x[moocore.is_nondominated(x, maximise=t.maxi)] if len(x) else x


def training_values(t: Truth) -> np.ndarray:
    """Every setting's trained training objectives, shape (settings, training objectives): they do not vary
    over the hardware points."""
    return t.values[:, 0][:, _training_columns(t)]


def expected_training_values(t: Truth) -> np.ndarray:
    """Each setting's training objectives as the additive least-squares fit over every possible setting: a
    constant plus one effect per level of each training knob (one-hot levels). The residual is what the
    fixed surrogate seed adds to a setting (no knob explains it). Shape (settings, training objectives)."""
    from dse.search.hvi import one_hot

    X = one_hot(t.settings)
    ok = t.possible
    w, *_ = np.linalg.lstsq(X[ok], training_values(t)[ok], rcond=None)
    return X @ w


def residual_std(t: Truth, exp: np.ndarray) -> np.ndarray:
    """The sample std, per training objective, of the possible settings' trained values about ``exp``
    (:func:`expected_training_values`): what the fixed surrogate seeds add to a setting."""
    resid = training_values(t)[t.possible] - exp[t.possible]
    return resid.std(axis=0, ddof=1) if len(resid) > 1 else np.full(exp.shape[1], np.nan)


def ceiling(t: Truth, budgets: list[int]) -> dict:
    """Greedy selections of settings on the table (each step adds the setting whose feasible sub-front adds
    the most hypervolume; ties to the lower index), as a share of the truth at each budget: ``oracle`` picks
    by the trained values, ``expected`` by the expected training values (:func:`expected_training_values`)
    while seeing the trained values of what it picked. Also the fit's residual sample std per training
    objective (``residual_std``) and the settings' spread (``spread_std``)."""
    from dse.search.pareto import hypervolume_of

    cols = _training_columns(t)
    exp = expected_training_values(t)
    pts = [t.entered(i) for i in range(len(t.settings))]

    def nd(x):
        return _nondominated(t, x)

    def greedy(guess) -> dict:
        front, chosen, out = np.zeros((0, len(t.directions))), [], {}
        alive = [i for i in range(len(pts)) if len(pts[i])]
        base = 0.0
        for step in range(1, max(budgets) + 1):
            gains = []
            for i in alive:
                q = pts[i].copy()
                q[:, cols] = guess[i]
                gains.append(hypervolume_of(nd(np.vstack([front, q])), t.directions, t.ref) - base)
            # a setting that adds nothing now adds nothing later (the front only grows): drop it
            keep = [(g, i) for g, i in zip(gains, alive) if g > 0]
            if keep:
                g, i = max(keep, key=lambda x: (x[0], -x[1]))
            else:  # nothing promises more: a search with budget left trains the others anyway, in index order
                i = next((j for j in range(len(pts)) if len(pts[j]) and j not in chosen), None)
            if i is not None:
                chosen.append(i)
                front = nd(np.vstack([front, pts[i]]))
                base = hypervolume_of(front, t.directions, t.ref)
                alive = [j for _, j in keep if j != i]
            if step in budgets:
                out[str(step)] = round(base / t.hv, 4)
        return out

    trained = np.array([p[0, cols] if len(p) else np.full(len(cols), np.nan) for p in pts])
    resid_std = residual_std(t, exp)
    return {"oracle": greedy(trained), "expected": greedy(exp),
            "residual_std": [round(float(x), 3) for x in resid_std],
            "spread_std": [round(float(x), 3) for x in trained[t.possible].std(axis=0, ddof=1)],
            "training_objectives": [t.spec.metrics[k] for k in cols],
            "exclusive": exclusive(t, pts, trained, exp, resid_std)}


def exclusive(t: Truth, pts: list[np.ndarray], trained: np.ndarray, exp: np.ndarray, resid_std: np.ndarray,
              top: int = 5) -> list[dict]:
    """The settings that hold the most hypervolume *alone*: each one's exclusive share (the truth's hypervolume
    over every setting's sub-front, less the same without that setting, as a share of the truth), largest
    first. A search that never trains the first one holds at most 1 - its share. With each: its knobs, its
    trained training objectives, their expected values (:func:`expected_training_values`), how many residual
    standard deviations apart (negative: luckier than expected, for a minimised objective) and its rank by
    expected value (1 the best)."""
    from dse.search.pareto import hypervolume_of

    def nd(x):
        return _nondominated(t, x)

    have = [i for i in range(len(pts)) if len(pts[i])]
    if not have:
        return []
    whole_front = nd(np.vstack([pts[i] for i in have]))
    whole = hypervolume_of(whole_front, t.directions, t.ref)
    on = [i for i in have if any((whole_front[:, None, :] == pts[i][None]).all(axis=2).any(axis=1))]
    shares = []
    for i in on:
        rest = [pts[j] for j in have if j != i]
        hv = hypervolume_of(nd(np.vstack(rest)), t.directions, t.ref) if rest else 0.0
        shares.append(((whole - hv) / t.hv, i))
    shares.sort(key=lambda x: (-x[0], x[1]))
    cols = _training_columns(t)
    sign = -1.0 if cols and t.maxi[cols[0]] else 1.0
    rank = np.argsort(np.argsort(sign * exp[:, 0], kind="stable"), kind="stable") + 1 if len(exp) else []
    out = []
    for share, i in shares[:top]:
        out.append({"setting": {k.removeprefix("training."): v for k, v in t.settings[i].items()},
                    "share": round(float(share), 5), "trained": [round(float(x), 3) for x in trained[i]],
                    "expected": [round(float(x), 3) for x in exp[i]],
                    "residual_sds": [round(float(x), 2) for x in (trained[i] - exp[i]) / resid_std],
                    "rank_by_expected": int(rank[i]), "index": int(i)})
    return out


def _plain_bp_seconds(spec, tparams: dict) -> float:
    """Plain BP's stored training time on the study's seeds (cached: trained with the first setting)."""
    from dataclasses import replace

    from dse.evaluation.evaluator import evaluate
    from dse.search.strategies.hybrid import training_config

    cfg = training_config(spec, tparams)
    cfg = replace(cfg, training=cfg.training.replace(scheme="bp"))
    return float(evaluate(cfg, metrics=spec.needed_metrics)["surrogate"]["compute_s"])


def _layers(spec) -> int:
    """Layers with compute (GEMM ops) summed over the workload's models."""
    from dse.evaluation.workloads import model_key, training_ops

    w = spec.base.workload
    hw = spec.base.hardware
    return sum(len(np.unique(training_ops(model_key(w, m), w.batch, w.optimizer, hw.word_bytes).layer))
               for m in w.models)


# -- the methods, on the table ----------------------------------------------------------------------------------
def make_sampler(spec, method: str, seed: int):
    """An Optuna sampler from the registry (``dse.search.samplers.SAMPLERS``) for a sampler name, or a variant:
    ``<name>-sN`` (``startup_trials = N``: TPE's and auto's random startup trials), ``<name>-pN``
    (``population = N``: NSGA-II/III's, and auto's once it switches)."""
    from dse.search.samplers import SAMPLERS

    name, _, var = method.partition("-")
    if var[:1] == "s":
        spec = spec.with_overrides(startup_trials=int(var[1:]))
    elif var[:1] == "p":
        spec = spec.with_overrides(population=int(var[1:]))
    elif var:
        raise SystemExit(f"--methods: unknown variant {method!r} (<sampler>-sN or <sampler>-pN)")
    return SAMPLERS[name](spec, seed)


def _suggest_all(trial, knobs) -> dict:
    from dse.search.study import suggest

    return {n: suggest(trial, n, k) for n, k in knobs}


def run_joint(t: Truth, sampler_name: str, seed: int, max_runs: int, max_trials: int) -> dict:
    """A joint search on the table: (setting, hardware point) per trial, in order, and its own seconds."""
    import optuna

    from dse.search.study import CONSTRAINTS_ATTR

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = t.spec
    study = optuna.create_study(directions=spec.directions, sampler=make_sampler(spec, sampler_name, seed))
    knobs = spec.space.searched()
    seen: set[int] = set()
    trace, t0 = [], time.perf_counter()
    for _ in range(max_trials):
        trial = study.ask()
        p = _suggest_all(trial, knobs)
        i = t.setting_index[tuple(p[n] for n in t.train_knobs)]
        j = t.hw_index.get(tuple(p[n] for n in t.hw_knobs))
        if i not in seen and len(seen) >= max_runs:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            break
        seen.add(i)
        if j is None or not t.possible[i]:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            trace.append((i, -1, time.perf_counter() - t0))
            continue
        study._storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR, [0.0 if t.feasible[i, j] else 1.0])
        study.tell(trial, list(map(float, t.values[i, j])))
        trace.append((i, j, time.perf_counter() - t0))
    return {"trace": trace}


def run_hybrid(t: Truth, sampler_name: str, seed: int, max_runs: int, workers: int = 1) -> dict:
    """The hybrid on the table: the outer sampler proposes settings (``workers`` asked before they are told);
    a new setting's sub-front enters; a repeated one is told its earlier values; one claimed by another
    worker of the same batch is pruned. Ends after ``MAX_REPEATS`` settings in a row brought nothing new, as
    the strategy does."""
    import optuna

    from dse.search.strategies.hybrid import MAX_REPEATS

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    spec = t.spec
    if sampler_name.partition("-")[0] == "hvi":  # the strategy chooses each setting itself
        return _run_hvi(t, sampler_name, seed, max_runs, workers)
    knobs = [(n, k) for n, k in spec.space.searched() if n.startswith("training.")]
    done: dict[int, list[float]] = {}
    trace, t0, repeats = [], time.perf_counter(), 0
    if sampler_name == "grid":  # the strategy walks the grid in a seeded order itself
        order = np.random.default_rng(seed).permutation(len(t.settings))[:max_runs]
        for i in order:
            trace.extend((int(i), int(j), time.perf_counter() - t0) for j in t.fronts[i][0])
        return {"trace": trace}
    outer = optuna.create_study(directions=spec.directions, sampler=make_sampler(spec, sampler_name, seed))
    while len(done) < max_runs and repeats < MAX_REPEATS:
        # every worker of the batch samples its setting while the others' are still running (Optuna samples
        # a trial's knobs when they are first suggested, so all are suggested before any is told)
        batch = [(ot, _suggest_all(ot, knobs)) for ot in [outer.ask() for _ in range(workers)]]
        claimed: set[int] = set()
        for ot, p in batch:
            i = t.setting_index[tuple(p[n] for n in t.train_knobs)]
            if i in done:
                outer.tell(ot, done[i])
                repeats += 1
            elif i in claimed or len(done) >= max_runs:
                outer.tell(ot, state=optuna.trial.TrialState.PRUNED)
                repeats += 1
            elif not t.possible[i]:
                outer.tell(ot, state=optuna.trial.TrialState.FAIL)
                claimed.add(i)
            else:
                claimed.add(i)
                idx, best = t.fronts[i]
                done[i] = best
                outer.tell(ot, best)
                trace.extend((i, int(j), time.perf_counter() - t0) for j in idx)
                repeats = 0
        if len(done) == int(t.possible.sum()):
            break
    return {"trace": trace}


def _run_hvi(t: Truth, method: str, seed: int, max_runs: int, workers: int, *,
             configure: Callable | None = None, points: Callable | None = None) -> dict:
    """The hybrid's ``hvi`` outer selection on the table: the strategy's own :class:`dse.search.hvi.HviSelector`,
    scoring each setting as the strategy does before training it (``points_before_training``: at the GP
    fraction it requests); once chosen, the setting's trained sub-front enters from the table (``hvi-sN``:
    ``N`` random settings first). ``workers`` settings are chosen before any is trained (each worker sees the
    others' as taken). ``configure(selector)``, if given, changes the selector before it runs (its accuracy
    model: ``bench/hvi_variants.py``); ``points(i)``, setting ``i``'s scored sub-front, if already costed."""
    from dse.search.hvi import HVI_STARTUP, HviSelector
    from dse.search.strategies.hybrid import points_before_training

    _, _, var = method.partition("-")
    startup = int(var[1:]) if var[:1] == "s" else HVI_STARTUP
    if var and var[:1] != "s":
        raise SystemExit(f"--methods: unknown variant hybrid:{method!r} (hvi-sN)")
    cols = _training_columns(t)
    memo: dict = {}

    def costed(i):
        return points_before_training(t.spec, t.settings[i], t.hw_points, t.arr, t.ref, memo)

    sel = HviSelector(t.settings, points or costed, t.directions, t.ref, cols, startup=startup)
    if configure is not None:
        configure(sel)
    rng = np.random.default_rng(seed)
    trained: dict[int, list[float]] = {}
    failed: set[int] = set()
    front = np.zeros((0, len(t.directions)))
    trace, t0 = [], time.perf_counter()
    while len(trained) < max_runs:
        batch: list[int] = []
        for _ in range(workers):
            i = sel.next(trained, failed | set(batch), front, rng)
            if i is not None:
                batch.append(i)
        if not batch:
            break
        for i in batch:
            if len(trained) >= max_runs:
                break
            if not t.possible[i]:
                failed.add(i)
                continue
            trained[i] = [float(t.values[i, 0, c]) for c in cols]
            front = np.vstack([front, t.entered(i)])
            trace.extend((i, int(j), time.perf_counter() - t0) for j in t.fronts[i][0])
    return {"trace": trace}


def curve(t: Truth, trace: list, hybrid: bool) -> list[dict]:
    """Hypervolume share after each surrogate run (rows: runs, trials, share, own seconds, modelled seconds)."""
    import moocore

    from dse.search.pareto import hypervolume_of

    rows, settings = [], []
    front = np.zeros((0, len(t.directions)))
    trials = 0
    entered = 0

    def row(own):
        runs = len(settings)
        train = float(t.train_seconds[settings].sum()) + t.bp_s
        hw = (runs * t.grid_s + entered * t.eval_hw_s) if hybrid else trials * t.eval_hw_s
        return {"runs": runs, "trials": trials, "share": hypervolume_of(front, t.directions, t.ref) / t.hv,
                "own_s": own, "wall_s": own + train + hw, "setting": settings[-1]}

    def flush():
        nonlocal front, pending
        if pending:
            cand = np.vstack([front, t.values[tuple(np.array(pending).T)]])
            front = cand[moocore.is_nondominated(cand, maximise=t.maxi)]
            pending = []

    last_own, pending = 0.0, []
    for i, j, own in trace:
        if not settings or i not in settings:
            if settings:
                flush()
                rows.append(row(last_own))
            settings.append(i)
        trials += 1
        entered += hybrid
        last_own = own
        if j >= 0 and t.feasible[i, j]:
            pending.append((i, j))
    if settings:
        flush()
        rows.append(row(last_own))
    return rows


def one_method(t: Truth, method: str, seed: int, max_runs: int, max_trials: int, workers: int) -> list[dict]:
    kind, _, sampler = method.partition(":")
    if kind == "hybrid":
        out = run_hybrid(t, sampler, seed, max_runs, workers)
    else:
        out = run_joint(t, kind, seed, max_runs, max_trials)
    rows = curve(t, out["trace"], kind == "hybrid")
    for r in rows:
        r.update(method=method, seed=seed)
    return rows


def at_budget(df, budget: int):
    """Per (method, seed): the share with at most ``budget`` surrogate runs, and whether the run got there."""
    g = df[df.runs <= budget].groupby(["method", "seed"], sort=False)
    share = g.share.max()
    reached = df.groupby(["method", "seed"], sort=False).runs.max() >= budget
    return share, reached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="studies/quickstart.toml")
    ap.add_argument("--truth", action="store_true", help="train every setting and cost every hardware point")
    ap.add_argument("--json", action="store_true", help="print one JSON object (tables go to stderr)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(10)),
                    help="search (sampler) seeds each method runs with (default 0..9)")
    ap.add_argument("--surrogate-seeds", type=int, default=None,
                    help="fixed surrogate seeds 0..N-1 for every setting and method (default: the study's "
                         "seeds_min)")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument("--methods", nargs="+", default=None,
                    help="joint sampler names and hybrid:<sampler> (variants tpe-sN, nsga2-pN, auto-sN); default: "
                         "random tpe nsga2 auto, and the hybrid with each and with grid; gp in both when torch is "
                         "installed")
    ap.add_argument("--max-trials", type=int, default=None,
                    help="a joint method's trials at most (default: the study's trial budget, [study] trials; "
                         f"{JOINT_TRIALS} for a study with a run budget, [study] runs)")
    ap.add_argument("--workers", type=int, default=1, help="hybrid: settings asked before they are told")
    ap.add_argument("--front-size", type=int, default=None,
                    help="hybrid: sub-front points entered per setting (default: the study's front_size)")
    ap.add_argument("--jobs", type=int, default=2, help="processes for the cold training and the methods")
    ap.add_argument("--out", default=None, help="output stem (CSV, PNG); default bench/out/search_quality-<study>")
    a = ap.parse_args()
    if not a.truth:
        raise SystemExit("bench/search_quality.py: give --truth (every method is measured as a share of the "
                         "exact front, which --truth computes)")
    from dse.errors import UsageError
    from dse.search.studyfile import load_study

    try:
        spec = load_study(a.study)
        if len(set(a.seeds)) != len(a.seeds) or min(a.seeds) < 0:
            raise UsageError(f"--seeds: distinct search seeds >= 0; got {' '.join(map(str, a.seeds))}")
        if a.surrogate_seeds is not None:
            if not 1 <= a.surrogate_seeds <= 20:
                raise UsageError(f"--surrogate-seeds: 1 to 20 fixed surrogate seeds; got {a.surrogate_seeds}")
            spec = spec.with_overrides(seeds=a.surrogate_seeds)
        spec = spec.with_overrides(seeds_max=spec.seeds)  # fixed seeds: no replication
        spec = spec.with_overrides(front_size=a.front_size)
    except UsageError as e:
        print(f"search_quality: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    # the methods, checked before any work: dse's own gp sampler says whether it can run here (torch)
    from dse.search.samplers import SAMPLERS

    joint, outer = ["random", "tpe", "nsga2", "auto"], ["random", "tpe", "nsga2", "auto", "grid", "hvi"]
    try:
        SAMPLERS["gp"](spec, 0)
        gp_error = None
        joint.append("gp")
        outer.append("gp")
    except UsageError as e:
        gp_error = str(e)
        if not a.methods:
            log(f"  GP sampler skipped: {gp_error}")
    methods = a.methods or joint + [f"hybrid:{s}" for s in outer]
    if gp_error and any(m.rpartition(":")[2].partition("-")[0] == "gp" for m in methods):
        print(f"search_quality: error: --methods: {gp_error}", file=sys.stderr)
        raise SystemExit(2)
    if any(m.rpartition(":")[2].partition("-")[0] == "hvi" for m in methods):
        try:  # where the strategy refuses hvi (an adaptive schedule, a constraint on a training metric, ...)
            spec.with_overrides(strategy="hybrid", sampler="hvi")
        except UsageError as e:
            if a.methods:
                print(f"search_quality: error: --methods hybrid:hvi: {e}", file=sys.stderr)
                raise SystemExit(2) from None
            log(f"  hybrid:hvi skipped: {e}")
            methods = [m for m in methods if m.rpartition(":")[2].partition("-")[0] != "hvi"]
    import pandas as pd
    from joblib import Parallel, delayed

    load0 = os.getloadavg()
    t = Truth(spec, jobs=a.jobs)
    load1 = os.getloadavg()
    err = t.check()
    H = len(t.hw_points)
    truth = {
        "study": spec.name, "surrogate_seeds": list(range(spec.first_seed, spec.first_seed + spec.seeds)),
        "settings": len(t.settings),
        "settings_failed": int((~t.possible).sum()), "hardware_points": H, "truth_front": int(len(t.front)),
        "truth_hv": t.hv, "reference": dict(zip(spec.metrics, t.ref)),
        "training_s": round(t.train_wall, 1), "training_cold_runs": t.cold, "training_jobs": a.jobs,
        "training_compute_s": round(float(t.train_seconds.sum()) + t.bp_s, 1),
        "hardware_s": round(t.hw_seconds, 2),
        "hardware_cpu_s": round(t.hw_cpu, 2),
        "designs_per_s": t.hw_designs * t.models / t.hw_seconds,
        "layer_designs_per_s": t.hw_designs * t.layers / t.hw_seconds,
        "designs_per_cpu_s": t.hw_designs * t.models / t.hw_cpu,
        "layer_designs_per_cpu_s": t.hw_designs * t.layers / t.hw_cpu,
        "load_during_training": [round(x, 2) for x in load1],
        "table_vs_evaluate_max_rel_diff": err,
    }
    log(f"truth of {spec.name}: {len(t.settings)} training settings x {H} hardware points on surrogate seeds "
        f"{truth['surrogate_seeds']}; exact feasible front {len(t.front)} points, hypervolume {t.hv:.6g}")
    log(f"  training {t.train_wall:.1f} s wall ({t.cold} settings trained cold, {a.jobs} processes; the runs' "
        f"stored training time {truth['training_compute_s']:.0f} s; load "
        f"{load0[0]:.1f} before, {load1[0]:.1f}/{load1[1]:.1f} 1/5-min after); hardware {t.hw_seconds:.2f} s "
        f"wall, {t.hw_cpu:.2f} s CPU for {t.hw_designs} configurations: {truth['designs_per_s']:.3g} designs/s "
        f"(configuration x model; {truth['designs_per_cpu_s']:.3g} per CPU second), "
        f"{truth['layer_designs_per_s']:.3g} layer designs/s ({t.layers} layers; "
        f"{truth['layer_designs_per_cpu_s']:.3g} per CPU second); table vs evaluate_hardware: "
        f"max relative difference {err:.1e}")
    if err > 1e-9:
        raise SystemExit(f"search_quality: the table differs from evaluate_hardware by {err:.2e}")
    t2 = time.perf_counter()
    ceil = ceiling(t, [b for b in a.budgets if b <= len(t.settings)])
    log(f"  ceiling ({time.perf_counter() - t2:.0f} s): greedy choice of settings by their trained values "
        + ", ".join(f"{b} runs {v:.3f}" for b, v in ceil["oracle"].items())
        + "; by their expected values (additive fit of " + ", ".join(ceil["training_objectives"])
        + f": residual std {ceil['residual_std']} against the settings' spread {ceil['spread_std']}) "
        + ", ".join(f"{b} runs {v:.3f}" for b, v in ceil["expected"].items()))
    if ceil["exclusive"]:
        e = ceil["exclusive"][0]
        log(f"  the setting that holds the most alone: {e['share']:.4f} of the truth ({e['setting']}; trained "
            f"{e['trained']}, expected {e['expected']}: {e['residual_sds']} residual std, rank "
            f"{e['rank_by_expected']} of {len(t.settings)} by expected value); a search that never trains it "
            f"holds at most {1 - e['share']:.4f}; the next: "
            + ", ".join(f"{x['share']:.4f}" for x in ceil["exclusive"][1:]))
    max_runs = max(a.budgets)
    max_trials = a.max_trials or (spec.trials if spec.runs is None else JOINT_TRIALS)
    t1 = time.perf_counter()
    jobs = [(m, s) for m in methods for s in a.seeds]
    parts = Parallel(n_jobs=a.jobs, backend="loky")(
        delayed(one_method)(t, m, s, max_runs, max_trials, a.workers) for m, s in jobs)
    df = pd.DataFrame([r for p in parts for r in p])
    log(f"  methods: joint at most {max_trials} trials; {len(jobs)} searches in {time.perf_counter() - t1:.0f} s "
        f"({a.jobs} processes; load {os.getloadavg()[0]:.1f})")
    out = Path(a.out or f"bench/out/search_quality-{spec.name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    from scipy.stats import mannwhitneyu

    table, pvals, result, most = [], {}, {}, {}
    for b in a.budgets:
        share, reached = at_budget(df, b)
        means = share.groupby(level=0, sort=False).mean()
        joint_means = means[[m for m in means.index if not m.startswith("hybrid")]]
        best_joint = joint_means.idxmax() if len(joint_means) else None
        for m in methods:
            s = share.get(m)
            if s is None:
                continue
            result.setdefault(m, {})[str(b)] = round(float(s.mean()), 4)
            if ceil["exclusive"]:  # the seeds that trained the setting holding the most alone, within b runs
                top = ceil["exclusive"][0]["index"]
                d = df[(df.method == m) & (df.runs <= b)]
                got = d.groupby("seed").setting.apply(lambda x: bool((x == top).any()))
                most.setdefault(m, {})[str(b)] = round(float(got.reindex(a.seeds, fill_value=False).mean()), 2)
            row = {"method": m, "budget": b, "mean": s.mean(), "std": s.std(ddof=1) if len(s) > 1 else 0.0,
                   "min": s.min(), "reached": int(reached[m].sum())}
            if m.startswith("hybrid") and best_joint is not None:
                p = mannwhitneyu(s.to_numpy(), share[best_joint].to_numpy(), alternative="greater").pvalue
                row.update(best_joint=best_joint, p_greater=p)
                pvals.setdefault(m, {})[str(b)] = {"vs": best_joint, "p": float(p)}
            table.append(row)
    tab = pd.DataFrame(table)
    tab.to_csv(out.with_name(out.name + "-table.csv"), index=False)
    wide = tab.assign(cell=[f"{r.mean:.3f} ± {r.std:.3f}" + ("" if r.reached == len(a.seeds) else f" ({r.reached})")
                            for r in tab.itertuples()]).pivot(index="method", columns="budget", values="cell")
    log(f"\nhypervolume as a share of the truth ({t.hv:.6g}), mean ± sample std over {len(a.seeds)} search "
        f"seeds ({' '.join(map(str, a.seeds))}), by surrogate runs (in brackets: seeds that spent that many runs, "
        "if not all)")
    log(wide.reindex(methods).to_string())
    if pvals:
        log("\none-sided Mann-Whitney U, hybrid > best joint method at that budget (p):")
        for m, d in pvals.items():
            log(f"  {m:18s} " + "  ".join(f"{b}: {v['p']:.3g} vs {v['vs']}" for b, v in d.items()))
    if most:
        log("\nshare of the seeds that trained the setting holding the most alone (above), by surrogate runs:")
        for m, d in most.items():
            log(f"  {m:18s} " + "  ".join(f"{b}: {v:.1f}" for b, v in d.items()))
    plot(df, out, spec.name, t.hv)
    log(f"wrote {out.with_suffix('.csv')}, {out.with_name(out.name + '-table.csv')}, {out.with_suffix('.png')}")
    if a.json:
        print(json.dumps({**truth, "search_seeds": list(a.seeds), "methods": result, "p_hybrid_greater": pvals,
                          "ceiling": ceil, "trained_most_exclusive": most}, default=float))


def plot(df, out: Path, name: str, hv: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from dse.figures.charts import method_colours  # one colour per method in every figure

    sns.set_theme(style="whitegrid")
    names = list(dict.fromkeys(df.method))
    joint = [m for m in names if not m.startswith("hybrid")]
    hybrid = [m for m in names if m.startswith("hybrid")]
    pal = method_colours(joint)  # the hybrids: shades of green, one each
    pal.update(dict(zip(hybrid, sns.color_palette("crest", len(hybrid)).as_hex())))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    sns.lineplot(data=df, x="runs", y="share", hue="method", errorbar=("pi", 100), ax=axes[0], palette=pal)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("surrogate runs (distinct training settings trained)")
    axes[0].set_ylabel(f"hypervolume / true optimum ({hv:.4g})")
    for m, g in df.groupby("method", sort=False):
        med = g.groupby("runs")[["wall_s", "share"]].median()
        axes[1].plot(med.wall_s, med.share, label=m, color=pal[m])
    axes[1].set_xscale("log")
    axes[1].set_xlabel("modelled wall seconds, one process (median over seeds)")
    axes[1].legend(fontsize=7)
    axes[0].get_legend().remove()
    fig.suptitle(f"{name}: search quality against the true front (band: min-max over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
