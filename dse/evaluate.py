"""Evaluate one configuration: training knobs + hardware + workload -> every metric the tool reports.

A configuration file (what ``dse export`` writes and ``dse evaluate`` reads) has the tables

* ``[workload]``  -- :class:`dse.workload.Workload` (zoo models, batch, data-set size, epochs, optimizer);
* ``[training]``  -- :class:`models.surrogate.SurrogateConfig` (scheme, predictor, phase schedule);
* ``[hardware]``  -- :class:`accel.Hardware`, the candidate accelerator;
* ``[reference]`` -- :class:`accel.Hardware`, the baseline that runs plain BP (``speedup``'s denominator);
* ``[schedule]``  -- optional what-if: ``gp_fraction`` (0-1) of post-warm-up steps in GP phase, used instead
  of the surrogate's measured fraction; with it the surrogate does not run unless ``accuracy = true``;
* ``technology``  -- optional path of a technology table (``accel.load_tech``), relative to the file;
* ``[parallel]``  -- optional: the job over several accelerators (pipeline stages, micro-batches, schedule,
  link, data-parallel replicas), :class:`dse.parallelism.ParallelConfig`.

Metrics: ``speedup`` = job time of plain BP on the reference / job time of the
candidate; ``speedup_same_hw`` = plain BP on the candidate's hardware / the candidate; ``energy_j`` the
candidate job's energy; ``energy_saving`` = 1 - energy / energy of plain BP on the reference (a fraction);
accuracy figures in percent (points for differences) from the training surrogate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from accel import Hardware, HardwareArray, Tech, area_mm2, default_tech, load_tech, peak_power_w
from accel.schedule import ENERGY_KEYS, job_cost, step_costs
from dse import metrics as registry
from dse.errors import UsageError
from dse.parallelism import ParallelConfig, evaluate_parallel, microbatch_size
from dse.schema import check_keys, load_toml, take
from dse.workload import Workload
from models.schemes import scheme_plan
from models.surrogate import SurrogateConfig

__all__ = ["Configuration", "evaluate", "evaluate_hardware", "hardware_metrics", "training_metrics",
           "load_configuration", "plan_key"]


@dataclass(frozen=True)
class Configuration:
    workload: Workload = field(default_factory=Workload)
    training: SurrogateConfig = field(default_factory=SurrogateConfig)
    hardware: Hardware = field(default_factory=Hardware)
    reference: Hardware = field(default_factory=Hardware)
    #: what-if override of the GP fraction (None: from the surrogate)
    gp_fraction: float | None = None
    #: with a what-if GP fraction, still run the surrogate for the accuracy figures
    accuracy: bool = False
    technology: str | None = None
    #: surrogate seeds (0..seeds-1) whose mean accuracy the configuration reports
    seeds: int = 3
    #: the job over several accelerators (None: one accelerator)
    parallel: ParallelConfig | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "workload": self.workload.to_dict(),
            "training": self.training.to_dict(),
            "hardware": self.hardware.to_dict(),
            "reference": self.reference.to_dict(),
        }
        if self.gp_fraction is not None:
            d["schedule"] = {"gp_fraction": self.gp_fraction, "accuracy": self.accuracy}
        if self.technology:
            d["technology"] = self.technology
        d["seeds"] = self.seeds
        if self.parallel is not None:
            d["parallel"] = self.parallel.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict, *, base: Path | None = None, where: str = "") -> "Configuration":
        pre = f"{where}." if where else ""
        check_keys(d, {"workload", "training", "hardware", "reference", "schedule", "technology", "seeds",
                       "meta", "parallel"}, where or "configuration")
        for t in ("workload", "training", "hardware", "reference", "schedule", "meta", "parallel"):
            if t in d and not isinstance(d[t], dict):
                raise UsageError(f"{pre}{t}: expected a table")
        workload = Workload.from_dict(d.get("workload", {}), where=f"{pre}workload", base=base)
        try:
            training = SurrogateConfig.from_dict(d.get("training", {}))
        except ValueError as e:
            raise UsageError(f"{pre}training.{e}") from None
        hw = {}
        for t in ("hardware", "reference"):
            try:
                hw[t] = Hardware.from_dict(d.get(t, {}))
            except (ValueError, TypeError) as e:
                raise UsageError(f"{pre}{t}.{e}") from None
        sched = d.get("schedule", {})
        check_keys(sched, {"gp_fraction", "accuracy"}, f"{pre}schedule")
        gpf = take(sched, "gp_fraction", float, f"{pre}schedule", default=None, low=0.0, high=1.0)
        tech = take(d, "technology", str, where or "configuration", default=None)
        if tech is not None and base is not None and not Path(tech).is_absolute():
            tech = str((base / tech).resolve())
        par = ParallelConfig.from_dict(d["parallel"], f"{pre}parallel") if "parallel" in d else None
        if par is not None:
            try:
                microbatch_size(workload.batch, par)
            except ValueError as e:
                raise UsageError(f"{pre}parallel.{e}") from None
        return cls(workload, training, hw["hardware"], hw["reference"], gpf,
                   take(sched, "accuracy", bool, f"{pre}schedule", default=False), tech,
                   take(d, "seeds", int, where or "configuration", default=3, low=1, high=10), par)


def load_configuration(path: str | Path) -> Configuration:
    """Read a configuration from TOML (or JSON, as ``dse export --format json`` writes it)."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        import json

        try:
            doc = json.loads(p.read_text())
        except OSError as e:
            raise UsageError(f"{p}: cannot be read ({e.strerror})") from None
        except json.JSONDecodeError as e:
            raise UsageError(f"{p}: not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise UsageError(f"{p}: expected one configuration (a JSON object)")
        return Configuration.from_dict(doc, base=p.parent)
    return Configuration.from_dict(load_toml(p), base=p.parent)


def plan_key(training: SurrogateConfig) -> tuple:
    """The training knobs a scheme's cost depends on, as a hashable key (every knob: a scheme reads the ones
    it needs; caching by all of them is exact and cheap)."""
    return tuple(sorted(training.to_dict().items()))


# -- cached workload pieces (pure functions of hashable keys) ------------------------------------------
@lru_cache(maxsize=64)
def _net(model: str, dataset: str | None, args: tuple):
    from models import zoo

    return zoo.build(model, dataset=dataset, **dict(args))


def _key(w: Workload, model: str) -> tuple:
    return (model, w.dataset, tuple(sorted(w.model_args.get(model, {}).items())))


@lru_cache(maxsize=64)
def _ops(key: tuple, batch: int, optimizer: str, word_bytes: int):
    return _net(*key).training_ops(batch, optimizer=optimizer, word_bytes=word_bytes)


@lru_cache(maxsize=256)
def _plan(key: tuple, training: tuple, batch: int, word_bytes: int):
    """The scheme's plan for a model (``training``: :func:`plan_key`); ``None`` for plain BP."""
    cfg = SurrogateConfig.from_dict(dict(training))
    if cfg.scheme == "bp":
        return None
    return scheme_plan(cfg, _net(*key), batch, word_bytes=word_bytes)


@lru_cache(maxsize=16)
def _tech(path: str | None) -> Tech:
    if path is None:
        return default_tech()
    try:
        return load_tech(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"technology: {e}") from None


@lru_cache(maxsize=256)
def _reference(key: tuple, w: Workload, ref: Hardware, tech_path: str | None):
    ops = _ops(key, w.batch, w.optimizer, ref.word_bytes)
    s = step_costs(ops, hw=ref, tech=_tech(tech_path))
    return s.bp, job_cost(s, n_steps=w.steps, scheme="bp")


def evaluate_hardware(cfg: Configuration, gp_fraction: float) -> dict:
    """Time, energy, area and power of ``cfg`` for a given GP fraction (no surrogate): the hardware half."""
    if cfg.parallel is not None:
        return _evaluate_pipeline(cfg, gp_fraction)
    w, tr, hw = cfg.workload, cfg.training, cfg.hardware
    tech = _tech(cfg.technology)
    pk = plan_key(tr)
    scheme = "bp" if tr.scheme == "bp" else None
    rows = []
    for model in w.models:
        key = _key(w, model)
        ops = _ops(key, w.batch, w.optimizer, hw.word_bytes)
        plan = _plan(key, pk, w.batch, hw.word_bytes)
        steps = step_costs(ops, plan=plan, hw=hw, tech=tech)
        job = job_cost(steps, n_steps=w.steps, warmup_frac=tr.warmup, gp_fraction=gp_fraction, scheme=scheme)
        bp_here = job_cost(steps, n_steps=w.steps, scheme="bp")
        ref_step, ref = _reference(key, w, cfg.reference, cfg.technology)
        rows.append({
            **_job_row(model, job, bp_here, ref, w.steps),
            # one accelerator: no pipeline bubble; it holds the whole batch's activation stash
            "bubble_rate": 0.0,
            "peak_act_bytes": float(ops.stash_bytes.sum()),
            "step_ms_bp_ref": ref_step.time_s * 1e3,
            "step_ms_bp": steps.bp.time_s * 1e3,
            "step_ms_scheme_bp": steps.scheme_bp.time_s * 1e3,
            "step_ms_gp": steps.scheme_gp.time_s * 1e3,
            "dram_gb_per_step_bp": steps.bp.dram_bytes / 1e9,
            "dram_gb_per_step_gp": steps.scheme_gp.dram_bytes / 1e9,
            "predictor_params": plan.params if plan is not None else 0,
            "predictor_state": plan.state if plan is not None else 0,
            "predictor_macs_gp_step": int(plan.gp.macs.sum()) if plan is not None else 0,
            "predictor_macs_bp_step": int(plan.train.macs.sum()) if plan is not None else 0,
            **{f"energy_j_{k}": float(job.energy_j[k]) for k in ENERGY_KEYS},
            **{f"energy_j_ref_{k}": float(ref.energy_j[k]) for k in ENERGY_KEYS},
        })
    return _summary(cfg, rows, tech, gp_fraction)


def _evaluate_pipeline(cfg: Configuration, gp_fraction: float) -> dict:
    """:func:`evaluate_hardware` for a job over several accelerators (``[parallel]``)."""
    w = cfg.workload
    tech = _tech(cfg.technology)
    rows = []
    for r in evaluate_parallel(cfg, gp_fraction):
        job, bp = r["job"], r["bp"]
        ref_step, ref = _reference(_key(w, r["model"]), w, cfg.reference, cfg.technology)
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
                                 "dram_gb_per_step_gp")},
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
    col = lambda k: np.array([[r[k]] for r in rows], dtype=np.float64)  # noqa: E731 - (models, 1)
    q = {k: col(k) for k in _PER_MODEL}
    q["samples"] = np.array([[r["steps"] * cfg.workload.batch] for r in rows], dtype=np.float64)
    q["area_mm2"] = np.array([area_mm2(cfg.hardware, tech)], dtype=np.float64)
    metrics = {k: float(v[0]) for k, v in registry.compute(q, only=lambda m: m.per_hardware).items()}
    summary = {
        "speedup_geomean": metrics["speedup"],
        "speedup_same_hw_geomean": metrics["speedup_same_hw"],
        "energy_j": metrics["energy_j"],
        "energy_j_ref": sum(r["energy_j_ref"] for r in rows),
        "energy_saving_total": metrics["energy_saving"],
        "area_mm2": metrics["area_mm2"],
        "area_mm2_ref": float(area_mm2(cfg.reference, tech)),
        "power_w": metrics["power_w"],
        "peak_power_w": float(peak_power_w(cfg.hardware, tech)),
        "gp_fraction": gp_fraction,
        "warmup": cfg.training.warmup,
        "models": len(rows),
        "throughput": metrics["throughput"],
        "bubble_rate": metrics["bubble_rate"],
        "peak_act_bytes": metrics["peak_act_bytes"],
        "devices": cfg.parallel.devices if cfg.parallel is not None else 1,
    }
    return {"models": rows, "summary": summary, "metrics": metrics}


