"""One check for every number and name a user gives, before anything uses it.

:func:`check_number` is the single place where a number (from a TOML file, or a command-line option) is
checked for finiteness and for the range the models compute in: NaN and infinities are refused everywhere, an
integer must be exactly representable (at most 2**53 in magnitude), and the fields in :data:`LIMITS` have an
upper bound that keeps the products the models form (MACs, bytes, cycles) inside 64-bit integers. Lower bounds
and the rules that tie fields together stay with the model that owns the field (e.g. ``accel.Hardware``).
:func:`check_document` applies it to every number of a parsed TOML document, naming the dotted field.
:func:`check_name` checks a study name (it names files beside the study file).
:func:`json_text` is the one way ``dse`` writes JSON: standard JSON, a non-finite number written as ``null``
(never ``NaN`` or ``Infinity``, which JSON does not have).
"""

from __future__ import annotations

import math
import re
from typing import Any

from dse.errors import UsageError

__all__ = ["check_number", "check_document", "check_name", "finite", "json_text", "LIMITS", "MAX_EXACT_INT",
           "MAX_FLOAT"]

#: the largest integer magnitude any input may hold (exactly representable in a float64)
MAX_EXACT_INT = 2**53
#: the largest magnitude of any other number
MAX_FLOAT = 1e15

#: field name -> the largest value it may take (a field is named by its last part: ``rows`` for
#: ``hardware.rows``, ``space.hardware.rows.high`` or ``--rows``)
LIMITS: dict[str, float] = {
    # the accelerator (accel.Hardware)
    "rows": 2**16, "cols": 2**16, "pred_rows": 2**16, "pred_cols": 2**16, "vector_width": 2**20,
    "word_bytes": 64, "acc_bytes": 64,
    "ifmap_kb": 2**30, "filter_kb": 2**30, "ofmap_kb": 2**30, "pred_kb": 2**30,
    "bandwidth_gbps": 1e6, "clock_ghz": 1e3,
    # the workload (dse.config.workload.Workload)
    "batch": 2**20, "dataset_size": 2**40, "epochs": 10**6,
    # a study
    "seed": 2**32 - 1, "seeds": 10**4, "trials": 10**7, "population": 10**6, "index": 10**6,
    # one layer (dse layer): GEMM dimensions M, K, N (a convolution is checked as its im2col GEMM)
    "gemm": 2**20, "conv": 2**20, "stride": 2**20, "pad": 2**20,
    # several accelerators ([parallel], dse pipeline): at most accel.pipeline.MAX_OPS forwards per step
    "stages": 10**6, "microbatches": 10**6, "chunks": 10**6, "replicas": 10**6,
    # dse pipeline's ASCII Gantt chart: columns
    "width": 10**4,
    # a network (zoo model, SCALE-Sim topology, ONNX model), per sample: elements of one activation, weights,
    # multiply-accumulates (times a batch of at most 2**20, still inside 64-bit integers)
    "tensor_elems": 2**32, "params": 2**40, "macs": 2**43,
}

_NAME = re.compile(r"\w[\w .+-]{0,119}")


def _limit(name: str) -> float | None:
    parts = [p for p in re.split(r"[.\[\]]+", name.lstrip("-")) if p and not p.isdigit()]
    for p in reversed(parts):
        key = p.replace("-", "_")
        if key in LIMITS:
            return LIMITS[key]
    return None


def check_number(value: Any, name: str, field: str | None = None) -> Any:
    """``value`` unchanged if it is a number that may be used; a one-line :class:`UsageError` naming
    ``name`` otherwise (its limit is that of ``field``, by default the last part of ``name`` found in
    :data:`LIMITS`). Non-numbers (and booleans) pass through: their type is checked where they are read."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            import numpy as np

            if isinstance(value, np.generic) and np.issubdtype(type(value), np.number):
                value = value.item()
            else:
                return value
        except ImportError:  # pragma: no cover
            return value
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"{name}: must be a finite number, got {value!r}")
    top = _limit(field or name)
    if isinstance(value, int) and abs(value) > MAX_EXACT_INT and (top is None or top > MAX_EXACT_INT):
        raise UsageError(f"{name}: {value} is too large; at most {MAX_EXACT_INT:,} in magnitude")
    if top is not None and value > top:
        shown = f"{int(top):,}" if float(top).is_integer() else f"{top:g}"
        raise UsageError(f"{name}: must be at most {shown}, got {value:g}" if isinstance(value, float)
                         else f"{name}: must be at most {shown}, got {value:,}")
    if isinstance(value, float) and abs(value) > MAX_FLOAT:
        raise UsageError(f"{name}: {value:g} is out of range; at most {MAX_FLOAT:g} in magnitude")
    return value


def check_document(doc: Any, where: str = "") -> None:
    """:func:`check_number` on every number of a parsed TOML document (tables, arrays, arrays of tables)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            check_document(v, f"{where}.{k}" if where else str(k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            check_document(v, f"{where}[{i}]")
    else:
        check_number(doc, where or "value")


def check_name(name: str, where: str) -> str:
    """A name that can name files: letters, digits, spaces and ``_ . + -``, not starting with a dot or a
    space, no ``..``, no path separator."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise UsageError(f"{where}: {name!r} is not a name; use letters, digits, spaces and _ . + - (at most 120, "
                         "not starting with . or holding ..): it names the storage files beside the study file")
    return name


def finite(obj: Any) -> Any:
    """``obj`` (nested dicts, lists, tuples of plain values and NumPy scalars) with every non-finite float
    replaced by None and NumPy scalars made Python numbers."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0:  # a NumPy scalar
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def json_text(obj: Any, **kw) -> str:
    """``json.dumps`` of :func:`finite` ``(obj)``: standard JSON, whatever numbers ``obj`` holds."""
    import json

    return json.dumps(finite(obj), allow_nan=False, **kw)
