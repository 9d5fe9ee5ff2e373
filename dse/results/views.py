"""Views of a study for a researcher. One design point in depth: a trial's configuration, every metric, per
model, per layer and phase.

:func:`trial_detail` gathers what ``dse show`` prints; :func:`layer_table` costs a configuration's training
step op by op (the view SCALE-Sim, Timeloop and ZigZag users are used to). Each op is costed alone with the
same GEMM and vector models the schedule uses (:func:`accel.gemm.gemm_cost`, :func:`accel.vector.vector_cost`,
without leakage); the step's total in :mod:`accel.schedule` also accounts for what no single op sees --
activation-stash stalls and DRAM traffic, overlap, the predictor, leakage over the step's wall time -- so the
per-op times need not add up to the step's.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from accel import gemm_cost
from accel.gemm import op_im2col
from accel.schedule import ENERGY_KEYS
from accel.vector import vector_cost
from dse.config.configuration import Configuration
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate_hardware
from dse.evaluation.workloads import model_key, technology, training_ops
from dse.search.identity import with_current_files

__all__ = ["unit_of", "natural_direction", "label_of", "metric_names", "hv_source", "trial_detail", "layer_table",
           "frozen_trial_detail", "find_trial", "status_summary", "recent_line", "CONVERGED_GAIN", "MIN_SETTINGS",
           "front_rows", "metric_order", "trial_rows", "data_frame", "table_columns", "display_table", "left_out_note",
           "table_headers", "proxy_note", "pareto_rows"]

_GEMM = ("fwd", "igrad", "wgrad")


def unit_of(metric: str) -> str:
    """A metric's unit, a proxy task's figure's its metric's (``fashion_accuracy``: %); empty for a name that is
    not a metric."""
    from dse.evaluation import metrics as registry

    m = registry.like(metric)
    return m.unit if m is not None else ""


def natural_direction(metric: str) -> str:
    from dse.evaluation import metrics as registry

    m = registry.like(metric)  # a proxy task's figure goes its metric's way
    if m is None:
        raise UsageError(f"unknown metric {metric!r}; allowed: {', '.join(registry.REGISTRY)}")
    return m.direction


def metric_names() -> list[str]:
    """Every metric a study records, in table order."""
    from dse.evaluation import metrics as registry

    return registry.names()


def hv_source(spec, metric: str) -> str:
    """Where a study's hypervolume reference value for ``metric`` comes from."""
    from dse.evaluation import metrics as registry

    if metric in spec.hv_reference:
        return "the study file's [hypervolume]"
    m = registry.get(metric)
    if m.hv_reference is not None:
        return "the metric's default"
    factor = {2.0: "twice"}.get(m.hv_baseline_factor, f"{m.hv_baseline_factor:g} x")
    return f"{factor} the reference accelerator's plain-BP figure"


def label_of(metric: str, direction: str | None = None) -> str:
    """``metric [unit]`` and, with a direction, which way is better."""
    from dse.evaluation import metrics as registry

    if metric in registry.REGISTRY:
        return registry.get(metric).label(direction)
    arrow = {"maximize": " (higher is better)", "minimize": " (lower is better)"}.get(direction or "", "")
    return f"{metric} []{arrow}"


