"""The gradient schemes' name table: one :class:`SchemeRecord` per scheme, registered below.

Every list of scheme names in the project derives from :data:`REGISTRY`: the configuration's allowed
``scheme`` values (:data:`CONFIGURABLE`, read by ``models.surrogate.config``), the controls every scheme is
reported against (:data:`CONTROLS`, with the result key of each one's gain, :data:`GAIN_KEYS`), the
diagnostics (:data:`DIAGNOSTICS`), the schemes under study (:data:`PREDICTING`) and the schemes with an
accelerator cost (:data:`COSTED`).

A record names the module that holds the scheme (``models/schemes/<name>.py``) and, in it, the scheme's two
halves: its training behaviour (a ``GradientScheme`` subclass, ``models.schemes.base``) and its cost lowering
(``(training knobs, net, batch, word_bytes) -> SchemePlan``, ``models.schemes.plan``). The halves are loaded
on first use, so this module is a light leaf (standard library only): the surrogate's cache hit imports it and
nothing heavy. :func:`check_complete` says whether a registered scheme has both halves it needs.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # pragma: no cover
    from models.schemes.base import GradientScheme
    from models.schemes.plan import SchemePlan

__all__ = ["KINDS", "SchemeRecord", "REGISTRY", "register", "record", "names", "check_complete", "costable",
           "make_scheme", "scheme_plan", "CONFIGURABLE", "PREDICTING", "CONTROLS", "DIAGNOSTICS", "COSTED",
           "GAIN_KEYS"]

#: a record's kind: ``predicting`` (a scheme under study: GP steps apply its predicted gradients), ``reference``
#: (plain BP: no GP step, no cost of its own), ``control`` (replays a scheme's GP/BP step mask; every scheme is
#: reported against each), ``diagnostic`` (``train_run`` only, not a configuration value)
KINDS = ("predicting", "reference", "control", "diagnostic")


@dataclass(frozen=True)
class SchemeRecord:
    """One gradient scheme: its name, its module and the names of its two halves in that module."""

    #: the scheme's name (``SurrogateConfig.scheme`` / ``train_run``'s ``scheme``)
    name: str
    #: dotted path of the module that holds both halves (``models.schemes.<name>``)
    module: str
    #: one of :data:`KINDS`
    kind: str
    #: the module's ``GradientScheme`` subclass (training behaviour); None: not written yet
    training: Optional[str] = None
    #: the module's lowering ``(cfg, net, batch, word_bytes) -> SchemePlan`` (accelerator cost); None: none
    cost: Optional[str] = None
    #: controls only: the result key of a scheme's accuracy gain against this control
    gain_key: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind: one of {', '.join(KINDS)} (got {self.kind!r})")
        if (self.kind == "control") != (self.gain_key is not None):
            raise ValueError(f"{self.name}: a control, and only a control, names its gain_key")

    @property
    def configurable(self) -> bool:
        """A ``SurrogateConfig.scheme`` value (every kind but the diagnostics)."""
        return self.kind != "diagnostic"

    @property
    def needs_cost(self) -> bool:
        """A configurable scheme with GP steps needs an accelerator cost (plain BP is the cost model's own
        baseline; diagnostics are never configured)."""
        return self.kind in ("predicting", "control")

    @property
    def path(self) -> str:
        """The module's file, relative to the repository (for messages)."""
        return self.module.replace(".", "/") + ".py"

    def _half(self, attr: Optional[str], what: str, fix: str) -> Any:
        if attr is None:
            raise ValueError(f"scheme {self.name!r} has no {what} ({self.path}: {fix}, and name it in its "
                             "SchemeRecord)")
        try:
            module = importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (self.module == exc.name or self.module.startswith(exc.name + ".")):
                raise  # a module it imports is missing: not the record's slip
            raise ValueError(f"scheme {self.name!r}: its module {self.module!r} (SchemeRecord) does not exist: "
                             f"no file {self.path}") from None
        value = getattr(module, attr, None)
        if value is None:
            raise ValueError(f"scheme {self.name!r} has no {what}: {self.path} defines no {attr!r} (the name its "
                             f"SchemeRecord gives; {fix})")
        return value

    def training_class(self) -> "type[GradientScheme]":
        """The scheme's ``GradientScheme`` subclass (imports its module); ValueError if it has none."""
        cls = self._half(self.training, "training behaviour", "define its GradientScheme subclass")
        if not isinstance(cls, type) or getattr(cls, "name", None) != self.name:
            raise ValueError(f"scheme {self.name!r}: {self.path}: {self.training} is not a GradientScheme "
                             f"subclass with name = {self.name!r}")
        return cls

    def lowering(self) -> "Callable[[Any, Any, int, int], SchemePlan]":
        """The scheme's cost lowering (imports its module); ValueError if it has none."""
        fn = self._half(self.cost, "accelerator cost", "define its lowering")
        if not callable(fn):
            raise ValueError(f"scheme {self.name!r}: {self.path}: {self.cost} is not callable")
        return fn

    def check(self) -> None:
        """ValueError (one line) unless the scheme has every half it needs: training behaviour always, an
        accelerator cost if :attr:`needs_cost`."""
        self.training_class()
        if self.needs_cost:
            self.lowering()


