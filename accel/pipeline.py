"""Pipeline-parallel training over several accelerators: schedules, an event-driven timer, zoo models.

A training step runs ``m`` micro-batches through ``p`` devices (pipeline stages, one accelerator each).
Every device executes its own **op order** (a list of ops, strictly in order); an op starts when its device
is free and its inputs have arrived. Op kinds (``KINDS``):

* ``F`` forward of a micro-batch through the device's layers (one model chunk of them);
* ``B`` the input gradient (on the critical path: the previous stage waits for it);
* ``W`` the weight gradient (needs only this device's ``B``: deferrable into bubbles);
* ``BW`` the whole backward in one op (``B`` then ``W``; the gradient message leaves at its end), as GPipe,
  1F1B and interleaved 1F1B run it;
* ``P`` a GP step's extra work per micro-batch (the gradient scheme's; ADA-GP: tensor reorganization and
  predictor inference), after ``F``;
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
the end of the step). A gradient scheme's **GP step** (``gp=True``; ADA-GP's, for example) keeps the
schedule's forwards in order, each followed by its ``P``; no ``B``, no ``W``, no backward message. The
scheme's **BP step** is the schedule with predictor work ``P_train`` per micro-batch added to ``W`` (or
``BW``), if any, and a per-step part in the update ``U``.

Figures of a step (:class:`PipelineStep`): ``makespan`` (the last op's end, the first ``F`` starting at 0);
``span`` = the largest over devices of (last op end - first ``F`` start): the period when identical steps
run back to back (the uniform shift that keeps every device's order); ``bubble_rate`` = 1 - (busy time
summed over devices) / (p * span), which for equal stages is the zero-bubble paper's
(span - m(F + B + W)) / span; ``idle`` per device = span - busy; peak activation memory per device in
micro-batch activations (a micro-batch's chunk activation is held from its ``F`` start to the end of its
``W``/``BW``, or of its ``P`` in a GP step) and in bytes.

A job (:func:`job_time`) of ``n`` steps takes the sum of their spans plus one fill and drain
(makespan - span): a GP step's forwards start at the same offsets as a BP step's, so the period after a
step is that step's span whichever kind follows.

From a zoo model (:func:`model_pipeline`): the layers are cut into contiguous stages balanced by their
training-step time on the accelerator (per-layer costs from :func:`accel.gemm_cost` /
:func:`accel.vector_cost`); each stage is then costed by :func:`accel.schedule.step_costs` on its own op
table at the micro-batch size (stash stalls, predictor overlap included), which gives ``F``, ``B``, ``W``,
``P`` and the update per stage, the activation stash and the bytes sent to the next stage. A gradient scheme
in a pipeline (ADA-GP, for example): each stage keeps its own copy of the predictor; in a GP step every
micro-batch's forward is followed by the scheme's work for it (``P``; ADA-GP: the predictor's
reorganization and inference), and the predicted gradients,
accumulated over the micro-batches, update the weights once at the end of the step (``U``); in a BP step the
predictor trains once per step, after the stage's last weight gradient (its time joins ``U``: the
predictor's target, the step's true weight gradient, exists only then). Data
parallelism (``replicas = d``): a ring all-reduce of each stage's weight gradients moves 2(d-1)/d of their
bytes over the link and takes 2(d-1) link latencies; it runs after the stage's last weight gradient and
before its update. A GP step exchanges no backward messages between stages, but its replicas still
all-reduce the **predicted** weight gradients (the same bytes as a BP step) to keep their weights equal;
a scheme's BP step also all-reduces the predictor's gradients.

Pure Python/numpy; no Optuna, no ``models`` import (op tables are duck-typed, as in ``accel.schedule``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np

from accel.hardware import MIN_RATE

__all__ = [
    "KINDS", "Schedule", "SCHEDULES", "register", "schedule_names", "gp_order", "check_order", "StageCosts", "Link",
    "OpRecord", "PipelineStep", "simulate", "job_time", "ring_allreduce_s", "gantt", "chrome_trace",
    "layer_times", "partition", "ModelPipeline", "model_pipeline", "step_counts", "PipelineJob", "pipeline_job",
]

KINDS = ("F", "B", "W", "BW", "P", "R", "U")
#: the most forwards (stages x chunks x micro-batches) one step may have: a bound on the timer's work
MAX_OPS = 1_000_000
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
    if v < 2:  # with one chunk it is 1F1B exactly: asking for it under this name is a mistake, not a choice
        raise ValueError(f"chunks: 1f1b-interleaved needs at least 2 model chunks per device, got {v} (with one "
                         "chunk it is 1f1b)")
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


def check_order(order: list[list[Op]], devices: int, microbatches: int, chunks: int = 1) -> None:
    """Refuse an explicit order (``simulate(order=...)``) that is not one training step: one list per device,
    and on each device every forward ``("F", micro-batch, chunk)`` once and its backward once -- ``BW`` (input
    and weight gradients together), or ``B`` and later ``W`` -- and nothing else. (The registered schedules are
    held to the same rule by their shared test.) The message names the device and the op."""
    if len(order) != devices:
        raise ValueError(f"order: one list of ops per device: expected {devices}, got {len(order)}")
    want = {(i, c) for i in range(microbatches) for c in range(chunks)}
    for r, ops in enumerate(order):
        seen: dict[str, set] = {"F": set(), "B": set(), "BW": set(), "W": set()}
        for op in ops:
            if len(op) != 3 or op[0] not in seen:
                raise ValueError(f"order: device {r}: op {op!r}: expected (kind, micro_batch, chunk), kind one "
                                 f"of F, B, W, BW")
            key = (op[1], op[2])
            if key not in want:
                raise ValueError(f"order: device {r}: op {op!r}: micro-batch 0-{microbatches - 1} and chunk "
                                 f"0-{chunks - 1} only")
            if key in seen[op[0]]:
                raise ValueError(f"order: device {r}: op {op!r} twice")
            seen[op[0]].add(key)
        # F once each; a backward (B or BW) once each: the keys with none, or with both
        for kind, odd in (("F", want - seen["F"]),
                          ("a backward (B or BW)", (want - seen["B"] - seen["BW"]) or (seen["B"] & seen["BW"]))):
            if odd:
                raise ValueError(f"order: device {r}: {kind} of every micro-batch and chunk once; not so for "
                                 f"(micro-batch, chunk) {min(odd)}")
        if seen["W"] != seen["B"]:
            odd = sorted(seen["W"] ^ seen["B"])[0]
            raise ValueError(f"order: device {r}: a W for every B and no other (micro-batch, chunk) {odd}")


def gp_order(order: list[list[Op]]) -> list[list[Op]]:
    """A GP step: the schedule's forwards in their order, each followed by its predictor work ``P``."""
    return [[o for f in ops if f[0] == "F" for o in (f, ("P", f[1], f[2]))] for ops in order]