def layer_table(cfg: Configuration, model: str) -> list[dict]:
    """Per op of one plain back-propagation step of ``model`` on ``cfg.hardware``: shape, cycles, stalls,
    utilization, time, DRAM bytes and energy by component (pJ)."""
    if model not in cfg.workload.models:
        raise UsageError(f"--model: {model!r} is not in this configuration's workload "
                         f"({', '.join(cfg.workload.models)})")
    hw = cfg.hardware
    tech = technology(cfg.technology)
    ops = training_ops(model_key(cfg.workload, model), cfg.workload.batch, cfg.workload.optimizer, hw.word_bytes)
    recs = ops.to_records()
    g = np.isin(ops.phase, _GEMM)
    rows: list[dict] = []
    # convolutions fetch their raw input (im2col), as the step's schedule costs them
    gc = gemm_cost(ops.M[g], ops.K[g], ops.N[g], ops.repeat[g], hw=hw, tech=tech, include_leakage=False,
                   im2col=op_im2col(ops, g)) if g.any() else None
    vc = vector_cost(ops.vec_elems[~g], hw=hw, tech=tech, include_leakage=False) if (~g).any() else None
    gi = vi = 0
    clock = hw.clock_ghz * 1e9
    for i, r in enumerate(recs):
        row = {k: r[k] for k in ("layer", "name", "kind", "phase", "M", "K", "N", "repeat", "macs", "vec_elems")}
        if g[i]:
            c, j = gc, gi
            gi += 1
            row["utilization"] = float(c.utilization[j])
            dram = float(c.dram_read_bytes[j] + c.dram_write_bytes[j])
        else:
            c, j = vc, vi
            vi += 1
            row["utilization"] = None  # a vector op does not use the array
            dram = float(c.dram_bytes[j])
        row.update({
            "cycles": float(c.total_cycles[j]),
            "compute_cycles": float(c.compute_cycles[j]),
            "stall_cycles": float(c.stall_cycles[j]),
            "time_us": float(c.total_cycles[j]) / clock * 1e6,
            "dram_bytes": dram,
        })
        for k in ENERGY_KEYS:
            if k != "leakage":
                row[f"energy_pj_{k}"] = float(c.energy_pj[k][j]) if k in c.energy_pj else 0.0
        rows.append(row)
    return rows


def find_trial(study, number: int):
    """The stored trial ``number`` (UsageError naming the range when there is none). One trial is read, not
    the whole study (seconds at 10^4 trials); the listing only when there is no such trial."""
    st = study._storage
    if 0 <= number < 2**31:  # (a trial number is a 32-bit integer in PostgreSQL; past it, no such trial)
        try:
            return st.get_trial(st.get_trial_id_from_study_id_trial_number(study._study_id, int(number)))
        except KeyError:  # no such trial
            pass
    trials = study.get_trials(deepcopy=False)
    by = {t.number: t for t in trials}
    if number not in by:
        hi = max(by) if by else -1
        raise UsageError(f"TRIAL: the study has no trial {number} (trials 0-{hi})" if by
                         else "TRIAL: the study has no trials yet; run it (dse run)")
    return by[number]


def trial_detail(study, spec, number: int, *, model: str | None = None, layers: bool = False) -> dict:
    """Everything stored and derivable about trial ``number`` of ``study``: :func:`frozen_trial_detail` of it."""
    return frozen_trial_detail(find_trial(study, number), spec, model=model, layers=layers)


#: what an unfinished trial with no recorded reason is doing, by state (a failed or pruned one says why it ended)
UNFINISHED = {"running": "running, no result yet (or its worker died: the next run recovers it)",
              "waiting": "queued: no worker has started it yet"}


def frozen_trial_detail(t, spec, *, model: str | None = None, layers: bool = False) -> dict:
    """Everything stored and derivable about one trial (an Optuna ``FrozenTrial``, read before its storage
    was closed: the breakdown needs no storage): state, knobs (requested), metrics, the per-model breakdown
    recomputed from its configuration, and, with ``layers``, :func:`layer_table` per model."""
    number = t.number
    state = t.state.name.lower()
    out: dict = {"trial": number, "state": state, "params": dict(t.params)}
    if state != "complete" or "config" not in t.user_attrs:
        out["reason"] = t.user_attrs.get("fail_reason", UNFINISHED.get(state, "no reason recorded"))
        return out
    # (the files the study file names now: a study moved with its files reads them where they are)
    cfg = Configuration.from_dict(with_current_files(t.user_attrs["config"], spec),
                                  where=f"trial {number} config")
    metrics = dict(t.user_attrs.get("metrics", {}))
    out["metrics"] = metrics
    # each constraint of the study (its file now, as pareto and export judge it): its violation (<= 0: met), or
    # None for one on a metric the trial did not record
    out["constraints"] = {str(c): (float(c.violation(metrics[c.metric])) if c.metric in metrics else None)
                          for c in spec.constraints}
    from dse.search.study import point_of

    p = point_of(t, spec)  # feasibility as pareto and export judge it (the stored verdict without the metrics)
    out["feasible"] = p.feasible if p is not None else all(v <= 0 for v in t.constraints.values())
    out["surrogate"] = dict(t.user_attrs.get("surrogate", {}))
    out["config"] = cfg.to_dict()
    models = list(cfg.workload.models)
    if model is not None:
        if model not in models:
            raise UsageError(f"--model: {model!r} is not in trial {number}'s workload ({', '.join(models)})")
        models = [model]
    hwres = evaluate_hardware(replace(cfg, workload=replace(cfg.workload, models=tuple(models))),
                              float(metrics.get("gp_fraction", 0.0)))
    out["models"] = hwres["models"]
    if layers:
        out["layers"] = {m: layer_table(cfg, m) for m in models}
    return out


