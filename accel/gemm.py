"""Cost of GEMM ops on a systolic array: cycles, SRAM and DRAM traffic, stalls, energy (vectorized numpy).

An op is ``repeat`` independent products ``A[M x K] @ B[K x N]`` (SCALE-Sim's orientation: A is the
"ifmap" operand, B the "filter", the M x N result the "ofmap"). Inputs are arrays over ops, shape ``(L,)``,
and a :class:`~accel.hardware.Hardware` (results of shape ``(L,)``) or a
:class:`~accel.hardware.HardwareArray` (results of shape ``(H, L)``). With ``sum_over`` (weights of shape
``(L,)`` or ``(L, P)``) every field is reduced over ops to ``(H,)`` / ``(H, P)`` inside the computation,
which keeps memory small for large sweeps.

A convolution is costed in its im2col GEMM view for the array (cycles, array-side SRAM accesses), but its
DRAM traffic is that of the raw input: pass ``im2col`` (an :class:`Im2col`, or an op table's geometry via
:func:`op_im2col`) and the A operand is fetched as input rows and columns (the halo that kernel and stride
imply), the windows being formed on chip.

The equations are documented in ``docs/accelerator.md``; in short, the dataflow (:mod:`accel.dataflow`, one
class each) gives the mapping ``(Sr, Sc, T)``, SCALE-Sim-exact compute cycles and array-side SRAM counters,
and the register-file and inter-PE bytes; this module adds DRAM traffic (unique data, plus re-fetches or
partial-sum spills only when the tile that must stay resident does not fit its buffer half, for the best
of three loop orders), time (fill + max(compute, DRAM) + drain, double-buffered) and energy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from accel._blas import one_blas_thread
from accel.dataflow import DATAFLOWS, Dataflow
from accel.hardware import Hardware, HardwareArray, as_array, distinct_rows
from accel.tech import Tech, default_tech

__all__ = ["GemmCost", "gemm_cost", "Im2col", "op_im2col", "OPERANDS", "ENERGY_COMPONENTS", "IM2COL_ROLES"]

OPERANDS = ("ifmap", "filter", "ofmap")
ENERGY_COMPONENTS = ("mac", "rf", "interpe", "sram", "dram", "leakage")

#: what the A operand of an op is: a plain matrix, the im2col matrix of a convolution's input (M = output
#: pixels, K = window), or its transpose (M = window, K = output pixels: the weight gradient)
IM2COL_ROLES = ("none", "window_cols", "window_rows")

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
    #: register-file bytes and bytes moved between neighbouring PEs
    rf_bytes: np.ndarray
    interpe_bytes: np.ndarray
    #: energy per component in pJ, keys mac, rf, interpe, sram, dram, leakage, total
    energy_pj: dict
    time_s: np.ndarray

    @property
    def energy_total_pj(self) -> np.ndarray:
        return self.energy_pj["total"]


# -- convolution geometry ------------------------------------------------------------------------------
_GEOM = ("in_h", "in_w", "in_c", "k_h", "k_w", "stride_h", "stride_w", "pad_h", "pad_w", "dilation")


@dataclass(frozen=True)
class Im2col:
    """Per op, what the A operand is (``role``, an index into :data:`IM2COL_ROLES`) and, for a convolution,
    its input geometry per product (per group): input ``in_h x in_w`` with ``in_c`` channels, a ``k_h x k_w``
    kernel, strides, paddings and dilation. Arrays of shape (L,); rows with role 0 ignore the geometry.

    Role 1 (``window_cols``): A = im2col(X), ``M = images * P * Q`` output pixels, ``K = in_c * k_h * k_w``
    (a forward convolution). Role 2 (``window_rows``): A = im2col(X)^T, ``M`` the window and ``K`` the
    pixels (the weight gradient ``dW = X_col^T @ dY``).
    """

    role: np.ndarray
    in_h: np.ndarray
    in_w: np.ndarray
    in_c: np.ndarray
    k_h: np.ndarray
    k_w: np.ndarray
    stride_h: np.ndarray
    stride_w: np.ndarray
    pad_h: np.ndarray
    pad_w: np.ndarray
    dilation: np.ndarray

    @classmethod
    def from_table(cls, table) -> "Im2col":
        """From an (L, 11) array of rows ``(role, in_h, in_w, in_c, k_h, k_w, stride_h, stride_w, pad_h,
        pad_w, dilation)`` (the layout of ``TrainingOps.im2col``)."""
        t = np.asarray(table, dtype=np.int64)
        if t.ndim != 2 or t.shape[1] != 11:
            raise ValueError(f"im2col: expected an (L, 11) table, got shape {t.shape}")
        return cls(*(t[:, i] for i in range(11)))

    @classmethod
    def conv(cls, h, w, c, kh, kw, *, stride=1, pad=0, dilation=1, role=1, n=1) -> "Im2col":
        """``n`` ops of one convolution geometry (scalars; stride and pad apply to both axes)."""
        vals = (role, h, w, c, kh, kw, stride, stride, pad, pad, dilation)
        return cls(*(np.full(n, v, dtype=np.int64) for v in vals))

    def take(self, sel) -> "Im2col":
        return Im2col(*(getattr(self, f.name)[sel] for f in fields(self)))

    def check(self, M, K) -> None:
        """Raise ``ValueError`` unless every conv row's geometry is valid and matches its GEMM view."""
        L = M.shape[0]
        for f in fields(self):
            a = getattr(self, f.name)
            if a.shape != (L,):
                raise ValueError(f"im2col.{f.name}: must have shape ({L},) like the ops, got {a.shape}")
        r = self.role
        if np.any((r < 0) | (r >= len(IM2COL_ROLES))):
            raise ValueError(f"im2col.role: must be 0, 1 or 2 ({', '.join(IM2COL_ROLES)})")
        conv = r > 0
        if not conv.any():
            return
        g = {f: getattr(self, f)[conv] for f in _GEOM}
        for f in _GEOM:
            low = 0 if f.startswith("pad") else 1
            if np.any(g[f] < low):
                raise ValueError(f"im2col.{f}: must be >= {low} on convolution rows")
        P, Q = _out_size(g)
        if np.any((P < 1) | (Q < 1)):
            raise ValueError("im2col: the kernel does not fit the padded input on some convolution row")
        window = g["in_c"] * g["k_h"] * g["k_w"]
        pixels = np.where(r[conv] == 1, M[conv], K[conv])
        wdim = np.where(r[conv] == 1, K[conv], M[conv])
        if np.any(wdim != window) or np.any(pixels % (P * Q) != 0):
            i = int(np.flatnonzero((wdim != window) | (pixels % (P * Q) != 0))[0])
            raise ValueError(f"im2col: convolution row {int(np.flatnonzero(conv)[i])} does not match its GEMM "
                             f"view (window {int(window[i])}, {int(P[i] * Q[i])} output pixels per image)")