# -- costs and links -------------------------------------------------------------------------------------
def _vec(x, n: int, name: str, default: float = 0.0) -> tuple[float, ...]:
    if x is None:
        return (float(default),) * n
    if type(x) is tuple and len(x) == n and all(type(v) is float and 0.0 <= v < math.inf for v in x):
        return x  # already checked (the fast path of dataclasses.replace)
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
    ``P_train``: the predictor's training in a gradient scheme's BP step (added to ``W``). ``U`` / ``U_gp``: the
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
        if not (isinstance(self.gbps, (int, float)) and math.isfinite(self.gbps) and self.gbps >= MIN_RATE):
            raise ValueError(f"link_gbps: must be a bandwidth in GB/s >= {MIN_RATE:g}, got {self.gbps!r}")
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
    #: per device: busy and idle (span - busy) time, in the unit of the stage times (the JSON's ``unit``)
    busy: tuple
    idle: tuple
    #: per device: peak activations held, in micro-batch activations of the device (all its chunks)
    peak_act: tuple
    peak_act_bytes: tuple
    #: bytes over the pipeline links per step (activations forward, gradients backward)
    link_bytes: float
    timeline: tuple = field(repr=False, default=())

    def to_dict(self, *, timeline: bool = False) -> dict:
        d = {k: getattr(self, k) for k in ("schedule", "stages", "microbatches", "chunks", "gp", "makespan",
                                           "span", "bubble_rate", "link_bytes")}
        d.update(busy=list(self.busy), idle=list(self.idle), peak_act=list(self.peak_act),
                 peak_act_bytes=list(self.peak_act_bytes))
        if timeline:
            d["timeline"] = [r._asdict() for r in self.timeline]
        return d