def metric_order(spec) -> list[str]:
    """The study's objectives first, then every other metric."""
    first = spec.metrics
    return first + [m for m in metric_names() if m not in first]


def _knob_columns(spec) -> list[tuple[str, object]]:
    """(column, bundle or None) per searched knob: a bundle's fields are columns of their own
    (``hardware.pred_rows`` ...), not the label Optuna stores."""
    from dse.config.space import Bundle

    out = []
    for name, knob in spec.space.searched():
        if isinstance(knob, Bundle):
            section = name.split(".", 1)[0]
            out += [(f"{section}.{f}", (name, knob)) for f in dict.fromkeys(k for t in knob.tables for k, _ in t)]
        else:
            out.append((name, None))
    return out


def task_columns(pts) -> list[str]:
    """The proxy tasks' own figures the points recorded (several tasks: ``<task>_accuracy_drop`` ...,
    :func:`dse.evaluation.metrics.task_figures`), in their recorded order."""
    from dse.evaluation import metrics as registry

    return list(dict.fromkeys(k for p in pts for k in registry.extra_figures(p.metrics)))


def front_rows(spec, pts) -> list[dict]:
    """One row per point: trial number, every metric (objectives first; an accuracy metric's standard error
    ``<metric>_se`` right after it and the number of surrogate ``seeds`` after the metrics, when a trial
    recorded them; then each proxy task's figures, several tasks), every searched knob (a bundle as its fields).
    A value a trial does not have is None."""
    order = metric_order(spec)
    tasks = task_columns(pts)
    se = {m for m in order if any(f"{m}_se" in p.metrics for p in pts)}
    seeds = any("seeds" in p.metrics for p in pts)
    knobs = _knob_columns(spec)
    rows = []
    for p in pts:
        r = {"trial": p.number}
        for m in order:
            r[m] = p.metrics.get(m)
            if m in se:
                r[f"{m}_se"] = p.metrics.get(f"{m}_se")
        if seeds:
            r["seeds"] = p.metrics.get("seeds")
        for t in tasks:
            r[t] = p.metrics.get(t)
        for col, bundle in knobs:
            if bundle is None:
                r[col] = p.params.get(col)
            else:
                label = p.params.get(bundle[0])
                r[col] = bundle[1].table(label).get(col.split(".", 1)[1]) if label is not None else None
        rows.append(r)
    return rows


#: below this share of the hypervolume added by the latest tenth of the trials, a search reads as converged...
CONVERGED_GAIN = 0.01
#: ...if that tenth holds at least this many training settings (a hybrid enters a setting's sub-front at once)
MIN_SETTINGS = 3