def _out_size(g):
    eh = g["dilation"] * (g["k_h"] - 1) + 1
    ew = g["dilation"] * (g["k_w"] - 1) + 1
    P = (g["in_h"] + 2 * g["pad_h"] - eh) // g["stride_h"] + 1
    Q = (g["in_w"] + 2 * g["pad_w"] - ew) // g["stride_w"] + 1
    return P, Q


def op_im2col(ops, sel=None) -> Im2col | None:
    """The :class:`Im2col` of an op table (``ops.im2col``, an (L, 11) array), optionally of rows ``sel``;
    ``None`` when the table carries no convolution geometry."""
    table = getattr(ops, "im2col", None)
    if table is None:
        return None
    t = np.asarray(table)
    if sel is not None:
        t = t[sel]
    if t.size == 0 or not np.any(t[:, 0] > 0):
        return None
    return Im2col.from_table(t)


class _Ifmap:
    """DRAM footprint of the A operand: a plain matrix, or a convolution's raw input (per product).

    ``block(m, k)``: bytes of the data one ``m x k`` block of A needs (for a convolution: the input rows and
    columns its windows touch, over the channels its window range covers); ``full()``: the unique bytes of
    the whole operand; ``inv_m`` / ``inv_k``: the largest extent along M (K) whose block, with the other
    extent given, fits ``cap`` bytes. Every function is the dense matrix's where the op is no convolution.
    """

    def __init__(self, M, K, geo: Im2col | None):
        self.M, self.K, self.w = M, K, None  # w: bytes per word, set per block by with_word
        self.conv = None
        if geo is None or not np.any(geo.role > 0):
            return
        self.role = geo.role
        self.conv = geo.role > 0
        # harmless values (a 1x1 input, 1x1 kernel) on rows that are no convolution
        g = {f: np.where(self.conv, getattr(geo, f), 0 if f.startswith("pad") else 1).astype(np.float64)
             for f in _GEOM}
        one = lambda x: np.where(self.conv, x, 1.0)  # noqa: E731 - local shorthand
        P, Q = _out_size(g)
        self.P, self.Q = one(P), one(Q)
        self.H, self.W, self.C = one(g["in_h"]), one(g["in_w"]), one(g["in_c"])
        self.kh, self.kw = one(g["k_h"]), one(g["k_w"])
        self.sh, self.sw = one(g["stride_h"]), one(g["stride_w"])
        self.eh = one(g["dilation"] * (g["k_h"] - 1) + 1)
        self.ew = one(g["dilation"] * (g["k_w"] - 1) + 1)
        self.win = self.C * self.kh * self.kw
        self.pix = np.where(self.role == 1, M, K)
        self.pq = self.P * self.Q
        self.Hu = np.minimum(self.H, self._rows(self.P))   # input rows the whole layer touches
        self.Wu = np.minimum(self.W, self._cols(self.Q))

    def with_word(self, w) -> "_Ifmap":
        """The same geometry with ``w`` bytes per word (an (h, 1) column)."""
        c = object.__new__(_Ifmap)
        c.__dict__.update(self.__dict__)
        c.w, c._full = w, None
        return c

    # rows / columns of the (padded) input that r output rows / q output columns touch
    def _rows(self, r):
        return np.minimum(r * self.kh, (r - 1.0) * self.sh + self.eh)

    def _cols(self, q):
        return np.minimum(q * self.kw, (q - 1.0) * self.sw + self.ew)

    def _raw(self, p, k):
        """Raw-input bytes of a block of ``p`` output pixels x ``k`` window entries."""
        images = np.maximum(1.0, p / self.pq)
        pin = np.minimum(p, self.pq)
        multi = pin >= self.Q
        rows = np.where(multi, np.minimum(self.H, self._rows(pin / self.Q)), np.minimum(self.H, self.kh))
        cols = np.where(multi, self.Wu, np.minimum(self.W, self._cols(pin)))
        chans = np.minimum(self.C, (np.minimum(k, self.win) - 1.0) / (self.kh * self.kw) + 1.0)
        return images * rows * cols * chans * self.w

    def _pk(self, m, k):
        """(pixels, window) extents of an m x k block of A."""
        return (np.where(self.role == 1, m, k), np.where(self.role == 1, k, m))

    def block(self, m, k):
        dense = m * k * self.w
        if self.conv is None:
            return dense
        p, kk = self._pk(m, k)
        return np.where(self.conv, np.minimum(dense, self._raw(p, kk)), dense)

    def full(self):
        if getattr(self, "_full", None) is None:
            dense = self.M * self.K * self.w
            if self.conv is None:
                self._full = dense
            else:
                raw = (self.pix / self.pq) * self.Hu * self.Wu * self.C * self.w
                self._full = np.where(self.conv, np.minimum(dense, raw), dense)
        return self._full

    def passes(self, m, k, block=None):
        """Bytes of one pass over A in independent ``m x k`` blocks (halos fetched again per block);
        ``block``: ``self.block(m, k)`` if the caller has it."""
        dense = self.M * self.K * self.w
        if self.conv is None:
            return dense + 0.0 * m * k
        # whole blocks plus the partial ones at the ends of each dimension
        m, k = np.minimum(m, self.M), np.minimum(k, self.K)
        nm, nk = np.floor(self.M / m), np.floor(self.K / k)
        rm, rk = self.M - nm * m, self.K - nk * k
        b = nm * nk * (self.block(m, k) if block is None else block)
        has_rm, has_rk = rm > 0, rk > 0
        if np.any(has_rk):
            b = b + nm * np.where(has_rk, self.block(m, np.maximum(rk, 1.0)), 0.0)
        if np.any(has_rm):
            b = b + nk * np.where(has_rm, self.block(np.maximum(rm, 1.0), k), 0.0)
            if np.any(has_rm & has_rk):
                b = b + np.where(has_rm & has_rk, self.block(np.maximum(rm, 1.0), np.maximum(rk, 1.0)), 0.0)
        return np.where(self.conv, np.clip(b, self.full(), dense), dense)

    def chunks(self, m, k):
        """Bytes of one pass over A in chunks of at most ``m x k`` that the mapper sizes (any smaller chunk
        would do): ``ceil(M/m) * ceil(K/k)`` equal chunks, each with its halo. Unlike :meth:`passes` (the
        array's folds: whole ones plus a remainder, whose halo depends on the remainder's size, so a larger
        fold can cost more) this never grows with ``m`` or ``k``: a block's bytes per element never do."""
        dense = self.M * self.K * self.w
        if self.conv is None:
            return dense + 0.0 * m * k
        m, k = np.minimum(m, self.M), np.minimum(k, self.K)
        nm, nk = np.ceil(self.M / m), np.ceil(self.K / k)
        b = nm * nk * self.block(self.M / nm, self.K / nk)
        return np.where(self.conv, np.clip(b, self.full(), dense), dense)

    def _inv_pixels(self, cap, kk):
        """Largest pixel extent p (with window extent kk) whose raw block fits cap."""
        chans = np.minimum(self.C, (np.minimum(kk, self.win) - 1.0) / (self.kh * self.kw) + 1.0)
        b = cap / (chans * self.w)                      # budget in input pixels
        img = self.Hu * self.Wu
        whole = np.floor(b / img) * self.pq             # whole images
        br = b / self.Wu                                # budget in full input rows
        r = np.maximum(np.floor(br / self.kh), np.floor((br - self.eh) / self.sh) + 1.0)
        r = np.clip(r, 0.0, self.P)
        rows1 = np.minimum(self.H, self.kh)
        bc = b / rows1
        q = np.maximum(np.floor(bc / self.kw), np.floor((bc - self.ew) / self.sw) + 1.0)
        q = np.clip(q, 0.0, self.Q)
        return np.where(b >= img, whole, np.where(r >= 1.0, r * self.Q, q))

    def _inv_window(self, cap, p):
        """Largest window extent k (with pixel extent p) whose raw block fits cap."""
        c_max = cap / self._raw(p, 1.0)                 # channels whose windows fit
        khw = self.kh * self.kw
        # a run of k window entries touches (k - 1) / (kh * kw) + 1 channels on average
        k = np.where(c_max >= 1.0, np.floor((c_max - 1.0) * khw + 1.0), 0.0)
        return np.where(c_max >= self.C, self.win, k)

    def inv_m(self, cap, k):
        dense = np.floor(cap / (k * self.w))
        if self.conv is None:
            return dense
        p_or_k = np.where(self.role == 1, self._inv_pixels(cap, k), self._inv_window(cap, k))
        return np.where(self.conv, np.maximum(dense, p_or_k), dense)

    def inv_k(self, cap, m):
        dense = np.floor(cap / (m * self.w))
        if self.conv is None:
            return dense
        p_or_k = np.where(self.role == 1, self._inv_window(cap, m), self._inv_pixels(cap, m))
        return np.where(self.conv, np.maximum(dense, p_or_k), dense)


