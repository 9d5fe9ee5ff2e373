"""Pipeline-parallel training over several accelerators: schedules, an event-driven timer, zoo models.

A training step runs ``m`` micro-batches through ``p`` devices (pipeline stages, one accelerator each).
Every device executes its own **op order** (a list of ops, strictly in order); an op starts when its device
is free and its inputs have arrived. Op kinds (``KINDS``):

* ``F`` forward of a micro-batch through the device's layers (one model chunk of them);
* ``B`` the input gradient (on the critical path: the previous stage waits for it);
* ``W`` the weight gradient (needs only this device's ``B``: deferrable into bubbles);
* ``BW`` the whole backward in one op (``B`` then ``W``; the gradient message leaves at its end), as GPipe,
  1F1B and interleaved 1F1B run it;
* ``P`` an ADA-GP GP step's predictor work per micro-batch (tensor reorganization, inference), after ``F``;
* ``R`` the data-parallel all-reduce of the weight gradients (the device waits; counted as idle);
* ``U`` the weight update, once per step.

Dependencies: ``F`` of virtual stage ``s`` needs ``F`` of ``s - 1`` (same micro-batch) plus the link's
transfer time; ``B``/``BW`` of ``s`` needs ``B``/``BW`` of ``s + 1`` plus the transfer, and its own ``F``;
``W`` needs its ``B``; ``P`` its ``F``. A transfer delays the dependent op but occupies neither device.
With ``v`` chunks per device (interleaved 1F1B) virtual stage ``s`` lives on device ``s % p`` and holds
model chunk ``s // p``; costs are given per virtual stage.

**A schedule is one function** ``order(p, m, chunks, costs) -> [ops of device 0, ..., ops of device p-1]``
with ops ``(kind, micro_batch, chunk)``, registered in :data:`SCHEDULES` with :func:`register`; the timer
(:func:`simulate`) executes any order and rejects one that deadlocks. Registered: ``gpipe``, ``1f1b``,
``1f1b-interleaved``, ``zb-h1``, ``zb-h2`` (Qi et al., arXiv 2401.10241, section 2; the orders of their
``get_hand_schedule``), ``2bp`` (Rae et al., arXiv 2405.18047: 1F1B with every weight gradient deferred to
the end of the step). An ADA-GP **GP step** (``gp=True``) keeps the schedule's forwards in order, each
followed by its ``P``; no ``B``, no ``W``, no backward message. An ADA-GP **BP step** is the schedule with
the predictor's training per micro-batch added to ``W`` (or ``BW``): it runs once the true gradients exist.

Figures of a step (:class:`PipelineStep`): ``makespan`` (the last op's end, the first ``F`` starting at 0);
``span`` = the largest over devices of (last op end - first ``F`` start): the period when identical steps
run back to back (the uniform shift that keeps every device's order); ``bubble_rate`` = 1 - (busy time
summed over devices) / (p * span), which for equal stages is the zero-bubble paper's
(span - m(F + B + W)) / span; ``idle_s`` per device = span - busy; peak activation memory per device in
micro-batch activations (a micro-batch's chunk activation is held from its ``F`` start to the end of its
``W``/``BW``, or of its ``P`` in a GP step) and in bytes.

A job (:func:`job_time`) of ``n`` steps takes the sum of their spans plus one fill and drain
(makespan - span): a GP step's forwards start at the same offsets as a BP step's, so the period after a
step is that step's span whichever kind follows.

From a zoo model (:func:`model_pipeline`): the layers are cut into contiguous stages balanced by their
training-step time on the accelerator (per-layer costs from :func:`accel.gemm_cost` /
:func:`accel.vector_cost`); each stage is then costed by :func:`accel.schedule.step_costs` on its own op
table at the micro-batch size (stash stalls, predictor overlap included), which gives ``F``, ``B``, ``W``,
``P`` and the update per stage, the activation stash and the bytes sent to the next stage. Data
parallelism (``replicas = d``): a ring all-reduce of each stage's weight gradients moves 2(d-1)/d of their
bytes over the link and takes 2(d-1) link latencies; it runs after the stage's last weight gradient and
before its update. A GP step exchanges no backward messages between stages, but its replicas still
all-reduce the **predicted** weight gradients (the same bytes as a BP step) to keep their weights equal;
a BP step of ADA-GP also all-reduces the predictor's gradients.

Pure Python/numpy; no Optuna, no ``models`` import (op tables are duck-typed, as in ``accel.schedule``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np

__all__ = [
    "KINDS", "Schedule", "SCHEDULES", "register", "schedule_names", "gp_order", "StageCosts", "Link",
    "OpRecord", "PipelineStep", "simulate", "job_time", "ring_allreduce_s", "gantt", "chrome_trace",
]

KINDS = ("F", "B", "W", "BW", "P", "R", "U")
#: op kinds that are computation (busy); ``R`` (all-reduce) is waiting
_BUSY = frozenset(("F", "B", "W", "BW", "P", "U"))

Op = tuple  # (kind, micro_batch, chunk)


# -- schedules: the extension point ---------------------------------------------------------------------
@dataclass(frozen=True)
class Schedule:
    """A registered pipeline schedule: its op-order function and a one-line description."""

    name: str
    order: Callable[..., list]
    summary: str
    #: accepts chunks > 1 (model chunks per device)
    chunked: bool = False


#: name -> Schedule; add one with :func:`register`
SCHEDULES: dict[str, Schedule] = {}


def register(name: str, summary: str, *, chunked: bool = False):
    """Decorator registering ``order(p, m, chunks, costs) -> list of p op lists`` as schedule ``name``."""

    def deco(fn):
        if name in SCHEDULES:
            raise ValueError(f"pipeline schedule {name!r} registered twice")
        SCHEDULES[name] = Schedule(name, fn, summary, chunked)
        return fn

    return deco


def schedule_names() -> list[str]:
    return list(SCHEDULES)


def _one_f_one_b(m: int, warmup: int, back: str, w_delay: int | None) -> list[Op]:
    """``warmup`` forwards, then one forward and one backward at a time, then the remaining backwards.

    ``back``: ``BW`` (whole backward) or ``B``; with ``B``, the weight gradient of micro-batch ``j`` follows
    the input gradient of micro-batch ``j + w_delay`` and the rest close the step (the order of the
    zero-bubble paper's handcrafted schedules).
    """
    warmup = min(warmup, m)
    ops: list[Op] = [("F", i, 0) for i in range(warmup)]
    nw = 0
    for i in range(m):
        if warmup + i < m:
            ops.append(("F", warmup + i, 0))
        ops.append((back, i, 0))
        if back == "B" and i >= w_delay:
            ops.append(("W", nw, 0))
            nw += 1
    if back == "B":
        ops += [("W", j, 0) for j in range(nw, m)]
    return ops


@register("gpipe", "GPipe: every forward, then every backward (last micro-batch first)")
def _gpipe(p, m, chunks, costs=None):
    return [[("F", i, 0) for i in range(m)] + [("BW", i, 0) for i in reversed(range(m))] for _ in range(p)]


@register("1f1b", "1F1B (PipeDream-flush): p-1-r warm-up forwards on device r, then one forward, one backward")
def _1f1b(p, m, chunks, costs=None):
    return [_one_f_one_b(m, p - r - 1, "BW", None) for r in range(p)]


@register("zb-h1", "ZB-H1: 1F1B with each device's weight gradients delayed by r (1F1B's memory)")
def _zb_h1(p, m, chunks, costs=None):
    return [_one_f_one_b(m, p - r - 1, "B", (p - 1) - min(p - r - 1, m)) for r in range(p)]


@register("zb-h2", "ZB-H2: 2(p-1-r) warm-up forwards, weight gradients delayed by 2r (up to 2p-1 activations)")
def _zb_h2(p, m, chunks, costs=None):
    return [_one_f_one_b(m, 2 * (p - r - 1), "B", 2 * (p - 1) - min(2 * (p - r - 1), m)) for r in range(p)]


@register("2bp", "2BP: 1F1B with input gradients only; every weight gradient at the end of the step")
def _2bp(p, m, chunks, costs=None):
    return [_one_f_one_b(m, p - r - 1, "B", m) for r in range(p)]


@register("1f1b-interleaved", "interleaved 1F1B (Megatron): v model chunks per device, m a multiple of p",
          chunked=True)
def _interleaved(p, m, chunks, costs=None):
    v = chunks
    if v == 1:
        return _1f1b(p, m, 1)
    if m % p:
        raise ValueError(f"microbatches: interleaved 1F1B with {v} chunks needs a multiple of the "
                         f"{p} stages, got {m}")
    total = m * v

    def fwd(k):  # k-th forward of a device -> (micro-batch, chunk)
        g, rem = divmod(k, p * v)
        return g * p + rem % p, rem // p

    out = []
    for r in range(p):
        warmup = min((p - r - 1) * 2 + (v - 1) * p, total)
        ops: list[Op] = []
        for k in range(warmup):
            ops.append(("F",) + fwd(k))
        for k in range(total):
            if warmup + k < total:
                ops.append(("F",) + fwd(warmup + k))
            mb, c = fwd(k)
            ops.append(("BW", mb, v - 1 - c))
        out.append(ops)
    return out


def gp_order(order: list[list[Op]]) -> list[list[Op]]:
    """A GP step: the schedule's forwards in their order, each followed by its predictor work ``P``."""
    return [[o for f in ops if f[0] == "F" for o in (f, ("P", f[1], f[2]))] for ops in order]


# -- costs and links -------------------------------------------------------------------------------------
def _vec(x, n: int, name: str, default: float = 0.0) -> tuple[float, ...]:
    if x is None:
        x = default
    a = np.broadcast_to(np.asarray(x, dtype=np.float64), (n,)) if np.ndim(x) == 0 else np.asarray(x, float)
    if a.shape != (n,):
        raise ValueError(f"{name}: expected {n} values, got {a.size}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name}: must be finite numbers >= 0")
    return tuple(float(v) for v in a)


@dataclass(frozen=True)
class StageCosts:
    """Per-virtual-stage op times (seconds per micro-batch) of ``devices`` devices holding ``chunks`` model
    chunks each (``S = devices * chunks`` virtual stages; virtual stage ``s`` on device ``s % devices``).

    ``F``, ``B``, ``W``: forward, input gradient, weight gradient. ``P``: a GP step's predictor work;
    ``P_train``: the predictor's training in a BP step of ADA-GP (added to ``W``). ``U`` / ``U_gp``: the
    weight update once per step (BP / GP step), per virtual stage. ``comm``: seconds to send one
    micro-batch's activations (or their gradient) from virtual stage ``s`` to ``s + 1`` (S - 1 values).
    ``allreduce``: per device, the data-parallel all-reduce time of a step. ``act_bytes``: activation stash
    of one micro-batch per virtual stage; ``msg_bytes``: bytes per transfer per boundary (S - 1 values).
    """

    F: tuple
    B: tuple
    W: tuple
    devices: int
    P: tuple = None
    P_train: tuple = None
    U: tuple = None
    U_gp: tuple = None
    comm: tuple = None
    allreduce: tuple = None
    act_bytes: tuple = None
    msg_bytes: tuple = None

    def __post_init__(self):
        p = self.devices
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
            raise ValueError(f"stages: must be an integer >= 1, got {p!r}")
        S = len(np.atleast_1d(self.F))
        if S % p:
            raise ValueError(f"costs: {S} virtual stages is not a multiple of {p} devices")
        for f in ("F", "B", "W", "P", "P_train", "U", "U_gp", "act_bytes"):
            object.__setattr__(self, f, _vec(getattr(self, f), S, f))
        for f in ("comm", "msg_bytes"):
            object.__setattr__(self, f, _vec(getattr(self, f), S - 1, f))
        object.__setattr__(self, "allreduce", _vec(self.allreduce, p, "allreduce"))

    @property
    def chunks(self) -> int:
        return len(self.F) // self.devices

    @classmethod
    def uniform(cls, p: int, F: float, B: float, W: float, *, comm: float = 0.0, chunks: int = 1,
                P: float = 0.0, P_train: float = 0.0, act_bytes: float = 0.0) -> "StageCosts":
        """Equal stages: ``F``, ``B``, ``W``, ``P`` per device (each of its ``chunks`` chunks takes 1/chunks)."""
        if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
            raise ValueError(f"chunks: must be an integer >= 1, got {chunks!r}")
        for name, x in (("tf", F), ("tb", B), ("tw", W), ("comm", comm), ("tp", P)):
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"{name}: must be a finite time >= 0, got {x!r}")
        S = p * chunks
        return cls(F=(F / chunks,) * S, B=(B / chunks,) * S, W=(W / chunks,) * S, devices=p,
                   P=(P / chunks,) * S, P_train=(P_train / chunks,) * S, comm=(comm,) * (S - 1),
                   act_bytes=(act_bytes / chunks,) * S)


