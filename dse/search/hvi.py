"""The hybrid's ``hvi`` outer selection (``sampler = "hvi"``, hybrid strategy only): the next training
setting to train is the one whose whole hardware sub-front promises the most hypervolume.

A training setting's hardware objectives (speed-up, energy, area...) are known before it is trained: the
accelerator model costs its hardware grid in milliseconds. Only its training objectives (the accuracy figures)
need the surrogate. So each untrained setting of the grid is scored by the **expected hypervolume
improvement** of its sub-front over the study's current front, its training objectives drawn from a
**Bayesian additive model** learned from the settings trained so far:

* the model: a constant plus one effect per level of each training knob (one-hot levels), a Gaussian prior
  on the effects and Gaussian noise, their scales chosen by the marginal likelihood on a small grid (in units
  of the trained values' spread) once :data:`HVI_MIN_FIT` settings are trained;
* the expectation: Gauss-Hermite quadrature over each training objective's predictive distribution, its
  spread widened by :data:`HVI_OPTIMISM` (an untrained setting may be a lucky one);
* the first :data:`HVI_STARTUP` settings (``startup_trials`` in the study file) are drawn at random.

Several training objectives are drawn together (one quadrature node moves each toward its better side by as
many standard deviations), an approximation. Constraints are read on the hardware metrics only (a constraint
on a training metric is not known before training). No Optuna here: the hybrid strategy
(:mod:`dse.search.strategies.hybrid`) asks :meth:`HviSelector.next` for a setting and enqueues it in its
outer study; ``bench/search_quality.py`` drives the same class on its exhaustive table, where it was measured
against the true front (``docs/search.md``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import moocore
import numpy as np

from dse.search.pareto import hypervolume_of

__all__ = ["HviSelector", "AdditiveModel", "one_hot", "standardized", "posterior", "HVI_STARTUP", "HVI_OPTIMISM",
           "HVI_MIN_FIT", "HVI_MAX_SETTINGS"]

#: settings drawn at random before the model chooses
HVI_STARTUP = 6
#: the predictive standard deviation is widened by this factor in the expectation
HVI_OPTIMISM = 1.5
#: trained settings from which the prior and noise scales are fitted (marginal likelihood)
HVI_MIN_FIT = 8
#: the largest grid of training settings it scores (each costed on the hardware candidates once per run)
HVI_MAX_SETTINGS = 4096
_HVI_TAUS = (0.3, 0.5, 0.75, 1.0, 1.5, 2.0)  # multiples of the trained values' standard deviation
_HVI_SIGMAS = (0.15, 0.25, 0.35, 0.45, 0.55, 0.7)
_HVI_NODES = 7


def one_hot(settings: Sequence[dict]) -> np.ndarray:
    """A constant column and one column per level of each knob (levels compared by ``repr``)."""
    knobs = list(settings[0])
    levels = [sorted({repr(s[k]) for s in settings}) for k in knobs]
    return np.array([[1.0] + [float(repr(s[k]) == v) for k, lv in zip(knobs, levels) for v in lv]
                     for s in settings])


def standardized(y: np.ndarray) -> tuple[float, np.ndarray]:
    """``y`` in units of its spread, centred: (the unit, the standardized values). The unit is the sample std
    (one value, or all equal: a tenth of their size)."""
    spread = float(np.std(y, ddof=1)) if len(y) > 1 else 0.0
    size = float(np.abs(y).max())
    scale = spread if spread > 1e-9 * size else (0.1 * size or 1.0)  # rounding leaves equal values ~1e-17 apart
    return scale, (y - y.mean()) / scale


def posterior(Xt: np.ndarray, y: np.ndarray, prior: np.ndarray, noise_var: float) -> tuple[np.ndarray, np.ndarray]:
    """Bayesian linear regression: the posterior mean and covariance of the weights, given the design ``Xt``,
    the values ``y``, the weights' independent prior variances ``prior`` and the noise variance."""
    cov = np.linalg.inv(np.diag(1.0 / prior) + Xt.T @ Xt / noise_var)
    return cov @ (Xt.T @ y / noise_var), cov