class _Dense:
    """DRAM footprint of a dense operand (the filter B, or the ofmap) with dims (d1, d2)."""

    def __init__(self, d1, d2, nbytes):
        self.d1, self.d2, self.b = d1, d2, nbytes

    def block(self, x, y):
        return x * y * self.b

    def full(self):
        return self.d1 * self.d2 * self.b

    def passes(self, x, y):
        return self.full() + 0.0 * x * y

    def inv_1(self, cap, y):
        return np.floor(cap / (y * self.b))

    def inv_2(self, cap, x):
        return np.floor(cap / (x * self.b))


class _Operand:
    """An operand's footprint seen through a dataflow: extents along the GEMM dims it spans."""

    def __init__(self, fp, dims: tuple[str, str]):
        self.fp, self.dims = fp, dims

    def _xy(self, ext):
        return ext[self.dims[0]], ext[self.dims[1]]

    def block(self, ext):
        return self.fp.block(*self._xy(ext))

    def full(self):
        return self.fp.full()

    def passes(self, ext, block=None):
        if isinstance(self.fp, _Ifmap):
            return self.fp.passes(*self._xy(ext), block=block)
        return self.fp.passes(*self._xy(ext))

    def chunks(self, ext):
        """One pass in chunks of at most ``ext`` sized by the mapper (equal chunks; see ``_Ifmap.chunks``)."""
        if isinstance(self.fp, _Ifmap):
            return self.fp.chunks(*self._xy(ext))
        return self.fp.passes(*self._xy(ext))

    def stream(self, ext, cap):
        """One pass streaming ``ext`` blocks: unique data if one block fits (its neighbours' overlap stays
        on chip), else every block with its own halo."""
        b = self.block(ext)
        return np.where(b <= cap, self.full(), self.passes(ext, block=b))

    def inv(self, cap, along: str, ext):
        """Largest extent along GEMM dim ``along`` (the other at ``ext``) whose block fits ``cap``."""
        other = ext[self.dims[1] if along == self.dims[0] else self.dims[0]]
        if isinstance(self.fp, _Ifmap):
            return self.fp.inv_m(cap, other) if along == "M" else self.fp.inv_k(cap, other)
        return self.fp.inv_1(cap, other) if along == self.dims[0] else self.fp.inv_2(cap, other)


