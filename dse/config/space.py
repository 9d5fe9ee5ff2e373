"""The search space, declared once and used by sampling, validation, export and grid enumeration.

In a study file, each knob under ``[space.training]``, ``[space.hardware]`` or ``[space.parallel]`` is one of

* a fixed value: ``dataflow = "ws"``;
* a list of choices: ``rows = [16, 32, 64]``;
* a range: ``lr = { low = 0.01, high = 0.1, log = true }`` or ``warmup = { low = 0.05, high = 0.3, step = 0.05 }``
  (integer when ``low`` and ``high`` are integers and ``step``, if given, is too; a ``step`` must divide
  ``high - low``, and a field that takes integers needs an integer range);
* a bundle, a list of tables of fields that go together, under a name of its own:
  ``predictor_unit = [{ pred_rows = 0, pred_cols = 0, pred_kb = 0.0 }, { pred_rows = 16, pred_cols = 16,
  pred_kb = 48.0 }]`` (sampled as one categorical knob whose values name their fields).

A knob's parameter name in the Optuna study is ``<section>.<field>`` (for example ``hardware.rows``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterator

from dse.errors import UsageError

__all__ = ["Fixed", "Choice", "Range", "Knob", "Space", "parse_knob"]


@dataclass(frozen=True)
class Fixed:
    value: Any
    finite = True

    def values(self) -> list:
        return [self.value]


@dataclass(frozen=True)
class Choice:
    choices: tuple
    finite = True

    def values(self) -> list:
        return list(self.choices)


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    log: bool = False
    step: float | None = None
    integer: bool = False

    @property
    def finite(self) -> bool:
        """Whether the range has a grid: a step, or integer bounds on a linear scale."""
        return self.step is not None or (self.integer and not self.log)

    def values(self) -> list:
        """The grid of a finite range (a continuous range has none)."""
        if not self.finite:
            raise UsageError("a continuous range has no grid; give it a step or use a list of choices")
        if self.step is None:
            return list(range(int(self.low), int(self.high) + 1))
        n = int(math.floor((self.high - self.low) / self.step + 1e-9))
        vals = [self.low + i * self.step for i in range(n + 1)]
        return [int(round(v)) for v in vals] if self.integer else [round(v, 12) for v in vals]


@dataclass(frozen=True)
class Bundle:
    """A choice among tables of fields that go together; Optuna sees each as a label ``a=1,b=2``."""

    tables: tuple[tuple[tuple[str, Any], ...], ...]
    finite = True

    def labels(self) -> list[str]:
        return [",".join(f"{k}={v}" for k, v in t) for t in self.tables]

    def values(self) -> list:
        return self.labels()

    def table(self, label: str) -> dict:
        return dict(self.tables[self.labels().index(label)])


Knob = Fixed | Choice | Range | Bundle


def parse_knob(name: str, spec: Any) -> Knob:
    if isinstance(spec, list):
        if not spec:
            raise UsageError(f"{name}: an empty list of choices; give at least one value")
        if all(isinstance(v, dict) for v in spec):
            tables = tuple(tuple(sorted(v.items())) for v in spec)
            twice = next((dict(t) for i, t in enumerate(tables) if t in tables[:i]), None)
        elif any(isinstance(v, (dict, list)) for v in spec):
            raise UsageError(f"{name}: choices must be plain values (numbers, strings, booleans), or all "
                             "tables (a bundle)")
        else:  # 16 and 16.0 are one value to the model (a bool is not a number here)
            twice = next((v for i, v in enumerate(spec)
                          if any(v == w and isinstance(v, bool) == isinstance(w, bool) for w in spec[:i])), None)
        if twice is not None:  # sampled twice as often as the others, without a word
            raise UsageError(f"{name}: {twice!r} is listed twice; give each choice once")
        return Bundle(tables) if all(isinstance(v, dict) for v in spec) else Choice(tuple(spec))
    if isinstance(spec, dict):
        allowed = {"low", "high", "log", "step"}
        unknown = sorted(set(spec) - allowed)
        if unknown:
            raise UsageError(f"{name}.{unknown[0]}: unknown key in a range; allowed: low, high, log, step")
        for k in ("low", "high"):
            if k not in spec:
                raise UsageError(f"{name}: a range needs {k!r} (and optionally log, step)")
            if not isinstance(spec[k], (int, float)) or isinstance(spec[k], bool):
                raise UsageError(f"{name}.{k}: expected a number, got {spec[k]!r}")
        low, high = spec["low"], spec["high"]
        log = spec.get("log", False)
        step = spec.get("step")
        if not isinstance(log, bool):
            raise UsageError(f"{name}.log: expected true or false, got {log!r}")
        if low > high:
            raise UsageError(f"{name}: inverted range (low {low} > high {high}); a range needs low < high")
        if low == high:
            raise UsageError(f"{name}: empty range (low == high == {low}); a range needs low < high, or give "
                              f"the fixed value {low}")
        if log and low <= 0:
            raise UsageError(f"{name}: a log range needs low > 0, got {low}")
        if step is not None:
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise UsageError(f"{name}.step: expected a positive number, got {step!r}")
            if log:
                raise UsageError(f"{name}: give either log or step, not both (Optuna's rule)")
            # Optuna's own test, on the decimals as written: it would narrow the range without a word
            span, d = Decimal(str(high)) - Decimal(str(low)), Decimal(str(step))
            if d > span:
                raise UsageError(f"{name}: step {step} is larger than high - low ({high} - {low}); give a smaller step")
            if span % d != 0:
                last = Decimal(str(low)) + (span // d) * d
                raise UsageError(f"{name}: step {step} does not divide high - low ({high} - {low}); the range would "
                                 f"end at {last}, not {high}: give high = {last} or a step that divides it")
        integer = all(isinstance(v, int) for v in (low, high)) and (step is None or isinstance(step, int))
        return Range(float(low) if not integer else low, float(high) if not integer else high, log,
                     step, integer)
    return Fixed(spec)


@dataclass(frozen=True)
class Space:
    """Knobs by parameter name (``section.field``), in declaration order."""

    knobs: tuple[tuple[str, Knob], ...]

    @classmethod
    def from_tables(cls, tables: dict[str, dict], allowed: dict[str, set[str]], where: str = "space"
                    ) -> "Space":
        unknown = sorted(set(tables) - set(allowed))
        if unknown:
            raise UsageError(f"{where}.{unknown[0]}: unknown section; allowed: {', '.join(sorted(allowed))}")
        knobs = []
        for section, table in tables.items():
            if not isinstance(table, dict):
                raise UsageError(f"{where}.{section}: expected a table of knobs")
            sets: dict[str, str] = {}  # field -> the knob that sets it (one knob, or a bundle's name)
            for field, spec in table.items():
                knob = parse_knob(f"{where}.{section}.{field}", spec)
                fields_ = {k for t in knob.tables for k, _ in t} if isinstance(knob, Bundle) else {field}
                for f in sorted(fields_):
                    if f not in allowed[section]:
                        what = f"{where}.{section}.{field}" + (f".{f}" if isinstance(knob, Bundle) else "")
                        raise UsageError(f"{what}: unknown knob; allowed: {', '.join(sorted(allowed[section]))}")
                for f in sorted(fields_):  # one field set by two knobs: the later would win without a word
                    if f in sets:
                        raise UsageError(f"{where}.{section}.{field}: sets {f}, which {where}.{section}.{sets[f]} "
                                         "sets too; give each field in one knob only")
                    sets[f] = field
                knobs.append((f"{section}.{field}", knob))
        return cls(tuple(knobs))

    def __iter__(self) -> Iterator[tuple[str, Knob]]:
        return iter(self.knobs)

    def names(self, section: str | None = None) -> list[str]:
        return [n for n, _ in self.knobs if section is None or n.startswith(section + ".")]

    def searched(self) -> list[tuple[str, Knob]]:
        return [(n, k) for n, k in self.knobs if not isinstance(k, Fixed)]

    def grid(self) -> dict[str, list]:
        """Values per searched knob, for the grid sampler (every knob must be finite)."""
        return {n: k.values() for n, k in self.searched()}

    def split(self, params: dict[str, Any], section: str | None = None) -> dict[str, dict[str, Any]]:
        """Sampled parameters plus fixed knobs, grouped by section: {"training": {...}, "hardware": {...}}
        (only ``section``'s when given; ``params`` then needs only that section's knobs)."""
        out: dict[str, dict[str, Any]] = {}
        for n, k in self.knobs:
            if section is not None and not n.startswith(section + "."):
                continue
            section_, field = n.split(".", 1)
            v = k.value if isinstance(k, Fixed) else params[n]
            if isinstance(k, Bundle):
                out.setdefault(section_, {}).update(k.table(v))
            else:
                out.setdefault(section_, {})[field] = v
        return out