#: the per-model quantities (dse.metrics.QUANTITIES) a model row carries under the same name
_PER_MODEL = ("time_s", "time_s_bp", "time_s_ref", "energy_j", "energy_j_ref", "bubble_rate", "peak_act_bytes")


def hardware_metrics(cfg: Configuration, hws: HardwareArray, gp_fraction: float) -> dict[str, np.ndarray]:
    """The per-hardware metrics (:func:`dse.metrics.per_hardware`) of ``cfg``'s training knobs over many
    accelerators at once (arrays (H,)).

    The registry's formulas, as in :func:`evaluate_hardware`, on per-model arrays over ``hws``, with no
    Python loop over configurations: for inner searches over thousands of hardware points per trained
    configuration.
    """
    if cfg.parallel is not None:
        raise UsageError("parallel: the vectorized hardware search (strategy hybrid) costs one accelerator; "
                         "search a [parallel] job with strategy = \"joint\"")
    w, tr = cfg.workload, cfg.training
    tech = _tech(cfg.technology)
    pk = plan_key(tr)
    scheme = "bp" if tr.scheme == "bp" else None
    M, H = len(w.models), len(hws)
    q = {k: np.zeros((M, H)) for k in ("time_s", "time_s_bp", "energy_j", "bubble_rate", "peak_act_bytes")}
    q["time_s_ref"], q["energy_j_ref"] = np.zeros((M, 1)), np.zeros((M, 1))
    q["samples"] = np.full((M, 1), float(w.steps * w.batch))
    for i, model in enumerate(w.models):
        key = _key(w, model)
        _, ref = _reference(key, w, cfg.reference, cfg.technology)
        q["time_s_ref"][i], q["energy_j_ref"][i] = ref.time_s, ref.energy_total_j
        for wb in np.unique(hws.word_bytes):
            idx = np.flatnonzero(hws.word_bytes == wb)
            sub = hws.take(idx)
            ops = _ops(key, w.batch, w.optimizer, int(wb))
            steps = step_costs(ops, plan=_plan(key, pk, w.batch, int(wb)), hw=sub, tech=tech)
            job = job_cost(steps, n_steps=w.steps, warmup_frac=tr.warmup, gp_fraction=gp_fraction,
                           scheme=scheme)
            bp_here = job_cost(steps, n_steps=w.steps, scheme="bp")
            q["time_s"][i, idx] = job.time_s
            q["time_s_bp"][i, idx] = bp_here.time_s
            q["energy_j"][i, idx] = job.energy_total_j
            q["peak_act_bytes"][i, idx] = float(ops.stash_bytes.sum())  # one accelerator: no bubble
    q["area_mm2"] = np.asarray(area_mm2(hws, tech), dtype=np.float64)
    return registry.compute(q, only=lambda m: m.per_hardware)