@dataclass(frozen=True)
class Link:
    """A link between neighbouring devices: ``gbps`` GB/s (1e9 bytes/s, as DRAM bandwidth elsewhere) and
    ``latency_us`` microseconds per transfer."""

    gbps: float = 50.0
    latency_us: float = 5.0

    def __post_init__(self):
        if not (isinstance(self.gbps, (int, float)) and math.isfinite(self.gbps) and self.gbps > 0):
            raise ValueError(f"link_gbps: must be a bandwidth in GB/s > 0, got {self.gbps!r}")
        if not (isinstance(self.latency_us, (int, float)) and math.isfinite(self.latency_us)
                and self.latency_us >= 0):
            raise ValueError(f"link_latency_us: must be a latency in microseconds >= 0, got {self.latency_us!r}")

    def transfer_s(self, nbytes):
        return self.latency_us * 1e-6 + np.asarray(nbytes, dtype=np.float64) / (self.gbps * 1e9)


def ring_allreduce_s(nbytes, replicas: int, link: Link):
    """Ring all-reduce over ``replicas`` devices: 2(d-1) steps of nbytes/d each (2(d-1)/d of the bytes)."""
    d = replicas
    if d <= 1:
        return np.zeros_like(np.asarray(nbytes, dtype=np.float64))
    return 2 * (d - 1) * link.latency_us * 1e-6 + 2 * (d - 1) / d * np.asarray(nbytes, float) / (link.gbps * 1e9)