def recent_line(recent: dict, *, ended_early: bool = False, covered: str | None = None) -> str:
    """The stopping signal in words (:func:`dse.search.pareto.recent_gain`): how much of the hypervolume the
    latest tenth of the complete trials added, and what that suggests; ``ended_early``: the run ended before its
    budget (its strategy had nothing new to propose, or its training budget was spent), so a larger trial
    budget would not run more of it; ``covered``: why more trials would run nothing new although the run
    reached its budget (:meth:`Strategy.covered`: a hybrid grid walk that trained every setting)."""
    from dse.search.pareto import RECENT_SHARE

    if not recent["recent"]:
        return "no complete trial yet"
    early = "the search ended before its trial budget, for the reason below: more trials alone would run no more of it"
    if recent["hypervolume"] <= 0 and recent.get("feasible") == 0:
        return (f"none of the {recent['points']} complete trials meets the constraints, so there is no front yet: "
                "relax the study's [[constraints]] or widen its space")
    if recent["hypervolume"] <= 0:
        return (f"the front does not improve on the reference point yet ({recent['recent']} latest complete "
                "trials): a starved search; " + (early if ended_early else "give it more trials"))
    gain, n = recent["gain"], recent["settings"]
    if covered and not ended_early:
        verdict = (f"{'still improving' if gain >= CONVERGED_GAIN else 'little gain'}, but more trials alone would "
                   f"run nothing new: {covered.removeprefix('the hybrid search ended: ')}")
    elif ended_early:
        verdict = f"{'still improving' if gain >= CONVERGED_GAIN else 'little gain'}, but {early}"
    elif gain >= CONVERGED_GAIN:
        verdict = "still improving: a larger budget is likely to pay"
    elif n < MIN_SETTINGS:
        verdict = (f"but they hold {n} training setting{'s' * (n != 1)}, too few to call the search converged: "
                   "a larger budget may still pay")
    else:
        verdict = "converged for this budget: more trials of the same search add little"
    return (f"the latest {RECENT_SHARE:.0%} of the complete trials ({recent['recent']}) added {gain:.2%} of the "
            f"hypervolume (from {recent['before']:.6g}); {verdict}")


def strategy_trials(spec, study, states=None) -> list:
    """The trials of ``study`` and of its strategy's helper studies (the hybrid's training settings), in those
    ``states`` (all by default); a helper study not made yet, or unreadable, adds none."""
    import optuna

    from dse.search.strategies import strategy_class

    trials = list(study.get_trials(deepcopy=False, states=states))
    for helper in strategy_class(spec.strategy).helper_studies(spec.name):
        try:
            trials += optuna.load_study(study_name=helper, storage=study._storage).get_trials(
                deepcopy=False, states=states)
        except Exception:  # not made yet, or unreadable: the main study's trials stand
            pass
    return trials


def diverged_settings(spec, study) -> dict[str, str]:
    """The training settings whose training diverged on some seed (their trials failed with the reason
    ``SurrogateDiverged``), in ``study`` and its strategy's helper studies (the hybrid's settings): each
    setting's training knobs (``name=value, ...``) -> the reason (which runs on which seeds)."""
    from optuna.trial import TrialState

    trials = strategy_trials(spec, study, states=(TrialState.FAIL,))
    out: dict[str, str] = {}
    for t in trials:
        reason = t.user_attrs.get("fail_reason", "")
        if reason.startswith("SurrogateDiverged"):
            key = ", ".join(f"{k}={v}" for k, v in sorted(t.params.items()) if k.startswith("training."))
            out.setdefault(key or "(no training knob)", reason.removeprefix("SurrogateDiverged: "))
    return out


def blas_kernels(trials) -> dict[str, int]:
    """BLAS kernel -> complete trials whose surrogate runs were trained with it (a trial of several seeds may
    count for several; runs cached before kernels were recorded are left out). Accuracies reproduce on the same
    kernel only (docs/surrogate.md), so a study with two kernels mixes rounding noise into its comparisons."""
    out: dict[str, int] = {}
    for t in trials:
        for k in str((t.user_attrs.get("surrogate") or {}).get("blas") or "").split(", "):
            if k and k != "not recorded":
                out[k] = out.get(k, 0) + 1
    return out


