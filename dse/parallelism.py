"""Training over several accelerators: the ``[parallel]`` table of a configuration and its evaluation.

```toml
[parallel]
stages = 4               # pipeline stages, one accelerator each (the [hardware] accelerator)
microbatches = 8         # micro-batches per step; the workload's batch is split over replicas x microbatches
schedule = "zb-h1"       # gpipe, 1f1b, 1f1b-interleaved, zb-h1, zb-h2, 2bp (accel.pipeline.SCHEDULES)
chunks = 1               # model chunks per device (1f1b-interleaved only)
link_gbps = 50.0         # link between neighbouring devices, GB/s (1e9 bytes/s)
link_latency_us = 5.0    # microseconds per transfer
replicas = 1             # data-parallel copies of the pipeline (ring all-reduce of the weight gradients)
```

Every field is a knob: ``[space.parallel]`` searches them like hardware or training knobs (parameter names
``parallel.stages`` and so on). With the table present, the candidate's job is costed by
:func:`accel.pipeline.pipeline_job` on ``stages x replicas`` accelerators: ``speedup`` = the reference
accelerator's plain-BP job time (one device, as without the table) / the pipeline job's time;
``speedup_same_hw`` = the same pipeline running plain BP / the candidate; ``energy_j`` the whole system's
job energy (every device's ops, every device's leakage over the whole job -- idle devices leak in the
bubbles -- and the link energy per byte from the technology table); ``area_mm2`` stays the area of one
accelerator. The workload's ``batch`` is the global batch of a step, so a job has the same steps as on one
device; each micro-batch holds ``batch / (replicas * microbatches)`` samples (it must divide).

Metrics of every configuration (one device without the table): ``throughput`` (training samples per second
over the job), ``bubble_rate`` (idle share of the devices' time in the steps; 0 on one device) and
``peak_act_bytes`` (the largest activation stash one device holds; on one device, the batch's stash).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from functools import lru_cache

import numpy as np

from accel import Hardware
from accel.pipeline import SCHEDULES, Link, ModelPipeline, model_pipeline, pipeline_job
from dse.errors import UsageError
from dse.schema import check_keys, take

__all__ = ["ParallelConfig", "FIELDS", "microbatch_size", "model_stages", "evaluate_parallel"]


@dataclass(frozen=True)
class ParallelConfig:
    """How a job is spread over accelerators (see the module docstring); validated on construction
    (``ValueError`` naming the field)."""

    stages: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    chunks: int = 1
    link_gbps: float = 50.0
    link_latency_us: float = 5.0
    replicas: int = 1

    def __post_init__(self):
        for f in ("stages", "microbatches", "chunks", "replicas"):
            v = getattr(self, f)
            ok = not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
            if not ok or v < 1:
                raise ValueError(f"{f}: must be an integer >= 1, got {v!r}")
            object.__setattr__(self, f, int(v))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: {self.schedule!r} is not a schedule; choose one of {', '.join(SCHEDULES)}")
        if self.chunks > 1 and not SCHEDULES[self.schedule].chunked:
            chunked = [n for n, s in SCHEDULES.items() if s.chunked]
            raise ValueError(f"chunks: {self.schedule} runs one model chunk per device, got {self.chunks} "
                             f"(chunks > 1 needs {', '.join(chunked)})")
        if self.chunks > 1 and self.microbatches % self.stages:
            raise ValueError(f"microbatches: interleaved 1F1B needs a multiple of the {self.stages} stages, "
                             f"got {self.microbatches}")
        for f in ("link_gbps", "link_latency_us"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{f}: must be a number, got {v!r}")
            object.__setattr__(self, f, float(v))
        Link(self.link_gbps, self.link_latency_us)  # validates both

    @property
    def devices(self) -> int:
        return self.stages * self.replicas

    @property
    def link(self) -> Link:
        return Link(self.link_gbps, self.link_latency_us)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "parallel") -> "ParallelConfig":
        if not isinstance(d, dict):
            raise UsageError(f"{where}: expected a table")
        check_keys(d, set(FIELDS), where)
        kw = {}
        for f in fields(cls):
            typ = {int: int, float: float, str: str}[type(f.default)]
            kw[f.name] = take(d, f.name, typ, where, default=f.default)
        try:
            return cls(**kw)
        except ValueError as e:
            raise UsageError(f"{where}.{e}") from None


FIELDS = tuple(f.name for f in fields(ParallelConfig))


def microbatch_size(batch: int, par: ParallelConfig) -> int:
    """Samples per micro-batch; ``ValueError`` when ``batch`` does not split evenly."""
    n = par.replicas * par.microbatches
    if batch % n:
        raise ValueError(f"microbatches: batch {batch} does not split into replicas x microbatches = "
                         f"{par.replicas} x {par.microbatches} equal micro-batches")
    return batch // n


@lru_cache(maxsize=64)
def _layer_bytes(net_key: tuple, mb: int, word_bytes: int):
    from dse.evaluate import _net

    net = _net(*net_key)
    out = np.array([math.prod(l.out) * mb * word_bytes for l in net.layers], dtype=np.float64)
    par = np.array([l.params * word_bytes for l in net.layers], dtype=np.float64)
    return out, par


@lru_cache(maxsize=64)
def _model_stages_cached(net_key: tuple, mb: int, optimizer: str, plan_key: tuple, hw: Hardware, stages: int,
                         chunks: int, link: Link, tech_path: str | None) -> ModelPipeline:
    from dse.evaluate import _ops, _plan, _tech

    ops = _ops(net_key, mb, optimizer, hw.word_bytes)
    plan = _plan(net_key, plan_key, mb, hw.word_bytes)
    out, par = _layer_bytes(net_key, mb, hw.word_bytes)
    if stages * chunks > len(out):
        raise ValueError(f"stages: {stages} stages x {chunks} chunks need at least as many layers; "
                         f"the model has {len(out)}")
    # the scheme's own gradients (fp32, as its Adam state) are all-reduced by data-parallel replicas
    pred_bytes = 4.0 * plan.params if plan is not None else 0.0
    return model_pipeline(ops, stages=stages, hw=hw, chunks=chunks, out_bytes=out, param_bytes=par, link=link,
                          plan=plan, pred_param_bytes=pred_bytes, tech=_tech(tech_path))


def model_stages(cfg, model: str) -> ModelPipeline:
    """``cfg``'s model cut into the stages of its ``[parallel]`` table on its ``[hardware]`` (cached)."""
    from dse.evaluate import _key, plan_key

    par, w = cfg.parallel, cfg.workload
    mb = microbatch_size(w.batch, par)
    return _model_stages_cached(_key(w, model), mb, w.optimizer, plan_key(cfg.training), cfg.hardware,
                                par.stages, par.chunks, par.link, cfg.technology)


