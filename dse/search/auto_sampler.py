"""The ``auto`` sampler: OptunaHub's AutoSampler rule for multi-objective studies, written here from its
published rule (no download at run time; OptunaHub's package also needs torch and cmaes, which dse does not):

* before the first complete trial: random;
* below :data:`SWITCH_AT` complete trials: multivariate TPE with the constant liar (workers that ask while
  others are still running are steered away from the running trials' points). AutoSampler uses a GP sampler
  instead when every knob is numerical and there are at most 3 objectives; dse's knobs are mostly
  categorical and Optuna's GP sampler needs torch, so TPE throughout;
* from :data:`SWITCH_AT` complete trials on: NSGA-II, NSGA-III from 4 objectives, whose first generation is
  every trial sampled before the switch (each is marked generation 0 when it is sampled, as AutoSampler does).

This module imports Optuna at module level; :mod:`dse.search.samplers` imports it only when the sampler is
built.
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.samplers import BaseSampler, NSGAIIISampler, NSGAIISampler, RandomSampler, TPESampler
from optuna.trial import TrialState

__all__ = ["AutoRuleSampler", "SWITCH_AT"]

#: complete trials after which the evolutionary sampler takes over (AutoSampler's budget for TPE and GP)
SWITCH_AT = 250


class AutoRuleSampler(BaseSampler):
    """Random, then multivariate TPE with the constant liar, then NSGA-II / NSGA-III (see the module's
    docstring). ``population``: the evolutionary sampler's population (None: Optuna's default);
    ``startup``: TPE's random startup trials."""

    def __init__(self, *, seed: int | None = None, population: int | None = None, startup: int = 10,
                 switch_at: int = SWITCH_AT) -> None:
        seed = 0 if seed is None else int(seed)
        self._random = RandomSampler(seed=seed)
        self._tpe = TPESampler(seed=seed + 1, multivariate=True, constant_liar=True, n_startup_trials=startup)
        self._seed, self._population, self._switch_at = seed, population, switch_at
        self._evo: BaseSampler | None = None
        self._by_trial: dict[int, BaseSampler] = {}  # trial id -> the sampler chosen for it in before_trial

    def _evolutionary(self, study: optuna.Study) -> BaseSampler:
        if self._evo is None:
            kw: dict[str, Any] = {"seed": self._seed + 2}
            if self._population is not None:
                kw["population_size"] = self._population
            if len(study.directions) >= 4:
                import warnings

                with warnings.catch_warnings():  # experimental notice
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    self._evo = NSGAIIISampler(**kw)
            else:
                self._evo = NSGAIISampler(**kw)
        return self._evo

    def _current(self, study: optuna.Study) -> BaseSampler:
        complete = len(study._get_trials(deepcopy=False, states=(TrialState.COMPLETE,), use_cache=True))
        if complete == 0:
            return self._random
        if complete < self._switch_at:
            return self._tpe
        return self._evolutionary(study)

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        sampler = self._current(study)
        if not isinstance(sampler, (NSGAIISampler, NSGAIIISampler)):
            # the evolutionary sampler later reads these trials as its first generation
            key = (NSGAIIISampler if len(study.directions) >= 4 else NSGAIISampler)._get_generation_key()
            study._storage.set_trial_system_attr(trial._trial_id, key, 0)
        study._storage.set_trial_system_attr(trial._trial_id, "auto:sampler", type(sampler).__name__)
        self._by_trial[trial._trial_id] = sampler
        sampler.before_trial(study, trial)

    def _of(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> BaseSampler:
        sampler = self._by_trial.get(trial._trial_id)
        return sampler if sampler is not None else self._current(study)

    def infer_relative_search_space(self, study, trial):
        return self._of(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._of(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._of(study, trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._of(study, trial).after_trial(study, trial, state, values)
        self._by_trial.pop(trial._trial_id, None)

    def reseed_rng(self) -> None:
        self._random.reseed_rng()
        self._tpe.reseed_rng()
        if self._evo is not None:
            self._evo.reseed_rng()
