"""The joint strategy: Optuna's sampler proposes every knob, training and hardware; one trial per step."""

from __future__ import annotations

import math

from dse.search.strategies.base import Strategy

__all__ = ["Joint"]


class Joint(Strategy):
    """Optuna's sampler proposes every knob, training and hardware; one trial per step (the runner's
    objective, :func:`dse.search.study.trial_objective`)."""

    name = "joint"
    summary = "Optuna samples every knob"
    stop_reason = GRID_DONE = ("the sampler stopped the search: it has nothing left to propose (sampler = \"grid\": "
                               "every point of the space's grid has been tried)")

    @classmethod
    def covered(cls, spec, study) -> str | None:
        """With ``sampler = "grid"``: every point of the grid tried (Optuna's grid sampler marks each trial
        with its ``grid_id``), so more trials would only repeat points."""
        if spec.sampler != "grid":
            return None
        size = math.prod(len(v) for v in spec.space.grid().values())
        tried = {t.system_attrs.get("grid_id") for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
        return cls.GRID_DONE if len(tried - {None}) >= size else None

    def step(self) -> bool:
        from dse.search.study import optimize_one  # (deferred: a study file is read without importing Optuna)

        r = self.runner
        return optimize_one(r.study, r.objective)  # False: the sampler stopped the study (its grid is done)