# -- the timer ------------------------------------------------------------------------------------------
class OpRecord(NamedTuple):
    """One executed op: device, kind, micro-batch (-1 for R/U), chunk, start and end (s)."""

    device: int
    kind: str
    mb: int
    chunk: int
    start: float
    end: float


@dataclass(frozen=True)
class PipelineStep:
    """One step's timing (seconds) and memory; see the module docstring for the definitions."""

    schedule: str
    stages: int
    microbatches: int
    chunks: int
    gp: bool
    makespan: float
    span: float
    bubble_rate: float
    busy_s: tuple
    idle_s: tuple
    #: per device: peak activations held, in micro-batch activations of the device (all its chunks)
    peak_act: tuple
    peak_act_bytes: tuple
    #: bytes over the pipeline links per step (activations forward, gradients backward)
    link_bytes: float
    timeline: tuple = field(repr=False, default=())

    def to_dict(self, *, timeline: bool = False) -> dict:
        d = {k: getattr(self, k) for k in ("schedule", "stages", "microbatches", "chunks", "gp", "makespan",
                                           "span", "bubble_rate", "link_bytes")}
        d.update(busy_s=list(self.busy_s), idle_s=list(self.idle_s), peak_act=list(self.peak_act),
                 peak_act_bytes=list(self.peak_act_bytes))
        if timeline:
            d["timeline"] = [r._asdict() for r in self.timeline]
        return d


