"""Training-step schedules: plain back-propagation, a gradient scheme's BP-phase and GP-phase steps, a job.

Inputs are op tables with numpy columns ``layer``, ``phase``, ``M``, ``K``, ``N``, ``repeat``,
``vec_elems``, ``stash_bytes`` (``models.graph.TrainingOps`` produces them) and a scheme's plan (duck-typed:
``models.schemes.SchemePlan`` produces one; this module does not import ``models``): its extra op tables
``train`` (a BP step) and ``gp`` (a GP step), the main-network ops a GP step still runs per layer
(``gp_wgrad``, ``gp_igrad``, ``gp_bwd_vec``, ``gp_update``), the layers whose activations a GP step keeps
(``gp_stash``) and how its extra work may overlap (``overlap``). Everything is vectorized over a
:class:`HardwareArray`. Op phases are checked: an unknown phase raises ``ValueError`` (it is never costed
as free). Main phases: :data:`MAIN_PHASES`; extra work: :data:`EXTRA_PHASES`.

Steps (ADA-GP, arXiv 2305.13236, as modelled here):

* **plain BP**: the forward of every layer (GEMMs and vector ops), then input- and weight-gradient GEMMs and
  the vector ops' backward, then the weight updates. Activations the backward pass needs (``stash_bytes``)
  stay on chip for the last layers whose summed stash fits in the chip's SRAM (the backward starts from the
  end); the rest is written to DRAM in the forward and read back in the backward.
* **a scheme's BP phase**: the plain-BP step plus the scheme's training work (``train``): its inference-side
  ops (``reorg``, ``pred_fwd``, ``pred_vec``) after each layer's forward, the rest once the true gradients
  exist.
* **a scheme's GP phase**: the forward of every layer, the scheme's ``gp`` ops, the main-network ops the plan
  selects (for ADA-GP none but the predicted layers' updates; for error feedback and local classifiers every
  predicted layer's weight-gradient GEMM; no input-gradient GEMMs unless selected), and the activation
  stash of the ``gp_stash`` layers (same on-chip rule as BP). Layers without an update in the plan
  (normalization scale/shift) are not updated in a GP step.

Predictor unit: the scheme's extra GEMMs run on ``hw.predictor_unit()``. With dedicated PEs
(``pred_rows > 0``) and ``overlap = "per_layer"`` the extra work after layer ``l`` overlaps the main array's
work up to the next layer with extra work (per segment the larger of the two, not the sum); a GP step's
weight-gradient GEMM of such a layer runs on the main array one segment later (it needs the prediction).
With ``overlap = "after_forward"`` (the prediction needs the whole forward) the extra work of a GP step
overlaps the main array's weight-gradient work after the forward. A BP step's training work overlaps the
backward pass. With no dedicated unit everything runs in series on the main array; with one, the scheduler
still time-shares when that is faster (per step kind).

Stash traffic uses the DRAM bandwidth a layer leaves idle (its compute time minus its own DRAM time);
beyond that it adds stall time. Leakage is charged over the step's wall time for the whole chip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel._blas import one_blas_thread
from accel.area import leakage_w
from accel.gemm import gemm_cost, op_im2col
from accel.hardware import FIELDS, Hardware, HardwareArray, as_array, distinct_rows
from accel.tech import Tech, default_tech
from accel.vector import vector_cost

__all__ = ["StepCost", "StepCosts", "JobCost", "step_costs", "job_cost", "ENERGY_KEYS", "MAIN_PHASES",
           "EXTRA_PHASES", "check_phases"]

#: energy components of a step or job, in pJ (J for jobs): GEMM MACs, register file, inter-PE moves,
#: vector-unit ALU, SRAM, DRAM, leakage
ENERGY_KEYS = ("mac", "rf", "interpe", "alu", "sram", "dram", "leakage")

#: phases of a network's own training ops (``models.graph.PHASES``), GEMMs first
MAIN_PHASES = ("fwd", "igrad", "wgrad", "fwd_vec", "bwd_vec", "update")
#: phases of a scheme's extra work (``models.schemes``), GEMMs first
EXTRA_PHASES = ("pred_fwd", "pred_refwd", "pred_igrad", "pred_wgrad", "reorg", "pred_vec", "pred_loss",
                "pred_update")
_GEMM_PHASES = ("fwd", "igrad", "wgrad", "pred_fwd", "pred_refwd", "pred_igrad", "pred_wgrad")
#: extra work that, in a BP step, may run beside the forward (the rest needs the true gradients)
_INFERENCE_SIDE = ("reorg", "pred_fwd", "pred_vec")


def check_phases(ops, allowed: tuple[str, ...], what: str) -> None:
    """Raise ``ValueError`` naming the first phase of ``ops`` not in ``allowed`` (never cost it as free)."""
    bad = sorted(set(np.unique(ops.phase).tolist()) - set(allowed))
    if bad:
        raise ValueError(f"{what}: unknown op phase {bad[0]!r}; known: {', '.join(allowed)}")


@dataclass(frozen=True)
class StepCost:
    """One training step: wall time (s), energy by component (pJ), DRAM bytes, time breakdown (s).

    Arrays have shape (H,) for a HardwareArray and are scalars for a Hardware.
    """

    time_s: np.ndarray
    energy_pj: dict
    dram_bytes: np.ndarray
    #: seconds by part: forward, backward, update, predictor (time the predictor adds), stash (stall)
    parts_s: dict

    @property
    def energy_total_pj(self):
        return sum(self.energy_pj[k] for k in ENERGY_KEYS)


@dataclass(frozen=True)
class StepCosts:
    """Plain BP, the scheme's BP-phase step and its GP-phase step; ``scheme`` names the plan (``None``: steps
    of no particular scheme, such as a free predictor's, which :func:`job_cost` accepts under any name)."""

    bp: StepCost
    scheme_bp: StepCost
    scheme_gp: StepCost
    scheme: str | None = None


