"""The cached pieces every evaluation of a configuration is built from: a zoo model's network and training
ops, a scheme's plan for it, the technology table and plain BP on the reference accelerator. Pure functions
of hashable keys, cached; shared by the one-accelerator and the several-accelerator costing."""

from __future__ import annotations

from functools import lru_cache

from accel import Hardware, Tech, default_tech, load_tech
from accel.schedule import job_cost, step_costs
from dse.config.workload import Workload
from dse.errors import UsageError
from models.schemes import scheme_plan
from models.surrogate import SurrogateConfig

__all__ = ["net", "model_key", "training_ops", "scheme_plan_of", "technology", "reference_job"]


@lru_cache(maxsize=64)
def net(model: str, dataset: str | None, args: tuple):
    from models import zoo

    return zoo.build(model, dataset=dataset, **dict(args))


def model_key(w: Workload, model: str) -> tuple:
    return (model, w.dataset, tuple(sorted(w.model_args.get(model, {}).items())))


@lru_cache(maxsize=64)
def training_ops(key: tuple, batch: int, optimizer: str, word_bytes: int):
    return net(*key).training_ops(batch, optimizer=optimizer, word_bytes=word_bytes)


@lru_cache(maxsize=256)
def scheme_plan_of(key: tuple, training: tuple, batch: int, word_bytes: int):
    """The scheme's plan for a model (``training``: :func:`dse.config.configuration.plan_key`); ``None`` for
    plain BP."""
    cfg = SurrogateConfig.from_dict(dict(training))
    if cfg.scheme == "bp":
        return None
    return scheme_plan(cfg, net(*key), batch, word_bytes=word_bytes)


@lru_cache(maxsize=16)
def technology(path: str | None) -> Tech:
    if path is None:
        return default_tech()
    try:
        return load_tech(path)
    except (OSError, ValueError) as e:
        raise UsageError(f"technology: {e}") from None


@lru_cache(maxsize=256)
def reference_job(key: tuple, w: Workload, ref: Hardware, tech_path: str | None):
    ops = training_ops(key, w.batch, w.optimizer, ref.word_bytes)
    s = step_costs(ops, hw=ref, tech=technology(tech_path))
    return s.bp, job_cost(s, n_steps=w.steps, scheme="bp")