def simulate(costs: StageCosts, schedule: str = "1f1b", microbatches: int = 8, *, gp: bool = False,
             order: list[list[Op]] | None = None) -> PipelineStep:
    """Time one step of ``schedule`` (or an explicit ``order``) with ``microbatches`` on ``costs``."""
    p, v = costs.devices, costs.chunks
    m = microbatches
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"microbatches: must be an integer >= 1, got {m!r}")
    if order is None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown {schedule!r}; one of {', '.join(SCHEDULES)}")
        sch = SCHEDULES[schedule]
        if v > 1 and not sch.chunked:
            raise ValueError(f"chunks: schedule {schedule} runs one chunk per device, got {v} "
                             f"(use 1f1b-interleaved)")
        order = sch.order(p, m, v, costs)
    if gp:
        order = gp_order(order)
    S = p * v
    F, B, W, P = costs.F, costs.B, costs.W, costs.P
    Wt = tuple(w + t for w, t in zip(W, costs.P_train))
    U = [sum(costs.U_gp[c * p + r] if gp else costs.U[c * p + r] for c in range(v)) for r in range(p)]
    order = [list(ops) for ops in order]
    for r in range(p):
        if costs.allreduce[r] > 0:
            order[r].append(("R", -1, 0))
        if U[r] > 0:
            order[r].append(("U", -1, 0))
    comm = costs.comm
    done: dict = {}  # (0, s, i): forward end; (1, s, i): gradient sent (B or BW end); (2, s, i): B end
    waiting: dict = {}  # key -> the device blocked on it
    first_f = [math.inf] * p
    free = [0.0] * p
    ptr = [0] * p
    busy = [0.0] * p
    rec: list = []
    held: list[list] = [[] for _ in range(p)]  # (time, is_alloc, bytes, units) per device
    act, msg, ar = costs.act_bytes, costs.msg_bytes, costs.allreduce
    link_bytes = 0.0
    ready_devices = list(range(p - 1, -1, -1))
    get = done.get
    while ready_devices:
        r = ready_devices.pop()
        ops = order[r]
        n_ops = len(ops)
        while ptr[r] < n_ops:
            kind, i, c = ops[ptr[r]]
            s = c * p + r
            # what the op waits for: (key of a finished op, delay after it)
            if kind == "F":
                deps, dur = (((0, s - 1, i), comm[s - 1]),) if s > 0 else (), F[s]
            elif kind == "B" or kind == "BW":
                deps = (((0, s, i), 0.0), ((1, s + 1, i), comm[s])) if s < S - 1 else (((0, s, i), 0.0),)
                dur = B[s] if kind == "B" else B[s] + Wt[s]
            elif kind == "W":
                deps, dur = (((2, s, i), 0.0),), Wt[s]
            elif kind == "P":
                deps, dur = (((0, s, i), 0.0),), P[s]
            elif kind == "R" or kind == "U":
                deps, dur = (), (ar[r] if kind == "R" else U[r])
            else:
                raise ValueError(f"op kind {kind!r}: one of {', '.join(KINDS)}")
            ready = 0.0
            for key, delay in deps:
                t = get(key)
                if t is None:
                    waiting[key] = r
                    break
                if t + delay > ready:
                    ready = t + delay
            else:
                t = 0.0
            if t is None:
                break
            start = free[r] if free[r] > ready else ready
            end = start + dur
            free[r] = end
            produced = None
            if kind == "F":
                produced = (0, s, i)
                if start < first_f[r]:
                    first_f[r] = start
                held[r].append((start, 1, act[s], 1.0 / v))
                if s < S - 1:
                    link_bytes += msg[s]
            elif kind == "B" or kind == "BW":
                produced = (1, s, i)
                if kind == "B":
                    done[(2, s, i)] = end
                else:
                    held[r].append((end, 0, -act[s], -1.0 / v))
                if s > 0:
                    link_bytes += msg[s - 1]
            elif kind == "W" or kind == "P":
                held[r].append((end, 0, -act[s], -1.0 / v))
            if produced is not None:
                done[produced] = end
                w = waiting.pop(produced, None)
                if w is not None:
                    ready_devices.append(w)
            if kind in _BUSY:
                busy[r] += dur
            rec.append((r, kind, i, c, start, end))
            ptr[r] += 1
    stuck = [(r, order[r][ptr[r]]) for r in range(p) if ptr[r] < len(order[r])]
    if stuck:
        raise ValueError(f"schedule deadlocks: device {stuck[0][0]} waits forever at op {stuck[0][1]}")
    makespan = max(free)
    starts = [first_f[r] if first_f[r] < math.inf else 0.0 for r in range(p)]
    span = max(free[r] - starts[r] for r in range(p))
    peak_u, peak_b = [], []
    for r in range(p):
        ev = sorted(held[r], key=lambda e: (e[0], e[1]))  # releases (0) before allocations (1) at a tie
        u = b = pu = pb = 0.0
        for _, _, db, du in ev:
            u += du
            b += db
            pu, pb = max(pu, u), max(pb, b)
        peak_u.append(round(pu, 9))
        peak_b.append(pb)
    bubble = 1.0 - sum(busy) / (p * span) if span > 0 else 0.0
    return PipelineStep(schedule=schedule if order is not None else schedule, stages=p, microbatches=m,
                        chunks=v, gp=gp, makespan=makespan, span=span, bubble_rate=bubble,
                        busy_s=tuple(busy), idle_s=tuple(span - b for b in busy), peak_act=tuple(peak_u),
                        peak_act_bytes=tuple(peak_b), link_bytes=link_bytes, timeline=tuple(OpRecord(*x) for x in rec))


