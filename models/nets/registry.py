"""The zoo's registry: what a network module imports to register its builders (a leaf module: it imports
only :mod:`models.graph`, never ``models.zoo`` or a network module).

A network module (``models/nets/<family>.py``) decorates each builder ``f(*, dataset, num_classes, **kw) ->
Net`` with :func:`register`; :mod:`models.nets` imports every such module, and :mod:`models.zoo` reads the
registry (:data:`ENTRIES`) through :func:`models.zoo.names`, :func:`models.zoo.entry` and
:func:`models.zoo.build`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from models.graph import Net

__all__ = ["DATASETS", "ZooEntry", "ENTRIES", "register", "dataset_input"]

#: data set -> (input channels, input size, classes)
DATASETS: dict[str, tuple[int, int, int]] = {
    "imagenet": (3, 224, 1000),
    "cifar10": (3, 32, 10),
    "cifar100": (3, 32, 100),
}


@dataclass(frozen=True)
class ZooEntry:
    name: str
    builder: Callable[..., Net]
    family: str
    #: the data set used when none is given ("native" means the builder's own default input)
    default_dataset: str
    #: data sets the builder accepts
    datasets: tuple[str, ...]
    description: str


#: name -> entry, in registration order (filled by the network modules' :func:`register` calls)
ENTRIES: dict[str, ZooEntry] = {}


def register(name: str, *, family: str, description: str, default_dataset: str = "imagenet",
             datasets: tuple[str, ...] = ("imagenet", "cifar10", "cifar100")):
    """Decorator: register a builder ``f(*, dataset, num_classes, **kw) -> Net`` under ``name``."""

    def deco(fn: Callable[..., Net]) -> Callable[..., Net]:
        if name in ENTRIES:
            raise ValueError(f"zoo model {name!r} registered twice")
        ENTRIES[name] = ZooEntry(name, fn, family, default_dataset, datasets, description)
        return fn

    return deco


def dataset_input(dataset: str, num_classes: int | None) -> tuple[int, int, int]:
    """(channels, size, classes) of an image data set, with an optional class-count override."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    c, s, k = DATASETS[dataset]
    return c, s, (num_classes or k)
