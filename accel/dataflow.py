"""The three systolic dataflows, one class each: mapping, compute cycles, SRAM counters, PE-level traffic.

A dataflow maps the GEMM dimensions of ``A[M x K] @ B[K x N]`` to the array's spatial rows ``Sr``, spatial
columns ``Sc`` and the temporal extent ``T``, and says which operand stays in the PEs (``stationary``),
which streams in along the rows (``row_op``) and which moves along the columns (``col_op``):

======== ============ ============ ============ ============
dataflow (Sr, Sc, T)  stationary   row_op       col_op
======== ============ ============ ============ ============
OS       (M, N, K)    ofmap        ifmap        filter
WS       (K, N, M)    filter       ifmap        ofmap (psums)
IS       (K, M, N)    ifmap        filter       ofmap (psums)
======== ============ ============ ============ ============

Each class also counts what the PEs do per op (register-file and inter-PE bytes), following the Eyeriss
accounting (Chen et al., ISCA 2016) that the technology table's costs are normalized under: every MAC
reads its two operands and its partial sum and writes the new partial sum, and each access is charged at
the level that serves it -- the PE's own register file, a neighbouring PE, or the global buffer (the SRAM,
counted by :meth:`Dataflow.sram_accesses`). The derivations are in ``docs/accelerator.md``.

Adding a dataflow means adding one class here (its ``name``, ``description``, and ``code``: its position in
:data:`DATAFLOWS`) and registering it in :data:`DATAFLOWS` (the instances, in code order; checked at import
by :func:`check_registry`); :data:`DATAFLOW_NAMES` (their names, in the same order) is derived from it. The rest of the
model (``accel.gemm``, ``accel.area``, ``accel.hardware``) reads only this registry.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Dataflow", "OutputStationary", "WeightStationary", "InputStationary", "DATAFLOWS",
           "DATAFLOW_NAMES", "by_code", "by_name", "check_registry"]


def _edge_hops(S, F, R):
    """Sum over the ``F`` folds of ``S`` (blocks of ``R``, the last partial) of ``e*(e-1)/2``: the hops a
    column of ``e`` values makes when it shifts into (or out of) an ``e``-deep column of PEs."""
    last = S - (F - 1.0) * R
    return (F - 1.0) * R * (R - 1.0) / 2.0 + last * (last - 1.0) / 2.0


class Dataflow:
    """One dataflow. Arrays are broadcastable numpy arrays: op columns (L,) and hardware columns (h, 1)."""

    name: str = ""
    code: int = -1
    description: str = ""
    #: which operand stays in the PEs, which streams along rows, which along columns
    stationary: str = ""
    row_op: str = ""
    col_op: str = ""
    #: GEMM dimension ("M", "K" or "N") on the spatial rows, spatial columns and time
    dims: tuple[str, str, str] = ("", "", "")
    #: extra cycles per fold besides T: R + C - 2 (OS) or 2R + C - 2 (stationary preload, WS/IS)
    preload: bool = False

    def mapping(self, M, K, N):
        """``(Sr, Sc, T)``: the spatial rows, spatial columns and temporal extent of the op."""
        d = {"M": M, "K": K, "N": N}
        return tuple(d[x] for x in self.dims)

    def compute_cycles(self, Sr, Sc, T, R, C, repeat):
        """SCALE-Sim 3.0.0's "Total Cycles": ``repeat * (F * (base + T) - 1)`` with ``F = Fr * Fc`` folds and
        ``base = R + C - 2`` (OS) or ``2R + C - 2`` (WS, IS), floored at one MAC per cycle per fold."""
        F = np.ceil(Sr / R) * np.ceil(Sc / C)
        base = (2.0 * R if self.preload else R) + C - 2.0
        # the max() only matters for a 1x1 OS array, where F*(T+0)-1 would be one cycle fewer than its MACs
        return np.maximum(F * (base + T) - 1.0, F * T) * repeat

    def sram_accesses(self, Sr, Sc, T, Fr, Fc):
        """Array-side SRAM reads and writes per operand (words, per product); equal to SCALE-Sim's counters
        (its OS ofmap-write quirk aside)."""
        reads = {self.row_op: Sr * T * Fc}
        writes = {op: 0.0 for op in (self.stationary, self.row_op, self.col_op)}
        reads.update(self._sram_rest(Sr, Sc, T, Fr))
        writes.update(self._sram_writes(Sr, Sc, T, Fr))
        return reads, writes

    def pe_traffic(self, Sr, Sc, T, R, C, Fr, Fc, w, a):
        """``(rf_bytes, interpe_bytes)`` per product: register-file bytes and bytes moved between PEs."""
        raise NotImplementedError

    def steady_pe_bytes(self, w, a):
        """``(rf_bytes, interpe_bytes)`` per MAC far from the array's edges (for peak power)."""
        raise NotImplementedError

    # -- per-dataflow pieces --------------------------------------------------------------------------
    def _sram_rest(self, Sr, Sc, T, Fr):
        raise NotImplementedError

    def _sram_writes(self, Sr, Sc, T, Fr):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<dataflow {self.name}>"