@dataclass(frozen=True)
class JobCost:
    """A whole training job: seconds, energy by component (J), steps of each kind."""

    time_s: np.ndarray
    energy_j: dict
    steps_bp: int
    steps_gp: int

    @property
    def energy_total_j(self):
        return sum(self.energy_j[k] for k in ENERGY_KEYS)



def _onehot(index: np.ndarray, n: int) -> np.ndarray:
    w = np.zeros((index.shape[0], n))
    ok = index >= 0
    w[np.flatnonzero(ok), index[ok]] = 1.0
    return w


#: the hardware fields GEMM and vector costs read when the caller charges leakage (the predictor-unit fields
#: only size the chip's area, hence its leakage)
_COST_FIELDS = tuple(f for f in FIELDS if not f.startswith("pred_"))


class _Costed:
    """GEMM and vector costs of an op table on a HardwareArray, summed into named columns.

    ``groups``: name -> boolean mask over ops (or a (L, n) weight matrix for per-layer columns).
    Results: ``sec[name]`` (H,) or (H, n) seconds; ``energy[name][component]``; ``dram[name]`` bytes;
    ``compute_s`` / ``dram_s`` (time the op's compute and its DRAM traffic would take alone).
    """

    def __init__(self, ops, hw: HardwareArray, tech: Tech, groups: dict[str, np.ndarray]):
        self.sec, self.energy, self.dram, self.compute_s, self.dram_s = {}, {}, {}, {}, {}
        # configurations that differ only in their predictor unit cost the same here: cost each once
        first, inv = distinct_rows([getattr(hw, f) for f in _COST_FIELDS])
        if first.size == len(hw):
            self._cost(ops, hw, tech, groups)
            return
        self._cost(ops, hw.take(first), tech, groups)
        for d in (self.sec, self.dram, self.compute_s, self.dram_s):
            d.update({k: v[inv] for k, v in d.items()})
        self.energy = {n: {k: v[inv] for k, v in e.items()} for n, e in self.energy.items()}

    def _cost(self, ops, hw: HardwareArray, tech: Tech, groups: dict[str, np.ndarray]) -> None:
        g = np.isin(ops.phase, _GEMM_PHASES)
        names = list(groups)
        widths = [1 if groups[n].ndim == 1 else groups[n].shape[1] for n in names]
        W = np.concatenate([groups[n].reshape(len(ops.phase), -1).astype(np.float64) for n in names], axis=1)
        clock = hw.clock_ghz[:, None] * 1e9
        bpc = (hw.bandwidth_gbps / hw.clock_ghz)[:, None]
        tot = {k: 0.0 for k in ("sec", "compute", "dram")}
        energy = {k: 0.0 for k in ENERGY_KEYS}
        if g.any() and W[g].any():
            c = _gemm_reduced(ops, g, W[g], hw, tech)
            tot = {"sec": c["total_cycles"] / clock, "compute": c["compute_cycles"] / clock, "dram": c["dram"]}
            for k in ("mac", "rf", "interpe", "sram"):
                energy[k] = energy[k] + c[k]
            energy["dram"] = energy["dram"] + c["dram_energy"]
        v = ~g
        if v.any() and W[v].any():
            c = vector_cost(ops.vec_elems[v], hw=hw, tech=tech, sum_over=W[v], include_leakage=False)
            tot = {"sec": tot["sec"] + c.total_cycles / clock, "compute": tot["compute"] + c.compute_cycles / clock,
                   "dram": tot["dram"] + c.dram_bytes}
            energy["alu"] = energy["alu"] + c.energy_pj["alu"]
            for k in ("sram", "dram"):
                energy[k] = energy[k] + c.energy_pj[k]
        H = len(hw)

        def full(x):
            return np.broadcast_to(np.asarray(x, dtype=np.float64), (H, W.shape[1]))

        tot = {k: full(x) for k, x in tot.items()}
        energy = {k: full(x) for k, x in energy.items()}
        start = 0
        for n, w in zip(names, widths):
            sl = slice(start, start + w)
            squeeze = groups[n].ndim == 1
            pick = (lambda a: a[:, start]) if squeeze else (lambda a: a[:, sl])
            self.sec[n] = pick(tot["sec"])
            self.compute_s[n] = pick(tot["compute"])
            self.dram[n] = pick(tot["dram"])
            self.dram_s[n] = self.dram[n] / (bpc[:, 0] if squeeze else bpc) / (clock[:, 0] if squeeze else clock)
            self.energy[n] = {k: pick(energy[k]) for k in ENERGY_KEYS}
            start += w


