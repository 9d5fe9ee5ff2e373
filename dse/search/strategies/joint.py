"""The joint strategy: Optuna's sampler proposes every knob, training and hardware; one trial per step."""

from __future__ import annotations

from dse.search.strategies.base import Strategy

__all__ = ["Joint"]


class Joint(Strategy):
    """Optuna's sampler proposes every knob, training and hardware; one trial per step (the runner's
    objective, :func:`dse.search.study.trial_objective`)."""

    name = "joint"
    summary = "Optuna samples every knob"

    def step(self) -> bool:
        from dse.search.study import optimize_one  # (deferred: a study file is read without importing Optuna)

        r = self.runner
        optimize_one(r.study, r.objective)
        return True