def job_time(steps: Sequence[tuple[PipelineStep, int]]) -> float:
    """Seconds for ``n`` back-to-back steps of each kind: the sum of spans plus one fill and drain."""
    used = [(s, n) for s, n in steps if n > 0]
    if not used:
        return 0.0
    return sum(s.span * n for s, n in used) + max(s.makespan - s.span for s, _ in used)


# -- pictures --------------------------------------------------------------------------------------------
_GLYPH = {"F": "F", "B": "B", "W": "W", "BW": "B", "P": "P", "R": "~", "U": "U"}


def gantt(step: PipelineStep, width: int = 96) -> str:
    """An ASCII Gantt chart: one row per device, ``width`` columns over the makespan; ``.`` is idle.

    Letters: F forward, B backward (input gradient, or the whole backward), W weight gradient, P predictor
    work of a GP step, ~ all-reduce, U update; lower case for model chunks after the first.
    """
    if width < 10:
        raise ValueError(f"width: at least 10 columns, got {width}")
    T = step.makespan or 1.0
    rows = [["."] * width for _ in range(step.stages)]
    for r in step.timeline:
        if r.end <= r.start:
            continue
        g = _GLYPH[r.kind]
        if r.chunk > 0:
            g = g.lower()
        a = int(r.start / T * width + 0.5)
        b = max(a + 1, int(r.end / T * width + 0.5))
        for x in range(a, min(b, width)):
            rows[r.device][x] = g
    label = max(len(str(step.stages - 1)), 1)
    lines = [f"dev {d:>{label}} |{''.join(row)}|" for d, row in enumerate(rows)]
    return "\n".join(lines)


def chrome_trace(step: PipelineStep, *, time_unit: float = 1.0) -> dict:
    """The step's timeline as Chrome trace-event JSON (opens in Perfetto or chrome://tracing).

    One thread per device; ``time_unit``: seconds per unit of the costs (1.0 for seconds, 1e-3 for ms).
    """
    us = time_unit * 1e6
    ev = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": f"device {d}"}}
          for d in range(step.stages)]
    for r in step.timeline:
        name = r.kind if r.mb < 0 else f"{r.kind}{r.mb}" + (f".{r.chunk}" if step.chunks > 1 else "")
        ev.append({"name": name, "cat": r.kind, "ph": "X", "pid": 0, "tid": r.device, "ts": r.start * us,
                   "dur": (r.end - r.start) * us, "args": {"micro_batch": r.mb, "chunk": r.chunk}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"schedule": step.schedule, "stages": step.stages, "microbatches": step.microbatches,
                          "gp_step": step.gp, "bubble_rate": step.bubble_rate}}
