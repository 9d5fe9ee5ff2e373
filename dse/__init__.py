"""dse: design-space exploration of adaptive gradient prediction (ADA-GP) training on DNN accelerators.

The public API (keyword arguments after the study; details in :mod:`dse.api`)::

    import dse
    spec = dse.load_study("studies/quickstart.toml")   # a study file, validated
    dse.run(spec)                                      # to its budget, with its strategy (workers=N: N processes)
    study = dse.open_study(spec)                       # the stored study
    study.front()                                      # the feasible Pareto front, a pandas DataFrame
    study.export(knee=True)                            # TOML that `dse evaluate` reproduces exactly
    study.show(3), study.plot(), study.report()        # as dse show / plot / report
    study.close()                                      # its database connections (or: with dse.open_study(...))
    dse.evaluate(dse.load_configuration("knee.toml"))  # every metric of one configuration
    dse.compare([spec, other]), dse.sweep(cfg, {"hardware.rows": [16, 32]})  # as dse compare / sweep

Extension points, one place each: metrics (:mod:`dse.evaluation.metrics`), search strategies
(:mod:`dse.search.strategies`), samplers (:mod:`dse.search.samplers`).
Names are imported on first use, so ``import dse`` stays light (the CLI checks files before importing Optuna).
"""

from __future__ import annotations

__version__ = "0.1.0"

from dse.config.configuration import Configuration, load_configuration
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate

_API = ("load_study", "run", "open_study", "Study", "configuration", "StudySpec", "Point", "compare", "sweep")

__all__ = ["__version__", "UsageError", "evaluate", "Configuration", "load_configuration", *_API]


def __dir__() -> list[str]:  # tab completion offers the names imported on first use too
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str):
    if name in _API:
        from dse import api

        return getattr(api, name)
    raise AttributeError(f"module 'dse' has no attribute {name!r}")
