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
        r = self.runner
        r.study.optimize(r.objective, n_trials=1, catch=(Exception,), gc_after_trial=False)
        return True
