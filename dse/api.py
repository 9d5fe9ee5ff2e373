"""The public Python API (re-exported by :mod:`dse`); the command line is a thin layer over it.

>>> import dse
>>> spec = dse.load_study("studies/quickstart.toml")  # doctest: +SKIP
>>> result = dse.run(spec)                  # to its budget, with its strategy; workers=N for N processes
>>> result["finished"] <= spec.trials     # the hybrid ends at its run budget, often before its trial budget
True
>>> study = dse.open_study(spec)            # the stored study, checked against the file
>>> front = study.front()                   # the feasible Pareto front, a pandas DataFrame (NaN where absent)
>>> every = study.trials()                  # every trial: state, feasible, on_front, metrics, knobs, reason
>>> list(front.columns[:2]) == ["trial", spec.metrics[0]]   # then its standard error (several seeds), ...
True
>>> knee = study.select(knee=True)[0]       # a Point: trial number, metrics, knobs, configuration
>>> text = study.export(knee=True)          # TOML that `dse evaluate` reads back
>>> again = dse.evaluate(dse.configuration(knee))["metrics"]   # every metric, every surrogate control
>>> {m: again[m] for m in knee.metrics} == knee.metrics           # what the study recorded, to the last digit
True
>>> study.close()                           # its database connections (or: with dse.open_study(spec) as study:)

Every function takes keyword arguments after the study (``storage``: a storage URL or a Path, default a SQLite file
beside the study file; see :mod:`dse.search.study`). ``tests/dse/test_api.py`` runs this example (on a small study).
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any, Callable

from dse.config.configuration import Configuration, load_configuration
from dse.errors import UsageError
from dse.evaluation.evaluator import evaluate
from dse.search.pareto import Point
from dse.search.studyfile import StudySpec, load_study

__all__ = ["load_study", "run", "open_study", "Study", "evaluate", "configuration", "load_configuration",
           "Configuration", "StudySpec", "Point", "compare", "sweep"]


@contextlib.contextmanager
def _as_arguments(names: dict[str, str] | None = None):
    """A UsageError raised inside that names a command-line option (``--strategy: ...``, ``TRIAL: ...``) names
    the Python argument instead (``strategy: ...``): ``names`` maps an option to its argument, else ``--x-y``
    is ``x_y``."""
    try:
        yield
    except UsageError as e:
        msg = str(e)
        m = re.match(r"(--[\w-]+|[A-Z]+)(?=[: ])", msg)
        if m is None:
            raise
        opt = m.group(1)
        arg = (names or {}).get(opt, opt.lstrip("-").replace("-", "_").lower())
        raise UsageError(arg + msg[len(opt):]) from None


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
        out = list(v)
    except TypeError:
        out = None
    if out is None or not all(isinstance(x, str) for x in out):
        raise UsageError(f"{name}: a list of strings (or one string), got {v!r}")
    return out


def _spec(spec: Any) -> StudySpec:
    if isinstance(spec, (str, Path)):
        return load_study(spec)
    if not isinstance(spec, StudySpec):
        raise UsageError(f"spec: a StudySpec (dse.load_study(path)) or the path of a study file, got "
                         f"{type(spec).__name__}")
    return spec


#: keyword arguments :func:`run` passes to :func:`dse.search.runner.run_study` (one process only)
RUNNER_ARGS = ("worker", "heartbeat", "stop", "poll")


def run(spec: StudySpec | str | Path, *, storage: str | Path | None = None, trials: int | None = None,
        timeout: float | None = None, workers: int | None = None, progress: Callable[[dict], None] | None = None,
        quiet: bool = True, accept_changes: bool = False, sampler: Any = None, runs: int | None = None,
        seed: int | None = None, strategy: str | None = None, **kw: Any):
    """Run (or resume) the study (a :class:`StudySpec` or the path of its file) to its budget with its strategy
    (``spec.strategy``).

    ``trials``, ``runs``, ``seed``, ``strategy`` and ``sampler`` (a name) override the file's, as ``dse run``'s
    options do. ``workers`` (default: the file's ``[study] workers``, else 1) > 1 starts that many local ``dse
    worker`` processes on one storage (by default a journal file beside the study file) sharing the budget
    exactly; they read the study file, so the spec must be the file's (with those overrides);
    ``quiet=False`` then shows one progress bar. ``progress(figures)`` (one process) is called after each
    step. Returns a dict-like result: ``finished``,
    ``budget``, ``complete``, ``front``, ``hypervolume``, ``recent`` (what the latest 10% of the complete
    trials added to the hypervolume: :func:`dse.search.pareto.recent_gain`), ``interrupted``, ``storage``,
    ``failed`` and, in one process, the strategy's own figures (hybrid: ``surrogate_runs``, ``exhausted``;
    several workers: ``exhausted``, ``worker_errors``, ``restarts``). ``sampler``: an
    Optuna sampler instance (any ``optuna.samplers.BaseSampler``, used as given with its own seed) instead of the file's
    ``sampler``, in one process; or a sampler's name (:mod:`dse.search.samplers` lists them). Extra keyword
    arguments, in one process, go to :func:`dse.search.runner.run_study` (``worker``, ``heartbeat``, ``stop``,
    ``poll``).
    """
    import numbers

    spec = _spec(spec)
    unknown = [k for k in kw if k not in RUNNER_ARGS]
    if unknown:
        raise UsageError(f"{unknown[0]}: not an argument of dse.run; allowed: storage, trials, timeout, workers, "
                         f"progress, quiet, accept_changes, sampler, runs, seed, strategy, {', '.join(RUNNER_ARGS)}")
    trials, workers = _integer("trials", trials, 1), _integer("workers", workers, 1)
    runs, seed = _integer("runs", runs, 1), _integer("seed", seed, 0)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)
                                or not timeout >= 0):
        raise UsageError(f"timeout: must be a number of seconds >= 0, got {timeout!r}")
    if progress is not None and not callable(progress):
        raise UsageError(f"progress: a function called with each step's figures, got {progress!r}")
    if strategy is not None and not isinstance(strategy, str):
        raise UsageError(f"strategy: a strategy's name, got {strategy!r}")
    with _as_arguments():  # with_overrides names the command's options
        spec = spec.with_overrides(trials=trials, runs=runs, seed=seed, strategy=strategy)
        if isinstance(sampler, str):  # a name: as the study file's `sampler` (checked there)
            spec, sampler = spec.with_overrides(sampler=sampler), None
    storage = _storage(storage)
    workers = spec.workers if workers is None else workers
    if workers > 1:
        from dse.search.workers import run_workers

        if sampler is not None:
            raise UsageError("sampler: a sampler instance runs in this process only; use workers=1, or name a "
                             "sampler in the study file for worker processes")
        for name, given in [("progress", progress), *kw.items()]:
            if given is not None and name != "poll" and not (name == "worker" and given == 0):
                raise UsageError(f"{name}: works in one process only; use workers=1 (with several workers, "
                                 "quiet=False shows a progress bar)")
        return run_workers(spec, workers=workers, storage=storage, timeout=timeout, quiet=quiet,
                           accept_changes=accept_changes, **({"poll": kw["poll"]} if "poll" in kw else {}))
    from dse.search.runner import run_study

    return run_study(spec, storage=storage, timeout=timeout, progress=progress, accept_changes=accept_changes,
                     sampler=sampler, **kw)


def _storage(storage: Any) -> str | None:
    """A storage URL; a :class:`pathlib.Path` is the file of one: a journal (``.journal``, ``.log``), else
    SQLite."""
    import os

    if storage is None or isinstance(storage, str):
        return storage
    if isinstance(storage, os.PathLike):
        p = Path(storage).absolute()
        return f"{'journal' if p.suffix in ('.journal', '.log') else 'sqlite'}:///{p}"
    raise UsageError(f"storage: a storage URL (sqlite:///FILE.db, journal:///FILE.journal, postgresql://...) or "
                     f"a pathlib.Path of a study file, got {storage!r}")


def open_study(spec: StudySpec | str | Path, *, storage: str | Path | None = None) -> "Study":
    """The stored study of ``spec`` (a :class:`StudySpec` or the path of its file), read-only (its Optuna study
    carries a plain random sampler, not the file's: reading never samples; ``dse.run`` searches). Close it when
    done (:meth:`Study.close`, or ``with dse.open_study(spec) as study:``): on PostgreSQL its pool holds server
    connections until then (or until the collector frees it). A study run with another strategy than the file
    names (``dse run FILE --strategy S``) is read as that strategy's: ``study.spec.strategy`` is the one it ran."""
    spec, storage = _spec(spec), _storage(storage)
    from dse.search.study import open_study as _open, read_spec, storage_url

    study = _open(spec, storage, create=False)
    return Study(read_spec(spec, study), study, storage_url(spec, storage))


def compare(specs: list, *, objectives: list[str] | str | None = None) -> dict:
    """``dse compare``: the fronts of two or more studies (specs or study-file paths, each on its default
    storage) on ``objectives`` (default: those every study shares), each study's hypervolume at one common
    reference point and how many of its front points another's front dominates. Returns ``studies`` (one row
    per study, what the command prints), ``reference``, ``objectives``, ``directions``, ``fronts`` (name ->
    :class:`dse.results.compare.StudyFront`) and ``notes`` (accuracy axes from different proxies or seeds)."""
    from dse.results.compare import compare_studies

    given = None if isinstance(specs, (str, Path, StudySpec)) or not hasattr(specs, "__iter__") else list(specs)
    if given is None or len(given) < 2:
        raise UsageError(f"specs: a list of two or more studies (specs or study-file paths), got {specs!r}")
    return compare_studies([_spec(s) for s in given], _listed("objectives", objectives))


def sweep(cfg: Configuration | str | Path, knobs: dict | list[str] | str, *,
          progress: Callable[[int, int, dict], None] | None = None):
    """``dse sweep``: every metric of ``cfg`` (a configuration or its file) at every combination of one or two
    knobs, as a pandas DataFrame (one row per combination, first knob outermost; the knobs as
    ``SECTION.FIELD`` columns). ``knobs``: ``{"hardware.rows": [16, 32, 64]}``, or the command's
    ``"hardware.rows=16,32,64"`` strings. ``progress(i, n, row)`` is called after each point."""
    from dse.evaluation.sweep import parse_knob, sweep as _sweep
    from dse.results.views import data_frame

    base_dir = None
    if isinstance(cfg, (str, Path)):
        base_dir = Path(cfg).resolve().parent  # a workload file it names is found beside it
        cfg = load_configuration(cfg)
    if not isinstance(cfg, Configuration):
        raise UsageError(f"cfg: a Configuration or the path of a configuration file, got {type(cfg).__name__}")
    if isinstance(knobs, dict):
        texts = []
        for k, v in knobs.items():
            vals = [v] if isinstance(v, (str, int, float)) else v
            try:
                texts.append(f"{k}=" + ",".join(str(x) for x in vals))
            except TypeError:
                raise UsageError(f"knobs: {k}: a list of values, got {v!r}") from None
    else:
        texts = _listed("knobs", knobs) or []
    if progress is not None and not callable(progress):
        raise UsageError(f"progress: a function called with (i, n, row), got {progress!r}")
    with _as_arguments({"--knob": "knobs"}):
        return data_frame(_sweep(cfg, [parse_knob(t) for t in texts], base_dir=base_dir, progress=progress))


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
        from dse.results.views import data_frame, row_columns

        rows = self.front_rows(columns=columns, sort=sort, limit=limit, where=where, noise_aware=noise_aware)
        columns = _listed("columns", columns)
        return data_frame(rows, ["trial", *(c for c in columns if c != "trial")] if columns else
                          row_columns(self.spec))

    def trials(self):
        """Every trial of the study as a pandas DataFrame, one row per trial in number order: ``trial``,
        ``state`` (complete, fail, pruned, running, waiting), ``feasible``, ``on_front``, every metric (with
        ``<metric>_se`` and ``seeds`` when recorded), every knob, ``fail_reason``; NaN where a trial has no
        value."""
        from dse.results.views import data_frame, row_columns, trial_rows

        return data_frame(trial_rows(self.spec, self._study), row_columns(self.spec, "trials"))

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

    def show(self, trial: int, *, model: str | None = None, layers: bool = False) -> dict:
        """``dse show --format json``: one trial in depth (knobs, every metric with the study's objective and
        constraint verdicts, the per-model breakdown; ``model``: one model of the workload; ``layers``: every op
        of a plain-BP training step on the trial's accelerator)."""
        from dse.results.views import find_trial, frozen_trial_detail

        trial = _integer("trial", trial, 0)
        if trial is None:
            raise UsageError("trial: a trial number >= 0, got None")
        with _as_arguments({"TRIAL": "trial", "--model": "model"}):
            return frozen_trial_detail(find_trial(self._study, trial), self.spec, model=model, layers=bool(layers))

    def plot(self, out: str | Path | None = None, *, warn: Callable[[str], None] | None = None,
             _option: str = "out") -> list[Path]:
        """``dse plot``: the study's figures (PNG and SVG) in the folder ``out`` (default: ``<name>-plots``
        beside the study file), written once all are drawn; returns the files. ``warn(message)``: what a
        figure could not show (default: :func:`warnings.warn`)."""
        import warnings

        from dse.config.outputs import check_folder, writing_folder
        from dse.figures.plots import make_plots

        folder = check_folder(Path(out) if out is not None else self._beside("plots"), _option)
        with writing_folder(folder, _option) as tmp:  # (_option: how the command names it, --out)
            files = make_plots(self._study, self.spec, tmp, warn=warn or (lambda m: warnings.warn(m, stacklevel=3)))
        return [folder / f.name for f in files]

    def report(self, out: str | Path | None = None, *, noise_aware: bool = False, _option: str = "out") -> Path:
        """``dse report``: one self-contained HTML file (status, objectives, figures, front, failures, the study
        file, versions) at ``out`` (default: ``<name>-report.html`` beside the study file); returns its path."""
        from dse.config.outputs import check_file
        from dse.figures.report import build_report

        path = check_file(Path(out), _option, suffixes=(".html", ".htm")) if out is not None else \
            check_file(self._beside("report.html"), _option)
        return Path(build_report(self.spec, self._study, path, storage=self._url, option=_option,
                                 noise_aware=noise_aware))

    def _beside(self, what: str) -> Path:
        if self.spec.path is None:
            raise UsageError("out: the study was built in code, without a file to write beside; name out")
        return Path(self.spec.path).resolve().parent / f"{self.spec.name}-{what}"

    def status(self) -> dict:
        """Trials by state, the budget, feasible trials, the front's size and hypervolume, failure reasons."""
        from dse.results.views import status_summary

        return status_summary(self.spec, study=self._study, url=self._url)
