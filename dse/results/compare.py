"""Compare studies: fronts on chosen objectives, hypervolume at one common reference point, dominance.

For studies ``S_1 .. S_n`` and objectives ``m_1 .. m_k`` (each a metric every study recorded; the
direction is the metric's natural one):

* each study's front is the non-dominated set of its feasible complete trials (its own constraints) on
  those objectives;
* the common reference point takes, per objective, the least demanding of the studies' own reference
  values (the largest for a minimised metric, the smallest for a maximised one), so that no study's points
  are cut off by another's reference; every study's hypervolume is measured against it;
* ``dominated_by[Y]`` of study X counts X's front points that some point of Y's front dominates (better or
  equal in every objective, strictly better in one); ``in_union_front`` counts X's points on the front of
  all the studies' points together (a point another study holds too counts for each that holds it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from dse.errors import UsageError
from dse.search.pareto import Point, front, hypervolume

__all__ = ["StudyFront", "compare", "compare_studies", "dominated_count"]


@dataclass
class StudyFront:
    name: str
    points: list[Point]  # the front on the compared objectives
    values: np.ndarray  # (n, k) objective values of the front
    complete: int
    feasible: int


def _minimise(values: np.ndarray, directions: list[str]) -> np.ndarray:
    return np.where(np.array(directions) == "maximize", -values, values)


def dominated_count(a: np.ndarray, b: np.ndarray, directions: list[str]) -> int:
    """How many rows of ``a`` some row of ``b`` dominates."""
    if not len(a) or not len(b):
        return 0
    x, y = _minimise(a, directions), _minimise(b, directions)
    le = (y[None, :, :] <= x[:, None, :]).all(axis=2)
    lt = (y[None, :, :] < x[:, None, :]).any(axis=2)
    return int((le & lt).any(axis=1).sum())


def check_names(names: list[str]) -> None:
    """UsageError unless the studies' names are distinct (each names its rows and columns)."""
    if len(set(names)) != len(names):
        raise UsageError(f"compare: two studies share a name ({', '.join(names)}); give each its own "
                         "[study] name")


def study_labels(specs: list) -> list[str]:
    """Each study's name in :func:`compare_studies`'s rows, columns and fronts: its ``[study]`` name, or, where
    studies share a name (a study and a copy run in another folder: the name is the stored study's, so it
    cannot be changed), its name and its file. UsageError for a study given twice (the same name in the same
    storage)."""
    from dse.search.storage import mask_url
    from dse.search.study import storage_url

    names = [s.name for s in specs]
    urls = [storage_url(s) for s in specs]
    seen: set[tuple[str, str]] = set()
    for n, u in zip(names, urls):
        if (n, u) in seen:
            raise UsageError(f"compare: the study {n!r} in {mask_url(u)} is given twice; give each study once")
        seen.add((n, u))
    labels = []
    for s in specs:
        if names.count(s.name) == 1:
            labels.append(s.name)
        elif s.path is None:
            raise UsageError(f"compare: two studies share the name {s.name!r} and one has no study file to tell "
                             "them apart; give each its own [study] name")
        else:
            shown = os.path.relpath(s.path)
            labels.append(f"{s.name} ({s.path if shown.startswith('..') else shown})")
    return labels


def compare(studies: list[tuple[str, object, list[Point], list[float] | None]], objectives: list[str],
            directions: list[str]) -> dict:
    """``studies``: (name, spec, points, its reference values for ``objectives`` or None) per study.

    Returns ``{"objectives", "directions", "reference", "studies": [row per study], "fronts": {name:
    StudyFront}}``; each row has the study, its complete / feasible trial counts, front size, hypervolume
    at the common reference, in_union_front, and ``dominated_by_<other>`` counts.
    """
    check_names([s[0] for s in studies])
    fronts: dict[str, StudyFront] = {}
    refs = []
    for name, spec, pts, ref in studies:
        sel = []
        for p in pts:
            missing = [m for m in objectives if m not in p.metrics]
            if missing:
                raise UsageError(f"--objectives: study {name} did not record {missing[0]}; choose metrics "
                                 "every study has")
            sel.append(Point(p.number, tuple(float(p.metrics[m]) for m in objectives), p.metrics, p.params,
                             p.feasible, p.config))
        f = front(sel, directions)
        fronts[name] = StudyFront(name, f, np.array([p.values for p in f], dtype=float).reshape(-1, len(objectives)),
                                  len(pts), sum(p.feasible for p in pts))
        if ref is not None:
            refs.append(ref)
    if not refs:
        raise UsageError("compare: no hypervolume reference point could be formed")
    r = np.array(refs, dtype=float)
    reference = [float(r[:, i].min() if d == "maximize" else r[:, i].max()) for i, d in enumerate(directions)]
    every = np.concatenate([f.values for f in fronts.values()])  # (the union front: what none of them dominates)
    rows = []
    for name, f in fronts.items():
        row = {"study": name, "complete": f.complete, "feasible": f.feasible, "front": len(f.values),
               "hypervolume": hypervolume(f.points, directions, reference),
               "in_union_front": len(f.values) - dominated_count(f.values, every, directions)}
        for other, g in fronts.items():
            if other != name:
                row[f"dominated_by_{other}"] = dominated_count(f.values, g.values, directions)
        rows.append(row)
    return {"objectives": objectives, "directions": directions, "reference": reference, "studies": rows,
            "fronts": fronts}


