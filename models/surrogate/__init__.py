"""Lightweight training surrogate: real numpy training with BP and the gradient schemes of
:mod:`models.schemes` (adagp, efb, local, dni), each against the null, null-momentum and
truncated controls.

Public surface::

    from models.surrogate import SurrogateConfig, evaluate
    res = evaluate(SurrogateConfig(), seeds=(0, 1, 2))
    res.to_dict()["predictor_gain"], res.to_dict()["gain_vs_truncated"]

Numpy only (no torch, no Optuna). See ``docs/surrogate.md``.
"""

from models.surrogate.config import NETWORKS, SCHEMES, TASKS, SurrogateConfig, load_training_table
from models.surrogate.evaluation import CACHE_VERSION, SurrogateResult, evaluate
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
