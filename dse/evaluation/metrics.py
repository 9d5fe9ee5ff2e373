"""The metric registry: every metric a study can optimise, constrain, tabulate, plot or export, declared once.

A :class:`Metric` holds a metric's name, natural direction, unit, a one-line description, where its inputs
come from, how it is computed from them, and its default hypervolume reference. Study files
(objectives, constraints, ``--best``, ``--where``), the evaluation (:func:`dse.evaluation.evaluator.evaluate` and the
vectorized :func:`dse.evaluation.evaluator.hardware_metrics`), the hybrid strategy, ``dse pareto``/``export``/``plot``
and the public API all read this table; nothing else lists metrics.

**How to add a metric (one place).** Add one ``register(Metric(...))`` call at the bottom of this module:

* ``compute`` reads *quantities* -- the named figures the evaluation produces -- from a mapping ``q`` and
  returns a float (or, for ``per_hardware`` metrics, an array over hardware points); ``inputs`` names the
  quantities it needs (a metric is computed only when all of them are present, e.g. accuracy figures only
  when the surrogate ran). The quantities are listed in :data:`QUANTITIES`.
* ``per_hardware=True`` when the value depends on the accelerator: then ``compute`` must work on arrays
  shaped ``(models, H)`` (one column per hardware point; ``H = 1`` for a single configuration), because the
  hybrid strategy costs thousands of hardware points at once with the same formula.
* ``controls`` names the training surrogate's controls the metric needs (``predictor_gain``: the null
  control): a study runs only the controls its objectives and constraints need, and the metric is computed
  only when its controls ran.
* ``hv_reference`` is the hypervolume reference value (a point every useful configuration dominates), or
  ``hv_baseline_factor`` times the metric's value for the reference accelerator running plain BP (a
  ``per_hardware`` metric only).
* ``unit``: tables and plot axes show a value in one of :data:`dse.results.formats.SI_UNITS` with an SI prefix
  (``12.3 mJ``), any other unit as a plain number; add a new base unit there to have it prefixed.

If the metric needs a quantity that does not exist yet, the evaluation that produces it adds it to the
mapping it passes to :func:`compute` (a per-model hardware figure: from
:func:`dse.evaluation.evaluator.model_cost`, in the model rows of ``evaluate_hardware`` and the arrays of
``hardware_metrics``) and lists it in :data:`QUANTITIES`; the metric's tests go beside the evaluation's
(``tests/dse/test_evaluate.py``), whose check that the scalar and the vectorized paths agree covers every
registered per-hardware metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import numpy as np

__all__ = ["Metric", "register", "get", "names", "check_names", "all_metrics", "compute", "controls_for",
           "per_hardware", "seeded", "seed_record", "standard_errors",
           "QUANTITIES", "REGISTRY"]

#: quantities a metric's ``compute`` may read; per-model arrays are shaped (models, H)
QUANTITIES = {
    "surrogate": "the training surrogate's figures (dict: accuracy, accuracy_drop, predictor_gain, ...)",
    "controls": "the surrogate controls that ran (a metric naming controls is computed only when they did)",
    "gp_fraction": "the GP fraction the job is costed with (the surrogate's measured one, or a what-if)",
    "time_s": "per model: the candidate's training-job time, s",
    "time_s_bp": "per model: plain BP's job time on the candidate's hardware, s",
    "time_s_ref": "per model: plain BP's job time on the reference accelerator, s",
    "energy_j": "per model: the candidate job's energy, J",
    "energy_j_ref": "per model: plain BP's job energy on the reference accelerator, J",
    "area_mm2": "the candidate accelerator's area, mm^2 (per hardware point)",
    "samples": "per model: the training samples its job processes (steps x global batch)",
    "bubble_rate": "per model: the idle share of the devices' time in its steps (0 on one accelerator)",
    "peak_act_bytes": "per model: the largest activation stash one device holds, bytes (one accelerator: "
                      "the batch's stash)",
}


@dataclass(frozen=True)
class Metric:
    """One metric: what it is called, which way is better, its unit, how it is computed."""

    name: str
    direction: str  # "maximize" or "minimize": the natural direction (objectives default to it)
    unit: str
    description: str
    compute: Callable[[Mapping[str, Any]], Any]
    inputs: tuple[str, ...]
    #: True when the value depends on the accelerator (computed over arrays of hardware points)
    per_hardware: bool = False
    #: hypervolume reference value, or None to use ``hv_baseline_factor``
    hv_reference: float | None = None
    #: reference = this factor x the metric's value for the reference accelerator running plain BP
    hv_baseline_factor: float | None = None
    #: format of a value in tables
    fmt: str = "{:.4g}"
    #: the surrogate controls (models.surrogate.evaluation.CONTROLS) whose runs the metric needs; a study runs
    #: only the controls its objectives and constraints need (:func:`controls_for`)
    controls: tuple[str, ...] = ()
    #: True for a mean over surrogate seeds whose per-seed values the surrogate's ``per_seed`` rows hold under
    #: this name: a trial then records them, and its standard error ``<name>_se`` (dse.search.noise)
    per_seed: bool = False

    def __post_init__(self):
        if self.direction not in ("maximize", "minimize"):
            raise ValueError(f"metric {self.name}: direction must be maximize or minimize")
        if (self.hv_reference is None) == (self.hv_baseline_factor is None):
            raise ValueError(f"metric {self.name}: give exactly one of hv_reference, hv_baseline_factor")
        if self.hv_baseline_factor is not None and not self.per_hardware:
            raise ValueError(f"metric {self.name}: hv_baseline_factor needs per_hardware=True (its reference is the "
                             "metric's value on the reference accelerator); give hv_reference instead")
        unknown = [i for i in self.inputs if i not in QUANTITIES]
        if unknown:
            raise ValueError(f"metric {self.name}: unknown quantity {unknown[0]!r}; see QUANTITIES")

    def label(self, direction: str | None = None) -> str:
        """``name [unit]``, with "(higher/lower is better)" when a direction is given."""
        arrow = {"maximize": " (higher is better)", "minimize": " (lower is better)"}.get(direction or "", "")
        return f"{self.name} [{self.unit}]{arrow}"


#: name -> Metric, in registration order (the order of tables and of ``dse evaluate``'s metrics)
REGISTRY: dict[str, Metric] = {}


def register(metric: Metric) -> Metric:
    if metric.name in REGISTRY:
        raise ValueError(f"metric {metric.name!r} is registered twice")
    REGISTRY[metric.name] = metric
    return metric


def get(name: str) -> Metric:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; allowed: {', '.join(REGISTRY)}") from None


def names() -> list[str]:
    return list(REGISTRY)


def check_names(given, where: str) -> list[str]:
    """``given`` (metric names) as a list, each registered; else a UsageError naming ``where`` (an option or an
    argument) and every metric allowed."""
    from dse.errors import UsageError

    try:
        given = list(given)
    except TypeError:
        raise UsageError(f"{where}: a list of metric names (or one name), got {given!r}") from None
    bad = next((m for m in given if not isinstance(m, str) or m not in REGISTRY), None)
    if bad is not None:
        raise UsageError(f"{where}: {bad!r} is not a metric; choose from {', '.join(REGISTRY)}")
    return given


def all_metrics() -> Iterator[Metric]:
    return iter(REGISTRY.values())


def per_hardware() -> list[str]:
    """Metrics that depend on the accelerator (the others hold for every hardware point of a setting)."""
    return [m.name for m in REGISTRY.values() if m.per_hardware]


def seeded() -> list[str]:
    """Metrics that are means over surrogate seeds (their noise is shown and tested: dse.search.noise)."""
    return [m.name for m in REGISTRY.values() if m.per_seed]


def seed_record(surrogate: dict | None) -> dict | None:
    """``{"seeds": [...], metric: [per-seed values]}`` for every seeded metric the surrogate's result holds
    (``None`` without a surrogate)."""
    if not surrogate or not surrogate.get("per_seed"):
        return None
    rows = surrogate["per_seed"]
    out: dict = {"seeds": [int(r["seed"]) for r in rows]}
    for m in seeded():
        if all(r.get(m) is not None for r in rows):
            out[m] = [float(r[m]) for r in rows]
    return out


def standard_errors(record: dict | None) -> dict[str, float]:
    """``<metric>_se`` (sample std over the seeds / sqrt(n)) for each seeded metric of a per-seed record with
    two seeds or more, and ``seeds`` (how many seeds); empty without a record."""
    if not record:
        return {}
    n = len(record["seeds"])
    out: dict[str, float] = {"seeds": n}
    if n >= 2:
        for m in seeded():
            if m in record:
                out[f"{m}_se"] = float(np.std(record[m], ddof=1) / math.sqrt(n))
    return out


#: each proxy task's own figures in a several-task surrogate result (``<task>_<figure>``:
#: models.surrogate.multitask.TaskComparison.figures), by the metric whose unit and direction each takes
TASK_FIGURES = {"accuracy": "accuracy", "accuracy_bp": "accuracy", "accuracy_drop": "accuracy_drop",
                "predictor_gain": "predictor_gain"}
#: the prefix of the rank agreement of two proxy tasks (``rank_agreement_<task1>_<task2>``: Spearman's rho)
RANK_AGREEMENT = "rank_agreement_"


def task_figures(surrogate: dict | None) -> dict[str, float]:
    """A several-task surrogate result's figures per task (``fashion_accuracy_drop`` ...) and the tasks' rank
    agreements, as numbers; empty with one task. They are not registered metrics (their names depend on the
    tasks): a trial records them with its metrics, for the front's columns and ``--where``, not as objectives
    (``accuracy_drop_worst`` is the objective over tasks)."""
    if not surrogate or not isinstance(surrogate.get("tasks"), str):
        return {}
    names = {f"{t}_{f}" for t in surrogate["tasks"].split(",") for f in TASK_FIGURES}
    return {k: float(v) for k, v in surrogate.items()
            if (k in names or k.startswith(RANK_AGREEMENT)) and isinstance(v, (int, float)) and not isinstance(v, bool)}


def extra_figures(metrics: Mapping[str, Any]) -> list[str]:
    """The names in a trial's recorded ``metrics`` that are not registered metrics, their ``<metric>_se`` or
    ``seeds``: each proxy task's own figures and the tasks' rank agreements (:func:`task_figures`), in order."""
    return [k for k in metrics if k not in REGISTRY and k != "seeds" and not k.endswith("_se")]


def like(name: str) -> Metric | None:
    """The registered metric ``name`` is, or one task's value of (``fashion_accuracy_drop``: accuracy_drop), or
    None (a rank agreement, or not a metric)."""
    if name in REGISTRY:
        return REGISTRY[name]
    for figure in sorted(TASK_FIGURES, key=len, reverse=True):  # accuracy_drop before accuracy
        if name.endswith(f"_{figure}") and len(name) > len(figure) + 1:
            return REGISTRY[TASK_FIGURES[figure]]
    return None


def controls_for(metrics) -> tuple[str, ...]:
    """The surrogate controls the metrics named in ``metrics`` need (none for accuracy and accuracy_drop)."""
    return tuple(dict.fromkeys(c for m in metrics for c in get(m).controls))


def compute(q: Mapping[str, Any], *, only: Callable[[Metric], bool] | None = None) -> dict[str, Any]:
    """Every registered metric whose inputs are all in ``q`` (and that ``only`` accepts), by name."""
    out = {}
    for m in REGISTRY.values():
        if (only is None or only(m)) and all(i in q for i in m.inputs) \
                and all(c in q.get("controls", ()) for c in m.controls):
            out[m.name] = m.compute(q)
    return out


# -- the metrics ---------------------------------------------------------------------------------------
def _geomean_ratio(num: str, den: str) -> Callable[[Mapping[str, Any]], Any]:
    """Geometric mean over the workload's models of q[num] / q[den] (per hardware point)."""
    return lambda q: np.exp(np.mean(np.log(q[num] / q[den]), axis=0))


