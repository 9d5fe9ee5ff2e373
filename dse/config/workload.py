"""The training job a configuration is costed on: zoo models, batch, data-set size, epochs, optimizer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dse.config.schema import check_keys, take
from dse.config.values import LIMITS, check_number
from dse.errors import UsageError

__all__ = ["Workload", "check_net"]

_OPTIMIZERS = ("sgd", "sgd_momentum", "adam")


#: training-set sizes of the datasets a workload may name: the default ``dataset_size`` of a file naming one (a
#: CIFAR-10 job costed with ImageNet's 1,281,167 samples was 25.6x too long and too dear)
DATASET_SIZES = {"imagenet": 1_281_167, "cifar10": 50_000, "cifar100": 50_000}


@dataclass(frozen=True)
class Workload:
    """``models`` trained for ``epochs`` over ``dataset_size`` samples in batches of ``batch``.

    ``dataset`` picks the input set-up (``imagenet``, ``cifar10``, ``cifar100``); ``None`` uses each
    model's own (299x299 for Inception, 416x416 for YOLOv3, token sequences for the Transformer). A file
    that names a dataset but no ``dataset_size`` gets that dataset's training-set size (:data:`DATASET_SIZES`);
    otherwise ImageNet-1k's.
    """

    models: tuple[str, ...] = ("resnet50",)
    dataset: str | None = None
    batch: int = 32
    dataset_size: int = 1_281_167
    epochs: int = 90
    optimizer: str = "sgd_momentum"
    #: per-model builder arguments (for example the Transformer's src_len / tgt_len)
    model_args: dict = field(default_factory=dict, compare=False)

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.dataset_size / self.batch)

    @property
    def steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def to_dict(self) -> dict:
        d = {"models": list(self.models), "batch": self.batch, "dataset_size": self.dataset_size,
             "epochs": self.epochs, "optimizer": self.optimizer}
        if self.dataset is not None:
            d["dataset"] = self.dataset
        if self.model_args:
            d["model_args"] = self.model_args
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "workload", base=None) -> "Workload":
        """``models`` entries ending in ``.csv`` / ``.onnx`` are workload files (SCALE-Sim topologies, ONNX
        models; :mod:`models.importers`), relative to ``base`` (the folder of the file naming them)."""
        from pathlib import Path

        from models import importers, zoo

        check_keys(d, {"models", "dataset", "batch", "dataset_size", "epochs", "optimizer", "model_args"},
                   where)
        models = take(d, "models", (list, str), where)
        models = [models] if isinstance(models, str) else list(models)
        if not models:
            raise UsageError(f"{where}.models: name at least one zoo model ({', '.join(zoo.names())})")
        known = zoo.names()
        for i, m in enumerate(models):
            if isinstance(m, str) and importers.is_file_model(m):
                p = Path(m).expanduser()
                if not p.is_absolute() and base is not None:
                    p = Path(base) / p
                if not p.is_file():
                    raise UsageError(f"{where}.models: workload file {m!r} not found"
                                     + (f" (relative to {base})" if base is not None else ""))
                models[i] = str(p.resolve())
            elif m not in known:
                raise UsageError(f"{where}.models: unknown model {m!r}; the zoo has: {', '.join(known)}, "
                                 "or a workload file (a SCALE-Sim topology .csv, an ONNX model .onnx)")
        twice = next((m for i, m in enumerate(models) if m in models[:i]), None)
        if twice is not None:  # it would be costed twice: in the job's energy and the speed-up's geometric mean
            raise UsageError(f"{where}.models: {twice!r} is named twice; name each model once")
        dataset = take(d, "dataset", str, where, default=None, choices=("imagenet", "cifar10", "cifar100"))
        if dataset is not None:
            for m in models:
                if importers.is_file_model(m):
                    continue  # a workload file fixes its own input
                if dataset not in zoo.entry(m).datasets:
                    raise UsageError(f"{where}.dataset: {m} {zoo.supported_inputs(m)}; got {dataset!r}")
        model_args = take(d, "model_args", dict, where, default={})
        for m, args in model_args.items():
            if m not in models or not isinstance(args, dict):
                raise UsageError(f"{where}.model_args.{m}: a table of builder arguments for one of "
                                 f"{', '.join(models)}")
        w = cls(
            models=tuple(models),
            dataset=dataset,
            batch=take(d, "batch", int, where, default=cls.batch, low=1),
            dataset_size=take(d, "dataset_size", int, where, default=DATASET_SIZES.get(dataset, cls.dataset_size),
                              low=1),
            epochs=take(d, "epochs", int, where, default=cls.epochs, low=1),
            optimizer=take(d, "optimizer", str, where, default=cls.optimizer, choices=_OPTIMIZERS),
            model_args=model_args,
        )
        for m in w.models:  # fail early, with the builder's message, on arguments it rejects
            try:
                net = w.net(m)
            except (TypeError, ValueError, RecursionError) as e:
                # a workload file's own message starts with its path: not named twice
                named = importers.is_file_model(m) and str(e).startswith(str(Path(m)))
                raise UsageError(f"{where}: {e}" if named else f"{where}: model {m}: {e}") from None
            check_net(net, f"{where}: model {m}")
        return w

    def net(self, model: str):
        from models import importers, zoo

        if importers.is_file_model(model):
            return zoo.build(model, **self.model_args.get(model, {}))
        return zoo.build(model, dataset=self.dataset, **self.model_args.get(model, {}))


def check_net(net, where: str):
    """``net`` (a :class:`models.graph.Net`) if its sizes are ones the models compute with exactly: every
    activation at most ``LIMITS["tensor_elems"]`` elements per sample, its weights and multiply-accumulates
    within theirs (:mod:`dse.config.values`); else a one-line UsageError naming ``where`` and the layer. A
    workload file (a SCALE-Sim topology, an ONNX model) can hold any integer: this is where it is bounded."""
    for layer in net.layers:
        for side, shape in (("input", layer.inp), ("output", layer.out)):
            elems = math.prod(shape)
            if elems > LIMITS["tensor_elems"]:
                raise UsageError(f"{where}: layer {layer.name}: its {side} {'x'.join(map(str, shape))} has "
                                 f"{elems:.3g} elements per sample; at most {LIMITS['tensor_elems']:,}")
    check_number(net.params, f"{where}: weights", "params")
    check_number(net.macs + net.matmul_macs, f"{where}: multiply-accumulates per sample", "macs")
    return net