def _gemm_reduced(ops, sel: np.ndarray, W: np.ndarray, hw: HardwareArray, tech: Tech) -> dict:
    """The GEMM fields the schedule needs, summed over ops with weights ``W`` (L_sel, P) -> (H, P)."""
    geo = op_im2col(ops, sel)  # convolutions fetch their raw input (None for tables without geometry)
    c = gemm_cost(ops.M[sel], ops.K[sel], ops.N[sel], ops.repeat[sel], hw=hw, tech=tech, sum_over=W,
                  include_leakage=False, im2col=geo)
    out = {"total_cycles": c.total_cycles, "compute_cycles": c.compute_cycles,
           "dram": c.dram_read_bytes + c.dram_write_bytes, "dram_energy": c.energy_pj["dram"]}
    out.update({k: c.energy_pj[k] for k in ("mac", "rf", "interpe", "sram")})
    return out


def _add_energy(*parts: dict) -> dict:
    return {k: sum(p[k] for p in parts) for k in ENERGY_KEYS}


def _stash(ops, hw: HardwareArray, n_layers: int, fwd_compute_s, fwd_dram_s, keep: np.ndarray | None = None):
    """Per layer: off-chip stash bytes (H, n) and the stall they add to the forward (H, n), for the layers
    ``keep`` (a boolean mask over layers; all when omitted)."""
    stash = np.zeros(n_layers)
    np.add.at(stash, ops.layer[ops.stash_bytes > 0], ops.stash_bytes[ops.stash_bytes > 0])
    if keep is not None:
        stash = np.where(keep, stash, 0.0)
    cap = (hw.ifmap_kb + hw.filter_kb + hw.ofmap_kb) * 1024.0  # (H,)
    from_end = np.cumsum(stash[::-1])[::-1]  # stash of this layer and every later one
    off = np.where(from_end[None, :] > cap[:, None], stash[None, :], 0.0)  # (H, n)
    bw = hw.bandwidth_gbps[:, None] * 1e9
    idle = np.maximum(0.0, fwd_compute_s - fwd_dram_s)
    fwd_stall = np.maximum(0.0, off / bw - idle)
    return off, fwd_stall