def _surrogate(key: str) -> Callable[[Mapping[str, Any]], float]:
    return lambda q: float(q["surrogate"][key])


register(Metric("accuracy", "maximize", "%", "the training surrogate's test accuracy (mean over seeds)",
                _surrogate("accuracy"), ("surrogate",), hv_reference=0.0, fmt="{:.2f}", per_seed=True))
register(Metric("accuracy_drop", "minimize", "points", "plain BP's surrogate accuracy minus this setting's",
                _surrogate("accuracy_drop"), ("surrogate",), hv_reference=10.0, fmt="{:.3g}", per_seed=True))
register(Metric("predictor_gain", "maximize", "points",
                "accuracy of ADA-GP's predicted gradients minus skipping the update (the null control)",
                _surrogate("predictor_gain"), ("surrogate",), hv_reference=0.0, fmt="{:.3g}", controls=("null",),
                per_seed=True))
register(Metric("gp_fraction", "maximize", "0-1", "post-warm-up training steps in GP phase",
                lambda q: float(q["gp_fraction"]), ("gp_fraction",), hv_reference=0.0, fmt="{:.3g}"))
register(Metric("accuracy_drop_worst", "minimize", "points",
                "the largest accuracy drop of the proxy tasks ([training] tasks; one task: accuracy_drop); "
                "its per-seed values are that task's",
                lambda q: float(q["surrogate"].get("accuracy_drop_worst", q["surrogate"]["accuracy_drop"])),
                ("surrogate",), hv_reference=10.0, fmt="{:.3g}", per_seed=True))