def status_summary(spec, storage: str | None = None, study=None, url: str | None = None) -> dict:
    """What ``dse status`` prints: trials by state, the budget (the last run's; ``budget_from`` says where it
    differs from the file's), front size, hypervolume, failure reasons, the
    strategy's own line (hybrid: settings trained, the surrogate runs they hold, the run budget), the training
    settings that diverged, each with its reason (``study``:
    the open study, else opened from ``storage``; ``url``: its storage URL, shown masked)."""
    from optuna.trial import TrialState

    from dse.search.pareto import front, recent_gain
    from dse.search.runguard import INTERRUPTED
    from dse.search.strategies import strategy_class
    from dse.search.study import (
        ended_early,
        hv_reference,
        mask_url,
        open_study,
        points_of,
        read_spec,
        run_budget,
        storage_url,
    )

    if study is None:
        study = open_study(spec, storage, create=False)
        spec = read_spec(spec, study)  # the strategy it ran with (dse run --strategy)
    ran = run_budget(spec, study)  # the budget of the last run: `dse run --trials/--runs` may override the file's
    differs = [f"{k} {getattr(ran, k)} (the file: {getattr(spec, k)})" for k in ("trials", "runs")
               if getattr(ran, k) != getattr(spec, k)]
    every = study.get_trials(deepcopy=False)  # listed once (a server round trip each on PostgreSQL)
    states = {s.name.lower(): 0 for s in TrialState}
    for t in every:
        states[t.state.name.lower()] += 1
    pts = points_of(every, spec)
    recent = recent_gain(pts, spec.directions, hv_reference(spec))
    ended = ended_early(study)  # why its last run ended before its budget, or None
    kernels = blas_kernels([t for t in every if t.state == TrialState.COMPLETE])
    reasons: dict[str, int] = {}
    # a trial Optuna's heartbeat failed (its worker on another machine died, or was paused or cut off) has no
    # reason of its own; its retry names it (system attribute failed_trial)
    stale = {int(n) for t in every for n in [t.system_attrs.get("failed_trial"),  # (and every retry of it
                                                  *t.system_attrs.get("retry_history", [])] if n is not None}
    for t in every:
        if t.state not in (TrialState.FAIL, TrialState.PRUNED):
            continue
        r = t.user_attrs.get("fail_reason") or (
            f"{INTERRUPTED}: its worker's heartbeat went stale (it died, was paused or lost the server); retried"
            if t.number in stale else "no reason recorded")
        reasons[r] = reasons.get(r, 0) + 1
    return {
        "study": spec.name,
        "strategy": spec.strategy,
        "storage": mask_url(url or storage_url(spec, storage)),
        "budget": ran.trials,
        **({"budget_from": "the last run: " + ", ".join(differs)} if differs else {}),
        "trials": states,
        "feasible": sum(p.feasible for p in pts),
        # complete trials that did not record an objective the study has now (changed with --accept-changes)
        **({"unplaced": unplaced} if (unplaced := states["complete"] - len(pts)) else {}),
        "front": len(front(pts, spec.directions)),
        "hypervolume": recent["hypervolume"],
        "hv_gain_last_10pct": recent["gain"],
        "last_10pct": (f"none of the {states['complete']} complete trials recorded all the study's objectives "
                       f"({', '.join(spec.metrics)}; an objective changed with --accept-changes): run more trials"
                       if states["complete"] and not pts else
                       recent_line(recent, ended_early=ended is not None,
                                   covered=None if ended else strategy_class(spec.strategy).covered(ran, study))),
        **({"ended_early": ended} if ended else {}),
        "objectives": [f"{o.direction} {o.metric}" for o in spec.objectives],
        "constraints": [str(c) for c in spec.constraints],
        "failures": reasons,
        **({"training": summary} if (summary := strategy_class(spec.strategy).run_summary(ran, study)) else {}),
        **({"diverged": [f"{k}: {r}" for k, r in bad.items()]} if (bad := diverged_settings(spec, study)) else {}),
        # workers on different CPUs, or a cache copied from another machine: say so, accuracies differ by kernel
        **({"blas": f"surrogate runs trained on {len(kernels)} BLAS kernels ("
                    + ", ".join(f"{k}: {n} trials" for k, n in sorted(kernels.items()))
                    + "); accuracies reproduce on the same kernel only, so compare trials of one kernel "
                      "(docs/surrogate.md)"} if len(kernels) > 1 else {}),
    }