_OP_DIMS = {"ifmap": ("M", "K"), "filter": ("K", "N"), "ofmap": ("M", "N")}


def _dram(df: Dataflow, M, K, N, Sr, Sc, T, R, C, Fr, Fc, w, a, half, ifm: _Ifmap):
    """DRAM bytes per product: reads and writes per operand, for the best of the dataflow's loop orders.

    A: column chunks outer (SCALE-Sim's order when a chunk is one fold); B: row chunks outer; C (WS, IS):
    the temporal dimension in chunks outer. A chunk is the largest run of folds whose resident tile fits
    its buffer half; see docs/accelerator.md for the rules.
    """
    Dr, Dc, Dt = df.dims
    fps = {"ifmap": ifm.with_word(w), "filter": _Dense(K, N, w), "ofmap": _Dense(M, N, w)}
    acc = _Dense(M, N, a)  # the ofmap as accumulators
    op = {k: _Operand(v, _OP_DIMS[k]) for k, v in fps.items()}
    S, Rop, Cop = op[df.stationary], op[df.row_op], op[df.col_op]
    cs, cr, cc = half[df.stationary], half[df.row_op], half[df.col_op]
    Re, Ce = np.minimum(R, Sr), np.minimum(C, Sc)
    ext = lambda r, c, t: {Dr: r, Dc: c, Dt: t}  # noqa: E731 - local shorthand
    out_psum = df.col_op == "ofmap"
    Acc = _Operand(acc, _OP_DIMS["ofmap"])
    cop_once = Cop.full()
    fold = ext(Re, Ce, T)
    # the row operand's one-fold tile: its footprint, a pass in such tiles, a streamed pass (reused below)
    r_tile = Rop.block(fold)
    r_pass = Rop.passes(fold, block=r_tile)
    r_stream = np.where(r_tile <= cr, Rop.full(), r_pass)
    if df.stationary == "ofmap":
        s_tile = s_once = 0.0 * Sr
    else:
        s_tile = S.block(fold)
        s_once = np.where(s_tile <= cs, S.full(), S.passes(fold, block=s_tile))
    s_write = S.full() if df.stationary == "ofmap" else 0.0 * Sr

    def chunk(extent, unit, total):
        """Chunk size in whole folds (a multiple of the array edge), at most the whole extent."""
        return np.minimum(np.floor(extent / unit) * unit, total)

    def psum_spill(rounds):
        return acc.full() * 2.0 * np.maximum(rounds - 1.0, 0.0)  # written and read back per extra round

    orders = []
    # -- A: Sc-chunks outer, Sr folds inner ------------------------------------------------------------
    holder = Acc if out_psum else Cop
    v = chunk(holder.inv(cc, Dc, ext(Re, Ce, T)), C, Sc)
    ok = v >= Ce
    n_c = np.where(ok, np.ceil(Sc / np.maximum(v, 1.0)), Fc)
    rop_a = np.where(Rop.full() <= cr, Rop.full(), n_c * r_stream)
    if out_psum:
        cop_a_rd = np.where(ok, 0.0, psum_spill(Fr) / 2.0)
        cop_a_wr = cop_once + cop_a_rd
    else:
        cop_a_rd = np.where(ok, cop_once, Fr * Cop.passes(ext(Re, Ce, T)))
        cop_a_wr = 0.0 * Sr
    orders.append((rop_a, cop_a_rd, cop_a_wr, s_once))
    # -- B: Sr-chunks outer, Sc folds inner ------------------------------------------------------------
    u = chunk(Rop.inv(cr, Dr, ext(Re, Ce, T)), R, Sr)
    ok = u >= Re
    n_r = np.where(ok, np.ceil(Sr / np.maximum(u, 1.0)), Fr)
    # chunks of one fold (the fold pass) stay available to a larger chunk
    rop_b = np.where(ok, np.minimum(Rop.chunks(ext(np.maximum(u, 1.0), Ce, T)), r_pass), Fc * r_pass)
    if out_psum:
        fits = acc.full() <= cc
        cop_b_rd = np.where(fits, 0.0, psum_spill(n_r) / 2.0)
        cop_b_wr = cop_once + cop_b_rd
    else:
        cop_b_rd = np.where(Cop.full() <= cc, cop_once, n_r * Cop.stream(ext(Re, Ce, T), cc))
        cop_b_wr = 0.0 * Sr
    orders.append((rop_b, cop_b_rd, cop_b_wr, s_once))
    # -- C (partial sums flowing): T-chunks outer, every fold inner; nothing spills --------------------
    if out_psum:
        t = np.minimum(Rop.inv(cr, Dt, ext(Sr, Sc, T)), Acc.inv(cc, Dt, ext(Sr, Sc, T)))
        t = np.minimum(np.floor(t), T)
        feasible = t >= 1.0
        t1 = np.maximum(t, 1.0)
        n_t = np.ceil(T / t1)
        rop_c = np.where(feasible, Rop.chunks(ext(Sr, Sc, t1)), np.inf)
        s_c = np.where(S.full() <= cs, S.full(), n_t * s_once)
        orders.append((rop_c, 0.0 * Sr, cop_once + 0.0 * Sr, s_c))
    totals = [r + cr_ + cw + s for r, cr_, cw, s in orders]
    best = np.argmin(np.stack(np.broadcast_arrays(*totals)), axis=0)

    def pick(i):
        """Field ``i`` of the order chosen per element."""
        out = orders[-1][i]
        for k in range(len(orders) - 2, -1, -1):
            out = np.where(best == k, orders[k][i], out)
        return out

    rop, cop_rd, cop_wr, s_rd = pick(0), pick(1), pick(2), pick(3)
    d_read = {df.row_op: rop, df.col_op: cop_rd, df.stationary: s_rd}
    d_write = {op_: 0.0 for op_ in OPERANDS}
    d_write[df.col_op] = cop_wr
    d_write[df.stationary] = d_write[df.stationary] + s_write
    # the ofmap's partial-sum reads are DRAM reads (written back first): they are in cop_rd above
    fill = np.minimum(s_tile, cs) + np.minimum(r_tile, cr)
    if df.stationary == "ofmap":
        fill = fill + np.minimum(Cop.block(fold), cc)
        drain = Re * Ce * w
    else:
        drain = np.minimum(Re, T) * Ce * w
    return d_read, d_write, fill, drain


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


