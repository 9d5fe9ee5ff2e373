"""The surrogate's configuration: one frozen dataclass of plain data, validated on construction.

Its defaults ARE the committed default ADA-GP setting (``studies/surrogate-default.toml`` holds the same
values as a ``[training]`` table). Every knob a search would vary is an integer, a boolean, a choice, or a
float that is meant to be drawn from a short grid (see ``docs/surrogate.md``): continuous knobs make every
trial a new training run and defeat the cache.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from models.schemes.registry import CONFIGURABLE

__all__ = ["SurrogateConfig", "TASKS", "TASK_CLASSES", "TASK_DEFAULTS", "NETWORKS", "SCHEMES", "load_training_table"]

TASKS = ("mnist1d", "digits", "fashion")
NETWORKS = ("cnn", "cnn_pool", "mlp", "resnet")
#: Image tasks (inputs ``(H, W, 1)``): they need an image network.
IMAGE_TASKS = ("fashion",)
IMAGE_NETWORKS = ("resnet", "mlp")
#: the configurable gradient schemes, from their name table (``models.schemes.registry``): the schemes under
#: study, then the reference (plain BP) and the controls, each as the control of ADA-GP's run with the same knobs
SCHEMES = CONFIGURABLE
#: classes of each task (``efb_rank`` is at most this)
TASK_CLASSES = {"mnist1d": 10, "digits": 10, "fashion": 10}
#: Each task's network and budget, the tuned proxy (docs/surrogate.md): a table naming a task takes these for
#: every knob it does not give (an explicitly given knob wins). MNIST-1D's are SurrogateConfig's own defaults;
#: digits (for fast tests) shares them; fashion's are the image proxy's (studies/surrogate-fashion.toml).
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "mnist1d": {"network": "cnn", "width": 25, "epochs": 10, "batch_size": 32, "lr": 0.05, "lr_decay": True,
                "momentum": 0.9},
    "digits": {"network": "cnn", "width": 25, "epochs": 10, "batch_size": 32, "lr": 0.05, "lr_decay": True,
               "momentum": 0.9},
    "fashion": {"network": "resnet", "width": 8, "epochs": 8, "batch_size": 128, "lr": 0.2, "lr_decay": True,
                "momentum": 0.9},
}
PRED_FEATURES = ("level", "deviation", "both")
PRED_OUTPUTS = ("row", "factored")

#: Knobs that change the plain-BP reference run (the BP cache key uses only these).
BP_KNOBS = ("task", "network", "width", "epochs", "batch_size", "lr", "lr_decay", "momentum")


def _int(lo: int, hi: int):
    return ("int", lo, hi)


def _float(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False):
    return ("float", lo, hi, lo_open, hi_open)


def _choice(*values: str):
    return ("choice", values)


_BOOL = ("bool",)

#: field -> rule; the single source of the allowed ranges (used by validation and by the docs' table).
RULES: dict[str, tuple] = {
    # task and network
    "task": _choice(*TASKS),
    "network": _choice(*NETWORKS),
    "width": _int(2, 256),
    "epochs": _int(1, 200),
    "batch_size": _int(1, 1024),
    "lr": _float(0.0, 10.0, lo_open=True),
    "lr_decay": _BOOL,
    "momentum": _float(0.0, 1.0, hi_open=True),
    # scheme
    "scheme": _choice(*SCHEMES),
    "true_output_grad": _BOOL,
    "agent": _BOOL,
    # predictor
    "pred_input": _int(1, 64),
    "pred_hidden_layers": _int(0, 4),
    "pred_width": _int(1, 1024),
    "pred_head": _int(0, 4096),
    "pred_layer_code": _BOOL,
    "pred_lr": _float(0.0, 1.0, lo_open=True),
    "pred_features": _choice(*PRED_FEATURES),
    "pred_output": _choice(*PRED_OUTPUTS),
    "pred_steps": _int(1, 16),
    # error feedback (efb) and local classifiers (local)
    "efb_rank": _int(1, 64),
    "efb_decay": _float(0.0, 1.0, hi_open=True),
    "local_width": _int(1, 64),
    # schedule
    "warmup": _float(0.0, 1.0, hi_open=True),
    "adaptive": _BOOL,
    "gp_fraction": _float(0.0, 0.95),
    "bp_phase": _int(1, 1000),
    "gp_phase_init": _int(0, 1000),
    "gp_phase_min": _int(0, 1000),
    "gp_phase_max": _int(1, 1000),
    "cos_threshold": _float(-1.0, 1.0),
    "relerr_threshold": _float(0.0, 10.0, lo_open=True),
}


def _describe(rule: tuple) -> str:
    kind = rule[0]
    if kind == "int":
        return f"an integer from {rule[1]} to {rule[2]}"
    if kind == "float":
        lo = f"{'>' if rule[3] else '>='} {rule[1]:g}"
        hi = f"{'<' if rule[4] else '<='} {rule[2]:g}"
        return f"a number {lo} and {hi}"
    if kind == "choice":
        return "one of " + ", ".join(repr(v) for v in rule[1])
    return "true or false"


def _check(name: str, value: Any) -> Any:
    rule = RULES[name]
    kind = rule[0]
    bad = ValueError(f"{name}: {_describe(rule)} (got {value!r})")
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if kind == "choice":
        if not isinstance(value, str) or value not in rule[1]:
            raise bad
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad
    if kind == "int":
        if isinstance(value, float):
            if not value.is_integer():
                raise bad
            value = int(value)
        if not rule[1] <= value <= rule[2]:
            raise bad
        return int(value)
    value = float(value)
    lo, hi, lo_open, hi_open = rule[1:]
    if not math.isfinite(value):
        raise bad
    if value < lo or (lo_open and value == lo) or value > hi or (hi_open and value == hi):
        raise bad
    return value


@dataclass(frozen=True)
class SurrogateConfig:
    """Training knobs of one surrogate evaluation. The defaults are the committed default ADA-GP setting.

    Task and network: ``task`` (``"mnist1d"`` default, ``"digits"`` for fast tests), ``network`` (``"cnn"``:
    three stride-2 convolutions of ``width`` channels, kernel 5, then a linear classifier; ``"cnn_pool"``:
    stride-1 convolutions each followed by max-pooling; ``"mlp"``: two hidden layers of ``width``), ``epochs``,
    ``batch_size``, ``lr`` and ``momentum`` of SGD with momentum; ``lr_decay``: cosine decay of the learning
    rate to zero over the run (it makes the final test accuracy far less noisy than a constant rate).

    Scheme (``models.schemes``, one module per scheme): ``"adagp"`` (predicted weight gradients in GP phases),
    ``"efb"`` (error feedback: each layer's output gradient from the output error through a learned low-rank
    map, ``dW`` from the layer's own input), ``"local"`` (a local auxiliary classifier per layer; the layer
    updates from its local loss), ``"dni"`` (DNI-style synthetic gradients dL/dh from h and the label in GP
    phases), ``"bp"`` (plain backprop); the controls of ADA-GP's schedule ``"null"`` (predicted layers skip GP
    steps), ``"null_momentum"`` (a zero gradient, the momentum step taken), ``"truncated"`` (only the layer
    below the classifier gets its exact gradient). Every scheme is reported against all three controls.
    ``true_output_grad``: in GP steps the
    classifier layer updates with its true gradient (one outer product from the loss, no backward pass);
    otherwise it is predicted like the others. ``agent``: blend the predicted gradient with the layer's last
    true gradient, weighted by a damped estimate of the correlation of successive true gradients.

    Predictor (ADA-GP): ``pred_input`` pooled length of a reorganized channel, ``pred_hidden_layers`` and
    ``pred_width`` of its MLP, ``pred_head`` output width (0: the largest fan-in + 1 for the bias, masked
    for smaller layers; smaller: tiled), ``pred_layer_code`` (append a one-hot layer index to the input;
    ours, not the paper's), ``pred_lr`` (Adam). Ours, not the paper's: ``pred_features`` (``"level"``: the
    pooled map divided by its RMS; ``"deviation"``: the pooled map minus its running mean, divided by a
    running RMS; ``"both"``), ``pred_output`` (``"row"``: the full gradient row; ``"factored"``: one
    coefficient per channel times the layer's batch-mean input patch, then 1 for the bias) and
    ``pred_steps`` (Adam steps per BP batch).

    Error feedback: ``efb_rank`` (1 to the number of classes) the rank of each layer's feedback map,
    ``efb_decay`` the per-BP-batch decay of the statistics it is refit from. Local classifiers:
    ``local_width`` the number of pooled positions of each head's input (at most the layer's own).

    Schedule: ``warmup`` fraction of all steps in plain BP; then BP phases of ``bp_phase`` steps alternate
    with GP phases. ``adaptive``: after each BP phase the GP-phase length doubles if the predictor's mean
    cosine >= ``cos_threshold`` and mean relative error <= ``relerr_threshold`` on that phase's batches,
    and halves otherwise, within [``gp_phase_min``, ``gp_phase_max``], starting at ``gp_phase_init``.
    Not adaptive: GP phases are sized so that ``gp_fraction`` of post-warm-up steps are GP.
    """

    task: str = "mnist1d"
    network: str = "cnn"
    width: int = 25
    epochs: int = 10
    batch_size: int = 32
    lr: float = 0.05
    lr_decay: bool = True
    momentum: float = 0.9
    scheme: str = "adagp"
    true_output_grad: bool = True
    agent: bool = False
    pred_input: int = 8
    pred_hidden_layers: int = 1
    pred_width: int = 64
    pred_head: int = 0
    pred_layer_code: bool = False
    pred_lr: float = 0.001
    pred_features: str = "level"
    pred_output: str = "row"
    pred_steps: int = 1
    efb_rank: int = 10
    efb_decay: float = 0.9
    local_width: int = 4
    warmup: float = 0.1
    adaptive: bool = False
    gp_fraction: float = 0.2
    bp_phase: int = 4
    gp_phase_init: int = 4
    gp_phase_min: int = 1
    gp_phase_max: int = 16
    cos_threshold: float = 0.3
    relerr_threshold: float = 1.0
    #: several proxy tasks (``task`` first): the setting is trained on each (dse's evaluator; ``task_configs``)
    tasks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name != "tasks":
                object.__setattr__(self, f.name, _check(f.name, getattr(self, f.name)))
        tasks = self.tasks
        allowed = ", ".join(repr(t) for t in TASKS)
        if not isinstance(tasks, (list, tuple)) or any(not isinstance(t, str) or t not in TASKS for t in tasks):
            raise ValueError(f"tasks: a list of task names, each one of {allowed} (got {tasks!r})")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"tasks: each task once (got {list(tasks)!r})")
        if tasks and tasks[0] != self.task:
            raise ValueError(f"tasks: the first is the task ({self.task!r}) (got {list(tasks)!r})")
        object.__setattr__(self, "tasks", tuple(tasks) if len(tasks) > 1 else ())
        classes = TASK_CLASSES[self.task]
        if self.efb_rank > classes:
            raise ValueError(f"efb_rank: an integer from 1 to the task's {classes} classes (got {self.efb_rank})")
        if self.task in IMAGE_TASKS and self.network not in IMAGE_NETWORKS:
            raise ValueError(f"network: {' or '.join(repr(n) for n in IMAGE_NETWORKS)} for the image task "
                             f"{self.task!r} (got {self.network!r})")
        if self.task not in IMAGE_TASKS and self.network == "resnet":
            raise ValueError(f"network: 'resnet' needs an image task ({', '.join(repr(t) for t in IMAGE_TASKS)}) "
                             f"(got task {self.task!r})")
        if self.gp_phase_min > self.gp_phase_max:
            raise ValueError(
                f"gp_phase_min: at most gp_phase_max ({self.gp_phase_max}) (got {self.gp_phase_min})"
            )
        if not self.gp_phase_min <= self.gp_phase_init <= self.gp_phase_max:
            raise ValueError(
                f"gp_phase_init: between gp_phase_min ({self.gp_phase_min}) and gp_phase_max "
                f"({self.gp_phase_max}) (got {self.gp_phase_init})"
            )

    # -- plain data ------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data; ``tasks`` only when there are several (so a one-task setting's dict is as before)."""
        d = asdict(self)
        if d["tasks"]:
            d["tasks"] = list(d["tasks"])
        else:
            del d["tasks"]
        return d

    def task_configs(self) -> list["SurrogateConfig"]:
        """One configuration per proxy task (``task`` first): each further task takes its own defaults for the
        knobs at ``task``'s (:meth:`replace`); just this one without ``tasks``."""
        if not self.tasks:
            return [self]
        first = self.replace(tasks=[])
        return [first] + [first.replace(task=t) for t in self.tasks[1:]]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SurrogateConfig":
        """Build from a mapping (a TOML ``[training]`` table); missing keys take the task's defaults
        (:data:`TASK_DEFAULTS`: network and budget), then the class's."""
        if not isinstance(data, Mapping):
            raise ValueError(f"training: a table of knobs (got {type(data).__name__})")
        names = [f.name for f in fields(cls)]
        for key in data:
            if key not in names:
                raise ValueError(f"{key}: unknown field; allowed: {', '.join(names)}")
        data = dict(data)
        tasks = data.get("tasks")
        if isinstance(tasks, (list, tuple)) and tasks and "task" not in data:
            data["task"] = tasks[0]  # ``tasks`` alone: the first is the task
        task = data.get("task", cls.task)
        defaults = TASK_DEFAULTS.get(task, {}) if isinstance(task, str) else {}
        return cls(**{**defaults, **data})

    def replace(self, **changes: Any) -> "SurrogateConfig":
        """A copy with ``changes``. A change of ``task`` also moves every knob still at the old task's default
        (:data:`TASK_DEFAULTS`) to the new task's, unless ``changes`` names it."""
        data = self.to_dict()
        new_task = changes.get("task", self.task)
        if new_task != self.task and isinstance(new_task, str) and new_task in TASK_DEFAULTS:
            old = TASK_DEFAULTS.get(self.task, {})
            for k, v in TASK_DEFAULTS[new_task].items():
                if k not in changes and data[k] == old.get(k):
                    data[k] = v
        data.update(changes)
        return type(self).from_dict(data)

    def to_toml(self, table: str = "training") -> str:
        lines = [f"[{table}]"]
        for key, value in self.to_dict().items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, str):
                text = f'"{value}"'
            elif isinstance(value, list):
                text = "[" + ", ".join(f'"{v}"' for v in value) + "]"
            elif isinstance(value, float):
                text = repr(value)
            else:
                text = str(value)
            lines.append(f"{key} = {text}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_toml(cls, path: str | Path, table: str = "training") -> "SurrogateConfig":
        return cls.from_dict(load_training_table(path, table))

    @property
    def proxy(self) -> str:
        """What every accuracy figure of this setting is measured on: the proxy task, its network and its
        training budget (not the workload's), e.g. ``"mnist1d / cnn, 10 epochs"``; several tasks: each one's,
        ``"; "``-separated."""
        if self.tasks:
            return "; ".join(c.proxy for c in self.task_configs())
        return f"{self.task} / {self.network}, {self.epochs} epochs"

    def bp_key(self) -> dict[str, Any]:
        """The knobs the plain-BP reference depends on."""
        return {k: getattr(self, k) for k in BP_KNOBS}


def load_training_table(path: str | Path, table: str = "training") -> dict[str, Any]:
    """Read the ``[training]`` table of a TOML file (ValueError with a one-line message if absent/invalid)."""
    import tomllib

    path = Path(path)
    try:
        with path.open("rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML ({exc})") from None
    if table not in doc:
        raise ValueError(f"{path}: needs a [{table}] table of training knobs")
    data = doc[table]
    if not isinstance(data, dict):
        raise ValueError(f"{table}: a table of knobs (got {type(data).__name__})")
    return data
