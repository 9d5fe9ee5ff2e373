"""Evaluate one configuration (:mod:`dse.config.configuration`): training knobs + hardware + workload -> every
metric the tool reports.

A configuration file (what ``dse export`` writes and ``dse evaluate`` reads) has the tables

* ``[workload]``  -- :class:`dse.config.workload.Workload` (zoo models, batch, data-set size, epochs, optimizer);
* ``[training]``  -- :class:`models.surrogate.SurrogateConfig` (scheme, predictor, phase schedule);
* ``[hardware]``  -- :class:`accel.Hardware`, the candidate accelerator;
* ``[reference]`` -- :class:`accel.Hardware`, the baseline that runs plain BP (``speedup``'s denominator);
* ``[schedule]``  -- optional what-if: ``gp_fraction`` (0-1) of post-warm-up steps in GP phase, used instead
  of the surrogate's measured fraction; with it the surrogate does not run unless ``accuracy = true``;
* ``technology``  -- optional path of a technology table (``accel.load_tech``), relative to the file;
* ``[parallel]``  -- optional: the job over several accelerators (pipeline stages, micro-batches, schedule,
  link, data-parallel replicas), :class:`dse.config.parallel.ParallelConfig`.

Metrics: ``speedup`` = job time of plain BP on the reference / job time of the
candidate; ``speedup_same_hw`` = plain BP on the candidate's hardware / the candidate; ``energy_j`` the
candidate job's energy; ``energy_saving`` = 1 - energy / energy of plain BP on the reference (a fraction);
accuracy figures in percent (points for differences) from the training surrogate.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np

from accel import HardwareArray, Tech, area_mm2, peak_power_w
from accel.schedule import ENERGY_KEYS, job_cost, step_costs
from dse.config.configuration import Configuration, load_configuration, plan_key
from dse.errors import UsageError
from dse.evaluation import metrics as registry
from dse.evaluation.multi_accelerator import evaluate_parallel
from dse.evaluation.workloads import model_key, reference_job, scheme_plan_of, technology, training_ops

__all__ = ["evaluate", "evaluate_hardware", "hardware_metrics", "training_metrics", "model_cost", "ModelCost",
           "energy_components"]


@dataclass(frozen=True)
class ModelCost:
    """One model of a configuration's workload costed on one accelerator or on an array of them (every figure
    then an array over the accelerators): its training ops, the scheme's plan, the step costs, the job with the
    scheme, the same job in plain BP on the same hardware, and plain BP on the reference accelerator."""

    ops: Any
    plan: Any
    steps: Any
    job: Any
    bp: Any
    ref_step: Any
    ref: Any


def _fingerprint(x: Any) -> Any:
    """A hashable key of a scheme's plan by its content (its network left out: the memo's key names the model),
    so that training settings whose plans are equal (they differ only in the schedule) share per-step costs."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (type(x).__name__, *(_fingerprint(getattr(x, f.name)) for f in dataclasses.fields(x)
                                    if f.name != "net"))
    if isinstance(x, np.ndarray):
        return (x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, (list, tuple)):
        return tuple(_fingerprint(v) for v in x)
    return x


def model_cost(cfg: Configuration, model: str, hw, gp_fraction: float, word_bytes: int,
               steps_memo: dict | None = None) -> ModelCost:
    """The one per-model costing both paths run: :func:`evaluate_hardware` (``hw`` an ``accel.Hardware``) and
    :func:`hardware_metrics` (``hw`` an ``accel.HardwareArray`` of accelerators of one word size).
    ``steps_memo``: see :func:`hardware_metrics`."""
    w, tr = cfg.workload, cfg.training
    key = model_key(w, model)
    ops = training_ops(key, w.batch, w.optimizer, word_bytes)
    plan = scheme_plan_of(key, plan_key(tr), w.batch, word_bytes)
    memo_key = (key, word_bytes, _fingerprint(plan)) if steps_memo is not None else None
    steps = steps_memo.get(memo_key) if steps_memo is not None else None
    if steps is None:
        steps = step_costs(ops, plan=plan, hw=hw, tech=technology(cfg.technology))
        if steps_memo is not None:
            steps_memo[memo_key] = steps
    job = job_cost(steps, n_steps=w.steps, warmup_frac=tr.warmup, gp_fraction=gp_fraction,
                   scheme="bp" if tr.scheme == "bp" else None)
    bp_here = job_cost(steps, n_steps=w.steps, scheme="bp")
    ref_step, ref = reference_job(key, w, cfg.reference, cfg.technology)
    return ModelCost(ops, plan, steps, job, bp_here, ref_step, ref)