class OutputStationary(Dataflow):
    """OS: each PE accumulates one output; A streams in from the left, B from the top, both forwarded.

    Per MAC: the partial sum is read from and written to the PE's register (``acc_bytes`` each; the first
    MAC of an output only writes); A and B each arrive from a neighbour (one inter-PE move of ``word_bytes``)
    except in the edge PEs, which the SRAM feeds. The finished outputs shift out down the columns.
    """

    name, code = "os", 0
    description = "output stationary"
    stationary, row_op, col_op = "ofmap", "ifmap", "filter"
    dims = ("M", "N", "K")
    preload = False

    def _sram_rest(self, Sr, Sc, T, Fr):
        return {"filter": Sc * T * Fr, "ofmap": 0.0 * Sr}

    def _sram_writes(self, Sr, Sc, T, Fr):
        return {"ofmap": Sr * Sc + 0.0 * Fr}

    def pe_traffic(self, Sr, Sc, T, R, C, Fr, Fc, w, a):
        macs = Sr * Sc * T
        rf = a * (2.0 * macs - Sr * Sc)
        moves_a = Sr * T * (Sc - Fc)          # A: every MAC but the edge column's gets it from a neighbour
        moves_b = Sc * T * (Sr - Fr)          # B: likewise from the PE above
        drain = Sc * _edge_hops(Sr, Fr, R)    # outputs shifting down and out of their columns
        return rf, w * (moves_a + moves_b + drain)

    def steady_pe_bytes(self, w, a):
        return 2.0 * a, 2.0 * w


class _PsumFlowing(Dataflow):
    """WS and IS: a stationary operand in the PEs, the other input along rows, partial sums down columns.

    Per MAC: the stationary value is read from the PE's register (``word_bytes``) and the new partial sum
    written to it (``acc_bytes``); the streamed input and the incoming partial sum each arrive from a
    neighbour (``word_bytes`` and ``acc_bytes``), except at the edges (the SRAM feeds the first column; the
    top row starts from zero or from a partial sum read back from the SRAM). Before each fold the
    stationary tile shifts down into place (one register write per value, ``e*(e-1)/2`` hops per column).
    """

    preload = True

    def _sram_rest(self, Sr, Sc, T, Fr):
        return {self.stationary: Sr * Sc + 0.0 * Fr, self.col_op: Sc * T * (Fr - 1.0)}

    def _sram_writes(self, Sr, Sc, T, Fr):
        return {self.col_op: Sc * T * Fr}

    def pe_traffic(self, Sr, Sc, T, R, C, Fr, Fc, w, a):
        macs = Sr * Sc * T
        rf = w * (macs + Sr * Sc) + a * macs
        moves_in = Sr * T * (Sc - Fc)         # the streamed input, from the left neighbour
        moves_psum = Sc * T * (Sr - Fr)       # partial sums, from the PE above
        preload = Sc * _edge_hops(Sr, Fr, R)  # the stationary tile shifting into place
        return rf, w * (moves_in + preload) + a * moves_psum

    def steady_pe_bytes(self, w, a):
        return w + a, w + a


class WeightStationary(_PsumFlowing):
    __doc__ = "WS: each PE holds one weight of B; A streams along the rows. " + _PsumFlowing.__doc__
    name, code = "ws", 1
    description = "weight stationary"
    stationary, row_op, col_op = "filter", "ifmap", "ofmap"
    dims = ("K", "N", "M")


class InputStationary(_PsumFlowing):
    __doc__ = "IS: each PE holds one value of A; B streams along the rows. " + _PsumFlowing.__doc__
    name, code = "is", 2
    description = "input stationary"
    stationary, row_op, col_op = "ifmap", "filter", "ofmap"
    dims = ("K", "M", "N")


#: the registry: one instance per dataflow, in code order (a HardwareArray stores a dataflow as its index here)
DATAFLOWS: tuple[Dataflow, ...] = (OutputStationary(), WeightStationary(), InputStationary())
#: the registered dataflows' names, in code order (a Hardware stores a dataflow as its name)
DATAFLOW_NAMES: tuple[str, ...] = tuple(d.name for d in DATAFLOWS)


def check_registry(dataflows: tuple[Dataflow, ...]) -> None:
    """Refuse a registry a new dataflow got wrong, naming the class and the fix (checked at import)."""
    seen: dict[str, str] = {}
    for i, d in enumerate(dataflows):
        cls = type(d).__name__
        if not isinstance(getattr(d, "name", None), str) or not d.name:
            raise ValueError(f"dataflow {cls}: give it a name (the study files' and --dataflow's value)")
        if d.name in seen:
            raise ValueError(f"dataflow {cls}: name {d.name!r} is {seen[d.name]}'s already; names must be unique")
        seen[d.name] = cls
        if getattr(d, "code", None) != i:
            raise ValueError(f"dataflow {cls}: code must be {i}, its position in DATAFLOWS (got "
                             f"{getattr(d, 'code', None)!r}): a HardwareArray stores a dataflow as that index")


check_registry(DATAFLOWS)


def by_code(code: int) -> Dataflow:
    """The dataflow stored as ``code``; any other code raises ``ValueError``."""
    c = int(code)
    if not 0 <= c < len(DATAFLOWS):
        raise ValueError(f"dataflow: unknown code {c}; allowed: " + ", ".join(
            f"{i} ({d.name})" for i, d in enumerate(DATAFLOWS)))
    return DATAFLOWS[c]


def by_name(name: str) -> Dataflow:
    """The dataflow called ``name``; any other name raises ``ValueError``."""
    for d in DATAFLOWS:
        if d.name == name:
            return d
    raise ValueError(f"dataflow: must be one of {', '.join(DATAFLOW_NAMES)}; got {name!r}")