def training_metrics(surrogate: dict | None, gp_fraction: float) -> dict[str, float]:
    """The metrics that do not depend on the hardware: the GP fraction, and the surrogate's figures when it
    ran (``surrogate``: the surrogate's result as a dict, or None)."""
    q: dict[str, Any] = {"gp_fraction": gp_fraction}
    if surrogate is not None:
        q["surrogate"] = surrogate
        q["controls"] = tuple(surrogate.get("controls", ()))
    return registry.compute(q, only=lambda m: not m.per_hardware)


def evaluate(cfg: Configuration, *, seeds: tuple[int, ...] | None = None,
             metrics: list[str] | None = None) -> dict:
    """Every metric of ``cfg``: the surrogate (cached) for accuracy and GP fraction, then the hardware.

    ``metrics``: the metrics the caller needs (a study: its objectives and constraints); the surrogate then
    runs only the controls they need (:func:`dse.metrics.controls_for`), and metrics that need others are
    left out. Default: every metric, every control.

    Returns ``{"models": [...], "summary": {...}, "metrics": {...}, "surrogate": {...} | None}`` where
    ``metrics`` holds every metric of :mod:`dse.metrics` that applies (accuracy figures only when the
    surrogate ran).
    """
    sur = None
    seeds = tuple(range(cfg.seeds)) if seeds is None else seeds
    if cfg.gp_fraction is None or cfg.accuracy:
        from models.surrogate import evaluate as run_surrogate

        from models.surrogate.evaluate import CONTROLS

        controls = CONTROLS if metrics is None else registry.controls_for(metrics)
        sur = run_surrogate(cfg.training, seeds=seeds, controls=controls).to_dict()
    gpf = cfg.gp_fraction if cfg.gp_fraction is not None else float(sur["gp_fraction"])
    if cfg.training.scheme == "bp":
        gpf = 0.0
    out = evaluate_hardware(cfg, gpf)
    out["metrics"] = {**out["metrics"], **training_metrics(sur, gpf)}
    if sur is not None:
        out["proxy"] = sur["proxy"]  # the accuracy figures are this proxy's, not the zoo models'
    out["surrogate"] = sur
    return out