def pareto_rows(spec, study, *, columns: list[str] | None = None, sort: str | None = None,
                limit: int | None = None, where: list[str] = (), noise_aware: bool = False) -> list[dict]:
    """The feasible front as rows (machine names: metrics plain, knobs ``section.field``), filtered by
    ``where`` ('NAME OP NUMBER' on a metric or numeric knob), sorted best first by ``sort`` (a metric, its
    natural direction; default the first objective), cut to ``limit`` rows, restricted to ``columns``.

    An accuracy figure that is a mean over two seeds or more has its standard error ``<metric>_se`` beside
    it, and ``seeds`` says how many. ``noise_aware``: only the front points distinguishable by the paired-seed
    test (:func:`dse.search.noise.noise_aware_front`).
    """
    from dse.search.noise import noise_aware_front
    from dse.search.pareto import COMPARISONS, check_recorded, front, parse_where
    from dse.search.study import load_points

    pts = load_points(study, spec)
    pts = noise_aware_front(pts, spec.metrics, spec.directions) if noise_aware else front(pts, spec.directions)
    rows = front_rows(spec, pts)
    names = list(dict.fromkeys(k for r in rows for k in r)) or row_columns(spec)
    numeric = {k for k in names if all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                                       for r in rows)}
    conds = [parse_where(w, dict.fromkeys(sorted(numeric | set(metric_order(spec))))) for w in where]
    check_recorded(rows, [m for m, _, _ in conds], "--where", "on the front")
    rows = [r for r in rows if all(r.get(m) is not None and COMPARISONS[op](r[m], v) for m, op, v in conds)]
    key = sort or spec.metrics[0]
    from dse.evaluation import metrics as registry

    sortable = metric_order(spec) + [c for c in task_columns(pts) if registry.like(c) is not None]
    if key not in sortable:
        raise UsageError(f"--sort: {key!r} is not a metric; allowed: {', '.join(sortable)}")
    check_recorded(rows, [key], "--sort", "on the front")
    sign = -1 if natural_direction(key) == "maximize" else 1
    rows.sort(key=lambda r: (r.get(key) is None, sign * (r.get(key) or 0.0), r["trial"]))
    if limit is not None:
        rows = rows[:limit]
    if columns:
        unknown = [c for c in columns if c not in names]
        if unknown:
            raise UsageError(f"--columns: unknown column {unknown[0]!r}; allowed: {', '.join(names)}")
        cols = ["trial"] + [c for c in columns if c != "trial"]
        rows = [{c: r.get(c) for c in cols} for r in rows]
    return rows


def trial_rows(spec, study) -> list[dict]:
    """Every trial as a row (:meth:`dse.api.Study.trials`): number, state, feasibility, front membership, the
    metrics and knobs of :func:`front_rows`, the failure reason."""
    from dse.search.pareto import Point, front
    from dse.search.study import point_of

    trials = study.get_trials(deepcopy=False)
    pts = {t.number: point_of(t, spec) for t in trials}
    on_front = {p.number for p in front([p for p in pts.values() if p is not None], spec.directions)}
    as_points = [pts[t.number] or Point(t.number, (), dict(t.user_attrs.get("metrics", {})), dict(t.params),
                                        False, {}) for t in trials]
    rows = []
    for t, r in zip(trials, front_rows(spec, as_points)):
        p = pts[t.number]
        head = {"trial": t.number, "state": t.state.name.lower(),
                "feasible": None if p is None else p.feasible, "on_front": t.number in on_front}
        rows.append({**head, **{k: v for k, v in r.items() if k != "trial"},
                     "fail_reason": t.user_attrs.get("fail_reason")})
    return rows


