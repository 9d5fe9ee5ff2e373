"""The workload zoo: a registry of network builders.

Each network is written once, from its architecture, in :mod:`models.nets` (loops over stages and blocks,
the way torchvision writes them) and registered here with its native input. ``build(name, dataset=...)``
instantiates it per sample for an input size and a number of classes; :meth:`models.graph.Net.training_ops`
lowers it for a batch size.

Data sets: ``imagenet`` (3x224x224, 1000 classes), ``cifar10`` / ``cifar100`` (3x32x32, 10 / 100 classes);
the CNNs' builders document their CIFAR adaptation (3x3 stride-1 stems). Inception-v3/v4 accept only
``imagenet``, at their native 299x299 crop (their stems need at least 75x75). YOLOv3 (416x416 COCO, 80
classes) and the Transformer (token sequences) have a single ``native`` set-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from models.graph import Net

__all__ = ["DATASETS", "ZooEntry", "register", "names", "entry", "build"]

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


_REGISTRY: dict[str, ZooEntry] = {}


def register(name: str, *, family: str, description: str, default_dataset: str = "imagenet",
             datasets: tuple[str, ...] = ("imagenet", "cifar10", "cifar100")):
    """Decorator: register a builder ``f(*, dataset, num_classes, **kw) -> Net`` under ``name``."""

    def deco(fn: Callable[..., Net]) -> Callable[..., Net]:
        if name in _REGISTRY:
            raise ValueError(f"zoo model {name!r} registered twice")
        _REGISTRY[name] = ZooEntry(name, fn, family, default_dataset, datasets, description)
        return fn

    return deco


def _load() -> None:
    # importing the modules registers their builders
    from models import nets  # noqa: F401


def names() -> list[str]:
    """Names of the zoo's models, in registration order."""
    _load()
    return list(_REGISTRY)


def entry(name: str) -> ZooEntry:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; the zoo has: {', '.join(_REGISTRY)}") from None


def build(name: str, *, dataset: str | None = None, num_classes: int | None = None, **kwargs) -> Net:
    """Instantiate zoo model ``name`` for ``dataset`` (default: the model's own) per sample.

    ``num_classes`` overrides the data set's; further keyword arguments go to the builder (for example
    ``src_len``/``tgt_len`` for the Transformer). A ``name`` ending in ``.csv`` or ``.onnx`` is a custom
    workload file (:mod:`models.importers`): its input and classes come from the file, ``dataset`` and the
    other arguments do not apply.
    """
    from models import importers

    if importers.is_file_model(name):
        if kwargs or num_classes is not None:
            raise ValueError(f"{name}: a workload file takes no builder arguments or class count")
        return importers.load(name)
    e = entry(name)
    ds = dataset or e.default_dataset
    if ds not in e.datasets:
        raise ValueError(f"model {name!r} supports datasets {', '.join(e.datasets)}; got {ds!r}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes}")
    return e.builder(dataset=ds, num_classes=num_classes, **kwargs)


def dataset_input(dataset: str, num_classes: int | None) -> tuple[int, int, int]:
    """(channels, size, classes) of an image data set, with an optional class-count override."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}; got {dataset!r}")
    c, s, k = DATASETS[dataset]
    return c, s, (num_classes or k)