def simulate(costs: StageCosts, schedule: str = "1f1b", microbatches: int = 8, *, gp: bool = False,
             order: list[list[Op]] | None = None) -> PipelineStep:
    """Time one step of ``schedule`` (or an explicit ``order``: one list of ``(kind, micro_batch, chunk)``
    per device) with ``microbatches`` on ``costs``; ``gp``: a gradient scheme's GP step of that schedule. Appends the
    all-reduce (``R``) and the update (``U``) to every device's order when they cost anything."""
    p, v = costs.devices, costs.chunks
    m = microbatches
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"microbatches: must be an integer >= 1, got {m!r}")
    if p * v * m > MAX_OPS:
        raise ValueError(f"microbatches: {p} stages x {v} chunks x {m} micro-batches is more than {MAX_OPS:,} "
                         f"forwards to time in one step")
    name = schedule if order is None else "custom"
    if order is not None:
        check_order(order, p, m, v)
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
    # (a device busy for the whole span sums its ops' times in another order than the span: rounding would
    # show it idle for -1e-15)
    bubble = max(1.0 - sum(busy) / (p * span), 0.0) if span > 0 else 0.0
    return PipelineStep(schedule=name, stages=p, microbatches=m,
                        chunks=v, gp=gp, makespan=makespan, span=span, bubble_rate=bubble,
                        busy=tuple(busy), idle=tuple(max(span - b, 0.0) for b in busy), peak_act=tuple(peak_u),
                        peak_act_bytes=tuple(peak_b), link_bytes=link_bytes, timeline=tuple(OpRecord(*x) for x in rec))


def job_time(steps: Sequence[tuple[PipelineStep, int]]) -> float:
    """Seconds for ``n`` back-to-back steps of each kind: the sum of spans plus one fill and drain."""
    used = [(s, n) for s, n in steps if n > 0]
    if not used:
        return 0.0
    return sum(s.span * n for s, n in used) + max(s.makespan - s.span for s, _ in used)


# -- pictures --------------------------------------------------------------------------------------------
_GLYPH = {"F": "F", "B": "B", "W": "W", "BW": "B", "P": "P", "R": "~", "U": "U"}


def gantt(step: PipelineStep, width: int = 96, *, until: float | None = None) -> str:
    """An ASCII Gantt chart: one row per device, ``width`` columns over the makespan (or over ``until``, to
    draw several steps to one scale); ``.`` is idle.

    Letters: F forward, B backward (input gradient, or the whole backward), W weight gradient, P predictor
    work of a GP step, ~ all-reduce, U update; lower case for model chunks after the first.
    """
    if width < 10:
        raise ValueError(f"width: at least 10 columns, got {width}")
    T = (until or step.makespan) or 1.0
    if not math.isfinite(T):
        raise ValueError(f"makespan: a chart needs a finite time scale, got {T!r}")
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


# -- from a zoo model --------------------------------------------------------------------------------------
_COLUMNS = ("layer", "phase", "M", "K", "N", "repeat", "vec_elems", "stash_bytes")


class _Rows:
    """The rows of an op table selected by a mask (the columns ``accel.schedule`` reads), layers renumbered
    from ``first`` (rows of no layer, -1, stay -1)."""

    def __init__(self, ops, mask, first: int = 0):
        for c in _COLUMNS:
            setattr(self, c, np.asarray(getattr(ops, c))[mask])
        self.layer = np.where(self.layer >= 0, self.layer - first, self.layer)
        geo = getattr(ops, "im2col", None)  # convolutions' input geometry (accel.gemm fetches the raw input)
        self.im2col = None if geo is None else np.asarray(geo)[mask]


class _StagePlan:
    """A scheme's plan (``accel.schedule.step_costs``'s duck-typed ``plan``) restricted to layers a..b-1 and
    renumbered; its rows of no layer (the shared predictor's update) go to every stage."""

    _LAYER_SETS = ("gp_wgrad", "gp_igrad", "gp_bwd_vec", "gp_update", "gp_stash")

    def __init__(self, plan, a: int, b: int):
        self.name, self.overlap = plan.name, plan.overlap
        for f in ("train", "gp"):
            t = getattr(plan, f)
            setattr(self, f, None if t is None else _Rows(t, ((t.layer >= a) & (t.layer < b)) | (t.layer < 0), a))
        for f in self._LAYER_SETS:
            setattr(self, f, tuple(i - a for i in getattr(plan, f) if a <= i < b))


