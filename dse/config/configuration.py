"""The configuration type: training knobs + hardware + workload, the unit every evaluation takes.

A configuration file (what ``dse export`` writes and ``dse evaluate`` reads) has the tables

* ``[workload]``  -- :class:`dse.config.workload.Workload` (zoo models, batch, data-set size, epochs, optimizer);
* ``[training]``  -- :class:`models.surrogate.SurrogateConfig` (scheme, predictor, phase schedule);
* ``[hardware]``  -- :class:`accel.Hardware`, the candidate accelerator;
* ``[reference]`` -- :class:`accel.Hardware`, the baseline that runs plain BP (``speedup``'s denominator);
* ``[schedule]``  -- optional what-if: ``gp_fraction`` (0-1) of post-warm-up steps in GP phase, used instead
  of the surrogate's measured fraction; with it the surrogate does not run unless ``accuracy = true``;
* ``technology``  -- optional path of a technology table (``accel.load_tech``), relative to the file;
* ``[parallel]``  -- optional: the job over several accelerators (pipeline stages, micro-batches, schedule,
  link, data-parallel replicas), :class:`dse.config.parallel.ParallelConfig`.

How a configuration is evaluated: :mod:`dse.evaluation.evaluator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel import Hardware, load_tech
from dse.config.parallel import ParallelConfig, microbatch_size
from dse.config.schema import check_keys, file_path, load_toml, read_limited, take
from dse.config.values import check_document
from dse.config.workload import Workload
from dse.errors import UsageError
from models.schemes import check_complete
from models.surrogate import SurrogateConfig

__all__ = ["Configuration", "load_configuration", "plan_key", "check_scheme", "MAX_SEEDS", "MAX_FIRST_SEED"]

#: the most surrogate seeds one configuration (or one study setting) averages
MAX_SEEDS = 20
#: the largest first surrogate seed (the training code seeds numpy with seed + small offsets)
MAX_FIRST_SEED = 10**6


@dataclass(frozen=True)
class Configuration:
    workload: Workload = field(default_factory=Workload)
    training: SurrogateConfig = field(default_factory=SurrogateConfig)
    hardware: Hardware = field(default_factory=Hardware)
    reference: Hardware = field(default_factory=Hardware)
    #: what-if override of the GP fraction (None: from the surrogate)
    gp_fraction: float | None = None
    #: with a what-if GP fraction, still run the surrogate for the accuracy figures
    accuracy: bool = False
    technology: str | None = None
    #: surrogate seeds (first_seed..first_seed+seeds-1) whose mean accuracy the configuration reports
    seeds: int = 3
    #: the job over several accelerators (None: one accelerator)
    parallel: ParallelConfig | None = None
    #: the first surrogate seed (a front re-checked on fresh seeds: e.g. 100)
    first_seed: int = 0

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The surrogate seeds whose mean the accuracy figures are."""
        return tuple(range(self.first_seed, self.first_seed + self.seeds))

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "workload": self.workload.to_dict(),
            "training": self.training.to_dict(),
            "hardware": self.hardware.to_dict(),
            "reference": self.reference.to_dict(),
        }
        if self.gp_fraction is not None:
            d["schedule"] = {"gp_fraction": self.gp_fraction, "accuracy": self.accuracy}
        if self.technology:
            d["technology"] = self.technology
        d["seeds"] = self.seeds
        if self.first_seed:
            d["first_seed"] = self.first_seed
        if self.parallel is not None:
            d["parallel"] = self.parallel.to_dict()
        return d

    def file_digests(self) -> dict[str, str]:
        """The files this configuration names (its technology table, its workload files), each by a digest of
        what the model reads from it: a study's trials depend on that, not only on the paths. A technology
        table by its constants (not its comments or sources), a SCALE-Sim topology by its cells (not its
        spacing, blank lines or line endings), an ONNX model by its bytes."""
        import dataclasses
        import hashlib
        import json

        from models import importers

        def digest(data: bytes) -> str:
            return hashlib.sha256(data).hexdigest()[:16]

        out = {}
        try:
            if self.technology:
                t = load_tech(self.technology)
                consts = {f.name: getattr(t, f.name) for f in dataclasses.fields(t)
                          if f.name not in ("name", "sources")}
                out[self.technology] = digest(json.dumps(consts, sort_keys=True, default=str).encode())
            for m in self.workload.models:
                if not importers.is_file_model(m):
                    continue
                data = Path(m).read_bytes()
                if m.lower().endswith(".csv"):
                    lines = data.decode("utf-8", "replace").splitlines()
                    data = "\n".join(",".join(c.strip() for c in ln.split(",")) for ln in lines if ln.strip()).encode()
                out[m] = digest(data)
        except (OSError, ValueError) as e:
            raise UsageError(f"a file the configuration names cannot be read: {e}") from None
        return out

    @classmethod
    def from_dict(cls, d: dict, *, base: Path | None = None, where: str = "") -> "Configuration":
        pre = f"{where}." if where else ""
        check_keys(d, {"workload", "training", "hardware", "reference", "schedule", "technology", "seeds",
                       "first_seed", "meta", "parallel"}, where or "configuration")
        for t in ("workload", "training", "hardware", "reference", "schedule", "meta", "parallel"):
            if t in d and not isinstance(d[t], dict):
                raise UsageError(f"{pre}{t}: expected a table")
        workload = Workload.from_dict(d.get("workload", {}), where=f"{pre}workload", base=base)
        try:
            training = SurrogateConfig.from_dict(d.get("training", {}))
        except ValueError as e:
            raise UsageError(f"{pre}training.{e}") from None
        check_scheme(training.scheme, f"{pre}training.scheme")
        hw = {}
        for t in ("hardware", "reference"):
            try:
                hw[t] = Hardware.from_dict(d.get(t, {}))
            except (ValueError, TypeError) as e:
                raise UsageError(f"{pre}{t}.{e}") from None
        sched = d.get("schedule", {})
        check_keys(sched, {"gp_fraction", "accuracy"}, f"{pre}schedule")
        gpf = take(sched, "gp_fraction", float, f"{pre}schedule", default=None, low=0.0, high=1.0)
        tech = take(d, "technology", str, where or "configuration", default=None)
        if tech is not None and base is not None and not Path(tech).is_absolute():
            tech = str((base / tech).resolve())
        if tech is not None:  # read now: a missing or bad table fails here, not in every trial
            try:
                load_tech(tech)
            except (OSError, ValueError) as e:
                raise UsageError(f"{pre}technology: {tech}: " + (e.strerror or str(e) if isinstance(e, OSError)
                                                                 else str(e).removeprefix(f"{tech}: "))) from None
        par = ParallelConfig.from_dict(d["parallel"], f"{pre}parallel") if "parallel" in d else None
        if par is not None:
            try:
                microbatch_size(workload.batch, par)
            except ValueError as e:
                raise UsageError(f"{pre}parallel.{e}") from None
        return cls(workload, training, hw["hardware"], hw["reference"], gpf,
                   take(sched, "accuracy", bool, f"{pre}schedule", default=False), tech,
                   take(d, "seeds", int, where or "configuration", default=3, low=1, high=MAX_SEEDS), par,
                   take(d, "first_seed", int, where or "configuration", default=0, low=0, high=MAX_FIRST_SEED))


