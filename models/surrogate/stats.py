"""Summary statistics of paired-seed results (a leaf: the standard library only)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["mean", "std", "pm"]


def mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs))


def std(xs: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); 0 for a single seed."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return float(math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)))


def pm(r: Mapping[str, Any], key: str, spec: str = "+.2f") -> str:
    """``r[key] ± r[key + '_std']`` (a result row's mean and its standard deviation)."""
    return f"{format(r[key], spec)} ± {r[key + '_std']:.2f}"