#: validated op columns and the A operand's footprint geometry of recent op tables, by content: a search
#: costs the same op tables on one configuration after another
_PREPARED: dict = {}
_PREPARED_MAX = 64


def _prepare(M, K, N, repeat, im2col: Im2col | None):
    """``(M, K, N, repeat, ifmap)``: the ops as validated float columns and the A operand's :class:`_Ifmap`
    (its convolution geometry checked against the GEMM view); cached by the inputs' contents."""
    raw = [np.asarray(x) for x in (M, K, N, repeat)]
    key = tuple((a.dtype.str, a.shape, a.tobytes()) for a in raw)
    if im2col is not None:
        key += tuple(np.asarray(getattr(im2col, f.name)).tobytes() for f in fields(im2col))
    hit = _PREPARED.get(key)
    if hit is not None:
        return hit
    M, K, N, rep = _as_ops(*raw)
    if im2col is not None:
        im2col.check(M, K)
        if not np.any(im2col.role > 0):
            im2col = None
    out = (M, K, N, rep, _Ifmap(M, K, im2col))
    for a in out[:4]:
        a.setflags(write=False)
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.pop(next(iter(_PREPARED)))
    _PREPARED[key] = out
    return out


#: hardware fields the per-op counts, traffic and energy depend on (besides the dataflow); bandwidth and clock
#: only enter the time, and the chip's leakage power its leakage energy
_STATIC_FIELDS = ("rows", "cols", "word_bytes", "acc_bytes", "ifmap_kb", "filter_kb", "ofmap_kb")