register(Metric("speedup", "maximize", "x",
                "plain BP's job time on the reference accelerator / this configuration's (geometric mean "
                "over the workload's models)",
                _geomean_ratio("time_s_ref", "time_s"), ("time_s", "time_s_ref"), per_hardware=True,
                hv_reference=1.0, fmt="{:.3g}"))
register(Metric("speedup_same_hw", "maximize", "x",
                "plain BP's job time on the same hardware / this configuration's (geometric mean): the "
                "algorithmic part of the speed-up",
                _geomean_ratio("time_s_bp", "time_s"), ("time_s", "time_s_bp"), per_hardware=True,
                hv_reference=1.0, fmt="{:.3g}"))
register(Metric("energy_j", "minimize", "J", "the training job's energy, summed over the workload's models",
                lambda q: np.sum(q["energy_j"], axis=0), ("energy_j",), per_hardware=True,
                hv_baseline_factor=2.0, fmt="{:.3g}"))
register(Metric("energy_saving", "maximize", "0-1",
                "1 - this job's energy / plain BP's on the reference accelerator (summed over models)",
                lambda q: 1.0 - np.sum(q["energy_j"], axis=0) / np.sum(q["energy_j_ref"], axis=0),
                ("energy_j", "energy_j_ref"), per_hardware=True, hv_reference=0.0, fmt="{:.3g}"))