def check_scheme(name: str, where: str) -> None:
    """``UsageError`` naming ``where`` unless scheme ``name`` has both its halves (its training behaviour and
    its accelerator cost, :func:`models.schemes.check_complete`): an incomplete scheme is refused before
    anything is trained."""
    try:
        check_complete(name)
    except ValueError as e:
        raise UsageError(f"{where}: {e}") from None


def load_configuration(path: str | Path) -> Configuration:
    """Read a configuration from TOML (or JSON, as ``dse export --format json`` writes it)."""
    p = file_path(path)
    if p.suffix.lower() == ".json":
        import json

        if p.is_dir() or not p.exists():
            raise UsageError(f"{p}: {'is a folder' if p.is_dir() else 'no such file'}; expected a JSON file")
        try:
            doc = json.loads(read_limited(p, "JSON").decode("utf-8"))
        except OSError as e:
            raise UsageError(f"{p}: cannot be read ({e.strerror})") from None
        except UnicodeDecodeError:
            raise UsageError(f"{p}: not a UTF-8 text file (expected JSON)") from None
        except json.JSONDecodeError as e:
            raise UsageError(f"{p}: not valid JSON: {e}") from None
        if not isinstance(doc, dict):
            raise UsageError(f"{p}: expected one configuration (a JSON object)")
        check_document(doc)  # every number finite and in range, as in a TOML file
        return Configuration.from_dict(_not_a_study(doc, p), base=p.parent)
    return Configuration.from_dict(_not_a_study(load_toml(p), p), base=p.parent)


#: tables only a study file has
STUDY_TABLES = ("study", "space", "objectives", "constraints")


def _not_a_study(doc: dict, p: Path) -> dict:
    """``doc``, unless it is a study file: then a one-line error saying what to do with it."""
    found = [k for k in STUDY_TABLES if k in doc]
    if found:
        raise UsageError(f"{p}: this is a study file ([{found[0]}]), not a configuration; run it with `dse run "
                         f"{p}`, or export a configuration from its results with `dse export {p}` (--knee, "
                         "--best METRIC) and give that file")
    return doc


def plan_key(training: SurrogateConfig) -> tuple:
    """The training knobs a scheme's cost depends on, as a hashable key (every knob: a scheme reads the ones
    it needs; caching by all of them is exact and cheap)."""
    return tuple(sorted((k, v) for k, v in training.to_dict().items() if k != "tasks"))  # proxy tasks cost nothing
