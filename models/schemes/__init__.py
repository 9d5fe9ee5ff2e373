"""Gradient schemes: one module per scheme, holding both halves of it, and one name table.

A scheme is what a GP step applies to each predicted layer instead of backpropagation. Each lives in its own
module, ``models/schemes/<name>.py`` (the controls ``null``, ``null_momentum`` and ``truncated`` share
``controls.py``), which holds

* its **training behaviour**: a :class:`~models.schemes.base.GradientScheme` subclass (what the surrogate's
  training loop calls on BP and GP steps; ``models/schemes/base.py`` documents the interface);
* its **size knobs**: the class's ``size_knobs`` (the ``SurrogateConfig`` fields that size its state) and,
  for the cost, a shape dataclass built from them (``EFBShape``, ``LocalShape``, ...);
* its **accelerator cost**: a lowering ``<name>_plan(cfg, net, batch, word_bytes) -> SchemePlan`` (what the
  scheme adds to a training step on the accelerator; ``models/schemes/plan.py`` documents the plan).

``models/schemes/registry.py`` is the one name table (:data:`REGISTRY`, a :class:`SchemeRecord` per scheme);
every list of scheme names the code reads derives from it (the configuration's ``scheme`` choices, the
controls, the diagnostics, the schemes ``proxy_experiments`` compares). The experiments behind
docs/surrogate.md (``models/surrogate/experiments.py``) name the settings they measured (a label, knobs and
an adaptive threshold per scheme): a new scheme joins them by a row there. The table is a light leaf:
importing this package loads only the table; a scheme's module is imported when one of its halves is first
used.

**Adding a scheme** ``foo``:

1. create ``models/schemes/foo.py`` with ``class Foo(GradientScheme)`` (``name = "foo"``, its ``size_knobs``,
   ``bp_step`` / ``gp_step`` / ``state``) and ``def foo_plan(cfg, net, batch, word_bytes) -> SchemePlan``
   (``plan.label_aware_plan`` does most of it for a scheme that predicts output gradients); add any new
   knob to ``models/surrogate/config.py`` (``SurrogateConfig`` and ``RULES``);
2. add its registration line to ``models/schemes/registry.py``::

       register(SchemeRecord("foo", "models.schemes.foo", "predicting", training="Foo", cost="foo_plan"))

   (kinds: ``predicting``, ``reference``, ``control``, ``diagnostic``; a control also names its
   ``gain_key``); it is then a ``SurrogateConfig.scheme`` value, reported against every control, and
   :func:`check_complete` (``tests/models/test_scheme_registry.py`` runs it on every record) finds both halves;
3. write its tests: its training behaviour against an independent closed form or finite differences
   (``tests/models/test_surrogate_schemes.py``) and its cost's ops and size knobs
   (``tests/models/test_scheme_costs.py``); every registered scheme already runs in the shared tests
   (lowering on every zoo model, short runs on the image proxy).

``accel.schedule``, ``dse`` and the surrogate's training loop need no change.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from models.schemes.registry import (
    CONFIGURABLE,
    CONTROLS,
    COSTED,
    DIAGNOSTICS,
    GAIN_KEYS,
    KINDS,
    PREDICTING,
    REGISTRY,
    SchemeRecord,
    check_complete,
    costable,
    make_scheme,
    names,
    record,
    register,
    scheme_plan,
)

if TYPE_CHECKING:  # pragma: no cover
    from models.schemes.adagp import adagp_shape
    from models.schemes.base import GradientScheme, Step, local_grad, predicted_layers
    from models.schemes.dni import DNIShape, dni_ops
    from models.schemes.efb import EFBShape, efb_ops
    from models.schemes.local import LocalShape, local_ops
    from models.schemes.plan import SchemePlan, hidden_layers, output_layer

__all__ = [
    # the name table (models.schemes.registry)
    "KINDS", "SchemeRecord", "REGISTRY", "register", "record", "names", "check_complete", "costable",
    "make_scheme", "scheme_plan", "CONFIGURABLE", "PREDICTING", "CONTROLS", "DIAGNOSTICS", "COSTED", "GAIN_KEYS",
    # training machinery (models.schemes.base)
    "GradientScheme", "Step", "predicted_layers", "local_grad",
    # cost machinery (models.schemes.plan) and the schemes' cost knobs and ops
    "SchemePlan", "output_layer", "hidden_layers", "adagp_shape", "EFBShape", "efb_ops", "LocalShape", "local_ops",
    "DNIShape", "dni_ops",
]

#: public name -> submodule that defines it (imported on first access: the heavy halves stay unloaded until used)
LAZY = {
    "GradientScheme": "base", "Step": "base", "predicted_layers": "base", "local_grad": "base",
    "SchemePlan": "plan", "output_layer": "plan", "hidden_layers": "plan",
    "adagp_shape": "adagp", "EFBShape": "efb", "efb_ops": "efb", "LocalShape": "local", "local_ops": "local",
    "DNIShape": "dni", "dni_ops": "dni",
}


def __getattr__(name: str) -> Any:
    sub = LAZY.get(name)
    if sub is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{sub}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY))