class _FreePlan:
    """No plan: a free predictor (no extra work) of no particular scheme; GP steps update the layers with their
    own weights."""

    name = None
    train = gp = None
    gp_wgrad = gp_igrad = gp_bwd_vec = gp_stash = ()
    overlap = "per_layer"

    def __init__(self, gp_update):
        self.gp_update = tuple(gp_update)


@one_blas_thread
def step_costs(ops, *, plan=None, hw: Hardware | HardwareArray, tech: Tech | None = None) -> StepCosts:
    """Cost of a plain-BP step, the scheme's BP-phase step and its GP-phase step of ``ops`` on ``hw``.

    ``plan``: the scheme's plan (see the module docstring; ``models.schemes.scheme_plan`` builds one);
    omitted means a free predictor: GP steps cost the forward and the updates of the layers with their own
    weights (a forward GEMM and an update), BP-phase steps cost plain BP.
    """
    tech = tech or default_tech()
    hwa, single = as_array(hw)
    H = len(hwa)
    check_phases(ops, MAIN_PHASES, "training ops")
    n = int(ops.layer.max()) + 1 if len(ops.phase) else 0
    ph = ops.phase
    layer_fwd = _onehot(np.where(np.isin(ph, ("fwd", "fwd_vec")), ops.layer, -1), n)
    if plan is None:
        plan = _FreePlan(np.intersect1d(ops.layer[ph == "fwd"], ops.layer[ph == "update"]).tolist())
    if plan.overlap not in ("per_layer", "after_forward"):
        raise ValueError(f"plan overlap: 'per_layer' or 'after_forward', got {plan.overlap!r}")
    empty = lambda t: t is None or not len(t.phase)  # noqa: E731 - local shorthand
    extra_layers: set[int] = set()
    for what, t in (("plan.train", plan.train), ("plan.gp", plan.gp)):
        if empty(t):
            continue
        check_phases(t, EXTRA_PHASES, what)
        extra_layers |= set(t.layer[t.layer >= 0].tolist())
    listed = set().union(*(set(getattr(plan, f)) for f in ("gp_wgrad", "gp_igrad", "gp_bwd_vec", "gp_update",
                                                             "gp_stash")))
    bad = sorted(i for i in extra_layers | listed if not 0 <= i < n)
    if bad:
        raise ValueError(f"plan: layer {bad[0]} is not a layer of these training ops (0..{n - 1})")

    def layers_mask(sel) -> np.ndarray:
        m = np.zeros(n, dtype=bool)
        m[list(sel)] = True
        return m

    def rows_of(sel, phase: str) -> np.ndarray:
        return (ph == phase) & layers_mask(sel)[np.clip(ops.layer, 0, None)] & (ops.layer >= 0)

    upd = ph == "update"
    gp_bwd = rows_of(plan.gp_wgrad, "wgrad") | rows_of(plan.gp_igrad, "igrad") | rows_of(plan.gp_bwd_vec, "bwd_vec")
    m = _Costed(ops, hwa, tech, {
        "fwd": layer_fwd,
        "bwd": np.isin(ph, ("igrad", "wgrad", "bwd_vec")),
        "update": upd,
        "update_gp": rows_of(plan.gp_update, "update"),
        "gp_bwd": _onehot(np.where(gp_bwd, ops.layer, -1), n),
    })
    bw = hwa.bandwidth_gbps * 1e9
    leak = np.asarray(leakage_w(hwa, tech), dtype=np.float64) * 1e12  # pJ per second
    zeros = np.zeros(H)

    def stash(keep, bwd_compute_s, bwd_dram_s):
        """Stall seconds (H,), DRAM bytes (H,) and energy of keeping the ``keep`` layers' activations."""
        off, fwd_stall = _stash(ops, hwa, n, m.compute_s["fwd"], m.dram_s["fwd"], keep)
        off_total = off.sum(axis=1)
        bwd_stall = np.maximum(0.0, off_total / bw - np.maximum(0.0, bwd_compute_s - bwd_dram_s))
        energy = {k: np.zeros(H) for k in ENERGY_KEYS}
        energy["dram"] = 2.0 * off_total * tech.dram_pj_per_byte  # written in the forward, read back
        return fwd_stall.sum(axis=1) + bwd_stall, 2.0 * off_total, energy

    def finish(time_s, energy, dram, parts):
        energy = dict(energy)
        energy["leakage"] = energy["leakage"] + leak * time_s
        return StepCost(time_s=time_s, energy_pj=energy, dram_bytes=dram, parts_s=parts)

    # plain BP
    fwd_layers = m.sec["fwd"]  # (H, n), no stash
    fwd_s = fwd_layers.sum(axis=1)
    stash_s, stash_dram, stash_energy = stash(None, m.compute_s["bwd"], m.dram_s["bwd"])
    bp_time = fwd_s + m.sec["bwd"] + m.sec["update"] + stash_s
    fwd_energy = {k: v.sum(axis=1) for k, v in m.energy["fwd"].items()}
    bp_energy = _add_energy(fwd_energy, m.energy["bwd"], m.energy["update"], stash_energy)
    fwd_dram = m.dram["fwd"].sum(axis=1)
    bp_dram = fwd_dram + m.dram["bwd"] + m.dram["update"] + stash_dram
    bp = finish(bp_time, bp_energy, bp_dram, {"forward": fwd_s, "backward": m.sec["bwd"],
                                              "update": m.sec["update"], "predictor": zeros, "stash": stash_s})

    # a GP step's main-network work after the forward, and its stash
    gp_bwd_layers = m.sec["gp_bwd"]  # (H, n)
    gp_bwd_s = gp_bwd_layers.sum(axis=1)
    gp_bwd_energy = {k: v.sum(axis=1) for k, v in m.energy["gp_bwd"].items()}
    gp_stash_s, gp_stash_dram, gp_stash_energy = stash(
        layers_mask(plan.gp_stash), m.compute_s["gp_bwd"].sum(axis=1), m.dram_s["gp_bwd"].sum(axis=1))
    per_layer = plan.overlap == "per_layer"

    def extra_work(on: HardwareArray):
        """The extra work on array ``on``: GP-step seconds per layer (H, n) and for the whole step (H,);
        BP-step inference-side seconds per layer (H, n) and training seconds (H,); energies; DRAM bytes."""
        none = {k: zeros for k in ENERGY_KEYS}
        out = {"gp_layers": np.zeros((H, n)), "gp_step": zeros, "gp_energy": none, "gp_dram": zeros,
               "inf_layers": np.zeros((H, n)), "train": zeros, "train_energy": none, "train_dram": zeros}
        if not empty(plan.gp):
            g = plan.gp
            c = _Costed(g, on, tech, {"layer": _onehot(g.layer, n), "step": g.layer < 0})
            out["gp_layers"], out["gp_step"] = c.sec["layer"], c.sec["step"]
            out["gp_energy"] = _add_energy({k: v.sum(axis=1) for k, v in c.energy["layer"].items()},
                                           c.energy["step"])
            out["gp_dram"] = c.dram["layer"].sum(axis=1) + c.dram["step"]
        if not empty(plan.train):
            t = plan.train
            inf = np.isin(t.phase, _INFERENCE_SIDE) & (t.layer >= 0) & per_layer
            c = _Costed(t, on, tech, {"inf": _onehot(np.where(inf, t.layer, -1), n), "train": ~inf})
            out["inf_layers"], out["train"] = c.sec["inf"], c.sec["train"]
            out["train_energy"] = _add_energy({k: v.sum(axis=1) for k, v in c.energy["inf"].items()},
                                              c.energy["train"])
            out["train_dram"] = c.dram["inf"].sum(axis=1) + c.dram["train"]
        return out

    # segments for per-layer overlap: segment k holds the layers after the k-th layer with extra work up to
    # and including the (k+1)-th; the extra work after the k-th such layer overlaps segment k's main work;
    # a GP step's backward work of a layer in segment j runs in segment j + 2 (after its prediction)
    anchor = layers_mask(extra_layers)
    seg_id = np.cumsum(anchor) - anchor
    n_seg = int(anchor.sum()) + 2
    seg_fwd = fwd_layers @ _onehot(seg_id, n_seg)
    seg_gp_main = seg_fwd + gp_bwd_layers @ _onehot(np.minimum(seg_id + 2, n_seg - 1), n_seg)
    to_seg = _onehot(np.where(anchor, np.cumsum(anchor), -1), n_seg)

    def scheme_steps(on: HardwareArray, overlap: bool):
        x = extra_work(on)
        if overlap and per_layer:
            seg_inf = x["inf_layers"] @ to_seg
            fwd_p = seg_fwd[:, 0] + np.maximum(seg_fwd[:, 1:], seg_inf[:, 1:]).sum(axis=1)
        else:
            fwd_p = fwd_s + x["inf_layers"].sum(axis=1)
        bwd_p = np.maximum(m.sec["bwd"], x["train"]) if overlap else m.sec["bwd"] + x["train"]
        t_bpp = fwd_p + bwd_p + m.sec["update"] + stash_s
        sbp = finish(t_bpp, _add_energy(bp_energy, x["train_energy"]), bp_dram + x["train_dram"],
                     {"forward": fwd_s, "backward": m.sec["bwd"], "update": m.sec["update"],
                      "predictor": t_bpp - bp_time, "stash": stash_s})
        gp_extra = x["gp_layers"].sum(axis=1) + x["gp_step"]
        if overlap and per_layer:
            seg_x = x["gp_layers"] @ to_seg
            seg_x[:, -1] += x["gp_step"]
            main_p = seg_gp_main[:, 0] + np.maximum(seg_gp_main[:, 1:], seg_x[:, 1:]).sum(axis=1)
        elif overlap:
            main_p = fwd_s + np.maximum(gp_bwd_s, gp_extra)
        else:
            main_p = fwd_s + gp_bwd_s + gp_extra
        t_gp = main_p + m.sec["update_gp"] + gp_stash_s
        sgp = finish(t_gp, _add_energy(fwd_energy, gp_bwd_energy, m.energy["update_gp"], x["gp_energy"],
                                       gp_stash_energy),
                     fwd_dram + m.dram["gp_bwd"].sum(axis=1) + m.dram["update_gp"] + x["gp_dram"] + gp_stash_dram,
                     {"forward": fwd_s, "backward": gp_bwd_s, "update": m.sec["update_gp"],
                      "predictor": main_p - fwd_s - gp_bwd_s, "stash": gp_stash_s})
        return sbp, sgp

    # time-shared on the main array, in series; with a dedicated unit, overlapped on it -- or, when the unit
    # is too small for that to pay, time-shared after all (the scheduler takes the faster, per step kind)
    sbp, sgp = scheme_steps(hwa, overlap=False)
    dedicated = hwa.pred_rows > 0
    if dedicated.any():
        sbp_u, sgp_u = scheme_steps(hwa.predictor_unit(), overlap=True)
        sbp = _pick(dedicated & (sbp_u.time_s <= sbp.time_s), sbp_u, sbp)
        sgp = _pick(dedicated & (sgp_u.time_s <= sgp.time_s), sgp_u, sgp)
    out = StepCosts(bp=bp, scheme_bp=sbp, scheme_gp=sgp, scheme=plan.name)
    return _squeeze(out) if single else out