def evaluate_hardware(cfg: Configuration, gp_fraction: float) -> dict:
    """Time, energy, area and power of ``cfg`` for a given GP fraction (no surrogate): the hardware half."""
    if cfg.parallel is not None:
        return _evaluate_pipeline(cfg, gp_fraction)
    w, hw = cfg.workload, cfg.hardware
    tech = technology(cfg.technology)
    rows = []
    for model in w.models:
        c = model_cost(cfg, model, hw, gp_fraction, hw.word_bytes)
        ops, plan, steps, job, bp_here, ref_step, ref = c.ops, c.plan, c.steps, c.job, c.bp, c.ref_step, c.ref
        rows.append({
            **_job_row(model, job, bp_here, ref, w.steps),
            # one accelerator: no pipeline bubble; it holds the whole batch's activation stash
            "bubble_rate": 0.0,
            "peak_act_bytes": float(ops.stash_bytes.sum()),
            "step_ms_bp_ref": ref_step.time_s * 1e3,
            "step_ms_bp": steps.bp.time_s * 1e3,
            "step_ms_scheme_bp": steps.scheme_bp.time_s * 1e3,
            "step_ms_gp": steps.scheme_gp.time_s * 1e3,
            "dram_gb_per_step_bp": steps.bp.dram_bytes / 1e9,  # plain BP's step, as step_ms_bp
            "dram_gb_per_step_scheme_bp": steps.scheme_bp.dram_bytes / 1e9,  # the BP phase's, as step_ms_scheme_bp
            "dram_gb_per_step_gp": steps.scheme_gp.dram_bytes / 1e9,
            "predictor_params": plan.params if plan is not None else 0,
            "predictor_state": plan.state if plan is not None else 0,
            "predictor_macs_gp_step": int(plan.gp.macs.sum()) if plan is not None else 0,
            "predictor_macs_bp_step": int(plan.train.macs.sum()) if plan is not None else 0,
            **{f"energy_j_{k}": float(job.energy_j[k]) for k in ENERGY_KEYS},
            **{f"energy_j_ref_{k}": float(ref.energy_j[k]) for k in ENERGY_KEYS},
        })
    return _summary(cfg, rows, tech, gp_fraction)


def energy_components(rows: list[dict]) -> list[str]:
    """The components of the job's energy that :func:`evaluate_hardware`'s model ``rows`` break it into (a row
    holds ``energy_j_<component>``): one accelerator's ``ENERGY_KEYS`` (mac, rf, ..., leakage), a job over
    several accelerators' dynamic, leakage and link; every row's, in first-seen order."""
    seen: dict[str, None] = {}
    for r in rows:
        seen.update((k[len("energy_j_"):], None) for k in r
                    if k.startswith("energy_j_") and k != "energy_j_ref" and not k.startswith("energy_j_ref_"))
    return list(seen)


def _evaluate_pipeline(cfg: Configuration, gp_fraction: float) -> dict:
    """:func:`evaluate_hardware` for a job over several accelerators (``[parallel]``)."""
    w = cfg.workload
    tech = technology(cfg.technology)
    rows = []
    for r in evaluate_parallel(cfg, gp_fraction):
        job, bp = r["job"], r["bp"]
        ref_step, ref = reference_job(model_key(w, r["model"]), w, cfg.reference, cfg.technology)
        rows.append({
            **_job_row(r["model"], job, bp, ref, w.steps),
            "throughput": job.throughput,
            "bubble_rate": float(job.bubble_rate),
            "peak_act_bytes": float(job.peak_act_bytes),
            "devices": cfg.parallel.devices,
            "stage_starts": r["stage_starts"],
            "stage_imbalance": r["imbalance"],
            "step_ms_bp_ref": ref_step.time_s * 1e3,
            **{k: r[k] for k in ("step_ms_bp", "step_ms_scheme_bp", "step_ms_gp", "dram_gb_per_step_bp",
                                 "dram_gb_per_step_scheme_bp", "dram_gb_per_step_gp")},
            "link_gb_per_step": {k: v / 1e9 for k, v in job.link_bytes.items()},
            "allreduce_ms_per_step": {k: v * 1e3 for k, v in job.allreduce_s.items()},
            **{f"energy_j_{k}": float(v) for k, v in job.energy_j.items()},
        })
    return _summary(cfg, rows, tech, gp_fraction)


def _job_row(model: str, job, bp, ref, steps: int) -> dict:
    """The figures every model row has: the candidate's job against plain BP on the same hardware (``bp``)
    and on the reference (``ref``)."""
    e, e_ref = job.energy_total_j, ref.energy_total_j
    return {"model": model, "speedup": float(ref.time_s / job.time_s),
            "speedup_same_hw": float(bp.time_s / job.time_s), "energy_j": float(e),
            "energy_saving": float(1.0 - e / e_ref), "time_s": float(job.time_s), "time_s_ref": float(ref.time_s),
            "time_s_bp": float(bp.time_s), "energy_j_ref": float(e_ref), "steps": steps, "steps_gp": job.steps_gp}


