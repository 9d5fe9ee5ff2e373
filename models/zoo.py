"""The workload zoo: a registry of network builders.

Each network is written once, from its architecture, in a module of :mod:`models.nets` (loops over stages
and blocks, the way torchvision writes them), which registers it with its native input
(:func:`models.nets.registry.register`, re-exported here as :func:`register`). ``build(name, dataset=...)``
instantiates it per sample for an input size and a number of classes; :meth:`models.graph.Net.training_ops`
lowers it for a batch size. Adding a model family: a new module in ``models/nets/`` and its import line in
``models/nets/__init__.py``; this module does not change.

Data sets: ``imagenet`` (3x224x224, 1000 classes), ``cifar10`` / ``cifar100`` (3x32x32, 10 / 100 classes);
the CNNs' builders document their CIFAR adaptation (3x3 stride-1 stems). Inception-v3/v4 accept only
``imagenet``, at their native 299x299 crop (their stems need at least 75x75). YOLOv3 (416x416 COCO, 80
classes) and the Transformer (token sequences) have a single ``native`` set-up.
"""

from __future__ import annotations

import models.nets  # noqa: F401 - importing the network modules registers their builders
from models.graph import Net
from models.nets.registry import DATASETS, ENTRIES, ZooEntry, dataset_input, register

__all__ = ["DATASETS", "ZooEntry", "register", "names", "entry", "build", "dataset_input"]


def names() -> list[str]:
    """Names of the zoo's models, in registration order."""
    return list(ENTRIES)


def entry(name: str) -> ZooEntry:
    try:
        return ENTRIES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; the zoo has: {', '.join(ENTRIES)}") from None


def supported_inputs(name: str) -> str:
    """What ``dataset`` a zoo model takes, in words: its data sets, or its one native input."""
    ds = entry(name).datasets
    if tuple(ds) == ("native",):
        return "takes its own input only (no dataset: leave it out)"
    return f"supports datasets {', '.join(ds)}"


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
        raise ValueError(f"model {name!r} {supported_inputs(name)}; got {ds!r}")
    if num_classes is not None and num_classes < 1:
        raise ValueError(f"num_classes must be a positive integer, got {num_classes}")
    return e.builder(dataset=ds, num_classes=num_classes, **kwargs)

