"""Vector ops (weight update, normalization, pooling, activation, element-wise, col2im) on the vector unit.

A vector op touches ``elems`` elements (reads plus writes, as :class:`models.graph.TrainingOps` counts them
in ``vec_elems``). Traffic assumption: every element streams from or to DRAM (``dram_fraction = 1``; a
caller that fuses an op on chip passes a smaller fraction), passing through one SRAM buffer (the ofmap
buffer, next to the vector unit) once on its way. The op is bandwidth-bound with double buffering::

    compute_cycles = ceil(elems / vector_width)
    total_cycles   = max(compute_cycles, elems * elem_bytes * dram_fraction / (bandwidth / clock))
    stall_cycles   = total_cycles - compute_cycles

Energy (pJ): ``alu = elems * vector_elem_pj``; ``sram = elems * elem_bytes * sram_pj_per_byte(ofmap half)``
(written by the vector unit and read on its way to DRAM, or written from DRAM and read by the unit: two
accesses per element that crosses DRAM, one per element otherwise, i.e. ``(1 + dram_fraction)`` per element);
``dram = elems * elem_bytes * dram_fraction * dram_pj_per_byte``; ``leakage`` as for GEMMs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accel._blas import one_blas_thread
from accel.area import leakage_w
from accel.hardware import Hardware, HardwareArray, as_array
from accel.tech import Tech, default_tech

__all__ = ["VectorCost", "vector_cost"]


@dataclass(frozen=True)
class VectorCost:
    """Costs of vector ops; shapes as for :class:`accel.gemm.GemmCost`. Units: cycles, bytes, pJ, seconds."""

    compute_cycles: np.ndarray
    stall_cycles: np.ndarray
    total_cycles: np.ndarray
    elems: np.ndarray
    dram_bytes: np.ndarray
    sram_bytes: np.ndarray
    #: keys alu, sram, dram, leakage, total
    energy_pj: dict
    time_s: np.ndarray


@one_blas_thread
def vector_cost(elems, *, hw: Hardware | HardwareArray, tech: Tech | None = None, elem_bytes=None,
                dram_fraction=1.0, sum_over=None, include_leakage: bool = True) -> VectorCost:
    """Cost vector ops touching ``elems`` elements each (array (L,)) on ``hw``.

    ``elem_bytes``: bytes per element (default: the hardware's ``word_bytes``; a scalar or an array (L,),
    e.g. 4 for fp32 optimizer state). ``dram_fraction``: fraction of the elements' bytes that cross DRAM
    (scalar or (L,), in [0, 1]). ``sum_over`` and ``include_leakage`` as in :func:`accel.gemm.gemm_cost`.
    """
    e = np.atleast_1d(np.asarray(elems, dtype=np.float64))
    if e.ndim != 1 or np.any(~np.isfinite(e)) or np.any(e < 0):
        raise ValueError("elems: must be a 1-D array of element counts >= 0")
    L = e.shape[0]
    frac = np.broadcast_to(np.asarray(dram_fraction, dtype=np.float64), (L,))
    if np.any((frac < 0) | (frac > 1)):
        raise ValueError("dram_fraction: must be in [0, 1]")
    h, single = as_array(hw)
    tech = tech or default_tech()
    col = lambda a: np.asarray(a, dtype=np.float64)[:, None]  # noqa: E731 - local shorthand
    if elem_bytes is None:
        eb = col(h.word_bytes)
    else:
        eb = np.broadcast_to(np.asarray(elem_bytes, dtype=np.float64), (L,))
        if np.any(eb <= 0):
            raise ValueError("elem_bytes: must be > 0")
    nbytes = e * eb                       # (H, L) or (L,)
    dram_b = nbytes * frac
    compute = np.ceil(e / col(h.vector_width))
    bpc = col(h.bandwidth_gbps) / col(h.clock_ghz)
    total = np.maximum(compute, dram_b / bpc)
    time_s = total / (col(h.clock_ghz) * 1e9)
    sram_b = nbytes * (1.0 + frac)
    energy = {
        "alu": e * tech.vector_elem_pj,
        "sram": sram_b * tech.sram_pj_per_byte(col(h.ofmap_kb) / 2.0),
        "dram": dram_b * tech.dram_pj_per_byte,
        "leakage": (col(leakage_w(h, tech)) * 1e12 * time_s) if include_leakage else 0.0 * total,
    }
    shape = total.shape
    energy = {k: np.broadcast_to(v, shape) for k, v in energy.items()}
    energy["total"] = energy["alu"] + energy["sram"] + energy["dram"] + energy["leakage"]
    res = dict(compute_cycles=np.broadcast_to(compute, shape), stall_cycles=total - compute, total_cycles=total,
               elems=np.broadcast_to(e, shape), dram_bytes=np.broadcast_to(dram_b, shape),
               sram_bytes=np.broadcast_to(sram_b, shape), time_s=time_s)
    if sum_over is not None:
        W = np.asarray(sum_over, dtype=np.float64)
        if W.shape[0] != L or W.ndim not in (1, 2):
            raise ValueError(f"sum_over: must have shape (L,) or (L, P) with L = {L} ops, got {W.shape}")
        res = {k: v @ W for k, v in res.items()}
        energy = {k: v @ W for k, v in energy.items()}
    else:
        res = {k: np.array(v) for k, v in res.items()}
        energy = {k: np.array(v) for k, v in energy.items()}
    if single:
        res = {k: v[0] for k, v in res.items()}
        energy = {k: v[0] for k, v in energy.items()}
    return VectorCost(energy_pj=energy, **res)
