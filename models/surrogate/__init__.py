"""Lightweight training surrogate: real numpy training with BP, ADA-GP, DNI and the null control.

Public surface::

    from models.surrogate import SurrogateConfig, evaluate
    res = evaluate(SurrogateConfig(), seeds=(0, 1, 2))
    res.to_dict()["predictor_gain"]

Numpy only (no torch, no Optuna). See ``docs/surrogate.md``.
"""

from models.surrogate.config import NETWORKS, SCHEMES, TASKS, SurrogateConfig, load_training_table
from models.surrogate.evaluate import CACHE_VERSION, SurrogateResult, evaluate
from models.surrogate.tasks import CacheError, cache_dir

__all__ = [
    "SurrogateConfig",
    "SurrogateResult",
    "evaluate",
    "cache_dir",
    "CacheError",
    "load_training_table",
    "TASKS",
    "NETWORKS",
    "SCHEMES",
    "CACHE_VERSION",
]