def row_columns(spec, kind: str = "front") -> list[str]:
    """The columns of :func:`front_rows` (``kind`` "front") or :func:`trial_rows` ("trials") before any trial
    recorded figures: what an empty table still has (no standard errors, seeds or task columns yet)."""
    middle = [*metric_order(spec), *(c for c, _ in _knob_columns(spec))]
    if kind == "trials":
        return ["trial", "state", "feasible", "on_front", *middle, "fail_reason"]
    return ["trial", *middle]


def data_frame(rows: list[dict], columns: list[str] | None = None):
    """``rows`` as a pandas DataFrame whose missing values are NaN: a column of numbers and gaps is numeric
    (float), never ``object`` holding None. No rows: an empty frame with ``columns`` (so that selecting or
    sorting by a column works on it as on a full one)."""
    import numpy as np
    import pandas as pd

    if not rows and columns:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in columns})
    df = pd.DataFrame(rows)
    for c in df.columns:
        col = df[c]
        if col.dtype != object:
            continue
        present = col.dropna()
        if present.empty:
            df[c] = np.nan
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            df[c] = pd.to_numeric(col.where(col.notna(), np.nan), errors="coerce")
        else:
            df[c] = col.where(col.notna(), np.nan)
    return df


def _varies(values: list) -> bool:
    from dse.results.formats import is_missing

    present = [v for v in values if not is_missing(v)]
    return len({repr(v) for v in present}) > 1


def table_columns(spec, rows: list[dict]) -> tuple[list[str], dict]:
    """The columns a printed front shows by default, and what it leaves out.

    Shown: ``trial``, the objectives (each followed by its standard error when a trial has one), the
    constraint metrics, the number of surrogate ``seeds`` and the searched knobs -- each only when it varies
    on ``rows`` (all of them, with one row). Left out (the dict): ``constant`` {column: its one value},
    ``empty`` [columns no row has], ``other`` [the remaining columns: other metrics, spreads]."""
    from dse.results.formats import is_missing

    names = list(dict.fromkeys(k for r in rows for k in r))
    cand = ["trial"]
    for m in [*spec.metrics, *(c.metric for c in spec.constraints)]:
        for c in (m, f"{m}_se"):
            if c in names and c not in cand:
                cand.append(c)
    cand += [c for c in names if (c == "seeds" or "." in c) and c not in cand]
    shown, constant, empty = ["trial"], {}, []
    for c in cand[1:]:
        values = [r.get(c) for r in rows]
        if all(is_missing(v) for v in values):
            empty.append(c)
        elif len(rows) > 1 and not _varies(values):
            constant[c] = next(v for v in values if not is_missing(v))
        else:
            shown.append(c)
    # a standard error stands beside its metric: one whose metric is left out (constant on the front, its
    # spread not) would read as the spread of the column before it
    orphans = [c for c in shown if c.endswith("_se") and c[:-3] in cand and c[:-3] not in shown]
    shown = [c for c in shown if c not in orphans]
    return shown, {"constant": constant, "empty": empty,
                   "other": [c for c in names if c not in cand or c in orphans]}


def left_out_note(left: dict, hidden_rows: int = 0, total_rows: int = 0, dropped: list[str] = ()) -> str:
    """One line under a default front table: the columns and rows it does not show, and how to see them."""
    from dse.results.formats import fmt_number

    parts = []
    if left["constant"]:
        parts.append("constant on the front: " + ", ".join(f"{c}={fmt_number(v)}"
                                                           for c, v in left["constant"].items()))
    if left["empty"]:
        parts.append("empty: " + ", ".join(left["empty"]))
    if dropped:
        parts.append(f"too wide for the terminal: {', '.join(dropped)}")
    if left["other"] or left["constant"] or left["empty"] or dropped:
        parts.append(f"{len(left['other'])} other metrics and spreads; --columns all shows every column")
    if hidden_rows:
        parts.append(f"{hidden_rows} of {total_rows} rows not shown (--all for every row, --limit N, "
                     "--sort METRIC)")
    return "not shown: " + "; ".join(parts) if parts else ""