def evaluate_parallel(cfg, gp_fraction: float) -> list[dict]:
    """Per model of ``cfg``'s workload: the candidate's pipeline job (its scheme) and the same pipeline
    running plain BP, as dicts of figures (seconds, joules, bytes)."""
    from dse.evaluate import _tech

    par, w, tr = cfg.parallel, cfg.workload, cfg.training
    tech = _tech(cfg.technology)
    scheme = tr.scheme
    rows = []
    for model in w.models:
        mp = model_stages(cfg, model)
        common = dict(n_steps=w.steps, samples_per_step=w.batch, replicas=par.replicas, link=par.link, tech=tech)
        try:
            job = pipeline_job(mp, par.schedule, par.microbatches, scheme=scheme, warmup_frac=tr.warmup,
                               gp_fraction=gp_fraction, **common)
            bp = pipeline_job(mp, par.schedule, par.microbatches, scheme="bp", **common)
        except ValueError as e:
            raise ValueError(f"parallel.{e}") from None
        span = {k: st.span * 1e3 for k, st in job.step.items()}
        dram = {k: par.microbatches * sum(mp.dram_mb_bytes[k]) / 1e9 for k in mp.dram_mb_bytes}
        rows.append({
            "model": model, "job": job, "bp": bp, "stage_starts": list(mp.starts), "imbalance": mp.imbalance,
            # step periods (spans) in the pipeline, ms; DRAM traffic per step summed over the stages, GB
            "step_ms_bp": bp.step["bp"].span * 1e3, "step_ms_scheme_bp": span.get("bp", 0.0),
            "step_ms_gp": span.get("gp", 0.0),
            "dram_gb_per_step_bp": dram["bp" if scheme == "bp" else "adagp_bp"], "dram_gb_per_step_gp": dram["gp"],
        })
    return rows

