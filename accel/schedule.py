"""Training-step schedules: plain back-propagation, ADA-GP's BP-phase and GP-phase steps, a whole job.

Inputs are op tables with numpy columns ``layer``, ``phase``, ``M``, ``K``, ``N``, ``repeat``,
``vec_elems``, ``stash_bytes`` (``models.graph.TrainingOps`` and ``models.predictor.predictor_ops`` produce
them; this module does not import ``models``). Everything is vectorized over a :class:`HardwareArray`.

Steps (DESIGN section 2):

* **plain BP**: the forward of every layer (GEMMs and vector ops), then input- and weight-gradient GEMMs and
  the vector ops' backward, then the weight updates. Activations the backward pass needs (``stash_bytes``)
  stay on chip for the last layers whose summed stash fits in the chip's SRAM (the backward starts from the
  end); the rest is written to DRAM in the forward and read back in the backward.
* **ADA-GP BP phase**: the plain-BP step plus the predictor: tensor reorganization and inference after each
  predicted layer's forward, and its training (loss, backward GEMMs, Adam update) once the true gradients
  exist.
* **ADA-GP GP phase**: per layer, the forward, then reorganization, predictor inference and the predicted
  layers' weight update; no backward GEMMs, no vector-op backward, no activation stash. Layers without a
  predicted gradient (normalization scale/shift) are not updated in a GP step.

Predictor unit: with dedicated PEs (``pred_rows > 0``) the predictor's work after layer ``l`` overlaps the
forward of the layers up to the next predicted layer (per layer the larger of the two, not the sum), and its
training overlaps the backward pass; with none, it runs in series on the main array.

Stash traffic uses the DRAM bandwidth a layer leaves idle (its compute time minus its own DRAM time);
beyond that it adds stall time. Leakage is charged over the step's wall time for the whole chip.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.area import leakage_w
from accel.gemm import gemm_cost
from accel.hardware import Hardware, HardwareArray, as_array
from accel.tech import Tech, default_tech
from accel.vector import vector_cost

__all__ = ["StepCost", "StepCosts", "JobCost", "step_costs", "job_cost", "ENERGY_KEYS"]

#: energy components of a step or job, in pJ (J for jobs): GEMM MACs, register file, inter-PE moves,
#: vector-unit ALU, SRAM, DRAM, leakage
ENERGY_KEYS = ("mac", "rf", "interpe", "alu", "sram", "dram", "leakage")

_GEMM_PHASES = ("fwd", "igrad", "wgrad")
_PRED_GEMM = ("pred_fwd", "pred_refwd", "pred_igrad", "pred_wgrad")


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
    bp: StepCost
    adagp_bp: StepCost
    adagp_gp: StepCost


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


class _Costed:
    """GEMM and vector costs of an op table on a HardwareArray, summed into named columns.

    ``groups``: name -> boolean mask over ops (or a (L, n) weight matrix for per-layer columns).
    Results: ``sec[name]`` (H,) or (H, n) seconds; ``energy[name][component]``; ``dram[name]`` bytes;
    ``compute_s`` / ``dram_s`` (time the op's compute and its DRAM traffic would take alone).
    """

    def __init__(self, ops, hw: HardwareArray, tech: Tech, groups: dict[str, np.ndarray]):
        self.sec, self.energy, self.dram, self.compute_s, self.dram_s = {}, {}, {}, {}, {}
        g = np.isin(ops.phase, _GEMM_PHASES + _PRED_GEMM)
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
        full = lambda x: np.broadcast_to(np.asarray(x, dtype=np.float64), (H, W.shape[1]))  # noqa: E731
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


#: (configuration, op) elements per chunk when reducing GEMM costs: bounds memory for large sweeps
_CHUNK = 1 << 18


def _gemm_reduced(ops, sel: np.ndarray, W: np.ndarray, hw: HardwareArray, tech: Tech) -> dict:
    """The GEMM fields the schedule needs, summed over ops with weights ``W`` (L_sel, P) -> (H, P).

    Costs are computed per op in chunks of configurations and only the needed fields are reduced (cheaper
    than reducing every field of :class:`accel.gemm.GemmCost`).
    """
    M, K, N, R = ops.M[sel], ops.K[sel], ops.N[sel], ops.repeat[sel]
    H, P = len(hw), W.shape[1]
    keys = ("total_cycles", "compute_cycles", "dram", "mac", "rf", "interpe", "sram")
    out = {k: np.empty((H, P)) for k in keys}
    step = max(1, _CHUNK // max(1, len(M)))
    for a in range(0, H, step):
        idx = np.arange(a, min(H, a + step))
        c = gemm_cost(M, K, N, R, hw=hw.take(idx) if (a or len(idx) < H) else hw, tech=tech,
                      include_leakage=False)
        out["total_cycles"][idx] = c.total_cycles @ W
        out["compute_cycles"][idx] = c.compute_cycles @ W
        out["dram"][idx] = (c.dram_read_bytes + c.dram_write_bytes) @ W
        for k in ("mac", "rf", "interpe", "sram"):
            out[k][idx] = c.energy_pj[k] @ W
        out.setdefault("_dram_e", np.empty((H, P)))[idx] = c.energy_pj["dram"] @ W
    out["dram_energy"] = out.pop("_dram_e")
    return out


def _add_energy(*parts: dict) -> dict:
    return {k: sum(p[k] for p in parts) for k in ENERGY_KEYS}


def _stash(ops, hw: HardwareArray, n_layers: int, fwd_compute_s, fwd_dram_s):
    """Per layer: off-chip stash bytes (H, n) and the stall they add to the forward (H, n)."""
    stash = np.zeros(n_layers)
    np.add.at(stash, ops.layer[ops.stash_bytes > 0], ops.stash_bytes[ops.stash_bytes > 0])
    cap = (hw.ifmap_kb + hw.filter_kb + hw.ofmap_kb) * 1024.0  # (H,)
    from_end = np.cumsum(stash[::-1])[::-1]  # stash of this layer and every later one
    off = np.where(from_end[None, :] > cap[:, None], stash[None, :], 0.0)  # (H, n)
    bw = hw.bandwidth_gbps[:, None] * 1e9
    idle = np.maximum(0.0, fwd_compute_s - fwd_dram_s)
    fwd_stall = np.maximum(0.0, off / bw - idle)
    return off, fwd_stall


def step_costs(ops, *, pred_train=None, pred_infer=None, hw: Hardware | HardwareArray,
               tech: Tech | None = None) -> StepCosts:
    """Cost of a plain-BP step, an ADA-GP BP-phase step and an ADA-GP GP-phase step of ``ops`` on ``hw``.

    ``pred_train`` / ``pred_infer``: the predictor's op tables for a BP-phase step (with training) and a GP
    step (inference only); both omitted means a free predictor (costs nothing).
    """
    tech = tech or default_tech()
    hwa, single = as_array(hw)
    H = len(hwa)
    n = int(ops.layer.max()) + 1 if len(ops.phase) else 0
    ph = ops.phase
    layer_fwd = _onehot(np.where(np.isin(ph, ("fwd", "fwd_vec")), ops.layer, -1), n)
    # layers whose weight gradient the predictor predicts: GEMM layers with weights of their own (a forward
    # GEMM and a weight update), the same rule as models.predictor's
    predicted = np.zeros(n, dtype=bool)
    predicted[np.intersect1d(ops.layer[ph == "fwd"], ops.layer[ph == "update"])] = True
    if pred_infer is not None and len(pred_infer.phase):
        extra = set(pred_infer.layer[pred_infer.layer >= 0].tolist()) - set(np.flatnonzero(predicted).tolist())
        if extra:
            raise ValueError(f"predictor ops for layers without their own weight update: {sorted(extra)[:5]}")
    upd = ph == "update"
    m = _Costed(ops, hwa, tech, {
        "fwd": layer_fwd,
        "bwd": np.isin(ph, ("igrad", "wgrad", "bwd_vec")),
        "update": upd,
        "update_gp": upd & predicted[np.clip(ops.layer, 0, None)],
    })
    off, fwd_stall = _stash(ops, hwa, n, m.compute_s["fwd"], m.dram_s["fwd"])
    bw = hwa.bandwidth_gbps * 1e9
    off_total = off.sum(axis=1)
    bwd_stall = np.maximum(0.0, off_total / bw - np.maximum(0.0, m.compute_s["bwd"] - m.dram_s["bwd"]))
    stash_energy = {k: np.zeros(H) for k in ENERGY_KEYS}
    stash_energy["dram"] = 2.0 * off_total * tech.dram_pj_per_byte  # written in the forward, read back
    fwd_layers = m.sec["fwd"]  # (H, n), no stash
    leak = np.asarray(leakage_w(hwa, tech), dtype=np.float64) * 1e12  # pJ per second

    def finish(time_s, energy, dram, parts):
        energy = dict(energy)
        energy["leakage"] = energy["leakage"] + leak * time_s
        return StepCost(time_s=time_s, energy_pj=energy, dram_bytes=dram, parts_s=parts)

    # plain BP
    fwd_s = fwd_layers.sum(axis=1)
    stash_s = fwd_stall.sum(axis=1) + bwd_stall
    bp_time = fwd_s + m.sec["bwd"] + m.sec["update"] + stash_s
    fwd_energy = {k: v.sum(axis=1) for k, v in m.energy["fwd"].items()}
    bp_energy = _add_energy(fwd_energy, m.energy["bwd"], m.energy["update"], stash_energy)
    bp_dram = m.dram["fwd"].sum(axis=1) + m.dram["bwd"] + m.dram["update"] + 2.0 * off_total
    zeros = np.zeros(H)
    bp = finish(bp_time, bp_energy, bp_dram, {"forward": fwd_s, "backward": m.sec["bwd"],
                                              "update": m.sec["update"], "predictor": zeros, "stash": stash_s})

    # the predictor's work on an array: per predicted layer (inference) and as a whole (training)
    def pred_work(on: HardwareArray):
        if pred_infer is None or not len(pred_infer.phase):
            return np.zeros((H, n)), zeros, {k: zeros for k in ENERGY_KEYS}, {k: zeros for k in ENERGY_KEYS}, zeros, zeros
        pi = _Costed(pred_infer, on, tech, {"inf": _onehot(pred_infer.layer, n)})
        is_inf = np.isin(pred_train.phase, ("reorg", "pred_fwd"))
        pt = _Costed(pred_train, on, tech, {"inf": _onehot(np.where(is_inf, pred_train.layer, -1), n),
                                            "train": ~is_inf})
        e_inf = {k: v.sum(axis=1) for k, v in pi.energy["inf"].items()}
        e_train = _add_energy({k: v.sum(axis=1) for k, v in pt.energy["inf"].items()}, pt.energy["train"])
        return (pi.sec["inf"], pt.sec["train"], e_inf, e_train, pi.dram["inf"].sum(axis=1),
                pt.dram["inf"].sum(axis=1) + pt.dram["train"])

    # segment k holds the layers after the k-th predicted layer up to and including the (k+1)-th; the
    # predictor's work after the k-th predicted layer overlaps segment k's forward on a dedicated unit
    seg_id = np.cumsum(predicted) - predicted
    n_seg = int(predicted.sum()) + 1
    seg_fwd = fwd_layers @ _onehot(seg_id, n_seg)
    pred_rank = np.where(predicted, np.cumsum(predicted), -1)

    def adagp_steps(on: HardwareArray, overlap: bool):
        inf_layers, train_s, e_inf, e_train, d_inf, d_train = pred_work(on)
        if overlap:
            seg_pred = inf_layers @ _onehot(pred_rank, n_seg)
            fwd_p = seg_fwd[:, 0] + np.maximum(seg_fwd[:, 1:], seg_pred[:, 1:]).sum(axis=1)
            bwd_p = np.maximum(m.sec["bwd"], train_s)
        else:
            fwd_p = fwd_s + inf_layers.sum(axis=1)
            bwd_p = m.sec["bwd"] + train_s
        t_bpp = fwd_p + bwd_p + m.sec["update"] + stash_s
        abp = finish(t_bpp, _add_energy(bp_energy, e_train), bp_dram + d_train,
                     {"forward": fwd_s, "backward": m.sec["bwd"], "update": m.sec["update"],
                      "predictor": t_bpp - bp_time, "stash": stash_s})
        t_gp = fwd_p + m.sec["update_gp"]
        gp = finish(t_gp, _add_energy(fwd_energy, m.energy["update_gp"], e_inf),
                    m.dram["fwd"].sum(axis=1) + m.dram["update_gp"] + d_inf,
                    {"forward": fwd_s, "backward": zeros, "update": m.sec["update_gp"],
                     "predictor": fwd_p - fwd_s, "stash": zeros})
        return abp, gp

    # time-shared on the main array, in series; with a dedicated unit, overlapped on it -- or, when the unit
    # is too small for that to pay, time-shared after all (the scheduler takes the faster, per step kind)
    abp, gp = adagp_steps(hwa, overlap=False)
    dedicated = hwa.pred_rows > 0
    if dedicated.any():
        abp_u, gp_u = adagp_steps(hwa.predictor_unit(), overlap=True)
        abp = _pick(dedicated & (abp_u.time_s <= abp.time_s), abp_u, abp)
        gp = _pick(dedicated & (gp_u.time_s <= gp.time_s), gp_u, gp)
    out = StepCosts(bp=bp, adagp_bp=abp, adagp_gp=gp)
    return _squeeze(out) if single else out


def _pick(mask: np.ndarray, a: StepCost, b: StepCost) -> StepCost:
    """Per configuration, ``a`` where ``mask`` else ``b``."""
    w = lambda x, y: np.where(mask, x, y)  # noqa: E731
    return StepCost(time_s=w(a.time_s, b.time_s), energy_pj={k: w(a.energy_pj[k], b.energy_pj[k]) for k in ENERGY_KEYS},
                    dram_bytes=w(a.dram_bytes, b.dram_bytes), parts_s={k: w(a.parts_s[k], b.parts_s[k]) for k in a.parts_s})


def _squeeze(s: StepCosts) -> StepCosts:
    def sq(c: StepCost) -> StepCost:
        f = lambda a: float(np.asarray(a).reshape(-1)[0])  # noqa: E731
        return StepCost(time_s=f(c.time_s), energy_pj={k: f(v) for k, v in c.energy_pj.items()},
                        dram_bytes=f(c.dram_bytes), parts_s={k: f(v) for k, v in c.parts_s.items()})
    return StepCosts(bp=sq(s.bp), adagp_bp=sq(s.adagp_bp), adagp_gp=sq(s.adagp_gp))


def job_cost(steps: StepCosts, *, n_steps: int, warmup_frac: float = 0.0, gp_fraction: float = 0.0,
             scheme: str = "adagp") -> JobCost:
    """A training job of ``n_steps``: for ``scheme="bp"`` every step is plain BP; for ``"adagp"`` the
    first ``round(warmup_frac * n_steps)`` steps are BP-phase steps (the predictor trains), then
    ``round(gp_fraction * rest)`` of the rest are GP steps and the others BP-phase steps."""
    if not 0.0 <= warmup_frac <= 1.0 or not 0.0 <= gp_fraction <= 1.0:
        raise ValueError("warmup_frac and gp_fraction must be in [0, 1]")
    if scheme == "bp":
        n_bp, n_gp, bp_step = n_steps, 0, steps.bp
    elif scheme == "adagp":
        warm = round(warmup_frac * n_steps)
        n_gp = round(gp_fraction * (n_steps - warm))
        n_bp, bp_step = n_steps - n_gp, steps.adagp_bp
    else:
        raise ValueError(f"scheme must be bp or adagp, got {scheme!r}")
    gp = steps.adagp_gp
    time = n_bp * np.asarray(bp_step.time_s) + n_gp * np.asarray(gp.time_s)
    energy = {k: (n_bp * np.asarray(bp_step.energy_pj[k]) + n_gp * np.asarray(gp.energy_pj[k])) * 1e-12
              for k in ENERGY_KEYS}
    return JobCost(time_s=time, energy_j=energy, steps_bp=n_bp, steps_gp=n_gp)
