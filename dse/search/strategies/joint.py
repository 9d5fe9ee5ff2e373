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
        if self.held:
            return {"stop_reason": self.held}
        return {"stop_reason": self.stop_reason} if self.stopped else {}

    stopped = False  # the sampler stopped the study
    held = None  # why the run left untried grid points to other machines' running trials

    #: seconds between two looks while every untried point of the grid is held by other trials (doubling from
    #: the first to the second)
    WAIT_S = (0.2, 2.0)
    #: seconds a run waits while the untried points are held by running trials of another machine (whose
    #: process nothing here can see) before it ends and leaves them to those
    HELD_WAIT_S = 30.0
    _waiting_since: float | None = None

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
                return self._wait(r.study)
            self._waiting_since = None
        self.stopped = not optimize_one(r.study, r.objective)  # the sampler stopped the study (its grid is done)
        return not self.stopped

    def _wait(self, study) -> bool:
        """Wait a little for the held points (True), or end the run (False) once they have been held by other
        machines' running trials for :attr:`HELD_WAIT_S` (a study copied from another machine, a node that was
        lost: nothing here fails them)."""
        now = time.monotonic()
        if self._waiting_since is None:
            self._waiting_since, self._pause = now, self.WAIT_S[0]
        elif now - self._waiting_since > self.HELD_WAIT_S:
            elsewhere = study.sampler.held_elsewhere(study)
            if elsewhere:
                names = ", ".join(f"{n} ({who or 'no owner recorded'})" for n, who in elsewhere[:5])
                self.held = (f"every untried grid point is held by a running trial of another machine (trial "
                             f"{names}) that has not ended in {self.HELD_WAIT_S:g} s: this run leaves those points "
                             "to it; if its process is gone, mark the trial failed (Python: dse.open_study(FILE)"
                             ".optuna.tell(N, state=optuna.trial.TrialState.FAIL)) and run again")
                self.stopped = True
                return False
        time.sleep(self._pause)
        self._pause = min(2 * self._pause, self.WAIT_S[1])
        return True