def metric_list(names: list[str], option: str) -> list[str]:
    """Metric names: each registered, none twice (``option`` names the argument in errors)."""
    from dse.evaluation import metrics as registry

    names = registry.check_names(names, option)
    dup = next((m for i, m in enumerate(names) if m in names[:i]), None)
    if dup is not None:
        raise UsageError(f"{option}: {dup!r} is named twice; name each metric once")
    return names


def _reference_for(spec, objs: list[str], ref_all: dict) -> list[float]:
    """A study's reference values for ``objs``: its own for its objectives, else the default of the metric
    for that study (computed as for an objective)."""
    from dataclasses import replace

    from dse.search.study import hv_reference
    from dse.search.studyfile import Objective

    missing = [m for m in objs if m not in ref_all]
    if missing:
        extra = replace(spec, objectives=tuple(Objective(m, "minimize") for m in missing))
        ref_all = {**ref_all, **dict(zip(missing, hv_reference(extra)))}
    return [ref_all[m] for m in objs]


def compare_studies(specs: list, objectives: list[str] | None = None, *, option: str = "objectives") -> dict:
    """:func:`compare` of the stored studies of ``specs`` (each with its own default storage) on
    ``objectives`` (default: the objectives every study shares, in the first study's order), each in its
    natural direction; ``option`` names the argument in errors. Returns :func:`compare`'s dict plus
    ``objectives`` and ``directions``."""
    from dse.results.views import natural_direction
    from dse.search.study import close_study, hv_reference, load_points, open_study

    if len(specs) < 2:
        raise UsageError("compare: give at least two study files")
    if objectives is not None:
        objs = metric_list(list(objectives), option)
        if len(objs) < 2:
            raise UsageError(f"{option}: a front needs two or more metrics, got {', '.join(objs)}; name them as "
                             f"{option} M1,M2")
    else:
        objs = [m for m in specs[0].metrics if all(m in s.metrics for s in specs[1:])]
        if len(objs) < 2:
            raise UsageError(f"{option}: the studies share fewer than two objectives; name two or more metrics "
                             f"with {option} M1,M2")
    directions = [natural_direction(m) for m in objs]
    labels = study_labels(specs)  # before reading any study
    entries = []
    for label, spec in zip(labels, specs):
        study = open_study(spec, None, create=False)
        try:
            points = load_points(study, spec)
        finally:
            close_study(study)
        ref = _reference_for(spec, objs, dict(zip(spec.metrics, hv_reference(spec))))
        entries.append((label, spec, points, ref))
    return {**compare(entries, objs, directions), "objectives": objs, "directions": directions,
            "notes": accuracy_notes(specs, objs, labels)}


def _proxy(spec) -> str:
    t = spec.base.training
    return ", ".join(f"{c.task} / {c.network}, {c.epochs} epochs" for c in t.task_configs()) if t.tasks else \
        f"{t.task} / {t.network}, {t.epochs} epochs"


def accuracy_notes(specs: list, objectives: list[str], labels: list[str] | None = None) -> list[str]:
    """What makes the studies' accuracy axes less comparable than they look, when an objective is an accuracy
    figure: different proxies (task, network, epochs: different accuracies altogether), or different
    surrogate seeds (the differences include seed noise). ``labels``: the studies' names in the notes
    (default: their ``[study]`` names)."""
    from dse.evaluation import metrics as registry

    if not any(registry.REGISTRY[m].per_seed for m in objectives):
        return []
    labels = labels or [spec.name for spec in specs]
    notes = []
    proxies = [(label, _proxy(spec)) for label, spec in zip(labels, specs)]
    if len({p for _, p in proxies}) > 1:
        notes.append("the studies' accuracy figures come from different proxies (" + "; ".join(
            f"{n}: {p}" for n, p in proxies) + "): their accuracy axes measure different things")
    seeds = [(label, (spec.first_seed, spec.seeds, spec.seeds_max)) for label, spec in zip(labels, specs)]
    if len({v for _, v in seeds}) > 1:
        def said(f, lo, hi):
            return f"{lo}{'' if lo == hi else f'-{hi}'} seeds from {f}"
        notes.append("the studies' surrogate seeds differ (" + "; ".join(
            f"{n}: {said(*v)}" for n, v in seeds) + "): accuracy differences include seed noise (docs/noise.md)")
    return notes
