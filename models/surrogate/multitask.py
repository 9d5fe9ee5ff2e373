"""Several proxy tasks for one setting: each task's result and the rank agreement between the tasks.

A ``[training]`` table may name ``tasks = ["mnist1d", "fashion"]`` instead of one ``task``: the setting's
knobs then apply to every task, and each knob the table does not give takes each task's own default
(:data:`models.surrogate.config.TASK_DEFAULTS`; a knob given at the first task's default value counts as not
given). The *rank agreement* of two tasks is Spearman's rank
correlation of the mean accuracies of the settings a call ran on both: the scheme and each of its controls
(``None`` with fewer than three, or when one task ranks them all equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Callable, Mapping, Optional, Sequence

from models.surrogate.config import SurrogateConfig
from models.surrogate.evaluation import CONTROLS, SurrogateResult, evaluate

__all__ = ["task_configs", "evaluate_tasks", "TaskComparison", "spearman"]


def task_configs(table: Mapping[str, Any], tasks: Optional[Sequence[str]] = None) -> list[SurrogateConfig]:
    """One configuration per task (:meth:`SurrogateConfig.task_configs`): the table's ``tasks`` list or its one
    ``task``; ``tasks`` if given replaces both (``dse surrogate --task``). ValueError (one line, naming the
    field) for a bad list."""
    data = dict(table)
    if tasks is not None:
        data.pop("task", None)
        data["tasks"] = list(tasks)
    return SurrogateConfig.from_dict(data).task_configs()


def spearman(a: Sequence[float], b: Sequence[float]) -> Optional[float]:
    """Spearman's rank correlation (average ranks for ties); None for fewer than 3 values or a constant side."""
    if len(a) != len(b) or len(a) < 3:
        return None
    from scipy.stats import spearmanr

    if len(set(a)) < 2 or len(set(b)) < 2:
        return None
    return float(spearmanr(a, b).statistic)


def _settings(res: SurrogateResult) -> dict[str, float]:
    """The mean accuracy of each setting of one call: the scheme, then each control it ran."""
    out = {res.config.scheme: res.accuracy}
    for c in res.controls:
        out.setdefault(c, res.accuracy - res.gain_vs(c))
    return out


@dataclass(frozen=True)
class TaskComparison:
    """Each task's :class:`SurrogateResult`, in the order given."""

    results: tuple[SurrogateResult, ...]

    def rank_agreement(self) -> list[dict[str, Any]]:
        """Per pair of tasks: the settings ranked and Spearman's rank correlation of their accuracies."""
        out = []
        for r1, r2 in combinations(self.results, 2):
            s1, s2 = _settings(r1), _settings(r2)
            names = [n for n in s1 if n in s2]
            out.append({"tasks": [r1.config.task, r2.config.task], "settings": names,
                        "spearman": spearman([s1[n] for n in names], [s2[n] for n in names])})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"tasks": {r.config.task: r.to_dict() for r in self.results},
                "accuracy_drop_worst": self.accuracy_drop_worst,
                "rank_agreement": self.rank_agreement()}

    @property
    def accuracy_drop_worst(self) -> float:
        """The largest accuracy drop of the tasks (points; each the mean of its per-seed drops, as reported)."""
        return max(r.to_dict()["accuracy_drop"] for r in self.results)

    def worst_per_seed(self) -> list[float]:
        """The per-seed accuracy drops of the task whose mean drop is the largest (their mean is
        :attr:`accuracy_drop_worst`): the per-seed values behind it, for its standard error and the paired test."""
        worst = max(self.results, key=lambda r: r.to_dict()["accuracy_drop"])
        return [float(row["accuracy_drop"]) for row in worst.to_dict()["per_seed"]]

    def figures(self) -> dict[str, Any]:
        """Flat per-task figures for a trial's record: ``<task>_accuracy``, ``<task>_accuracy_bp``,
        ``<task>_accuracy_drop`` (and ``<task>_predictor_gain`` when the null control ran), ``accuracy_drop_worst``,
        ``tasks`` (the names, comma-separated) and ``rank_agreement_<task1>_<task2>`` (Spearman, when defined);
        ``blas``, ``cached``, ``wall_s`` and ``compute_s`` over every task's runs."""
        dicts = [r.to_dict() for r in self.results]
        out: dict[str, Any] = {"tasks": ",".join(r.config.task for r in self.results),
                               "accuracy_drop_worst": self.accuracy_drop_worst,
                               # provenance of every task's runs, not the first's: each kernel, all cached or not
                               "blas": ", ".join(sorted({k for d in dicts for k in d["blas"].split(", ")})),
                               "cached": all(d["cached"] for d in dicts),
                               "wall_s": sum(d["wall_s"] for d in dicts),
                               "compute_s": sum(d["compute_s"] for d in dicts)}
        for r, d in zip(self.results, dicts):
            t = r.config.task
            out.update({f"{t}_{k}": d[k] for k in ("accuracy", "accuracy_bp", "accuracy_drop")})
            if "null" in r.controls:
                out[f"{t}_predictor_gain"] = d["predictor_gain"]
        for pair in self.rank_agreement():
            if pair["spearman"] is not None:
                out["rank_agreement_" + "_".join(pair["tasks"])] = pair["spearman"]
        return out


def evaluate_tasks(configs: Sequence[SurrogateConfig], *, seeds: Sequence[int] = (0, 1, 2), cache: bool = True,
                   progress: Optional[Callable[[int, int, str], None]] = None,
                   controls: Sequence[str] = CONTROLS, jobs: int = 1) -> TaskComparison:
    """:func:`models.surrogate.evaluate` of each configuration (one per task) on the same paired seeds;
    ``progress(done, total, label)`` counts the runs of every task."""
    from models.surrogate.evaluation import runs_per_seed

    totals = [runs_per_seed(c, [x for x in CONTROLS if x in controls or x == c.scheme]) * len(seeds)
              for c in configs]
    results = []
    for i, cfg in enumerate(configs):
        before = sum(totals[:i])

        def tick(done, total, label, before=before, task=cfg.task):
            if progress is not None:
                progress(before + done, sum(totals), f"{task}, {label}")

        results.append(evaluate(cfg, seeds=seeds, cache=cache, progress=tick, controls=controls, jobs=jobs))
    return TaskComparison(tuple(results))