def _static(df: Dataflow, M, K, N, rep, ifm: _Ifmap, hw: HardwareArray, idx: np.ndarray, tech: Tech) -> dict:
    """What does not depend on bandwidth, clock or leakage, for configurations ``idx`` (all of dataflow
    ``df``) over all ops: (h, L) arrays (or broadcastable to it), plus the pieces of the time (``_time``)."""
    col = lambda a: a[idx].astype(np.float64)[:, None]  # noqa: E731 - local shorthand
    R, C = col(hw.rows), col(hw.cols)
    w, a = col(hw.word_bytes), col(hw.acc_bytes)
    half = {op: col(getattr(hw, f"{op}_kb")) * 512.0 for op in OPERANDS}  # bytes in one half
    Sr, Sc, T = df.mapping(M, K, N)
    Fr, Fc = np.ceil(Sr / R), np.ceil(Sc / C)
    compute = df.compute_cycles(Sr, Sc, T, R, C, rep)
    macs = M * K * N * rep  # (L,)

    reads, writes = df.sram_accesses(Sr, Sc, T, Fr, Fc)
    reads = {op: reads[op] * rep for op in OPERANDS}
    writes = {op: writes[op] * rep for op in OPERANDS}
    rf_b, ip_b = df.pe_traffic(Sr, Sc, T, R, C, Fr, Fc, w, a)
    rf_b, ip_b = rf_b * rep, ip_b * rep

    d_read, d_write, fill, drain = _dram(df, M, K, N, Sr, Sc, T, R, C, Fr, Fc, w, a, half, ifm)
    dram = {op: (d_read[op] + d_write[op]) * rep for op in OPERANDS}
    dram_read = sum(np.asarray(d_read[op]) for op in OPERANDS) * rep
    dram_write = sum(np.asarray(d_write[op]) for op in OPERANDS) * rep
    dram_total = dram_read + dram_write
    # the first fill and the last drain are not overlapped with compute (see _time)
    edge = np.minimum(fill + drain, dram_total)

    # ---- energy (pJ) ----------------------------------------------------------------------------------
    sram_e = 0.0
    for op in OPERANDS:
        wb = a if (op == df.col_op and df.col_op == "ofmap") else w  # partial sums are accumulator words
        array_bytes = (reads[op] + writes[op]) * wb
        sram_e = sram_e + (array_bytes + dram[op]) * tech.sram_pj_per_byte(half[op] / 1024.0)
    energy = {
        "mac": macs * tech.mac_pj,
        "rf": rf_b * tech.rf_pj_per_byte,
        "interpe": ip_b * tech.interpe_pj_per_byte,
        "sram": sram_e,
        "dram": dram_total * tech.dram_pj_per_byte,
    }
    fields = dict(
        compute_cycles=compute, macs=macs, dram_read_bytes=dram_read, dram_write_bytes=dram_write,
        rf_bytes=rf_b, interpe_bytes=ip_b, sram_reads=reads, sram_writes=writes, dram_bytes=dram,
        energy_pj=energy,
    )
    return {"fields": fields, "compute": compute, "edge": edge, "rest": np.maximum(dram_total - edge, 0.0)}