def _summary(cfg: Configuration, rows: list[dict], tech: Tech, gp_fraction: float) -> dict:
    """The evaluation's result: the model rows, a summary and the per-hardware metrics, which the registry
    computes from the rows' per-model quantities (each a (models, 1) array: one hardware point)."""
    col = lambda k: np.array([[r[k]] for r in rows], dtype=np.float64)  # noqa: E731 - local shorthand, (models, 1)
    q = {k: col(k) for k in _PER_MODEL}
    q["samples"] = np.array([[r["steps"] * cfg.workload.batch] for r in rows], dtype=np.float64)
    q["area_mm2"] = np.array([area_mm2(cfg.hardware, tech)], dtype=np.float64)
    metrics = {k: float(v[0]) for k, v in registry.compute(q, only=lambda m: m.per_hardware).items()}
    summary = {
        **metrics,  # every per-hardware metric of the registry, under its own name
        # the same under the names of earlier versions (kept: scripts read them)
        "speedup_geomean": metrics["speedup"],
        "speedup_same_hw_geomean": metrics["speedup_same_hw"],
        "energy_saving_total": metrics["energy_saving"],
        # context that is not a metric
        "energy_j_ref": sum(r["energy_j_ref"] for r in rows),
        "area_mm2_ref": float(area_mm2(cfg.reference, tech)),
        "peak_power_w": float(peak_power_w(cfg.hardware, tech)),
        "gp_fraction": gp_fraction,
        "warmup": cfg.training.warmup,
        "models": len(rows),
        "devices": cfg.parallel.devices if cfg.parallel is not None else 1,
    }
    return {"models": rows, "summary": summary, "metrics": metrics}


#: the per-model quantities (dse.evaluation.metrics.QUANTITIES) a model row carries under the same name
_PER_MODEL = ("time_s", "time_s_bp", "time_s_ref", "energy_j", "energy_j_ref", "bubble_rate", "peak_act_bytes")


def hardware_metrics(cfg: Configuration, hws: HardwareArray, gp_fraction: float,
                     steps_memo: dict | None = None) -> dict[str, np.ndarray]:
    """The per-hardware metrics (:func:`dse.evaluation.metrics.per_hardware`) of ``cfg``'s training knobs over many
    accelerators at once (arrays (H,)).

    The registry's formulas, as in :func:`evaluate_hardware`, on per-model arrays over ``hws``, with no
    Python loop over configurations: for inner searches over thousands of hardware points per trained
    configuration. ``steps_memo``: a dict the caller keeps to cost many training settings over the same
    ``hws`` (and the same workload, technology and reference): the per-step costs, which depend on the
    training knobs only through the predictor (:func:`dse.config.configuration.plan_key`), are computed once
    per predictor and model (the warm-up and GP fraction only mix them).
    """
    if cfg.parallel is not None:
        raise UsageError("parallel: the vectorized hardware search (strategy hybrid) costs one accelerator; "
                         "search a [parallel] job with strategy = \"joint\"")
    w = cfg.workload
    tech = technology(cfg.technology)
    M, H = len(w.models), len(hws)
    q = {k: np.zeros((M, H)) for k in ("time_s", "time_s_bp", "energy_j", "bubble_rate", "peak_act_bytes")}
    q["time_s_ref"], q["energy_j_ref"] = np.zeros((M, 1)), np.zeros((M, 1))
    q["samples"] = np.full((M, 1), float(w.steps * w.batch))
    for i, model in enumerate(w.models):
        for wb in np.unique(hws.word_bytes):
            idx = np.flatnonzero(hws.word_bytes == wb)
            c = model_cost(cfg, model, hws.take(idx), gp_fraction, int(wb), steps_memo)
            q["time_s_ref"][i], q["energy_j_ref"][i] = c.ref.time_s, c.ref.energy_total_j
            q["time_s"][i, idx] = c.job.time_s
            q["time_s_bp"][i, idx] = c.bp.time_s
            q["energy_j"][i, idx] = c.job.energy_total_j
            q["peak_act_bytes"][i, idx] = float(c.ops.stash_bytes.sum())  # one accelerator: no bubble
    q["area_mm2"] = np.asarray(area_mm2(hws, tech), dtype=np.float64)
    return registry.compute(q, only=lambda m: m.per_hardware)


