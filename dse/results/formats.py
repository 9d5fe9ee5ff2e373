"""Numbers and units as every table and figure shows them (a leaf: imports nothing of dse).

One set of rules for ``pareto``, ``show``, ``evaluate``, ``sweep``, ``layer``, ``pipeline``, the report and the
figures' tick labels:

* a column of a unit that takes SI prefixes (:data:`SI_UNITS`: J, W, B, B/s, s, Hz, samples/s) is shown in
  one prefix chosen for the whole column (its largest magnitude in [1, 1000)): ``energy_j [kJ]`` with 111,
  not ``energy_j [J]`` with 1.11e+05; energies given in pJ are converted to J first (:func:`to_base`);
* a number is shown with 4 significant digits, an integer (or an integral float such as 64.0) without
  ``.0``, large integers with thousands separators, nothing missing (None, NaN) as ``-``;
* a knob's unit comes from its name's suffix (:func:`knob_unit`: ``_kb`` KiB, ``_gbps`` GB/s, ...).
"""

from __future__ import annotations

import math
import re
from typing import Iterable

__all__ = ["SI_UNITS", "si_scale", "to_base", "fmt_number", "knob_unit", "is_missing", "name_pieces", "wrap_name",
           "fmt_with_unit"]

#: units shown with an SI prefix (one per column)
SI_UNITS = ("J", "W", "B", "B/s", "s", "Hz", "samples/s", "FLOP/s")
_PREFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"),
             (1e-12, "p"))
#: units that are a prefixed base unit: value in the unit -> value in the base unit
_PREFIXED = {"pJ": (1e-12, "J"), "nJ": (1e-9, "J"), "uJ": (1e-6, "J"), "mJ": (1e-3, "J"), "kJ": (1e3, "J"),
             "ms": (1e-3, "s"), "us": (1e-6, "s"), "ns": (1e-9, "s"), "GB/s": (1e9, "B/s"),
             "GHz": (1e9, "Hz"), "MHz": (1e6, "Hz"), "GB": (1e9, "B"), "MB": (1e6, "B")}
#: a knob's unit by the suffix of its field name
_KNOB_SUFFIX = (("_kb", "KiB"), ("_gbps", "GB/s"), ("_ghz", "GHz"), ("_us", "µs"), ("_ms", "ms"),
                ("_mm2", "mm^2"), ("_bytes", "B"))


def is_missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def to_base(unit: str) -> tuple[float, str]:
    """(factor, base unit) for a prefixed unit such as pJ (1e-12, J); (1, unit) for any other."""
    return _PREFIXED.get(unit, (1.0, unit))


def si_scale(values: Iterable, unit: str) -> tuple[float, str]:
    """(divisor, unit shown) for a column of ``values`` in ``unit``: an SI unit gets the prefix that puts the
    column's largest magnitude in [1, 1000) (values / divisor are then shown); any other unit is kept."""
    factor, base = to_base(unit)
    if base not in SI_UNITS:
        return 1.0, unit
    nums = [abs(float(v)) * factor for v in values
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not is_missing(v)]
    top = max((x for x in nums if math.isfinite(x)), default=0.0)
    if top == 0.0:
        return 1.0 / factor, base
    for scale, prefix in _PREFIXES:
        if top >= scale * (1 - 5e-5):  # 999.96 rounds to 1000 at 4 digits: one prefix up
            return scale / factor, prefix + base
    return 1e-12 / factor, "p" + base


def fmt_number(v, digits: int = 4) -> str:
    """A table cell: ``-`` for missing, integers (and integral floats) without ``.0`` (thousands separated),
    other numbers with ``digits`` significant digits."""
    if is_missing(v):
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == int(v) and abs(v) < 1e15:
            return f"{int(v):,}"
        s = f"{v:.{digits}g}"
        if "e" in s and 1e-4 <= abs(v) < 1e15:
            s = f"{v:,.{max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))}f}"
        return s
    return str(v)


def knob_unit(name: str) -> str:
    """A knob's unit from its field name (``hardware.ifmap_kb`` -> KiB); empty when the name says none."""
    field = name.rsplit(".", 1)[-1]
    for suffix, unit in _KNOB_SUFFIX:
        if field.endswith(suffix):
            return unit
    return ""


_BREAK = re.compile(r"(?<=[._ ,])|(?=\[)|(?=\()")


def name_pieces(name: str) -> list[str]:
    """``name`` cut where a line may break: after ``.``, ``_``, a space or a comma, before ``[`` or ``(``."""
    return [p for p in _BREAK.split(name) if p]


def wrap_name(name: str, width: int) -> list[str]:
    """``name`` on lines of at most ``width`` characters, broken only between :func:`name_pieces` (a piece
    longer than ``width`` gets a line of its own)."""
    lines = [""]
    for p in name_pieces(name):
        if lines[-1] and len(lines[-1]) + len(p.rstrip()) > width:
            lines.append("")
        lines[-1] += p
    return [ln.rstrip() for ln in lines]


def fmt_with_unit(v, unit: str, digits: int = 3) -> str:
    """One value with its unit, SI-prefixed where the unit takes a prefix: ``42.5 kJ``, ``51.2 GB/s``,
    ``2.78 mm^2``, ``64 KiB``; a value without a unit as :func:`fmt_number` writes it."""
    if is_missing(v) or not isinstance(v, (int, float)) or isinstance(v, bool):
        return fmt_number(v)
    div, shown = si_scale([v], unit)
    x = v / div
    text = fmt_number(x) if isinstance(x, int) or x == int(x) else f"{x:.{digits}g}"
    return f"{text} {shown}" if shown else text