def _seconds(ops, sel, hw, tech, weights) -> np.ndarray:
    """Seconds of the selected ops summed with ``weights`` (n_sel, k) on one Hardware -> (k,)."""
    from accel.gemm import gemm_cost, op_im2col
    from accel.vector import vector_cost

    out = np.zeros(weights.shape[1])
    g = sel & np.isin(ops.phase, ("fwd", "igrad", "wgrad"))
    v = sel & ~g
    gw, vw = weights[g[sel]], weights[v[sel]]
    if g.any():
        c = gemm_cost(ops.M[g], ops.K[g], ops.N[g], ops.repeat[g], hw=hw, tech=tech, sum_over=gw,
                      include_leakage=False, im2col=op_im2col(ops, g))
        out += np.asarray(c.total_cycles, dtype=np.float64)
    if v.any():
        c = vector_cost(ops.vec_elems[v], hw=hw, tech=tech, sum_over=vw, include_leakage=False)
        out += np.asarray(c.total_cycles, dtype=np.float64)
    return out / (hw.clock_ghz * 1e9)


def layer_times(ops, hw, tech=None) -> tuple[np.ndarray, np.ndarray]:
    """Per layer on ``hw``: seconds of its share of one plain-BP training step (forward, backward, update;
    stash stalls not counted: the weights the stages are balanced by) and of its weight gradient."""
    n = int(ops.layer.max()) + 1
    L = len(ops.phase)
    w = np.zeros((L, 2 * n))
    w[np.arange(L), ops.layer] = 1.0
    wg = np.flatnonzero(ops.phase == "wgrad")
    w[wg, n + ops.layer[wg]] = 1.0
    t = _seconds(ops, np.ones(L, dtype=bool), hw, tech, w)
    return t[:n], t[n:]


