"""The joint strategy: Optuna's sampler proposes every knob, training and hardware; one trial per step."""

from __future__ import annotations

import itertools
import math
import time

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
        # (the grid's last point may be a queued retry the runner evaluated itself, not a step's trial)
        done = self.covered(self.spec, self.runner.study)
        if done:
            return {"stop_reason": done}
        return {"stop_reason": self.stop_reason} if self.stopped else {}

    stopped = False  # the sampler stopped the study

    #: seconds between two looks while every untried point of the grid is held by other trials
    WAIT_S = 0.2

    def step(self) -> bool:
        from dse.search.study import optimize_one  # (deferred: a study file is read without importing Optuna)

        r = self.runner
        outlook = getattr(r.study.sampler, "outlook", None)  # the grid sampler's (dse.search.samplers)
        if outlook is not None:
            seen = outlook(r.study)
            if seen == "done":  # every point tried
                self.stopped = True
                return False
            if seen == "wait":  # every untried point held by another trial, which ends it or fails and is retried
                time.sleep(self.WAIT_S)
                return True
        self.stopped = not optimize_one(r.study, r.objective)  # the sampler stopped the study (its grid is done)
        return not self.stopped
