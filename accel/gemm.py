"""Cost of GEMM ops on a systolic array: cycles, SRAM and DRAM traffic, stalls, energy (vectorized numpy).

An op is ``repeat`` independent products ``A[M x K] @ B[K x N]`` (SCALE-Sim's orientation: A is the
"ifmap" operand, B the "filter", the M x N result the "ofmap"). Inputs are arrays over ops, shape ``(L,)``,
and a :class:`~accel.hardware.Hardware` (results of shape ``(L,)``) or a
:class:`~accel.hardware.HardwareArray` (results of shape ``(H, L)``). With ``sum_over`` (weights of shape
``(L,)`` or ``(L, P)``) every field is reduced over ops to ``(H,)`` / ``(H, P)`` inside the computation,
which keeps memory small for large sweeps.

The equations are documented in ``docs/accelerator.md``; in short, with ``(Sr, Sc, T)`` the mapping's
spatial rows, spatial columns and temporal extent (OS: ``(M, N, K)``, WS: ``(K, N, M)``, IS: ``(K, M, N)``)
and ``Fr = ceil(Sr/R)``, ``Fc = ceil(Sc/C)``:

* compute cycles = ``repeat * (Fr*Fc*(R + C + T - 2) - 1)`` (OS) or ``repeat * (Fr*Fc*(2R + C + T - 2) - 1)``
  (WS, IS): SCALE-Sim 3.0.0's "Total Cycles", cycle-exact (tests/data/scalesim);
* array-side SRAM accesses per operand follow the mapping (and equal SCALE-Sim's counters);
* DRAM bytes: unique data, plus re-fetches (or partial-sum spills) when a working set does not fit its
  buffer half, for the better of the two fold loop orders;
* time = fill + max(compute, remaining DRAM bytes / bandwidth) + drain, with double buffering.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel.hardware import Hardware, HardwareArray, as_array
from accel.tech import Tech, default_tech

__all__ = ["GemmCost", "gemm_cost", "OPERANDS", "ENERGY_COMPONENTS"]

OPERANDS = ("ifmap", "filter", "ofmap")
ENERGY_COMPONENTS = ("mac", "rf", "interpe", "sram", "dram", "leakage")

#: target number of (configuration, op) elements per block: blocks stay cache-sized
_BLOCK_ELEMS = 1 << 16


@dataclass(frozen=True)
class GemmCost:
    """Costs of GEMM ops. Every array has shape ``(L,)`` for one Hardware, ``(H, L)`` for a HardwareArray,
    or the reduced shape when ``sum_over`` was given.

    Units: cycles of the accelerator clock (floats: DRAM-bound times are fractional); accesses in words
    (operand words of ``word_bytes``; the ofmap's partial-sum accesses in WS/IS in accumulator words of
    ``acc_bytes``); bytes; pJ; seconds.
    """

    compute_cycles: np.ndarray
    stall_cycles: np.ndarray
    total_cycles: np.ndarray
    utilization: np.ndarray
    macs: np.ndarray
    #: array-side SRAM reads per operand (words), keys ifmap, filter, ofmap
    sram_reads: dict
    #: array-side SRAM writes per operand (words), keys ifmap, filter, ofmap (only the ofmap is written)
    sram_writes: dict
    #: DRAM bytes per operand (reads for ifmap/filter; writes + partial-sum reads for the ofmap)
    dram_bytes: dict
    dram_read_bytes: np.ndarray
    dram_write_bytes: np.ndarray
    #: energy per component in pJ, keys mac, rf, interpe, sram, dram, leakage, total
    energy_pj: dict
    time_s: np.ndarray

    @property
    def energy_total_pj(self) -> np.ndarray:
        return self.energy_pj["total"]


_ARRAY_FIELDS = ("compute_cycles", "stall_cycles", "total_cycles", "macs", "dram_read_bytes",
                 "dram_write_bytes", "time_s")


def _as_ops(M, K, N, repeat):
    arrs = [np.atleast_1d(np.asarray(x)) for x in (M, K, N, repeat)]
    arrs = np.broadcast_arrays(*arrs)
    out = []
    for name, a in zip(("M", "K", "N", "repeat"), arrs):
        if a.ndim != 1:
            raise ValueError(f"{name}: must be a scalar or a 1-D array over ops, got shape {a.shape}")
        if a.dtype.kind not in "iuf":
            raise ValueError(f"{name}: must be numeric, got dtype {a.dtype}")
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)) or np.any(a < 1) or np.any(a != np.round(a)):
            bad = ~np.isfinite(a) | (a < 1) | (a != np.round(a))
            raise ValueError(f"{name}: must be integers >= 1, got {a[bad][0]!r} at op {int(np.flatnonzero(bad)[0])}")
        out.append(a)
    return out



def _block(df: int, M, K, N, rep, hw: HardwareArray, idx: np.ndarray, tech: Tech, leakage_w, include_leakage):
    """All fields for configurations ``idx`` (all of dataflow ``df``) over all ops, as (h, L) arrays."""
    col = lambda a: a[idx].astype(np.float64)[:, None]  # noqa: E731
    R, C = col(hw.rows), col(hw.cols)
    w, a = col(hw.word_bytes), col(hw.acc_bytes)
    half = {op: col(getattr(hw, f"{op}_kb")) * 512.0 for op in OPERANDS}  # bytes in one half
    if df == 0:
        Sr, Sc, T = M, N, K
        roles = ("ofmap", "ifmap", "filter")  # stationary S, row-streamed Rop, column Cop
    elif df == 1:
        Sr, Sc, T = K, N, M
        roles = ("filter", "ifmap", "ofmap")
    else:
        Sr, Sc, T = K, M, N
        roles = ("ifmap", "filter", "ofmap")
    s_op, r_op, c_op = roles
    cap_s, cap_r, cap_c = half[s_op], half[r_op], half[c_op]

    Fr = np.ceil(Sr / R)
    Fc = np.ceil(Sc / C)
    F = Fr * Fc
    base = R + C - 2.0 if df == 0 else 2.0 * R + C - 2.0
    # SCALE-Sim's count; the max() only matters for a 1x1 OS array, where F*(T+0)-1 would be one cycle
    # fewer than the MACs it performs (the only deviation from SCALE-Sim, documented in docs/accelerator.md)
    compute = np.maximum(F * (base + T) - 1.0, F * T) * rep
    macs = M * K * N * rep  # (L,)

    Re = np.minimum(R, Sr)
    Ce = np.minimum(C, Sc)
    SrT, ScT, SrSc = Sr * T, Sc * T, Sr * Sc  # (L,)

    # ---- array-side SRAM accesses (words, per op including repeat) -----------------------------
    reads = {}
    writes = {op: 0.0 for op in OPERANDS}
    reads[r_op] = SrT * Fc * rep
    if df == 0:
        reads[c_op] = ScT * Fr * rep
        reads[s_op] = 0.0
        writes[s_op] = np.broadcast_to(SrSc * rep, Fr.shape)
    else:
        reads[s_op] = np.broadcast_to(SrSc * rep, Fr.shape)
        writes[c_op] = ScT * Fr * rep          # partial sums (accumulator words)
        reads[c_op] = ScT * (Fr - 1.0) * rep   # partial sums read back to accumulate

    # ---- DRAM bytes (per repeat), best of two fold loop orders ------------------------------
    # order A: column folds outer, row folds inner (SCALE-Sim's order); order B: the reverse.
    rop_a = np.where(SrT * w <= cap_r, 1.0, Fc)
    rop_b = np.where(Re * T * w <= cap_r, 1.0, Fc)
    if df == 0:
        cop_a = np.where(Ce * T * w <= cap_c, 1.0, Fr)
        cop_b = np.where(ScT * w <= cap_c, 1.0, Fr)
        traffic_a = SrT * rop_a + ScT * cop_a
        traffic_b = SrT * rop_b + ScT * cop_b
        use_b = traffic_b < traffic_a
        rop_bytes = SrT * w * np.where(use_b, rop_b, rop_a)
        cop_in = ScT * w * np.where(use_b, cop_b, cop_a)  # the column operand is an input here
        s_bytes = SrSc * w                                 # outputs written once
        d_read = {r_op: rop_bytes, c_op: cop_in, s_op: 0.0}
        d_write = {s_op: s_bytes}
    else:
        spill_a = Ce * T * a > cap_c
        spill_b = ScT * a > cap_c
        psum = 2.0 * a * (Fr - 1.0)  # bytes per output element for a spill: write + read back per extra fold
        s_once = SrSc * w
        # bytes that differ between orders (+ ScT*w, the final outputs, in every order)
        traffic_a = SrT * w * rop_a + ScT * np.where(spill_a, psum, 0.0) + s_once
        traffic_b = SrT * w * rop_b + ScT * np.where(spill_b, psum, 0.0) + s_once
        # order C: the temporal dimension in chunks of t (outer), all folds inner. t is the largest chunk
        # whose row-operand slice (Sr x t) and output slice (Sc x t accumulators) fit their buffer halves;
        # streamed data then moves once, and the stationary operand is re-fetched per chunk unless it fits.
        t = np.minimum(np.minimum(np.floor(cap_r / (Sr * w)), np.floor(cap_c / (Sc * a))), T)
        n_chunks = np.ceil(T / np.maximum(t, 1.0))
        s_fac_c = np.where(s_once <= cap_s, 1.0, n_chunks)
        traffic_c = np.where(t >= 1.0, SrT * w + s_once * s_fac_c, np.inf)
        use_b = traffic_b < traffic_a
        best_ab = np.where(use_b, traffic_b, traffic_a)
        use_c = traffic_c < best_ab
        rop_bytes = SrT * w * np.where(use_c, 1.0, np.where(use_b, rop_b, rop_a))
        spill = np.where(use_c, False, np.where(use_b, spill_b, spill_a))
        cop_rd = ScT * a * (Fr - 1.0) * spill
        cop_wr = ScT * w + cop_rd
        s_bytes = s_once * np.where(use_c, s_fac_c, 1.0)
        d_read = {r_op: rop_bytes, s_op: s_bytes, c_op: cop_rd}
        d_write = {c_op: cop_wr}
    dram = {op: (d_read.get(op, 0.0) + d_write.get(op, 0.0)) * rep for op in OPERANDS}
    dram_read = sum(np.asarray(d_read[op]) for op in d_read) * rep
    dram_write = sum(np.asarray(d_write[op]) for op in d_write) * rep
    dram_total = dram_read + dram_write

    # ---- time: first fill + overlapped middle + last drain ------------------------------------
    if df == 0:
        fill = np.minimum(Re * T * w, cap_r) + np.minimum(Ce * T * w, cap_c)
        drain = Re * Ce * w
    else:
        fill = np.minimum(Re * Ce * w, cap_s) + np.minimum(Re * T * w, cap_r)
        drain = np.minimum(Re, T) * Ce * w
    bpc = col(hw.bandwidth_gbps) / col(hw.clock_ghz)  # bytes per cycle
    edge = fill + drain
    total = edge / bpc + np.maximum(compute, np.maximum(dram_total - edge, 0.0) / bpc)
    stall = total - compute
    clock_hz = col(hw.clock_ghz) * 1e9
    time_s = total / clock_hz

    # ---- energy (pJ) ----------------------------------------------------------------------------
    e_byte = {op: tech.sram_pj_per_byte(half[op] / 1024.0) for op in OPERANDS}
    sram_e = 0.0
    for op in OPERANDS:
        wb = a if (op == c_op and df != 0) else w  # partial sums are accumulator words
        array_bytes = (np.asarray(reads[op]) + np.asarray(writes[op])) * wb
        sram_e = sram_e + (array_bytes + dram[op]) * e_byte[op]
    word_scale = w / 2.0
    energy = {
        "mac": macs * tech.mac_pj,
        "rf": macs * (tech.rf_accesses_per_mac * tech.rf_pj) * word_scale,
        "interpe": macs * (tech.interpe_moves_per_mac * tech.interpe_pj) * word_scale,
        "sram": sram_e,
        "dram": dram_total * tech.dram_pj_per_byte,
        "leakage": (leakage_w[idx][:, None] * 1e12) * time_s if include_leakage else 0.0 * total,
    }
    shape = total.shape
    return dict(
        compute_cycles=compute, stall_cycles=stall, total_cycles=total, macs=np.broadcast_to(macs, shape),
        dram_read_bytes=np.broadcast_to(dram_read, shape), dram_write_bytes=np.broadcast_to(dram_write, shape),
        time_s=time_s,
        sram_reads={op: np.broadcast_to(reads[op], shape) for op in OPERANDS},
        sram_writes={op: np.broadcast_to(writes[op], shape) for op in OPERANDS},
        dram_bytes={op: np.broadcast_to(dram[op], shape) for op in OPERANDS},
        energy_pj={k: np.broadcast_to(v, shape) for k, v in energy.items()},
    )


def gemm_cost(M, K, N, repeat=1, *, hw: Hardware | HardwareArray, tech: Tech | None = None,
              sum_over=None, include_leakage: bool = True) -> GemmCost:
    """Cost ``repeat`` x ``A[M x K] @ B[K x N]`` for every op (arrays of shape (L,)) on ``hw``.

    ``hw``: a Hardware (results shape (L,)) or a HardwareArray of H configurations (results (H, L)); mixed
    dataflows are fine. ``tech``: technology table (default: the packaged one). ``sum_over``: optional
    weights over ops, shape (L,) or (L, P): every field is returned as ``field @ sum_over`` (e.g. a 0/1 mask
    per phase), shape (H,) / (H, P) (or () / (P,) for one Hardware); ``utilization`` is then recomputed as
    reduced MACs / (R*C*reduced total cycles). ``include_leakage``: add the whole chip's leakage over the
    op's time (turn off when the caller charges leakage over the wall time of a schedule itself).
    """
    M, K, N, rep = _as_ops(M, K, N, repeat)
    hwa, single = as_array(hw)
    tech = tech or default_tech()
    from accel.area import leakage_w  # local: area imports hardware/tech only
    leak = np.asarray(leakage_w(hwa, tech), dtype=np.float64)
    L, H = M.shape[0], len(hwa)
    W = None
    if sum_over is not None:
        W = np.asarray(sum_over, dtype=np.float64)
        if W.shape[0] != L or W.ndim not in (1, 2):
            raise ValueError(f"sum_over: must have shape (L,) or (L, P) with L = {L} ops, got {W.shape}")
    out_shape = (H, L) if W is None else (H,) + W.shape[1:]
    out = _Collector(out_shape)
    rows_per_block = max(1, _BLOCK_ELEMS // max(L, 1))
    for df in range(3):
        members = np.flatnonzero(hwa.dataflow == df)
        for s in range(0, members.size, rows_per_block):
            idx = members[s:s + rows_per_block]
            blk = _block(df, M, K, N, rep, hwa, idx, tech, leak, include_leakage)
            out.put(idx, blk, W)
    res = out.result()
    R = hwa.rows.astype(np.float64).reshape((H,) + (1,) * (len(out_shape) - 1))
    C = hwa.cols.astype(np.float64).reshape(R.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        util = np.where(res["total_cycles"] > 0, res["macs"] / (R * C * res["total_cycles"]), 0.0)
    energy = res["energy_pj"]
    energy["total"] = sum(energy[k] for k in ENERGY_COMPONENTS)
    res["energy_pj"] = energy
    res["utilization"] = util
    if single:
        res = _squeeze(res)
    return GemmCost(**res)


class _Collector:
    """Gathers per-block results into full (or reduced) output arrays."""

    def __init__(self, shape):
        self.shape = shape
        self.data: dict = {}

    def _arr(self, key, sub=None):
        d = self.data if sub is None else self.data.setdefault(sub, {})
        if key not in d:
            d[key] = np.zeros(self.shape)
        return d[key]

    def put(self, idx, blk, W):
        for k, v in blk.items():
            if isinstance(v, dict):
                for kk, vv in v.items():
                    self._arr(kk, k)[idx] = vv if W is None else vv @ W
            else:
                self._arr(k)[idx] = v if W is None else v @ W

    def result(self):
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.data.items()}


def _squeeze(res):
    out = {}
    for k, v in res.items():
        out[k] = {kk: vv[0] for kk, vv in v.items()} if isinstance(v, dict) else v[0]
    return out