def table_headers(spec, columns: list[str], units: dict[str, str] | None = None, short: bool = False
                  ) -> dict[str, str]:
    """Headers for a printed front: a unit in every header that has one (``units`` overrides a column's,
    e.g. a prefixed kJ); the surrogate's measured GP fraction and the requested (sampled) one named apart; an
    accuracy figure's standard error as ``±``. ``short``: a knob by its field name alone (``rows`` for
    ``hardware.rows``) when no other column has that field name."""
    from dse.results.formats import knob_unit

    units = units or {}
    out = {}
    fields = [c.split(".", 1)[1] for c in columns if "." in c]
    for c in columns:
        base = c[:-3] if c.endswith("_se") else c[:-4] if c.endswith("_std") else c
        unit = units.get(c, unit_of(base) or knob_unit(c))
        if c.endswith("_se") and base in metric_order(spec):
            out[c] = "±"
        elif c == "gp_fraction":
            out[c] = f"gp_fraction(measured) [{unit}]"
        elif c == "training.gp_fraction":
            out[c] = "gp_fraction (requested)" if short else "training.gp_fraction(requested)"
        else:
            name = c.split(".", 1)[1] if short and "." in c and fields.count(c.split(".", 1)[1]) == 1 else c
            out[c] = f"{name} [{unit}]" if unit else name
    return out


def display_table(spec, rows: list[dict], columns: list[str], short: bool = False
                  ) -> tuple[list[str], list[list[str]], list[bool]]:
    """(headers, cells, right-aligned) of a front table: every column of a unit with SI prefixes scaled to
    one prefix (its header says which); an ``_se`` or ``_std`` column in its metric's unit and scale;
    ``short``: knobs by field name (:func:`table_headers`)."""
    from dse.results.formats import fmt_number, is_missing, knob_unit, si_scale

    def base(c):
        return c[:-3] if c.endswith("_se") else c[:-4] if c.endswith("_std") else c

    scale, units, by_base = {}, {}, {}
    for c in columns:
        b = base(c)
        unit = unit_of(b) or knob_unit(b)
        if not unit:
            continue
        if b not in by_base:  # a spread takes its metric's scale
            src = b if any(b in r for r in rows) else c
            by_base[b] = si_scale([r.get(src) for r in rows], unit)
        scale[c], units[c] = by_base[b]
    head = table_headers(spec, columns, units, short)
    numeric = [all(is_missing(r.get(c)) or (isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool))
                   for r in rows) for c in columns]
    cells = []
    for r in rows:
        line = []
        for c, num in zip(columns, numeric):
            v = r.get(c)
            if num and not is_missing(v) and scale.get(c, 1.0) != 1.0:
                v = v / scale[c]
            line.append(fmt_number(v))
        cells.append(line)
    return [head[c] for c in columns], cells, numeric


def proxy_note(spec, rows: list[dict] = ()) -> str:
    """One line saying whose accuracy the accuracy figures are, and how sure they are."""
    t = spec.base.training
    if spec.adaptive:
        spread = (f"means of {spec.seeds} to {spec.seeds_max} surrogate seeds from seed {spec.first_seed} (more "
                  "near the front), ± their standard error (seeds: how many)")
    elif any(k.endswith("_se") for r in rows[:1] for k in r):
        spread = ("± the standard error of the mean over the surrogate seeds (seeds: how many; one seed has "
                  "none)")
    elif spec.seeds > 1:
        spread = f"means of {spec.seeds} surrogate seeds, ± their standard error (seeds: how many)"
    else:
        spread = "one seed: no spread shown (seeds > 1 in [study] gives one)"
    if t.tasks:
        cfgs = t.task_configs()
        who = ("tasks " + ", ".join(f"{c.task} ({c.network})" for c in cfgs)
               + f" (accuracy, accuracy_drop, predictor_gain: {cfgs[0].task}'s; accuracy_drop_worst: the worst task's)")
    else:
        who = f"task {t.task} ({t.network})"
    return (f"accuracy figures: the training surrogate's on its proxy {who}, not the "
            f"workload's models; {spread}. Knobs are the values the search requested (a header names a knob "
            f"by its field: pred_width is training.pred_width).")