def _time(st: dict, rows: np.ndarray, bandwidth: np.ndarray, clock: np.ndarray) -> dict:
    """Cycles and seconds for static rows ``rows`` of ``st`` at these bandwidths and clocks ((n,) each):
    first fill + max(compute, the rest of the DRAM traffic) + last drain, double-buffered."""
    pick = lambda x: np.broadcast_to(x, st["rest"].shape)[rows]  # noqa: E731 - local shorthand
    compute, edge, rest = pick(st["compute"]), pick(st["edge"]), pick(st["rest"])
    bpc = bandwidth.astype(np.float64)[:, None] / clock.astype(np.float64)[:, None]  # bytes per cycle
    total = edge / bpc + np.maximum(compute, rest / bpc)
    return dict(stall_cycles=total - compute, total_cycles=total,
                time_s=total / (clock.astype(np.float64)[:, None] * 1e9))


@one_blas_thread
def gemm_cost(M, K, N, repeat=1, *, hw: Hardware | HardwareArray, tech: Tech | None = None,
              sum_over=None, include_leakage: bool = True, im2col: Im2col | None = None) -> GemmCost:
    """Cost ``repeat`` x ``A[M x K] @ B[K x N]`` for every op (arrays of shape (L,)) on ``hw``.

    ``hw``: a Hardware (results shape (L,)) or a HardwareArray of H configurations (results (H, L)); mixed
    dataflows are fine. ``tech``: technology table (default: the packaged one). ``sum_over``: optional
    weights over ops, shape (L,) or (L, P): every field is returned as ``field @ sum_over`` (e.g. a 0/1 mask
    per phase), shape (H,) / (H, P) (or () / (P,) for one Hardware); ``utilization`` is then recomputed as
    reduced MACs / (R*C*reduced total cycles). ``include_leakage``: add the whole chip's leakage over the
    op's time (turn off when the caller charges leakage over the wall time of a schedule itself).
    ``im2col``: per-op convolution geometry (:class:`Im2col`); the A operand of a convolution row is then
    fetched from DRAM as the raw input (default: every A is a plain matrix).
    """
    M, K, N, rep, ifm = _prepare(M, K, N, repeat, im2col)
    hwa, single = as_array(hw)
    tech = tech or default_tech()
    from accel.area import leakage_w  # local: area imports hardware/tech only
    leak = np.asarray(leakage_w(hwa, tech), dtype=np.float64) if include_leakage else None
    L, H = M.shape[0], len(hwa)
    W = None
    if sum_over is not None:
        W = np.asarray(sum_over, dtype=np.float64)
        if W.shape[0] != L or W.ndim not in (1, 2):
            raise ValueError(f"sum_over: must have shape (L,) or (L, P) with L = {L} ops, got {W.shape}")
    out_shape = (H, L) if W is None else (H,) + W.shape[1:]
    out = _Collector(out_shape, L, W)
    rows_per_block = max(1, _BLOCK_ELEMS // max(L, 1))
    for df in DATAFLOWS:
        members = np.flatnonzero(hwa.dataflow == df.code)
        if not members.size:
            continue
        # the counts, traffic and energy once per distinct array-and-buffer configuration; the time once per
        # distinct (configuration, bandwidth, clock); leakage per configuration
        first, inv = distinct_rows([getattr(hwa, f)[members] for f in _STATIC_FIELDS])
        order = np.argsort(inv, kind="stable")
        starts = np.searchsorted(inv[order], np.arange(first.size + 1))
        for s in range(0, first.size, rows_per_block):
            e = min(first.size, s + rows_per_block)
            st = _static(df, M, K, N, rep, ifm, hwa, members[first[s:e]], tech)
            run = order[starts[s]:starts[e]]
            cfg, loc = members[run], inv[run] - s  # these rows' configurations and their static row
            out.put(cfg, st["fields"], loc)
            bw, ck = hwa.bandwidth_gbps[cfg], hwa.clock_ghz[cfg]
            first2, inv2 = distinct_rows([loc, bw, ck])
            for s2 in range(0, first2.size, rows_per_block):
                e2 = min(first2.size, s2 + rows_per_block)
                sel = first2[s2:e2]
                tm = _time(st, loc[sel], bw[sel], ck[sel])
                mine = np.flatnonzero((inv2 >= s2) & (inv2 < e2))
                out.put(cfg[mine], tm, inv2[mine] - s2)
                energy = {"leakage": tm["time_s"] if include_leakage else 0.0 * tm["time_s"]}
                out.put(cfg[mine], {"energy_pj": energy}, inv2[mine] - s2,
                        scale=leak[cfg[mine]] * 1e12 if include_leakage else None)
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
    """Gathers per-block results into full (or reduced) output arrays.

    ``put(dest, blk, pick, scale)``: the rows ``blk[...][pick]`` (reduced over ops with ``W`` first, so a
    row shared by many configurations is reduced once) go to output rows ``dest``, times ``scale`` per row
    if given.
    """

    def __init__(self, shape, L, W):
        self.shape, self.L, self.W = shape, L, W
        self.data: dict = {}

    def _arr(self, key, sub=None):
        d = self.data if sub is None else self.data.setdefault(sub, {})
        if key not in d:
            d[key] = np.zeros(self.shape)
        return d[key]

    def _one(self, target, dest, v, pick, scale):
        v = np.asarray(v, dtype=np.float64)
        if v.ndim == 1:  # (L,): the same for every row of the block
            v = v if self.W is None else v @ self.W
            target[dest] = v if scale is None else scale.reshape((-1,) + (1,) * v.ndim) * v
            return
        if v.ndim == 0:
            return self._one(target, dest, np.full(self.L, float(v)), pick, scale)
        if v.shape[1] != self.L:  # (h, 1): the same for every op
            v = np.broadcast_to(v, (v.shape[0], self.L))
        if self.W is not None:
            v = v @ self.W
        v = v[pick]
        if scale is not None:
            v = scale.reshape((-1,) + (1,) * (v.ndim - 1)) * v
        target[dest] = v

    def put(self, dest, blk, pick, scale=None):
        for k, v in blk.items():
            if isinstance(v, dict):
                for kk, vv in v.items():
                    self._one(self._arr(kk, k), dest, vv, pick, scale)
            else:
                self._one(self._arr(k), dest, v, pick, scale)

    def result(self):
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.data.items()}


def _squeeze(res):
    out = {}
    for k, v in res.items():
        out[k] = {kk: vv[0] for kk, vv in v.items()} if isinstance(v, dict) else v[0]
    return out