register(Metric("area_mm2", "minimize", "mm^2", "the candidate accelerator's silicon area",
                lambda q: np.asarray(q["area_mm2"], dtype=np.float64), ("area_mm2",), per_hardware=True,
                hv_baseline_factor=2.0, fmt="{:.3g}"))
register(Metric("power_w", "minimize", "W", "the job's average power: its energy / its time",
                lambda q: np.sum(q["energy_j"], axis=0) / np.sum(q["time_s"], axis=0),
                ("energy_j", "time_s"), per_hardware=True, hv_baseline_factor=2.0, fmt="{:.3g}"))
register(Metric("throughput", "maximize", "samples/s",
                "training samples per second over the whole job (every model's job in turn)",
                lambda q: np.sum(q["samples"], axis=0) / np.sum(q["time_s"], axis=0), ("samples", "time_s"),
                per_hardware=True, hv_reference=0.0, fmt="{:.4g}"))
register(Metric("bubble_rate", "minimize", "0-1",
                "the devices' idle share of the job's steps, weighted by each model's job time (0 on one "
                "accelerator)",
                lambda q: np.sum(q["bubble_rate"] * q["time_s"], axis=0) / np.sum(q["time_s"], axis=0),
                ("bubble_rate", "time_s"), per_hardware=True, hv_reference=1.0, fmt="{:.3g}"))
register(Metric("peak_act_bytes", "minimize", "B",
                "the largest activation stash one device holds, over the workload's models",
                lambda q: np.max(q["peak_act_bytes"], axis=0), ("peak_act_bytes",), per_hardware=True,
                hv_baseline_factor=2.0, fmt="{:.4g}"))