def _pick(mask: np.ndarray, a: StepCost, b: StepCost) -> StepCost:
    """Per configuration, ``a`` where ``mask`` else ``b``."""
    w = lambda x, y: np.where(mask, x, y)  # noqa: E731 - local shorthand
    return StepCost(time_s=w(a.time_s, b.time_s),
                    energy_pj={k: w(a.energy_pj[k], b.energy_pj[k]) for k in ENERGY_KEYS},
                    dram_bytes=w(a.dram_bytes, b.dram_bytes),
                    parts_s={k: w(a.parts_s[k], b.parts_s[k]) for k in a.parts_s})


def _squeeze(s: StepCosts) -> StepCosts:
    def sq(c: StepCost) -> StepCost:
        f = lambda a: float(np.asarray(a).reshape(-1)[0])  # noqa: E731 - local shorthand
        return StepCost(time_s=f(c.time_s), energy_pj={k: f(v) for k, v in c.energy_pj.items()},
                        dram_bytes=f(c.dram_bytes), parts_s={k: f(v) for k, v in c.parts_s.items()})
    return StepCosts(bp=sq(s.bp), scheme_bp=sq(s.scheme_bp), scheme_gp=sq(s.scheme_gp), scheme=s.scheme)


def job_cost(steps: StepCosts, *, n_steps: int, warmup_frac: float = 0.0, gp_fraction: float = 0.0,
             scheme: str | None = None) -> JobCost:
    """A training job of ``n_steps``: for ``scheme="bp"`` every step is plain BP; otherwise (``None``,
    ``steps.scheme``, or any name when ``steps.scheme`` is ``None``) the first ``round(warmup_frac * n_steps)``
    steps are the scheme's BP-phase steps (its predictor trains), then ``round(gp_fraction * rest)`` of the
    rest are GP steps and the others BP-phase steps."""
    if not 0.0 <= warmup_frac <= 1.0 or not 0.0 <= gp_fraction <= 1.0:
        raise ValueError("warmup_frac and gp_fraction must be in [0, 1]")
    if scheme == "bp":
        n_bp, n_gp, bp_step = n_steps, 0, steps.bp
    elif scheme is None or steps.scheme is None or scheme == steps.scheme:
        warm = round(warmup_frac * n_steps)
        n_gp = round(gp_fraction * (n_steps - warm))
        n_bp, bp_step = n_steps - n_gp, steps.scheme_bp
    else:
        raise ValueError(f"scheme: 'bp' or these steps' scheme {steps.scheme!r}, got {scheme!r}")
    gp = steps.scheme_gp
    time = n_bp * np.asarray(bp_step.time_s) + n_gp * np.asarray(gp.time_s)
    energy = {k: (n_bp * np.asarray(bp_step.energy_pj[k]) + n_gp * np.asarray(gp.energy_pj[k])) * 1e-12
              for k in ENERGY_KEYS}
    return JobCost(time_s=time, energy_j=energy, steps_bp=n_bp, steps_gp=n_gp)
