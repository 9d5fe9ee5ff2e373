"""The ``[parallel]`` table of a configuration: how a training job is spread over several accelerators.

```toml
[parallel]
stages = 4               # pipeline stages, one accelerator each (the [hardware] accelerator)
microbatches = 8         # micro-batches per step; the workload's batch is split over replicas x microbatches
schedule = "zb-h1"       # gpipe, 1f1b, 1f1b-interleaved, zb-h1, zb-h2, 2bp (accel.pipeline.SCHEDULES)
chunks = 1               # model chunks per device (1f1b-interleaved only)
link_gbps = 50.0         # link between neighbouring devices, GB/s (1e9 bytes/s)
link_latency_us = 5.0    # microseconds per transfer
replicas = 1             # data-parallel copies of the pipeline (ring all-reduce of the weight gradients)
```

Every field is a knob: ``[space.parallel]`` searches them like hardware or training knobs (parameter names
``parallel.stages`` and so on). How such a job is costed: :mod:`dse.evaluation.multi_accelerator`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from accel.pipeline import SCHEDULES, Link
from dse.config.schema import check_keys, take
from dse.errors import UsageError

__all__ = ["ParallelConfig", "FIELDS", "microbatch_size"]


@dataclass(frozen=True)
class ParallelConfig:
    """How a job is spread over accelerators (see the module docstring); validated on construction
    (``ValueError`` naming the field)."""

    stages: int = 1
    microbatches: int = 1
    schedule: str = "1f1b"
    chunks: int = 1
    link_gbps: float = 50.0
    link_latency_us: float = 5.0
    replicas: int = 1

    def __post_init__(self):
        for f in ("stages", "microbatches", "chunks", "replicas"):
            v = getattr(self, f)
            ok = not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
            if not ok or v < 1:
                raise ValueError(f"{f}: must be an integer >= 1, got {v!r}")
            object.__setattr__(self, f, int(v))
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: {self.schedule!r} is not a schedule; choose one of {', '.join(SCHEDULES)}")
        if self.chunks > 1 and not SCHEDULES[self.schedule].chunked:
            chunked = [n for n, s in SCHEDULES.items() if s.chunked]
            raise ValueError(f"chunks: {self.schedule} runs one model chunk per device, got {self.chunks} "
                             f"(chunks > 1 needs {', '.join(chunked)})")
        if SCHEDULES[self.schedule].chunked and self.chunks < 2:
            raise ValueError(f"chunks: {self.schedule} needs at least 2 model chunks per device, got "
                             f"{self.chunks} (with one chunk it is 1f1b)")
        if self.chunks > 1 and self.stages < 2:  # its chunks would pass activations to their own device
            raise ValueError(f"stages: {self.schedule} interleaves model chunks across devices and needs at least "
                             "2 stages, got 1 (on one device use 1f1b, chunks = 1)")
        if self.chunks > 1 and self.microbatches % self.stages:
            raise ValueError(f"microbatches: interleaved 1F1B needs a multiple of the {self.stages} stages, "
                             f"got {self.microbatches}")
        for f in ("link_gbps", "link_latency_us"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{f}: must be a number, got {v!r}")
            object.__setattr__(self, f, float(v))
        Link(self.link_gbps, self.link_latency_us)  # validates both

    @property
    def devices(self) -> int:
        return self.stages * self.replicas

    @property
    def link(self) -> Link:
        return Link(self.link_gbps, self.link_latency_us)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "parallel") -> "ParallelConfig":
        if not isinstance(d, dict):
            raise UsageError(f"{where}: expected a table")
        check_keys(d, set(FIELDS), where)
        kw = {}
        for f in fields(cls):
            typ = {int: int, float: float, str: str}[type(f.default)]
            kw[f.name] = take(d, f.name, typ, where, default=f.default)
        try:
            return cls(**kw)
        except ValueError as e:
            raise UsageError(f"{where}.{e}") from None


FIELDS = tuple(f.name for f in fields(ParallelConfig))


def microbatch_size(batch: int, par: ParallelConfig) -> int:
    """Samples per micro-batch; ``ValueError`` when ``batch`` does not split evenly."""
    n = par.replicas * par.microbatches
    if batch % n:
        raise ValueError(f"microbatches: batch {batch} does not split into replicas x microbatches = "
                         f"{par.replicas} x {par.microbatches} equal micro-batches")
    return batch // n
