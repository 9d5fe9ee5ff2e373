"""Training over several accelerators: a configuration with a ``[parallel]`` table (:mod:`dse.config.parallel`),
costed as a pipeline of accelerators.

The table's fields (stages, micro-batches, schedule, chunks, link, replicas) are documented there; each is a
knob that ``[space.parallel]`` searches (parameter names ``parallel.stages`` and so on). With the table
present, the candidate's job is costed by :func:`accel.pipeline.pipeline_job` on ``stages x replicas``
accelerators: ``speedup`` = the reference accelerator's plain-BP job time (one device, as without the table) /
the pipeline job's time; ``speedup_same_hw`` = the same pipeline running plain BP / the candidate;
``energy_j`` the whole system's job energy (every device's ops, every device's leakage over the whole job --
idle devices leak in the bubbles -- and the link energy per byte from the technology table); ``area_mm2``
stays the area of one accelerator. The workload's ``batch`` is the global batch of a step, so a job has the
same steps as on one device; each micro-batch holds ``batch / (replicas * microbatches)`` samples (it must divide).

Metrics of every configuration (one device without the table): ``throughput`` (training samples per second
over the job), ``bubble_rate`` (idle share of the devices' time in the steps; 0 on one device) and
``peak_act_bytes`` (the largest activation stash one device holds; on one device, the batch's stash).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from accel import Hardware
from accel.pipeline import Link, ModelPipeline, model_pipeline, pipeline_job
from dse.config.configuration import plan_key
from dse.config.parallel import microbatch_size
from dse.errors import UsageError
from dse.evaluation.workloads import model_key, net, scheme_plan_of, technology, training_ops

__all__ = ["model_stages", "evaluate_parallel"]


@lru_cache(maxsize=64)
def _layer_bytes(net_key: tuple, mb: int, word_bytes: int):
    layers = net(*net_key).layers
    out = np.array([math.prod(l.out) * mb * word_bytes for l in layers], dtype=np.float64)
    par = np.array([l.params * word_bytes for l in layers], dtype=np.float64)
    return out, par


@lru_cache(maxsize=64)
def _model_stages_cached(net_key: tuple, mb: int, optimizer: str, training: tuple, hw: Hardware, stages: int,
                         chunks: int, link: Link, tech_path: str | None) -> ModelPipeline:
    ops = training_ops(net_key, mb, optimizer, hw.word_bytes)
    plan = scheme_plan_of(net_key, training, mb, hw.word_bytes)
    out, par = _layer_bytes(net_key, mb, hw.word_bytes)
    weighted = sum(1 for layer in net(*net_key).layers if layer.gemm is not None and layer.params > 0)
    if stages * chunks > weighted:  # a stage without a conv or linear layer: a lone norm, ReLU or pool
        what = f"{stages} stages" + (f" x {chunks} chunks" if chunks > 1 else "")
        raise ValueError(f"stages: {what} need at least as many weight layers; {net_key[0]} has {weighted}")
    # the scheme's own gradients (fp32, as its Adam state) are all-reduced by data-parallel replicas
    pred_bytes = 4.0 * plan.params if plan is not None else 0.0
    return model_pipeline(ops, stages=stages, hw=hw, chunks=chunks, out_bytes=out, param_bytes=par, link=link,
                          plan=plan, pred_param_bytes=pred_bytes, tech=technology(tech_path))


def model_stages(cfg, model: str) -> ModelPipeline:
    """``cfg``'s model cut into the stages of its ``[parallel]`` table on its ``[hardware]`` (cached)."""
    par, w = cfg.parallel, cfg.workload
    mb = microbatch_size(w.batch, par)
    try:
        return _model_stages_cached(model_key(w, model), mb, w.optimizer, plan_key(cfg.training), cfg.hardware,
                                    par.stages, par.chunks, par.link, cfg.technology)
    except ValueError as e:
        if str(e).startswith("stages: "):  # more stages than the model has weight layers: an impossible job
            raise UsageError(f"parallel.{e}") from None
        raise


def evaluate_parallel(cfg, gp_fraction: float) -> list[dict]:
    """Per model of ``cfg``'s workload: the candidate's pipeline job (its scheme) and the same pipeline
    running plain BP, as dicts of figures (seconds, joules, bytes)."""
    par, w, tr = cfg.parallel, cfg.workload, cfg.training
    tech = technology(cfg.technology)
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
            "dram_gb_per_step_bp": dram["bp"],
            "dram_gb_per_step_scheme_bp": dram["bp" if scheme == "bp" else "scheme_bp"],
            "dram_gb_per_step_gp": dram["gp"],
        })
    return rows

