"""Hardware descriptions: one configuration (:class:`Hardware`) or many (:class:`HardwareArray`).

Both are validated on construction by the same vectorized rules; a violation raises ``ValueError`` with a
one-line message naming the field and what is allowed (``impossible hardware: ...`` for combinations that
cannot run at all).

Units: SRAM sizes in KiB (each buffer is double-buffered: half holds the working set while the other half
fills), DRAM bandwidth in GB/s (1e9 bytes/s), clock in GHz, word sizes in bytes.

Defaults are SCALE-Sim's shipped ``configs/scale.cfg`` (32x32 output-stationary array, 64 KiB per SRAM),
bf16 operands with fp32 accumulation, one DDR4-3200 channel (3200 MT/s x 8 B = 25.6 GB/s) and a 1 GHz
clock; they are a starting point, not a recommendation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping

import numpy as np

from accel.dataflow import DATAFLOW_NAMES  # dataflow names, in code order (one class each there)

__all__ = ["Hardware", "HardwareArray", "FIELDS", "as_array", "distinct_rows"]


_INT_FIELDS = ("rows", "cols", "word_bytes", "acc_bytes", "vector_width", "pred_rows", "pred_cols")
#: the smallest DRAM bandwidth (GB/s), clock (GHz) and link bandwidth (accel.pipeline.Link) a design may have: 1 MB/s,
#: 1 MHz, far below any accelerator's, so that a training job's time and energy stay finite (1e-300 GB/s made
#: them overflow to null)
MIN_RATE = 1e-3
_FLOAT_FIELDS = ("ifmap_kb", "filter_kb", "ofmap_kb", "bandwidth_gbps", "clock_ghz", "pred_kb")


@dataclass(frozen=True)
class Hardware:
    """One accelerator configuration: an R x C systolic array, three SRAMs, DRAM, a vector unit, a predictor unit.

    ``pred_rows = pred_cols = 0`` means the predictor time-shares the main array; otherwise the predictor unit
    is its own ``pred_rows x pred_cols`` array with ``pred_kb`` KiB of SRAM (split equally into its three
    buffers, see :meth:`predictor_unit`). ``pred_kb`` is counted in the area either way.
    """

    rows: int = 32
    cols: int = 32
    dataflow: str = "os"
    word_bytes: int = 2
    acc_bytes: int = 4
    ifmap_kb: float = 64.0
    filter_kb: float = 64.0
    ofmap_kb: float = 64.0
    bandwidth_gbps: float = 25.6
    clock_ghz: float = 1.0
    vector_width: int = 32
    pred_rows: int = 0
    pred_cols: int = 0
    pred_kb: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.dataflow, str) or self.dataflow not in DATAFLOW_NAMES:
            raise ValueError(f"dataflow: must be one of {', '.join(DATAFLOW_NAMES)}; got {self.dataflow!r}")
        cols = {}
        for f in _INT_FIELDS:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                if isinstance(v, (float, np.floating)) and float(v).is_integer():
                    v = int(v)
                else:
                    raise ValueError(f"{f}: must be an integer, got {v!r}")
            object.__setattr__(self, f, int(v))
            cols[f] = np.array([int(v)], dtype=np.int64)
        for f in _FLOAT_FIELDS:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise ValueError(f"{f}: must be a number, got {v!r}")
            object.__setattr__(self, f, float(v))
            cols[f] = np.array([float(v)], dtype=np.float64)
        cols["dataflow"] = np.array([DATAFLOW_NAMES.index(self.dataflow)], dtype=np.int64)
        _validate(cols)

    # -- plain data --------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain data (str, int, float) that round-trips through TOML/JSON via :meth:`from_dict`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Hardware":
        """Build from a mapping of field names (unknown keys are an error; missing keys take defaults)."""
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown hardware field; allowed: {', '.join(FIELDS)}")
        return cls(**dict(data))

    def replace(self, **changes) -> "Hardware":
        """A copy with some fields changed (validated)."""
        d = self.to_dict()
        d.update(changes)
        return Hardware.from_dict(d)

    # -- derived ---------------------------------------------------------------------------------
    @property
    def has_predictor_unit(self) -> bool:
        return self.pred_rows > 0

    def predictor_unit(self) -> "Hardware":
        """The array that runs predictor GEMMs: the dedicated unit, or ``self`` when it time-shares.

        The dedicated unit keeps the dataflow, word sizes, DRAM bandwidth, clock and vector width, and splits
        ``pred_kb`` equally into its ifmap, filter and ofmap buffers. Its own ``pred_*`` fields are 0.
        """
        if not self.has_predictor_unit:
            return self
        d = self.to_dict()
        d.update(_predictor_overrides(self.pred_rows, self.pred_cols, self.pred_kb))
        return Hardware(**d)


FIELDS = tuple(f.name for f in fields(Hardware))

#: dataflow names sorted, as indices into DATAFLOW_NAMES (vectorized name -> code lookup)
_BY_NAME = np.argsort(np.asarray(DATAFLOW_NAMES))

#: how the dedicated predictor unit differs from the main array; every other field is inherited
_PREDICTOR_OWN = ("rows", "cols", "ifmap_kb", "filter_kb", "ofmap_kb", "pred_rows", "pred_cols", "pred_kb")
#: fields the predictor unit shares with the main array
_PREDICTOR_SHARED = ("dataflow", "word_bytes", "acc_bytes", "bandwidth_gbps", "clock_ghz", "vector_width")


def _check_predictor_fields() -> None:
    """Every hardware field must be either overridden or deliberately shared by the predictor unit: a new
    field must be placed in one of the two lists (raises at import otherwise, so it is never defaulted)."""
    placed = set(_PREDICTOR_OWN) | set(_PREDICTOR_SHARED)
    missing = [f for f in FIELDS if f not in placed]
    extra = sorted(placed - set(FIELDS))
    if missing or extra or set(_PREDICTOR_OWN) & set(_PREDICTOR_SHARED):
        raise RuntimeError(f"accel.hardware: the predictor unit does not say what to do with fields {missing}"
                           f" (stale: {extra}); add each to _PREDICTOR_OWN or _PREDICTOR_SHARED")


_check_predictor_fields()


def _predictor_overrides(pred_rows, pred_cols, pred_kb) -> dict:
    """The predictor unit's own fields (scalars or arrays): its array, ``pred_kb`` split into three equal
    buffers, and no predictor of its own."""
    third = pred_kb / 3.0
    return dict(rows=pred_rows, cols=pred_cols, ifmap_kb=third, filter_kb=third, ofmap_kb=third,
                pred_rows=0 * pred_rows, pred_cols=0 * pred_cols, pred_kb=0.0 * pred_kb)


def _fail_index(bad: np.ndarray) -> str:
    if bad.size <= 1:
        return ""
    return f" (configuration {int(np.flatnonzero(bad)[0])})"


def _validate(c: Mapping[str, np.ndarray]) -> None:
    """Vectorized validation shared by Hardware and HardwareArray; raises ValueError on the first violation."""

    def check(bad, field, msg, value):
        bad = np.asarray(bad)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            v = value[i].item() if np.ndim(value) else value
            raise ValueError(f"{field}: {msg}, got {v!r}{_fail_index(bad)}")

    check((c["dataflow"] < 0) | (c["dataflow"] >= len(DATAFLOW_NAMES)), "dataflow",
          "must be a code " + ", ".join(f"{i} ({n})" for i, n in enumerate(DATAFLOW_NAMES)), c["dataflow"])
    for f in ("rows", "cols", "vector_width"):
        check(c[f] < 1, f,
              "must be an integer >= 1" + (" (impossible hardware: no PEs)" if f != "vector_width" else ""), c[f])
    check(c["word_bytes"] < 1, "word_bytes", "must be an integer >= 1", c["word_bytes"])
    check(c["acc_bytes"] < c["word_bytes"], "acc_bytes", "must be an integer >= word_bytes", c["acc_bytes"])
    for f in ("ifmap_kb", "filter_kb", "ofmap_kb"):
        check(~np.isfinite(c[f]) | (c[f] <= 0), f, "must be a finite size in KiB > 0", c[f])
    check(~np.isfinite(c["bandwidth_gbps"]) | (c["bandwidth_gbps"] < MIN_RATE), "bandwidth_gbps",
          f"must be a finite DRAM bandwidth in GB/s >= {MIN_RATE:g} (impossible hardware: zero bandwidth)",
          c["bandwidth_gbps"])
    check(~np.isfinite(c["clock_ghz"]) | (c["clock_ghz"] < MIN_RATE), "clock_ghz",
          f"must be a finite clock in GHz >= {MIN_RATE:g}", c["clock_ghz"])
    for f in ("pred_rows", "pred_cols"):
        check(c[f] < 0, f, "must be an integer >= 0 (0 = predictor time-shares the main array)", c[f])
    check((c["pred_rows"] > 0) != (c["pred_cols"] > 0), "pred_cols",
          "must be 0 exactly when pred_rows is 0 (both 0 = time-shared predictor)", c["pred_cols"])
    check(~np.isfinite(c["pred_kb"]) | (c["pred_kb"] < 0), "pred_kb", "must be a finite size in KiB >= 0", c["pred_kb"])

    # A buffer half must hold at least one edge of the array's tile: max(rows, cols) words (operands) or
    # accumulators (ofmap, which holds partial sums in WS/IS).
    edge = np.maximum(c["rows"], c["cols"])
    for f, bytes_ in (("ifmap_kb", c["word_bytes"]), ("filter_kb", c["word_bytes"]), ("ofmap_kb", c["acc_bytes"])):
        need = edge * bytes_
        half = c[f] * 512.0
        if (half < need).any():
            i = int(np.flatnonzero(half < need)[0])
            raise ValueError(
                f"{f}: impossible hardware: half of {c[f][i]:g} KiB ({half[i]:g} B) cannot hold one "
                f"{int(edge[i])}-element tile edge of {int(bytes_[i])}-byte words ({int(need[i])} B); "
                f"need {f} >= {2 * need[i] / 1024:g}{_fail_index(half < need)}")
    pedge = np.maximum(c["pred_rows"], c["pred_cols"])
    has = c["pred_rows"] > 0
    need = pedge * c["acc_bytes"]
    half = c["pred_kb"] / 3.0 * 512.0
    bad = has & (half < need)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"pred_kb: impossible hardware: a third of {c['pred_kb'][i]:g} KiB per predictor buffer cannot hold "
            f"one {int(pedge[i])}-element tile edge per half; need pred_kb >= {6 * need[i] / 1024:g}"
            f"{_fail_index(bad)}")


class HardwareArray:
    """Many hardware configurations as a struct of numpy arrays (shape ``(H,)`` each), validated at once.

    Build with :meth:`from_list` (Hardware objects), :meth:`from_dict` (a mapping of equal-length columns,
    e.g. a dict of arrays or a pandas DataFrame; missing columns take the Hardware defaults; ``dataflow``
    may be strings or codes 0/1/2 = os/ws/is) or :meth:`from_hardware` (one configuration).
    Attributes have the Hardware field names; ``dataflow`` holds int codes (``dataflow_names`` the strings).
    """

    __slots__ = FIELDS + ("_n",)

    def __init__(self, columns: Mapping[str, Any], *, _validated: bool = False):
        if _validated:  # internal fast path: columns already converted and validated
            for f in FIELDS:
                object.__setattr__(self, f, columns[f])
            object.__setattr__(self, "_n", len(columns["rows"]))
            return
        unknown = sorted(set(columns) - set(FIELDS))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown hardware field; allowed: {', '.join(FIELDS)}")
        defaults = Hardware()
        lengths = {k: np.size(v) for k, v in columns.items() if np.ndim(v) > 0}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"columns must have equal lengths, got {lengths}")
        n = next(iter(lengths.values())) if lengths else 1
        if n < 1:
            raise ValueError("a HardwareArray needs at least one configuration")
        cols: dict[str, np.ndarray] = {}
        for f in FIELDS:
            v = columns.get(f, getattr(defaults, f))
            a = np.asarray(v)
            if a.ndim == 0:
                a = np.full(n, a.item() if a.dtype != object else v)
            if f == "dataflow":
                if a.dtype.kind in "iu":
                    codes = a.astype(np.int64)
                else:
                    s = a.astype(str)
                    bad = ~np.isin(s, DATAFLOW_NAMES)
                    if bad.any():
                        raise ValueError(f"dataflow: must be one of {', '.join(DATAFLOW_NAMES)}; got {str(s[bad][0])!r}"
                                         f"{_fail_index(bad)}")
                    codes = np.searchsorted(np.asarray(DATAFLOW_NAMES)[_BY_NAME], s)
                    codes = _BY_NAME[codes].astype(np.int64)
                cols[f] = codes
            elif f in _INT_FIELDS:
                if a.dtype.kind == "f":
                    if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                        bad = ~np.isfinite(a) | (a != np.round(a))
                        raise ValueError(f"{f}: must be an integer, got {a[bad][0]!r}{_fail_index(bad)}")
                elif a.dtype.kind not in "iub":
                    raise ValueError(f"{f}: must be an integer, got dtype {a.dtype}")
                cols[f] = a.astype(np.int64)
            else:
                if a.dtype.kind not in "iuf":
                    raise ValueError(f"{f}: must be a number, got dtype {a.dtype}")
                cols[f] = a.astype(np.float64)
        _validate(cols)
        for f in FIELDS:
            cols[f].setflags(write=False)
            object.__setattr__(self, f, cols[f])
        object.__setattr__(self, "_n", n)

    def __setattr__(self, name, value):
        raise AttributeError("HardwareArray is immutable")

    def __reduce__(self):  # pickling (e.g. to worker processes) goes through validation again
        return (HardwareArray, ({f: np.array(getattr(self, f)) for f in FIELDS},))

    # -- constructors ------------------------------------------------------------------------------
    @classmethod
    def from_list(cls, hardware: Iterable[Hardware]) -> "HardwareArray":
        hws = list(hardware)
        if not hws:
            raise ValueError("a HardwareArray needs at least one configuration")
        return cls({f: [getattr(h, f) for h in hws] for f in FIELDS})

    @classmethod
    def from_dict(cls, columns: Mapping[str, Any]) -> "HardwareArray":
        """From a mapping of columns (dict of lists/arrays, or a pandas DataFrame)."""
        if hasattr(columns, "columns") and hasattr(columns, "to_dict"):  # a DataFrame, without importing pandas
            columns = {str(k): np.asarray(columns[k]) for k in columns.columns}
        return cls(columns)

    @classmethod
    def from_hardware(cls, hw: Hardware) -> "HardwareArray":
        """A one-configuration array (cached on the frozen Hardware: the costing functions call this)."""
        cached = hw.__dict__.get("_as_array")
        if cached is None:
            cols = {}
            for f in FIELDS:
                v = DATAFLOW_NAMES.index(hw.dataflow) if f == "dataflow" else getattr(hw, f)
                a = np.array([v], dtype=np.float64 if f in _FLOAT_FIELDS else np.int64)
                a.setflags(write=False)
                cols[f] = a
            cached = cls(cols, _validated=True)  # Hardware.__post_init__ validated the same values
            object.__setattr__(hw, "_as_array", cached)
        return cached

    # -- access ------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> Hardware:
        if not isinstance(i, (int, np.integer)):
            raise TypeError("index a HardwareArray with an int (use take() for many)")
        d = {f: getattr(self, f)[i].item() for f in FIELDS}
        d["dataflow"] = DATAFLOW_NAMES[d["dataflow"]]
        return Hardware(**d)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def take(self, index) -> "HardwareArray":
        """A sub-array (index: int array or boolean mask)."""
        return HardwareArray({f: getattr(self, f)[index] for f in FIELDS})

    @property
    def dataflow_names(self) -> np.ndarray:
        return np.asarray(DATAFLOW_NAMES)[self.dataflow]

    def to_dict(self) -> dict:
        """Columns as plain lists (dataflow as strings); round-trips through :meth:`from_dict`."""
        out = {f: getattr(self, f).tolist() for f in FIELDS}
        out["dataflow"] = self.dataflow_names.tolist()
        return out

    def predictor_unit(self) -> "HardwareArray":
        """Per configuration, the array that runs predictor GEMMs (see :meth:`Hardware.predictor_unit`)."""
        has = self.pred_rows > 0
        cols = {f: getattr(self, f) for f in FIELDS}
        own = _predictor_overrides(self.pred_rows, self.pred_cols, self.pred_kb)
        cols.update({f: np.where(has, v, cols[f]) for f, v in own.items()})
        return HardwareArray(cols)

    def __repr__(self) -> str:
        return f"HardwareArray(n={self._n})"

    def __eq__(self, other) -> bool:
        return isinstance(other, HardwareArray) and len(self) == len(other) and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in FIELDS)

    __hash__ = None


def as_array(hw: "Hardware | HardwareArray") -> tuple["HardwareArray", bool]:
    """``(columns, single)``: a HardwareArray for either input, and whether a single Hardware was given
    (whose results the caller squeezes back to scalars / op arrays)."""
    if isinstance(hw, Hardware):
        return HardwareArray.from_hardware(hw), True
    if isinstance(hw, HardwareArray):
        return hw, False
    raise TypeError(f"hw must be a Hardware or a HardwareArray, got {type(hw).__name__}")


def distinct_rows(columns) -> tuple[np.ndarray, np.ndarray]:
    """``(first, inverse)`` over the rows formed by ``columns`` (equal-length 1-D numeric arrays): the index
    of one representative of each distinct row (in sorted row order), and for every row the position of its
    representative in ``first``. The costing functions evaluate representatives only and expand the results
    (sweeps over grids repeat the same array and buffers at many bandwidths, clocks or predictor units)."""
    n = len(columns[0])
    if n == 1:
        return np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    key = np.column_stack([np.asarray(c, dtype=np.float64) for c in columns])
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    return first, inv.reshape(-1)