#: name -> record, in registration order (the order of every derived list and of the error messages)
REGISTRY: dict[str, SchemeRecord] = {}


def register(rec: SchemeRecord) -> SchemeRecord:
    """Add a scheme to the name table (ValueError if its name is taken)."""
    if rec.name in REGISTRY:
        raise ValueError(f"scheme {rec.name!r} is already registered ({REGISTRY[rec.name].path})")
    REGISTRY[rec.name] = rec
    return rec


def names(*kinds: str) -> tuple[str, ...]:
    """Registered names of these kinds (every name if none), in registration order."""
    return tuple(n for n, r in REGISTRY.items() if not kinds or r.kind in kinds)


def record(name: str) -> SchemeRecord:
    """The record of ``name``; ValueError listing the registered names if there is none."""
    rec = REGISTRY.get(name)
    if rec is None:
        raise ValueError(f"scheme: one of {', '.join(repr(k) for k in REGISTRY)} (got {name!r})")
    return rec


def check_complete(name: str) -> None:
    """ValueError with a one-line message unless ``name`` is a registered scheme with both halves it needs
    (its training behaviour, and its accelerator cost if it is configurable and has GP steps), e.g.
    ``scheme 'x' has no accelerator cost (models/schemes/x.py: define its lowering)``. Imports the
    scheme's module. Call it when validating a configuration, before training."""
    record(name).check()


def costable(name: str) -> bool:
    """Whether :func:`scheme_plan` can cost ``name``: a registered scheme that needs a cost and has one
    (False for ``bp``, the diagnostics, unknown names and schemes missing their lowering)."""
    rec = REGISTRY.get(name)
    if rec is None or not rec.needs_cost:
        return False
    try:
        rec.lowering()
    except ValueError:
        return False
    return True


def make_scheme(name: str, cfg, net, n_classes: int, seed: int, task=None) -> "GradientScheme":
    """An instance of the registered scheme ``name`` for one training run."""
    return record(name).training_class()(cfg, net, n_classes, seed, task)


def scheme_plan(cfg: Any, net: Any, batch: int, *, word_bytes: int = 2) -> "SchemePlan":
    """The accelerator plan (``models.schemes.plan.SchemePlan``) of ``cfg.scheme`` (not ``bp``) for ``net``
    at ``batch``; ``cfg`` is any object with the scheme's knobs (a ``SurrogateConfig``)."""
    rec = REGISTRY.get(cfg.scheme)
    if rec is None or not rec.needs_cost:
        raise ValueError(f"scheme: one of {', '.join(COSTED)} has a cost plan (got {cfg.scheme!r})")
    return rec.lowering()(cfg, net, batch, word_bytes)


# -- the name table: one line per scheme (see models/schemes/__init__.py to add one) -----------------------
register(SchemeRecord("adagp", "models.schemes.adagp", "predicting", training="AdaGP", cost="adagp_plan"))
register(SchemeRecord("efb", "models.schemes.efb", "predicting", training="ErrorFeedback", cost="efb_plan"))
register(SchemeRecord("local", "models.schemes.local", "predicting", training="LocalClassifier", cost="local_plan"))
register(SchemeRecord("dni", "models.schemes.dni", "predicting", training="DNI", cost="dni_plan"))
register(SchemeRecord("bp", "models.schemes.bp", "reference", training="BP"))
register(SchemeRecord("null", "models.schemes.controls", "control", training="Null", cost="null_plan",
                      gain_key="predictor_gain"))
register(SchemeRecord("null_momentum", "models.schemes.controls", "control", training="NullMomentum",
                      cost="null_momentum_plan", gain_key="gain_vs_null_momentum"))
register(SchemeRecord("truncated", "models.schemes.controls", "control", training="Truncated",
                      cost="truncated_plan", gain_key="gain_vs_truncated"))
register(SchemeRecord("oracle", "models.schemes.oracle", "diagnostic", training="Oracle"))
register(SchemeRecord("stale", "models.schemes.stale", "diagnostic", training="Stale"))

# -- derived lists (snapshots of the table above) ----------------------------------------------------------
#: the configuration's ``scheme`` values: the schemes under study, the reference and the controls
CONFIGURABLE = tuple(n for n, r in REGISTRY.items() if r.configurable)
#: the schemes under study (GP steps apply their predictions)
PREDICTING = names("predicting")
#: the controls every scheme is reported against, in this order (each replays the scheme's GP/BP step mask)
CONTROLS = names("control")
#: diagnostic schemes of ``train_run`` (not configuration values)
DIAGNOSTICS = names("diagnostic")
#: the schemes with an accelerator cost (``scheme_plan``): every configurable one but plain BP
COSTED = tuple(n for n, r in REGISTRY.items() if r.needs_cost)
#: control -> result key of a scheme's accuracy gain against it (``predictor_gain`` is the one against ``null``)
GAIN_KEYS = {n: r.gain_key for n, r in REGISTRY.items() if r.kind == "control"}
