"""The joint strategy: Optuna's sampler proposes every knob, training and hardware; one trial per step."""

from __future__ import annotations

import itertools
import math

from dse.search.strategies.base import Strategy

__all__ = ["Joint"]


class Joint(Strategy):
    """Optuna's sampler proposes every knob, training and hardware; one trial per step (the runner's
    objective, :func:`dse.search.study.trial_objective`)."""

    name = "joint"
    summary = "Optuna samples every knob"
    GRID_DONE = "the grid sampler has tried every point of the space's grid (sampler = \"grid\")"
    stop_reason = ("the sampler stopped the search (Optuna's Study.stop): it has nothing left to propose; the grid "
                   "sampler does so once every point of the space's grid has been tried")

    @classmethod
    def covered(cls, spec, study) -> str | None:
        """With ``sampler = "grid"``: every point of the grid tried (by its values, over the trials that
        count: :func:`dse.search.samplers.grid_untried`), so more trials would only repeat points."""
        if spec.sampler != "grid":
            return None
        from dse.search.samplers import grid_untried

        grid = spec.space.grid()
        trials = study.get_trials(deepcopy=False)
        if len(trials) < math.prod(len(v) for v in grid.values()):
            return None  # fewer trials than points (a large grid is not walked point by point to say so)
        left = grid_untried(list(grid), itertools.product(*grid.values()), trials)
        return None if left else cls.GRID_DONE

    def figures(self) -> dict:
        if not self.stopped:
            return {}
        return {"stop_reason": self.covered(self.spec, self.runner.study) or self.stop_reason}

    stopped = False  # the sampler stopped the study

    def step(self) -> bool:
        from dse.search.study import optimize_one  # (deferred: a study file is read without importing Optuna)

        r = self.runner
        self.stopped = not optimize_one(r.study, r.objective)  # the sampler stopped the study (its grid is done)
        return not self.stopped
