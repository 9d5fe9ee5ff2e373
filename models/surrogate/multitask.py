"""Several proxy tasks for one setting: each task's result and the rank agreement between the tasks.

A ``[training]`` table may name ``tasks = ["mnist1d", "fashion"]`` instead of one ``task``: the setting's
knobs then apply to every task, and each knob the table does not give takes each task's own default
(:data:`models.surrogate.config.TASK_DEFAULTS`). The *rank agreement* of two tasks is Spearman's rank
correlation of the mean accuracies of the settings a call ran on both: the scheme and each of its controls
(``None`` with fewer than three, or when one task ranks them all equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Callable, Mapping, Optional, Sequence

from models.surrogate.config import TASKS, SurrogateConfig
from models.surrogate.evaluation import CONTROLS, SurrogateResult, evaluate

__all__ = ["task_configs", "evaluate_tasks", "TaskComparison", "spearman"]


def task_configs(table: Mapping[str, Any], tasks: Optional[Sequence[str]] = None) -> list[SurrogateConfig]:
    """One configuration per task: ``tasks`` if given (it wins over the table's), else the table's ``tasks``
    list, else its one ``task``. ValueError (one line, naming the field) for a bad list."""
    data = dict(table)
    listed = data.pop("tasks", None)
    if tasks is None and listed is not None:
        if "task" in data:
            raise ValueError("tasks: give either task or tasks, not both")
        if not isinstance(listed, (list, tuple)) or not listed:
            raise ValueError(f"tasks: a non-empty list of task names, each one of {', '.join(map(repr, TASKS))} "
                             f"(got {listed!r})")
        tasks = listed
    if tasks is None:
        return [SurrogateConfig.from_dict(data)]
    tasks = list(tasks)
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"tasks: each one of {', '.join(map(repr, TASKS))} (got {t!r})")
    if len(set(tasks)) != len(tasks):
        raise ValueError(f"tasks: each task once (got {tasks!r})")
    return [SurrogateConfig.from_dict({**data, "task": t}) for t in tasks]


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
                "rank_agreement": self.rank_agreement()}


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
