"""The public Python API (re-exported by :mod:`dse`); the command line is a thin layer over it.

>>> import dse
>>> spec = dse.load_study("studies/quickstart.toml")  # doctest: +SKIP
>>> result = dse.run(spec)                  # to its budget, with its strategy; workers=N for N processes
>>> result["finished"] == spec.trials
True
>>> study = dse.open_study(spec)            # the stored study, checked against the file
>>> front = study.front()                   # the feasible Pareto front, a pandas DataFrame (NaN where absent)
>>> every = study.trials()                  # every trial: state, feasible, on_front, metrics, knobs, reason
>>> list(front.columns[:1 + len(spec.metrics)]) == ["trial", *spec.metrics]
True
>>> knee = study.select(knee=True)[0]       # a Point: trial number, metrics, knobs, configuration
>>> text = study.export(knee=True)          # TOML that `dse evaluate` reads back
>>> again = dse.evaluate(dse.configuration(knee))["metrics"]   # every metric, every surrogate control
>>> {m: again[m] for m in knee.metrics} == knee.metrics           # what the study recorded, to the last digit
True
>>> study.close()                           # its database connections (or: with dse.open_study(spec) as study:)

Every function takes keyword arguments after the study (``storage``: a storage URL, default a SQLite file
beside the study file; see :mod:`dse.search.study`). ``tests/dse/test_api.py`` runs this example (on a small study).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from dse.config.configuration import Configuration, load_configuration
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate
from dse.search.pareto import Point
from dse.search.studyfile import StudySpec, load_study

__all__ = ["load_study", "run", "open_study", "Study", "evaluate", "configuration", "load_configuration",
           "Configuration", "StudySpec", "Point"]


def _integer(name: str, v: Any, lo: int) -> int | None:
    """``v`` (None passes) checked as an integer >= ``lo``, the argument named as the CLI names its option."""
    import numbers

    if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo):
        raise UsageError(f"{name}: must be an integer >= {lo}, got {v!r}")
    return None if v is None else int(v)


def _listed(name: str, v: Any) -> list | None:
    """A list argument given as one string (``where="speedup>=1"``) is a list of that one string."""
    if v is None or isinstance(v, str):
        return None if v is None else [v]
    try:
        return list(v)
    except TypeError:
        raise UsageError(f"{name}: a list of strings (or one string), got {v!r}") from None


def _spec(spec: Any) -> StudySpec:
    if isinstance(spec, (str, Path)):
        return load_study(spec)
    if not isinstance(spec, StudySpec):
        raise UsageError(f"spec: a StudySpec (dse.load_study(path)) or the path of a study file, got "
                         f"{type(spec).__name__}")
    return spec


def run(spec: StudySpec | str | Path, *, storage: str | None = None, trials: int | None = None,
        timeout: float | None = None, workers: int | None = None, progress: Callable[[dict], None] | None = None,
        quiet: bool = True, accept_changes: bool = False, sampler: Any = None, **kw: Any):
    """Run (or resume) the study (a :class:`StudySpec` or the path of its file) to its budget with its strategy
    (``spec.strategy``).

    ``workers`` (default: the file's ``[study] workers``, else 1) > 1 starts that many local ``dse worker``
    processes on one storage (by default a journal file beside the study file) sharing the budget exactly;
    ``quiet=False`` then shows one progress bar. ``progress(figures)`` (one process) is called after each
    step. Returns a dict-like result: ``finished``,
    ``budget``, ``complete``, ``front``, ``hypervolume``, ``recent`` (what the latest 10% of the complete
    trials added to the hypervolume: :func:`dse.search.pareto.recent_gain`), ``interrupted``, ``storage``,
    ``failed`` and the strategy's own figures (hybrid: ``surrogate_runs``, ``exhausted``). ``sampler``: an
    Optuna sampler instance (any ``optuna.samplers.BaseSampler``, used as given with its own seed) instead of the file's
    ``sampler``, in one process; or a sampler's name (:mod:`dse.search.samplers` lists them). Extra keyword
    arguments go to :func:`dse.search.runner.run_study` (``worker``, ``heartbeat``, ``stop``, ``strategy``).
    """
    import numbers

    spec = _spec(spec)
    trials, workers = _integer("trials", trials, 1), _integer("workers", workers, 1)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                or not timeout >= 0):
        raise UsageError(f"timeout: must be a number of seconds >= 0, got {timeout!r}")
    if trials is not None:
        spec = spec.with_overrides(trials=trials)
    workers = spec.workers if workers is None else workers
    if isinstance(sampler, str):  # a name: as the study file's `sampler` (checked there)
        spec, sampler = spec.with_overrides(sampler=sampler), None
    if workers > 1:
        from dse.search.workers import run_workers

        if sampler is not None:
            raise UsageError("sampler: a sampler instance runs in this process only; use workers=1, or name a "
                             "sampler in the study file for worker processes")
        return run_workers(spec, workers=workers, storage=storage, timeout=timeout, quiet=quiet,
                           accept_changes=accept_changes)
    from dse.search.runner import run_study

    return run_study(spec, storage=storage, timeout=timeout, progress=progress, accept_changes=accept_changes,
                     sampler=sampler, **kw)


def open_study(spec: StudySpec | str | Path, *, storage: str | None = None) -> "Study":
    """The stored study of ``spec`` (a :class:`StudySpec` or the path of its file), read-only (its Optuna study
    carries a plain random sampler, not the file's: reading never samples; ``dse.run`` searches). Close it when
    done (:meth:`Study.close`, or ``with dse.open_study(spec) as study:``): on PostgreSQL its pool holds server
    connections until then (or until the collector frees it)."""
    if not isinstance(spec, StudySpec):
        spec = load_study(spec)
    from dse.search.study import open_study as _open, storage_url

    return Study(spec, _open(spec, storage, create=False), storage_url(spec, storage))


def configuration(point: Point) -> Configuration:
    """The full configuration of a trial (what ``dse export`` writes and ``dse evaluate`` reads)."""
    if not isinstance(point, Point):
        raise UsageError(f"point: a Point (study.select(...), study.points()), got {type(point).__name__}; a "
                         "configuration file is read with dse.load_configuration(path)")
    return Configuration.from_dict(point.config)


class Study:
    """A stored study with the file it was made from: its points, front, status and exports."""

    def __init__(self, spec: StudySpec, study, url: str) -> None:
        self.spec, self._study, self._url = spec, study, url

    def close(self) -> None:
        """Close the storage's pooled database connections now (PostgreSQL: connections the server holds open)
        rather than when the garbage collector finds them. The study stays readable: its next read connects
        again. ``with dse.open_study(spec) as study:`` closes it at the block's end."""
        from dse.search.study import close_study

        close_study(self._study)

    def __enter__(self) -> "Study":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def optuna(self):
        """The underlying :class:`optuna.Study` (for Optuna's own tools and visualizations)."""
        return self._study

    def points(self) -> list[Point]:
        """Every complete trial as a :class:`Point` (feasibility by the study's constraints)."""
        from dse.search.study import load_points

        return load_points(self._study, self.spec)

    def front_points(self, *, noise_aware: bool = False) -> list[Point]:
        """The feasible Pareto-optimal points, best first in the first objective (``noise_aware``: only those
        distinguishable by the paired-seed test, :func:`dse.search.noise.noise_aware_front`)."""
        from dse.search.noise import noise_aware_front
        from dse.search.pareto import front

        pts = self.points()
        f = noise_aware_front(pts, self.spec.metrics, self.spec.directions) if noise_aware else \
            front(pts, self.spec.directions)
        sign = -1 if self.spec.directions[0] == "maximize" else 1
        return sorted(f, key=lambda p: (sign * p.values[0], p.number))

    def front(self, *, columns: list[str] | None = None, sort: str | None = None, limit: int | None = None,
              where: list[str] = (), noise_aware: bool = False):
        """The feasible Pareto front as a pandas DataFrame: ``trial``, the objectives, every other metric (an
        accuracy metric's standard error ``<metric>_se`` beside it and the number of surrogate ``seeds`` when
        the trials recorded them; a seed spread is ``<metric>_se`` times the square root of ``seeds``), every knob
        (a bundle as its fields); best first in ``sort`` (default the first objective), filtered by ``where``
        (e.g. ``["accuracy_drop<=1"]``), at most ``limit`` rows, only ``columns`` (and ``trial``); ``noise_aware``:
        only the points distinguishable by the paired-seed test. A value a trial does not have is NaN."""
        from dse.results.views import data_frame

        return data_frame(self.front_rows(columns=columns, sort=sort, limit=limit, where=where,
                                          noise_aware=noise_aware))

    def trials(self):
        """Every trial of the study as a pandas DataFrame, one row per trial in number order: ``trial``,
        ``state`` (complete, fail, pruned, running, waiting), ``feasible``, ``on_front``, every metric (with
        ``<metric>_se`` and ``seeds`` when recorded), every knob, ``fail_reason``; NaN where a trial has no
        value."""
        from dse.results.views import data_frame, trial_rows

        return data_frame(trial_rows(self.spec, self._study))

    def front_rows(self, *, columns: list[str] | None = None, sort: str | None = None,
                   limit: int | None = None, where: list[str] = (), noise_aware: bool = False) -> list[dict]:
        """:meth:`front` as a list of dicts (what ``dse pareto`` prints)."""
        from dse.results.views import pareto_rows

        return pareto_rows(self.spec, self._study, columns=_listed("columns", columns), sort=sort,
                           limit=_integer("limit", limit, 1), where=_listed("where", where) or [],
                           noise_aware=noise_aware)

    def select(self, *, knee: bool = False, best: str | None = None, where: list[str] = (),
               pareto: bool = False) -> list[Point]:
        """Points to export: the front's knee (the default), the feasible point ``best`` in a metric (with
        conditions ``where`` such as ``"accuracy_drop<=1"``), or the whole front (``pareto``)."""
        from dse.results.export import export_points

        if sum([knee, best is not None, pareto]) > 1:
            raise UsageError("export: choose one of knee, best, pareto")
        where = _listed("where", where) or []
        if where and best is None:
            raise UsageError("where: conditions on the other metrics, only with best=METRIC")
        return export_points(self.spec, self.points(), best=best, where=where, pareto=pareto)

    def export(self, *, knee: bool = False, best: str | None = None, where: list[str] = (),
               pareto: bool = False, format: str = "toml") -> str:
        """The selected configurations as text: ``toml`` (one configuration), ``json`` or ``csv``."""
        from dse.results.export import FORMATS, render

        if format not in FORMATS:
            raise UsageError(f"format: {format!r}; choose one of {', '.join(FORMATS)}")
        return render(self.select(knee=knee, best=best, where=where, pareto=pareto), format, self.spec)

    def status(self) -> dict:
        """Trials by state, the budget, feasible trials, the front's size and hypervolume, failure reasons."""
        from dse.results.views import status_summary

        return status_summary(self.spec, study=self._study, url=self._url)
