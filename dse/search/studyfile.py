"""Study files: what to search, for what, under which constraints (TOML, validated on load).

```toml
[study]
name = "quickstart"         # the study's name in its storage
sampler = "auto"            # auto (default), tpe, nsga2, nsga3, random, qmc, grid, gp (torch), hvi (hybrid)
seed = 0
trials = 60                 # the budget: finished trials (complete or failed) the study runs to
seeds = 1                   # surrogate seeds per training setting (accuracy is their mean); or, adaptive:
seeds_min = 1               #   every setting trains seeds_min seeds, and a setting whose points are on the
seeds_max = 3               #   front or within noise of it gets more, up to seeds_max (dse.search.noise)
first_seed = 0              # the first surrogate seed (e.g. 100: re-check a front on fresh seeds)
population = 16             # NSGA-II/III population size (optional)
startup_trials = 10         # TPE's (and auto's) random trials before it models (optional; Optuna's 10; hvi: 6)
workers = 2                 # local processes `dse run` starts by default (1; --workers overrides)

[workload]   ...            # dse.config.workload.Workload
[training]   ...            # base training knobs (models.surrogate.SurrogateConfig); [space.training] varies them
                            # task and epochs name the accuracy proxy and its budget (default mnist1d, 10)
[hardware]   ...            # base candidate accelerator (accel.Hardware); [space.hardware] varies it
[reference]  ...            # the plain-BP baseline accelerator
[parallel]   ...            # optional: a job over several accelerators (dse.config.parallel.ParallelConfig)
technology = "tech.toml"    # optional technology table

[space.training]            # knobs: a fixed value, a list of choices, or {low, high, log, step}
pred_width = [16, 64]
[space.hardware]
rows = [32, 64, 128]
[space.parallel]            # needs a [parallel] table (its fields are the knobs); strategy joint
schedule = ["1f1b", "zb-h1", "zb-h2"]

[[objectives]]              # 2 to 4
metric = "accuracy_drop"    # direction defaults to the metric's natural one
[[objectives]]
metric = "speedup"

[[constraints]]             # feasible when every bound holds (Optuna's Trial.set_constraint)
metric = "area_mm2"
max = 150.0

[hypervolume]               # reference point, per objective (defaults: each metric's, dse.evaluation.metrics)
speedup = 1.0
```
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from accel import Hardware
from accel.hardware import FIELDS as HARDWARE_FIELDS
from dse.config.configuration import MAX_FIRST_SEED, MAX_SEEDS, Configuration, check_scheme
from dse.config.parallel import FIELDS as PARALLEL_FIELDS, ParallelConfig, microbatch_size
from dse.config.schema import check_keys, file_path, load_toml, take
from dse.config.space import Bundle, Choice, Fixed, Space
from dse.config.values import check_name, check_number
from dse.errors import UsageError
from dse.evaluation import metrics as registry
from dse.search.identity import relative_paths
from dse.search.samplers import SAMPLERS as SAMPLER_REGISTRY
from dse.search.strategies import STRATEGIES, Option
from models.surrogate import SurrogateConfig

__all__ = ["StudySpec", "Objective", "Constraint", "load_study", "spec_from_dict", "SAMPLERS", "STRATEGIES"]

#: sampler names (dse.search.samplers) and search strategies (dse.search.strategies), from their registries
SAMPLERS = tuple(SAMPLER_REGISTRY)

_TRAINING_FIELDS = {f.name for f in fields(SurrogateConfig)}


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str


@dataclass(frozen=True)
class Constraint:
    metric: str
    max: float | None = None
    min: float | None = None

    def violation(self, value):
        """Optuna's convention: <= 0 when satisfied, the amount of violation otherwise (a float, or an array
        for an array of values)."""
        v = np.full(np.shape(value), -np.inf)
        if self.max is not None:
            v = np.maximum(v, np.asarray(value) - self.max)
        if self.min is not None:
            v = np.maximum(v, self.min - np.asarray(value))
        return float(v) if np.ndim(v) == 0 else v

    def __str__(self) -> str:
        return self.bounds(self.metric)

    def bounds(self, name: str = "") -> str:
        """``'>= a and <= b'``, each bound preceded by ``name`` when given (``str()``: the metric's)."""
        parts = []
        if self.min is not None:
            parts.append(f"{name} >= {self.min:g}".lstrip())
        if self.max is not None:
            parts.append(f"{name} <= {self.max:g}".lstrip())
        return " and ".join(parts)


@dataclass(frozen=True)
class StudySpec:
    name: str
    base: Configuration
    space: Space
    objectives: tuple[Objective, ...]
    constraints: tuple[Constraint, ...] = ()
    sampler: str = "auto"
    seed: int = 0
    trials: int = 50
    #: surrogate seeds every training setting trains (``seeds_min`` in the file, or ``seeds``)
    seeds: int = 1
    population: int | None = None
    #: TPE's (and the auto sampler's) random startup trials (None: Optuna's default, 10)
    startup_trials: int | None = None
    strategy: str = "joint"
    #: the strategy's own [study] options (``Strategy.options``), read back as ``spec.<option>``
    options: dict = field(default_factory=dict)
    #: local worker processes ``dse run`` (and :func:`dse.run`) starts unless told otherwise
    workers: int = 1
    hv_reference: dict = field(default_factory=dict)
    #: the file it was read from (None when built in code)
    path: Path | None = None
    #: the raw TOML document as read
    raw: dict = field(default_factory=dict, compare=False)
    #: the most seeds a setting on the front (or within noise of it) gets (None: ``seeds``, no replication)
    seeds_max: int | None = None
    #: the first surrogate seed: a setting's seeds are first_seed, first_seed + 1, ...
    first_seed: int = 0

    def __post_init__(self) -> None:
        if self.seeds_max is None or self.seeds_max < self.seeds:
            object.__setattr__(self, "seeds_max", self.seeds)
        # every strategy's options, at their declared defaults unless given (a spec built in code and one read
        # from a file with the same values are equal)
        object.__setattr__(self, "options", {**{n: o.default for n, o in OPTIONS.items()}, **self.options})

    def __getattr__(self, name: str):
        # a strategy's option: spec.front_size reads spec.options["front_size"]
        opts = self.__dict__.get("options", {})
        if not name.startswith("__") and name in opts:
            return opts[name]
        raise AttributeError(f"'StudySpec' object has no attribute {name!r}")

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metrics(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def needed_metrics(self) -> list[str]:
        """The metrics the study's trials must have: its objectives, then its constraints' metrics."""
        return list(dict.fromkeys(self.metrics + [c.metric for c in self.constraints]))

    def identity(self) -> dict:
        """What the study's trials depend on, as plain JSON-able data: the strategy, the base configuration,
        the space, the objectives, the constraints and the surrogate seeds (not the budget, the sampler or
        its seed, which a resumed run may change). Stored with the study; :func:`dse.search.study.open_study`
        refuses a file whose identity differs (:func:`dse.search.identity.identity_change` says how)."""
        out = {"strategy": self.strategy, "seeds": self.seeds, "base": self.base.to_dict(),
               "space": {n: _knob_doc(k) for n, k in self.space},
               "objectives": [f"{o.direction} {o.metric}" for o in self.objectives],
               "constraints": [str(c) for c in self.constraints]}
        if self.seeds_max != self.seeds:  # (only when set: a study made before they existed keeps its identity)
            out["seeds_max"] = self.seeds_max
        if self.first_seed:
            out["first_seed"] = self.first_seed
        files = self.base.file_digests()
        if files:  # the tables and topologies it names, by content (only when it names some: as above)
            out["file contents"] = files
        return relative_paths(out, self.relative_files())

    def relative_files(self) -> dict[str, str]:
        """The files (technology table, workload files) the study file names by relative paths: the absolute
        path each resolves to (as :class:`Configuration` resolves it, symlinks too) -> the path as written
        (normalized). A path written as an absolute one is not among them."""
        if self.path is None:
            return {}
        folder = self.path.resolve().parent
        named = [self.raw.get("technology")] + list((self.raw.get("workload") or {}).get("models") or [])
        return {str((folder / v).resolve()): os.path.normpath(v) for v in named
                if isinstance(v, str) and not v.startswith("~") and not Path(v).is_absolute()}

    @property
    def adaptive(self) -> bool:
        """Whether settings near the front get more seeds than the others (seeds_max > seeds_min)."""
        return self.seeds_max > self.seeds

    def seeded(self, cfg: Configuration, n: int | None = None) -> Configuration:
        """``cfg`` on this study's surrogate seeds: ``n`` of them (default the minimum) from ``first_seed``."""
        return replace(cfg, seeds=self.seeds if n is None else n, first_seed=self.first_seed)

    def configuration(self, params: dict[str, Any]) -> Configuration:
        """The configuration a trial's sampled parameters describe (ValueError if it is impossible)."""
        parts = self.space.split(params)
        training = self.base.training.to_dict()
        training.update(parts.get("training", {}))
        hardware = self.base.hardware.to_dict()
        hardware.update(parts.get("hardware", {}))
        par = self.base.parallel
        if parts.get("parallel"):
            par = ParallelConfig(**{**par.to_dict(), **parts["parallel"]})
            microbatch_size(self.base.workload.batch, par)
        return replace(self.base, training=SurrogateConfig.from_dict(training),
                       hardware=Hardware.from_dict(hardware), parallel=par)

    def with_overrides(self, **kw) -> "StudySpec":
        """A copy with fields or strategy options replaced (``None`` leaves one as it is)."""
        kw = {k: v for k, v in kw.items() if v is not None}
        opts = {k: kw.pop(k) for k in list(kw) if k in OPTIONS}
        if opts:  # checked as the study file's [study] table is (type and bounds), named as the override is
            checked = {}
            for k in opts:
                try:
                    checked[k] = _option(opts, OPTIONS[k])
                except UsageError as e:
                    raise UsageError(str(e).replace(f"study.{k}:", f"--{k.replace('_', '-')}:", 1)) from None
            kw["options"] = {**self.options, **checked}
        if "sampler" in kw and kw["sampler"] not in SAMPLERS:
            raise UsageError(f"--sampler: {kw['sampler']!r} is not a sampler; choose one of {', '.join(SAMPLERS)}")
        if "strategy" in kw and kw["strategy"] not in STRATEGIES:
            raise UsageError(f"--strategy: {kw['strategy']!r}; choose one of {', '.join(STRATEGIES)}")
        if "trials" in kw and kw["trials"] < 1:
            raise UsageError(f"--trials: must be an integer >= 1, got {kw['trials']}")
        if "seed" in kw and kw["seed"] < 0:
            raise UsageError(f"--seed: must be an integer >= 0, got {kw['seed']}")
        if "workers" in kw and kw["workers"] < 1:
            raise UsageError(f"--workers: must be an integer >= 1, got {kw['workers']}")
        for k in ("trials", "seed", "workers"):
            if k in kw:
                check_number(kw[k], f"--{k}")
        if "first_seed" in kw and not 0 <= kw["first_seed"] <= MAX_FIRST_SEED:
            raise UsageError(f"--first-seed: must be an integer from 0 to {MAX_FIRST_SEED}, got {kw['first_seed']}")
        if "seeds" in kw and "seeds_max" not in kw:  # a fixed number of seeds: no replication
            kw["seeds_max"] = kw["seeds"]
        for k in ("seeds", "seeds_max"):
            if k in kw and not 1 <= kw[k] <= MAX_SEEDS:
                raise UsageError(f"--{k.replace('_', '-')}: must be an integer from 1 to {MAX_SEEDS}, got {kw[k]}")
        if kw.get("seeds_max", self.seeds_max) < kw.get("seeds", self.seeds):
            raise UsageError(f"--seeds-max: must be at least the minimum number of seeds "
                             f"({kw.get('seeds', self.seeds)}), got {kw.get('seeds_max', self.seeds_max)}")
        spec = replace(self, **kw)
        if spec.sampler == "grid":
            _check_grid(spec.space)
        if {"strategy", "sampler", "seeds", "seeds_max"} & set(kw) or opts:  # what the strategy checks
            STRATEGIES[spec.strategy].validate(spec)
        return spec


#: every strategy's [study] options by name (dse.search.strategies: each declares its own)
OPTIONS: dict[str, Option] = {o.name: o for s in STRATEGIES.values() for o in s.options}
_clash = [o.name for o in (o for s in STRATEGIES.values() for o in s.options)
          if o.name in {f.name for f in fields(StudySpec)} or OPTIONS[o.name] is not o]
assert not _clash, f"strategy options must have names of their own (not a [study] field's): {_clash}"


def _option(table: dict, o: Option) -> Any:
    """Option ``o``'s value in ``table``, checked (type, bounds) with a message naming ``study.<name>``."""
    return take(table, o.name, o.type, "study", default=o.default, low=o.low, high=o.high)


def _knob_doc(k) -> Any:
    if isinstance(k, Fixed):
        return k.value
    if isinstance(k, Choice):
        return list(k.choices)
    if isinstance(k, Bundle):
        return [dict(t) for t in k.tables]
    return {f: getattr(k, f) for f in ("low", "high", "log", "step") if getattr(k, f) not in (None, False)}


def _check_grid(space: Space) -> None:
    for n, k in space.searched():
        if not k.finite:
            raise UsageError(f"space.{n}: the grid sampler needs finite knobs; give this range a step or "
                             "use a list of choices")


def _knob_values(fld: str, knob) -> tuple[list[dict], dict | None]:
    """The values :func:`_check_values` tries for a knob (as ``{field: value}`` tables), and the one of them a
    float range samples inside (None for other knobs): a float range on an integer field fails there, not at
    its ends."""
    if isinstance(knob, Fixed):
        return [{fld: knob.value}], None
    if isinstance(knob, Choice):
        return [{fld: v} for v in knob.choices], None
    if isinstance(knob, Bundle):
        return [dict(t) for t in knob.tables], None
    if knob.step is not None:
        inside = knob.low + knob.step
    elif knob.log:
        inside = knob.low * (knob.high / knob.low) ** 0.618
    else:
        inside = knob.low + (knob.high - knob.low) * 0.618
    probe = {fld: inside}
    return [{fld: knob.low}, {fld: knob.high}] + ([] if knob.integer else [probe]), probe


def _check_values(space: Space, base: Configuration) -> None:
    """Every value a knob can take must be valid with the base's other fields, or with some values of one or
    two other knobs of its section (``schedule = "1f1b-interleaved"`` with a searched ``chunks = [1, 2]``, and
    with ``stages = [1, 2]`` on a base of one stage); the combinations a trial samples are checked per trial."""
    def check(name: str, v: dict) -> None:
        section = name.split(".", 1)[0]
        if section == "training":
            cfg = SurrogateConfig.from_dict({**base.training.to_dict(), **v})
            if "scheme" in v:
                check_scheme(cfg.scheme, f"space.{name}")
        elif section == "parallel":
            ParallelConfig(**{**base.parallel.to_dict(), **v})
        else:
            Hardware.from_dict({**base.hardware.to_dict(), **v})

    for name, knob in space:
        section, fld = name.split(".", 1)
        values, probe = _knob_values(fld, knob)
        others = [_knob_values(n.split(".", 1)[1], k)[0] for n, k in space.searched()
                  if n != name and n.startswith(section + ".")]
        for v in values:
            try:
                check(name, v)
            except (ValueError, TypeError) as e:
                if any(_passes(check, name, {**w, **v}) for vals in others for w in vals) or any(
                        _passes(check, name, {**w, **u, **v}) for i, a in enumerate(others) for b in others[i + 1:]
                        for w in a for u in b):
                    continue  # valid together with other knobs' values: a trial's combination is checked
                shown = next(iter(v.values())) if len(v) == 1 else v
                why = str(e)
                if len(v) == 1 and why.startswith(f"{fld}: "):  # the field is already named
                    why = why[len(fld) + 2:]
                    why = why.removesuffix(f" (got {shown!r})")  # and the value too
                sampled = (" (a value the float range samples; integer low, high and step make an integer range)"
                           if v is probe else "")
                raise UsageError(f"space.{name}: value {shown!r}{sampled} is not allowed: {why}") from None


def _passes(check, name: str, v: dict) -> bool:
    try:
        check(name, v)
    except (ValueError, TypeError, UsageError):
        return False
    return True


def spec_from_dict(doc: dict, *, path: Path | None = None) -> StudySpec:
    top = {"study", "workload", "training", "hardware", "reference", "technology", "space", "objectives",
           "constraints", "hypervolume", "parallel"}
    if not {"study", "space", "objectives"} & set(doc):  # a preset for another command: say so, not a table error
        if not doc:
            raise UsageError("study file: it is empty; a study needs [space] and [[objectives]] tables (`dse init` "
                             "writes one)")
        cmd = "dse surrogate" if set(doc) <= {"training"} else "dse evaluate"
        raise UsageError(f"study file: no [space] and no [[objectives]]: this is not a study but a file for `{cmd} "
                         "FILE`; a study searches a [space] for [[objectives]] (`dse init` writes one)")
    check_keys(doc, top, "study file")
    st = doc.get("study", {})
    if not isinstance(st, dict):
        raise UsageError("study: expected a table")
    strategy = take(st, "strategy", str, "study", default="joint", choices=tuple(STRATEGIES))
    # every strategy's options are accepted (``dse run --strategy`` may pick another one than the file's)
    declared = [o for s in STRATEGIES.values() for o in s.options]
    check_keys(st, {"name", "sampler", "seed", "trials", "seeds", "seeds_min", "seeds_max", "first_seed",
                    "population", "startup_trials", "strategy", "workers", *(o.name for o in declared)}, "study")
    default_name = path.stem if path is not None else "study"
    name = check_name(take(st, "name", str, "study", default=default_name), "study.name")
    base = Configuration.from_dict({k: doc[k] for k in ("workload", "training", "hardware", "reference",
                                                         "technology", "parallel") if k in doc},
                                   base=path.parent if path else None)
    space_doc = doc.get("space", {})
    if not isinstance(space_doc, dict):
        raise UsageError("space: expected tables [space.training], [space.hardware], [space.parallel]")
    space = Space.from_tables(space_doc, {"training": _TRAINING_FIELDS, "hardware": set(HARDWARE_FIELDS),
                                          "parallel": set(PARALLEL_FIELDS)})
    if space.names("parallel") and base.parallel is None:
        raise UsageError("space.parallel: add a [parallel] table (the base job over several accelerators) "
                         "for its knobs to vary")
    _check_values(space, base)
    objs = doc.get("objectives")
    if not isinstance(objs, list) or not 2 <= len(objs) <= 4:
        got = f"got {len(objs)}" if isinstance(objs, list) else "got none" if objs is None else \
            "got a single value"
        raise UsageError(f"objectives: give 2 to 4 [[objectives]] tables ({got}), each with a metric "
                         f"({', '.join(registry.names())})")
    objectives = []
    for i, o in enumerate(objs):
        where = f"objectives[{i}]"
        if not isinstance(o, dict):
            raise UsageError(f"{where}: expected a table with metric and optional direction")
        check_keys(o, {"metric", "direction"}, where)
        m = take(o, "metric", str, where, choices=tuple(registry.names()))
        d = take(o, "direction", str, where, default=registry.get(m).direction,
                 choices=("minimize", "maximize"))
        objectives.append(Objective(m, d))
    if len({o.metric for o in objectives}) != len(objectives):
        raise UsageError("objectives: a metric appears twice")
    constraints = []
    cons = doc.get("constraints", [])
    if not isinstance(cons, list):
        raise UsageError("constraints: give [[constraints]] tables, each with a metric and max and/or min")
    for i, c in enumerate(cons):
        where = f"constraints[{i}]"
        if not isinstance(c, dict):
            raise UsageError(f"{where}: expected a table with metric and max and/or min")
        check_keys(c, {"metric", "max", "min"}, where)
        m = take(c, "metric", str, where, choices=tuple(registry.names()))
        hi = take(c, "max", float, where, default=None)
        lo = take(c, "min", float, where, default=None)
        if hi is None and lo is None:
            raise UsageError(f"{where}: give max and/or min for {m}")
        if hi is not None and lo is not None and lo > hi:
            raise UsageError(f"{where}: min {lo} > max {hi}")
        constraints.append(Constraint(m, hi, lo))
    hv = doc.get("hypervolume", {})
    if not isinstance(hv, dict):
        raise UsageError("hypervolume: expected a table of reference values per objective metric")
    check_keys(hv, {o.metric for o in objectives}, "hypervolume")
    hv_ref = {k: take(hv, k, float, "hypervolume") for k in hv}
    sampler = take(st, "sampler", str, "study", default="auto", choices=SAMPLERS)
    seeds_min, seeds_max = _seeds(st)
    spec = StudySpec(
        name=name,
        base=base,
        space=space,
        objectives=tuple(objectives),
        constraints=tuple(constraints),
        sampler=sampler,
        seed=take(st, "seed", int, "study", default=0, low=0),  # at most 2**32 - 1 (dse.config.values.LIMITS)
        trials=take(st, "trials", int, "study", default=50, low=1),
        seeds=seeds_min,
        seeds_max=seeds_max,
        first_seed=take(st, "first_seed", int, "study", default=0, low=0, high=MAX_FIRST_SEED),
        population=take(st, "population", int, "study", default=None, low=2),
        startup_trials=take(st, "startup_trials", int, "study", default=None, low=1),
        strategy=strategy,
        options={o.name: _option(st, o) for o in declared},
        workers=take(st, "workers", int, "study", default=1, low=1, high=64),
        hv_reference=hv_ref,
        path=path,
        raw=doc,
    )
    if sampler == "grid":
        _check_grid(space)
    STRATEGIES[strategy].validate(spec)
    if not space.searched():
        raise UsageError("space: no knob is searched; give at least one knob a list of choices or a range")
    return spec


def _seeds(st: dict) -> tuple[int, int]:
    """[study] seeds (a fixed number), or seeds_min and seeds_max (adaptive replication)."""
    if "seeds" in st and ("seeds_min" in st or "seeds_max" in st):
        raise UsageError("study.seeds: give either seeds (a fixed number of surrogate seeds per setting) or "
                         "seeds_min and seeds_max (adaptive), not both")
    if "seeds" in st:
        n = take(st, "seeds", int, "study", low=1, high=MAX_SEEDS)
        return n, n
    lo = take(st, "seeds_min", int, "study", default=1, low=1, high=MAX_SEEDS)
    hi = take(st, "seeds_max", int, "study", default=lo, low=1, high=MAX_SEEDS)
    if hi < lo:
        raise UsageError(f"study.seeds_max: must be at least seeds_min ({lo}), got {hi}")
    return lo, hi


def load_study(path: str | Path) -> StudySpec:
    p = file_path(path)
    return spec_from_dict(load_toml(p), path=p.resolve())