class AdditiveModel:
    """Bayesian linear regression on one-hot knob levels (see the module's docstring)."""

    def __init__(self, X: np.ndarray) -> None:
        self.X = X

    def _prior(self, tau: float) -> np.ndarray:
        return np.array([1e4] + [tau ** 2] * (self.X.shape[1] - 1))

    def _log_evidence(self, rows: np.ndarray, y: np.ndarray, tau: float, sigma: float) -> float:
        Xt = self.X[rows]
        C = (Xt * self._prior(tau)) @ Xt.T + sigma ** 2 * np.eye(len(rows))
        _, logdet = np.linalg.slogdet(C)
        return -0.5 * float(y @ np.linalg.solve(C, y) + logdet)

    def predict(self, rows: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and standard deviation (noise included) of every row of ``X``, given the values
        ``y`` of ``rows``."""
        scale, yc = standardized(y)  # the trained values' spread is the unit
        tau, sigma = 1.0, 0.5
        if len(rows) >= HVI_MIN_FIT:
            tau, sigma = max(((t, s) for t in _HVI_TAUS for s in _HVI_SIGMAS),
                             key=lambda ts: self._log_evidence(rows, yc, *ts))
        mu, var = self.predictive(rows, yc, tau, sigma)
        return y.mean() + scale * mu, scale * np.sqrt(var)

    def predictive(self, rows: np.ndarray, yc: np.ndarray, tau: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
        """Every row's predictive mean and variance (noise included) given the standardized values ``yc`` of
        ``rows``, for the prior scale ``tau`` and the noise ``sigma`` (both in units of the values' spread)."""
        mean, cov = posterior(self.X[rows], yc, self._prior(tau), sigma ** 2)
        return self.X @ mean, np.einsum("ij,jk,ik->i", self.X, cov, self.X) + sigma ** 2


class HviSelector:
    """Chooses the next training setting to train (see the module's docstring).

    ``settings``: every training setting of the grid; ``points(i)``: setting ``i``'s feasible sub-front as an
    array (points, objectives) in the study's objectives and directions, its training columns anything (they
    are filled in here), or an empty array when it has no feasible point; ``training``: the indices of the
    training objectives; ``reference``: the study's hypervolume reference point.
    """

    def __init__(self, settings: Sequence[dict], points: Callable[[int], np.ndarray], directions: Sequence[str],
                 reference: Sequence[float], training: Sequence[int], *, startup: int = HVI_STARTUP,
                 optimism: float = HVI_OPTIMISM) -> None:
        self.settings = list(settings)
        self._points = points
        self._cache: dict[int, np.ndarray] = {}
        self.sign = np.array([-1.0 if d == "maximize" else 1.0 for d in directions])
        self.ref = np.asarray(reference, dtype=np.float64) * self.sign  # all minimised from here on
        self._minimised = ["minimize"] * len(self.sign)
        self.training = list(training)
        self.startup, self.optimism = startup, optimism
        self.model = AdditiveModel(one_hot(self.settings))

    def points(self, i: int) -> np.ndarray:
        if i not in self._cache:
            p = np.asarray(self._points(i), dtype=np.float64)
            self._cache[i] = p.reshape(-1, len(self.sign)) * self.sign
        return self._cache[i]

    def _hv(self, x: np.ndarray) -> float:
        return hypervolume_of(x, self._minimised, self.ref)

    def minimised_front(self, front: np.ndarray) -> np.ndarray:
        """The non-dominated points of ``front`` (objective values, study directions) that improve on the
        reference point in every objective, every objective minimised (maximised ones negated)."""
        f = np.asarray(front, dtype=np.float64).reshape(-1, len(self.sign)) * self.sign
        f = f[(f < self.ref).all(axis=1)]
        return f[moocore.is_nondominated(f)] if len(f) else f

    def next(self, trained: dict[int, Sequence[float]], taken: set[int], front: np.ndarray,
             rng: np.random.Generator) -> int | None:
        """The setting to train next, or None when every setting is trained or taken.

        ``trained``: setting index -> its training objectives' values (in ``training``'s order); ``taken``:
        settings not to propose (trained, being trained by another worker, failed); ``front``: the study's
        feasible points (objective values, study directions) -- every point may be given, the dominated ones
        are dropped here."""
        free = [i for i in range(len(self.settings)) if i not in taken and i not in trained]
        if not free:
            return None
        if not trained or len(trained) < self.startup:
            return int(rng.choice(free))
        rows = np.array(sorted(trained))
        y = np.array([list(trained[i]) for i in rows], dtype=np.float64).reshape(len(rows), len(self.training))
        preds = []
        for c in range(y.shape[1]):
            ok = np.isfinite(y[:, c])  # an infinite value says nothing of the knobs' effects: left out
            if not ok.any():
                return int(rng.choice(free))
            preds.append(self.model.predict(rows[ok], y[ok, c]))
        f = self.minimised_front(front)
        base = self._hv(f)
        z, w = np.polynomial.hermite_e.hermegauss(_HVI_NODES) if self.training else (np.zeros(1), np.ones(1))
        w = w / w.sum()
        order = np.argsort(z)  # the most favourable draw first: the improvement only shrinks after it
        gains = np.zeros(len(free))
        for n, i in enumerate(free):
            p = self.points(i)
            if not len(p):  # no feasible point to score: chosen only when no other setting is left
                gains[n] = -1.0
                continue
            gain = 0.0
            for k in order:
                q = p.copy()
                for c, (mu, sd) in zip(self.training, preds):
                    # minimised: a favourable draw is a low value (maximised objectives were negated)
                    q[:, c] = self.sign[c] * mu[i] + self.optimism * sd[i] * z[k]
                g = self._hv(np.vstack([f, q])) - base
                if not g > 0:  # nothing gained (NaN: an infinite volume on both sides says nothing)
                    break
                gain += w[k] * g
            gains[n] = gain
        # the largest expected gain (ties, and nothing promising any gain, drawn at random among them)
        top = np.flatnonzero(gains == gains.max())
        return int(free[top[0]] if len(top) == 1 else free[int(rng.choice(top))])
