"""Technology table: energy and area constants as data (``accel/data/tech_default.toml``).

Each entry of the TOML file is a table with ``value``, ``unit`` and ``source``; :func:`load_tech` reads the
default table or a user's file with the same keys and returns a frozen :class:`Tech`.

SRAM access energy scales with capacity as a power law fitted through two anchors (CACTI-style scaling):
``e(cap) = sram_small_pj * (cap / sram_small_kib) ** alpha`` per 32-bit access, with
``alpha = ln(sram_large_pj / sram_small_pj) / ln(sram_large_kib / sram_small_kib)``, and linearly with the
number of bytes accessed. With the default anchors (5 pJ at 8 KiB, 50 pJ at 1024 KiB), alpha = ln 10 / ln 128
= 0.4746.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import numpy as np

__all__ = ["Tech", "load_tech", "default_tech"]


@dataclass(frozen=True)
class Tech:
    """Technology constants (see the TOML file for units and sources)."""

    mac_pj: float
    rf_pj_per_byte: float
    interpe_pj_per_byte: float
    sram_small_pj: float
    sram_small_kib: float
    sram_large_pj: float
    sram_large_kib: float
    dram_pj_per_byte: float
    vector_elem_pj: float
    pe_area_um2: float
    vector_lane_area_um2: float
    sram_mm2_per_kib: float
    leakage_mw_per_mm2: float
    #: energy per byte sent over a link between two accelerators (pipeline messages, all-reduce)
    link_pj_per_byte: float
    name: str = "custom"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for f in _CONSTANTS:
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not \
                    0 <= v <= TECH_MAX:
                raise ValueError(f"tech {f}: must be a number from 0 to {TECH_MAX:g}, got {v!r}")
        for f in ("sram_small_pj", "sram_small_kib", "sram_large_pj", "sram_large_kib"):
            if getattr(self, f) <= 0:
                raise ValueError(f"tech {f}: must be > 0, got {getattr(self, f)!r}")
        if self.sram_large_kib == self.sram_small_kib:
            raise ValueError("tech sram_large_kib: must differ from sram_small_kib (two anchors fit the power law)")
        if not abs(self.sram_exponent) <= SRAM_EXPONENT_MAX:
            raise ValueError(f"tech sram_large_pj: the two SRAM anchors give an energy exponent of "
                             f"{self.sram_exponent:.3g} (energy ~ capacity^alpha); at most {SRAM_EXPONENT_MAX:g} "
                             "in magnitude (CACTI-style fits give about 0.5)")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    @property
    def sram_exponent(self) -> float:
        """Exponent alpha of the SRAM energy power law (dimensionless)."""
        return math.log(self.sram_large_pj / self.sram_small_pj) / math.log(self.sram_large_kib / self.sram_small_kib)

    def sram_pj_per_byte(self, capacity_kib):
        """Energy (pJ) per byte read or written from an SRAM bank of ``capacity_kib`` KiB (array or scalar)."""
        cap = np.asarray(capacity_kib, dtype=np.float64)
        return (self.sram_small_pj / 4.0) * (cap / self.sram_small_kib) ** self.sram_exponent

    def to_dict(self) -> dict:
        """Plain data in the TOML file's layout (``{key: {value, source}}`` plus name)."""
        out: dict = {"name": self.name}
        for f in _CONSTANTS:
            out[f] = {"value": getattr(self, f), "source": self.sources.get(f, "")}
        return out


_CONSTANTS = tuple(f.name for f in fields(Tech) if f.name not in ("name", "sources"))

#: the largest value of any constant (pJ, um2, KiB, mW/mm2): far above any technology's (the default's largest
#: is 2048 KiB, its largest energy 160 pJ/B), low enough that a training job's totals stay finite in float64
TECH_MAX = 1e9
#: the largest magnitude of the SRAM power law's exponent (a buffer of the largest allowed size still costs a
#: finite energy per byte)
SRAM_EXPONENT_MAX = 4.0
#: the keys of a constant's table dse reads
_ENTRY_KEYS = {"value", "source", "unit"}

#: keys of earlier table versions, with what replaced them
_RENAMED = {
    "rf_pj": "use rf_pj_per_byte (pJ per byte; the old value was per 2-byte word)",
    "interpe_pj": "use interpe_pj_per_byte (pJ per byte; the old value was per 2-byte word)",
    "rf_accesses_per_mac": "register accesses now follow from the dataflow (accel.dataflow); remove the key",
    "interpe_moves_per_mac": "inter-PE moves now follow from the dataflow (accel.dataflow); remove the key",
}


def load_tech(path: str | Path | None = None) -> Tech:
    """Load a technology table from a TOML file (default: the packaged ``tech_default.toml``).

    Every constant of :class:`Tech` must be present as ``[key] value = ..., source = "..."``; unknown keys and
    missing sources are errors (``ValueError`` naming the key).
    """
    if path is None:
        text = resources.files("accel").joinpath("data/tech_default.toml").read_text(encoding="utf-8")
        where = "tech_default.toml"
    else:
        p = Path(path)
        where = str(p)
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{where}: not a text (UTF-8) file: {e}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not a valid TOML file: {e}") from None
    values: dict = {}
    sources: dict = {}
    for key, entry in data.items():
        if key in ("name", "description"):
            continue
        if key in _RENAMED:
            raise ValueError(f"{where}: technology key {key!r} was replaced: {_RENAMED[key]}")
        if key not in _CONSTANTS:
            raise ValueError(f"{where}: unknown technology key {key!r}; allowed: {', '.join(_CONSTANTS)}")
        if not isinstance(entry, dict) or "value" not in entry:
            raise ValueError(f"{where}: [{key}] must be a table with 'value' and 'source'")
        # a key of the user's own (a note, a reference) is theirs; one that looks like a misspelt value, unit or
        # source is refused (a misspelt value beside the real one was ignored without a word)
        near = [(k, m[0]) for k in sorted(set(entry) - _ENTRY_KEYS)
                if (m := difflib.get_close_matches(k.lower(), sorted(_ENTRY_KEYS), n=1, cutoff=0.7))]
        if near:
            raise ValueError(f"{where}: [{key}] has {near[0][0]!r}: a misspelt {near[0][1]!r}? (an entry holds "
                             f"{', '.join(sorted(_ENTRY_KEYS))}, and any keys of the user's own)")
        src = entry.get("source", "")
        if not isinstance(src, str) or not src.strip():
            raise ValueError(f"{where}: [{key}] needs a non-empty 'source' string citing where the number comes from")
        v = entry["value"]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}: [{key}] value must be a number, got {v!r}")
        try:
            values[key] = float(v)
        except OverflowError:
            raise ValueError(f"{where}: [{key}] value must be a number from 0 to {TECH_MAX:g}, got an integer of "
                             f"{len(str(v))} digits") from None
        sources[key] = src
    missing = [k for k in _CONSTANTS if k not in values]
    if missing:
        raise ValueError(f"{where}: missing technology keys: {', '.join(missing)}")
    try:
        return Tech(**values, name=str(data.get("name", where)), sources=sources)
    except ValueError as e:  # the table's own checks: name the file
        raise ValueError(f"{where}: {str(e).removeprefix('tech ')}") from None


_DEFAULT: Tech | None = None


def default_tech() -> Tech:
    """The packaged default table (loaded once, on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_tech()
    return _DEFAULT