def training_metrics(surrogate: dict | None, gp_fraction: float) -> dict[str, float]:
    """The metrics that do not depend on the hardware: the GP fraction, and the surrogate's figures when it
    ran (``surrogate``: the surrogate's result as a dict, or None) with ``seeds`` (how many seeds they are
    the mean of) and ``<metric>_se`` for each seeded metric (:func:`dse.evaluation.metrics.standard_errors`)."""
    q: dict[str, Any] = {"gp_fraction": gp_fraction}
    if surrogate is not None:
        q["surrogate"] = surrogate
        q["controls"] = tuple(surrogate.get("controls", ()))
    out = registry.compute(q, only=lambda m: not m.per_hardware)
    # the seeds behind the accuracy figures, and each one's standard error (two seeds or more)
    out.update(registry.standard_errors(registry.seed_record(surrogate)))
    out.update(registry.task_figures(surrogate))  # each proxy task's own figures (several tasks)
    return out


def _seed_list(seeds) -> tuple[int, ...]:
    """``seeds`` (an evaluate argument) as distinct integers from 0 to MAX_FIRST_SEED + MAX_SEEDS - 1, at most
    MAX_SEEDS of them."""
    import numbers

    from dse.config.configuration import MAX_FIRST_SEED, MAX_SEEDS

    top = MAX_FIRST_SEED + MAX_SEEDS - 1  # the last seed a configuration can name
    allowed = (f"distinct integers from 0 to {top}, 1 to {MAX_SEEDS} of them, e.g. range(3) "
               "(--seeds N on the command line is a count, from the configuration's first_seed)")
    try:
        out = tuple(seeds) if not isinstance(seeds, (str, bytes)) else None
    except TypeError:
        out = None
    if (not out or len(out) > MAX_SEEDS or len(set(out)) != len(out)
            or not all(isinstance(x, numbers.Integral) and not isinstance(x, bool) and 0 <= x <= top
                       for x in out)):
        raise UsageError(f"seeds: {allowed}; got {seeds!r}")
    return tuple(int(x) for x in out)


def evaluate(cfg: Configuration | str, *, seeds: tuple[int, ...] | None = None,
             metrics: list[str] | str | None = None) -> dict:
    """Every metric of ``cfg`` (a :class:`Configuration`, or the path of a file ``dse export`` wrote): the
    surrogate (cached) for accuracy and GP fraction, then the hardware.

    ``metrics``: the metrics the caller needs (a study: its objectives and constraints); the surrogate then
    runs only the controls they need (:func:`dse.evaluation.metrics.controls_for`), and metrics that need others are
    left out. Default: every metric, every control.

    Returns ``{"models": [...], "summary": {...}, "metrics": {...}, "surrogate": {...} | None}`` where
    ``metrics`` holds every metric of :mod:`dse.evaluation.metrics` that applies (accuracy figures only when the
    surrogate ran).

    ``seeds``: the surrogate seeds to train, distinct integers (default: the configuration's, ``cfg.seed_list``:
    ``seeds`` of them from ``first_seed``); the command's ``--seeds N`` is a count: ``seeds=range(cfg.first_seed,
    cfg.first_seed + N)``.
    """
    if isinstance(cfg, (str, PurePath)):
        cfg = load_configuration(cfg)
    if not isinstance(cfg, Configuration):
        raise UsageError(f"cfg: a Configuration (dse.configuration(point), dse.load_configuration(path)) or the "
                         f"path of a configuration file, got {type(cfg).__name__}")
    if metrics is not None:
        metrics = registry.check_names([metrics] if isinstance(metrics, str) else metrics, "metrics")
    sur = None
    seeds = cfg.seed_list if seeds is None else _seed_list(seeds)
    if cfg.gp_fraction is None or cfg.accuracy:
        from models.surrogate.evaluation import CONTROLS

        controls = CONTROLS if metrics is None else registry.controls_for(metrics)
        from models.surrogate.multitask import evaluate_tasks

        both = evaluate_tasks(cfg.training.task_configs(), seeds=seeds, controls=controls)
        for result in both.results:
            result.check_converged()  # a diverged seed makes the means unusable: the trial fails with the reason
        sur = both.results[0].to_dict()  # the first task's figures; with several tasks each one's and the worst
        if len(both.results) > 1:
            sur.update(both.figures())
        # each seed's drop of the worst task (the first, with one task): accuracy_drop_worst's per-seed values
        sur["per_seed"] = [{**row, "accuracy_drop_worst": w} for row, w in zip(sur["per_seed"], both.worst_per_seed())]
    gpf = cfg.gp_fraction if cfg.gp_fraction is not None else float(sur["gp_fraction"])
    if cfg.training.scheme == "bp":
        gpf = 0.0
    out = evaluate_hardware(cfg, gpf)
    out["metrics"] = {**out["metrics"], **training_metrics(sur, gpf)}
    if sur is not None:
        out["proxy"] = sur["proxy"]  # the accuracy figures are this proxy's, not the zoo models'
    out["surrogate"] = sur
    return out