def partition(costs, parts: int, *, per_part=None) -> list[int]:
    """Cut a sequence of layer costs into ``parts`` contiguous, non-empty groups minimizing the largest
    group's sum (exact dynamic programme). ``per_part``: optional (parts, n) costs when the groups run on
    different hardware. Returns the first layer index of every group (starts[0] == 0)."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)) or parts < 1:
        raise ValueError(f"stages: must be an integer >= 1, got {parts!r}")
    c = np.asarray(costs if per_part is None else per_part, dtype=np.float64)
    c = np.broadcast_to(c, (parts, c.shape[-1]))
    n = c.shape[1]
    if parts > n:
        raise ValueError(f"stages: {parts} stages need at least as many layers, the model has {n}")
    pre = np.concatenate([np.zeros((parts, 1)), np.cumsum(c, axis=1)], axis=1)
    best = pre[0].copy()  # best[L]: the smallest largest-group sum cutting the first L layers into k + 1 groups
    best[0] = np.inf
    cut = np.zeros((parts, n + 1), dtype=np.int64)
    Ls, Is = np.arange(n + 1)[:, None], np.arange(n + 1)[None, :]
    for k in range(1, parts):
        # the (k+1)-th group holds layers i .. L-1 (i >= k: the first k groups are not empty)
        cand = np.maximum(best[None, :], pre[k][:, None] - pre[k][None, :])
        cand = np.where((Is >= k) & (Is < Ls), cand, np.inf)
        cut[k] = np.argmin(cand, axis=1)
        best = cand[np.arange(n + 1), cut[k]]
    starts = [0] * parts
    L = n
    for k in range(parts - 1, 0, -1):
        L = int(cut[k, L])
        starts[k] = L
    return starts


@dataclass(frozen=True)
class ModelPipeline:
    """A model cut into stages on given accelerators: op costs per micro-batch for the three step kinds,
    energy, memory and traffic per stage. Times in s, energy in pJ, sizes in bytes."""

    #: plain BP step, the gradient scheme's BP-phase step (its predictor's training in U) and its GP step
    bp: StageCosts
    scheme_bp: StageCosts
    gp: StageCosts
    #: first layer of every virtual stage, and the layer count
    starts: tuple
    layers: int
    #: largest virtual-stage BP step time over the mean (1.0 = perfectly balanced)
    imbalance: float
    #: dynamic energy per micro-batch (without the update) per virtual stage, for each step kind
    energy_mb_pj: dict
    #: dynamic energy of the update per step per virtual stage (BP, GP)
    energy_update_pj: dict
    #: leakage power (W) of each device
    leakage_w: tuple
    #: weight-gradient bytes per virtual stage: all layers (BP) and the predicted ones (GP); the predictor's
    grad_bytes: tuple
    grad_bytes_gp: tuple
    pred_grad_bytes: float
    microbatch: int
    #: DRAM bytes per micro-batch per virtual stage ("bp", "scheme_bp", "gp"; the update's counted once a step)
    dram_mb_bytes: dict = field(default_factory=dict)

    @property
    def stages(self) -> int:
        return self.bp.devices

    @property
    def chunks(self) -> int:
        return self.bp.chunks


def model_pipeline(ops, *, stages: int, hw, chunks: int = 1, out_bytes, param_bytes, link: Link | None = None,
                   plan=None, pred_param_bytes: float = 0.0, tech=None) -> ModelPipeline:
    """Cut ``ops`` (one micro-batch's training ops) into ``stages * chunks`` balanced virtual stages.

    ``hw``: one Hardware for every device or a sequence of ``stages``. ``out_bytes`` / ``param_bytes``:
    per layer, the bytes of its output for one micro-batch (sent to the next stage when a cut follows it)
    and of its weight gradient. ``plan``: the gradient scheme's plan for a micro-batch (as
    :func:`accel.schedule.step_costs` takes it; None: a free predictor); each stage keeps its own copy of the
    scheme's predictor (its rows of no layer are charged on every stage). ``pred_param_bytes``: the bytes of
    the predictor's gradients, all-reduced by data-parallel replicas in BP steps.
    """
    from accel.area import leakage_w
    from accel.hardware import Hardware
    from accel.schedule import step_costs
    from accel.tech import default_tech
    from accel.vector import vector_cost

    tech = tech or default_tech()
    link = link or Link()
    if isinstance(chunks, bool) or not isinstance(chunks, (int, np.integer)) or chunks < 1:
        raise ValueError(f"chunks: must be an integer >= 1, got {chunks!r}")
    hws = [hw] * stages if isinstance(hw, Hardware) else list(hw)
    if len(hws) != stages:
        raise ValueError(f"hardware: one accelerator for all stages or one per stage ({stages}), got {len(hws)}")
    S = stages * chunks
    n = int(ops.layer.max()) + 1
    out_bytes = np.asarray(out_bytes, dtype=np.float64)
    param_bytes = np.asarray(param_bytes, dtype=np.float64)
    if out_bytes.shape != (n,) or param_bytes.shape != (n,):
        raise ValueError(f"out_bytes, param_bytes: one value per layer ({n})")
    distinct = {id(h): h for h in hws}
    times = {k: layer_times(ops, h, tech) for k, h in distinct.items()}
    starts = partition(None, S, per_part=np.stack([times[id(hws[s % stages])][0] for s in range(S)]))
    bounds = list(starts) + [n]
    ph = ops.phase
    predicted = np.zeros(n, dtype=bool)  # the layers a GP step updates: the plan's, or accel.schedule's rule
    predicted[list(plan.gp_update) if plan is not None else
              np.intersect1d(ops.layer[ph == "fwd"], ops.layer[ph == "update"])] = True
    cols = {k: [] for k in ("F", "B", "W", "U", "Pt", "Fg", "P", "Ug", "act", "e_bp", "e_sbp", "e_gp",
                            "eu", "eug", "step", "gb", "gbg", "d_bp", "d_sbp", "d_gp")}
    for s in range(S):
        h = hws[s % stages]
        a, b = bounds[s], bounds[s + 1]
        mask = (ops.layer >= a) & (ops.layer < b)
        sub = _Rows(ops, mask, a)
        sc = step_costs(sub, plan=None if plan is None else _StagePlan(plan, a, b), hw=h, tech=tech)
        w = float(times[id(h)][1][a:b].sum())
        bp, sbp, gp = sc.bp, sc.scheme_bp, sc.scheme_gp
        stash = bp.parts_s["stash"]
        cols["F"].append(bp.parts_s["forward"] + stash / 2)  # the stash is written in F, read back in B
        cols["B"].append(bp.parts_s["backward"] - w + stash / 2)
        cols["W"].append(w)
        cols["U"].append(bp.parts_s["update"])
        cols["Pt"].append(max(0.0, sbp.time_s - bp.time_s))
        cols["Fg"].append(gp.parts_s["forward"])
        # everything else of a GP step per micro-batch: the scheme's extra work, any weight-gradient GEMMs and
        # stash it keeps (error feedback, local losses); ADA-GP: reorganization and predictor inference
        cols["P"].append(max(0.0, gp.time_s - gp.parts_s["forward"] - gp.parts_s["update"]))
        cols["Ug"].append(gp.parts_s["update"])
        cols["act"].append(float(sub.stash_bytes.sum()))
        cols["step"].append(bp.time_s)
        upd = mask & (ph == "update")
        upd_gp = upd & predicted[np.clip(ops.layer, 0, None)]
        eu = {False: 0.0, True: 0.0}
        for gp_step, sel in ((False, upd), (True, upd_gp)):
            if sel.any():
                eu[gp_step] = float(np.asarray(vector_cost(ops.vec_elems[sel], hw=h, tech=tech,
                                                           include_leakage=False).energy_pj["total"]).sum())
        dyn = lambda c: c.energy_total_pj - c.energy_pj["leakage"]  # noqa: E731 - local shorthand
        cols["eu"].append(eu[False])
        cols["eug"].append(eu[True])
        cols["e_bp"].append(dyn(bp) - eu[False])
        cols["e_sbp"].append(dyn(sbp) - eu[False])
        cols["e_gp"].append(dyn(gp) - eu[True])
        cols["d_bp"].append(bp.dram_bytes)
        cols["d_sbp"].append(sbp.dram_bytes)
        cols["d_gp"].append(gp.dram_bytes)
        cols["gb"].append(float(param_bytes[a:b].sum()))
        cols["gbg"].append(float((param_bytes[a:b] * predicted[a:b]).sum()))
    msg = tuple(float(out_bytes[bounds[s + 1] - 1]) for s in range(S - 1))
    comm = tuple(float(x) for x in link.transfer_s(np.asarray(msg))) if S > 1 else ()
    common = dict(devices=stages, comm=comm, msg_bytes=msg, act_bytes=tuple(cols["act"]))
    bpc = StageCosts(F=tuple(cols["F"]), B=tuple(cols["B"]), W=tuple(cols["W"]), U=tuple(cols["U"]), **common)
    sbpc = StageCosts(F=bpc.F, B=bpc.B, W=bpc.W, U=tuple(u + t for u, t in zip(cols["U"], cols["Pt"])), **common)
    gpc = StageCosts(F=tuple(cols["Fg"]), B=bpc.B, W=bpc.W, P=tuple(cols["P"]), U_gp=tuple(cols["Ug"]),
                     **common)
    step = np.asarray(cols["step"])
    return ModelPipeline(
        bp=bpc, scheme_bp=sbpc, gp=gpc, starts=tuple(starts), layers=n,
        imbalance=float(step.max() / step.mean()) if step.mean() > 0 else 1.0,
        energy_mb_pj={"bp": tuple(cols["e_bp"]), "scheme_bp": tuple(cols["e_sbp"]), "gp": tuple(cols["e_gp"])},
        energy_update_pj={"bp": tuple(cols["eu"]), "gp": tuple(cols["eug"])},
        leakage_w=tuple(float(leakage_w(h, tech)) for h in hws),
        grad_bytes=tuple(cols["gb"]), grad_bytes_gp=tuple(cols["gbg"]), pred_grad_bytes=float(pred_param_bytes),
        microbatch=int(getattr(ops, "batch", 0)),
        dram_mb_bytes={"bp": tuple(cols["d_bp"]), "scheme_bp": tuple(cols["d_sbp"]), "gp": tuple(cols["d_gp"])})


def step_counts(n_steps: int, *, scheme: str = "bp", warmup_frac: float = 0.0, gp_fraction: float = 0.0
                ) -> tuple[int, int]:
    """(BP steps, GP steps) of a job: the counting rule of :func:`accel.schedule.job_cost` (reused)."""
    from accel.schedule import ENERGY_KEYS, StepCost, StepCosts, job_cost

    z = StepCost(time_s=0.0, energy_pj={k: 0.0 for k in ENERGY_KEYS}, dram_bytes=0.0, parts_s={})
    j = job_cost(StepCosts(z, z, z), n_steps=n_steps, warmup_frac=warmup_frac, gp_fraction=gp_fraction,
                 scheme="bp" if scheme == "bp" else None)
    return j.steps_bp, j.steps_gp


@dataclass(frozen=True)
class PipelineJob:
    """A training job on ``stages x replicas`` accelerators. Seconds, joules, bytes."""

    time_s: float
    #: dynamic (the devices' ops), leakage (every device over the whole job, idle or not), link
    energy_j: dict
    #: samples per second over the job
    throughput: float
    #: idle share of the devices' time over the job's steps (spans)
    bubble_rate: float
    #: the largest activation memory of any device in any step
    peak_act_bytes: float
    steps_bp: int
    steps_gp: int
    #: the step kinds the job runs ("bp": plain BP or the scheme's BP phase, "gp")
    step: dict
    #: bytes over the links per step kind (pipeline messages of every replica plus the all-reduce)
    link_bytes: dict
    #: seconds of the data-parallel all-reduce per step kind (the slowest device)
    allreduce_s: dict

    @property
    def energy_total_j(self) -> float:
        return sum(self.energy_j.values())


def pipeline_job(mp: ModelPipeline, schedule: str, microbatches: int, *, n_steps: int, samples_per_step: int,
                 scheme: str = "bp", warmup_frac: float = 0.0, gp_fraction: float = 0.0, replicas: int = 1,
                 link: Link | None = None, tech=None) -> PipelineJob:
    """A job of ``n_steps`` steps of ``microbatches`` micro-batches on ``replicas`` copies of the pipeline.

    ``scheme="bp"``: every step plain BP; any other name (the gradient scheme's, e.g. ``"adagp"``): the
    scheme's BP-phase steps (its predictor trains once per step, in ``U``) and
    ``round(gp_fraction * (n_steps - warm-up))`` GP steps, counted as :func:`accel.schedule.job_cost` counts
    them.
    """
    from dataclasses import replace

    from accel.tech import default_tech

    tech = tech or default_tech()
    link = link or Link()
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise ValueError(f"replicas: must be an integer >= 1, got {replicas!r}")
    d, p, v = replicas, mp.stages, mp.chunks
    n_bp, n_gp = step_counts(n_steps, scheme=scheme, warmup_frac=warmup_frac, gp_fraction=gp_fraction)

    def per_device(x):
        return [sum(x[c * p + r] for c in range(v)) for r in range(p)]

    bp_kind = "bp" if scheme == "bp" else "scheme_bp"  # the key of a BP(-phase) step in mp's per-kind dicts
    kinds = {"bp": (mp.bp if scheme == "bp" else mp.scheme_bp, False, n_bp, mp.energy_mb_pj[bp_kind],
                    mp.energy_update_pj["bp"],
                    [g + (mp.pred_grad_bytes if scheme != "bp" else 0.0) for g in per_device(mp.grad_bytes)]),
             "gp": (mp.gp, True, n_gp, mp.energy_mb_pj["gp"], mp.energy_update_pj["gp"],
                    per_device(mp.grad_bytes_gp))}
    steps, link_bytes, ar_s = {}, {}, {}
    used, dyn_pj, link_pj = [], 0.0, 0.0
    for name, (costs, gp, count, e_mb, e_upd, grads) in kinds.items():
        if count == 0:
            continue
        ar = ring_allreduce_s(np.asarray(grads), d, link)
        st = simulate(replace(costs, allreduce=tuple(float(x) for x in ar)), schedule, microbatches, gp=gp)
        steps[name] = st
        ar_s[name] = float(np.max(ar))
        lb = d * st.link_bytes + (2 * (d - 1) * sum(grads) if d > 1 else 0.0)
        link_bytes[name] = lb
        used.append((st, count))
        dyn_pj += count * d * sum(microbatches * e + u for e, u in zip(e_mb, e_upd))
        link_pj += count * lb * tech.link_pj_per_byte
    t = job_time(used)
    leak_j = t * d * sum(mp.leakage_w)
    busy = sum(n * sum(s.busy) for s, n in used)
    period = sum(n * p * s.span for s, n in used)
    return PipelineJob(
        time_s=t, energy_j={"dynamic": dyn_pj * 1e-12, "leakage": leak_j, "link": link_pj * 1e-12},
        throughput=n_steps * samples_per_step / t if t > 0 else 0.0,
        bubble_rate=1.0 - busy / period if period > 0 else 0.0,
        peak_act_bytes=max(max(s.peak_act_bytes) for s, _ in used) if used else 0.0,
        steps_bp=n_bp, steps_gp=n_gp, step=steps, link_bytes=link_bytes, allreduce_s=ar_s)
