"""Search strategies, one module each, in one registry.

* :mod:`.joint`: Optuna samples every knob; one trial per step;
* :mod:`.hybrid`: Optuna samples the training knobs, the vectorized hardware model searches the hardware; one
  trained setting and its sub-front per step.

**Adding a strategy**: subclass :class:`~dse.search.strategies.base.Strategy` in a new module here (declare its
``name``, its ``[study]`` ``options`` and, if it needs them, ``validate``, ``helper_studies``,
``importance_points``; ``queues`` if it queues trials in its helper studies), add it to :data:`STRATEGIES`
below, and write its tests. The study file's ``strategy`` choices, its options, ``dse run --strategy``, the
workers and the plots read this table. A strategy module imports Optuna inside its methods, so that a study file
is validated without importing it.
"""

from __future__ import annotations

from dse.search.strategies.base import Option, Strategy
from dse.search.strategies.hybrid import Hybrid
from dse.search.strategies.joint import Joint

__all__ = ["STRATEGIES", "Strategy", "Option", "strategy_class", "describe_strategies"]

#: name -> strategy class
STRATEGIES: dict[str, type[Strategy]] = {s.name: s for s in (Joint, Hybrid)}


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under ``name`` in :data:`STRATEGIES` (KeyError if none is)."""
    return STRATEGIES[name]


def describe_strategies() -> str:
    """The strategies for ``--help``: "joint (...) or hybrid (...)"."""
    parts = [f"{n} ({s.summary})" if s.summary else n for n, s in STRATEGIES.items()]
    return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else parts[0]
