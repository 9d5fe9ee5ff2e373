"""``evaluate``: the surrogate's answer for one configuration over paired seeds, with its controls, cached.

For each seed three runs share the initialization and the batch order: plain BP (cached by the BP knobs
only, so every scheme setting reuses it), the configured scheme, and the null control replaying the
scheme's exact BP/GP step mask. Each run is cached as a small JSON file under
``cache_dir()/surrogate/v<N>/``, keyed by a hash of its knobs and seed; a cache hit reads three files per
seed and imports nothing heavy (no data set, no threadpoolctl, no mnist1d).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from models.surrogate.config import SurrogateConfig
from models.surrogate.tasks import cache_dir, cache_error

__all__ = ["SurrogateResult", "evaluate", "CACHE_VERSION"]

#: Bump when a change to the training code changes results, so that old cache entries are not reused.
CACHE_VERSION = 2


def _key(kind: str, knobs: dict[str, Any], seed: int) -> str:
    text = json.dumps({"v": CACHE_VERSION, "kind": kind, "knobs": knobs, "seed": seed}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _path(kind: str, key: str) -> Path:
    return cache_dir() / "surrogate" / f"v{CACHE_VERSION}" / kind / f"{key}.json"


#: what every cached run holds (what ``train_run`` returns), and the keys that must be finite numbers
_RUN_KEYS = ("accuracy", "diverged", "steps", "warmup_steps", "gp_fraction", "phases", "cos", "relerr", "epochs",
             "network_params", "predictor_params", "wall_s")
_NUMERIC = ("accuracy", "steps", "warmup_steps", "gp_fraction", "wall_s")


def _valid(entry: Any) -> bool:
    if not isinstance(entry, dict) or any(k not in entry for k in _RUN_KEYS):
        return False
    return all(isinstance(entry[k], (int, float)) and not isinstance(entry[k], bool)
               and math.isfinite(entry[k]) for k in _NUMERIC) and isinstance(entry["phases"], list)


def _load(path: Path) -> Optional[dict[str, Any]]:
    """A cached run, or None: absent, unreadable, or damaged (not JSON, or not a run's shape: discarded, so
    that the run is recomputed)."""
    try:
        with path.open() as fh:
            entry = json.load(fh)
    except (OSError, ValueError):
        entry = None
    if entry is not None and _valid(entry):
        return entry
    if path.is_file():
        try:
            path.unlink()
        except OSError:
            pass
    return None


def _store(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("w") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError as e:
        raise cache_error(cache_dir(), e) from e


def _mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs))


def _std(xs: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1); 0 for a single seed."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return float(math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)))


@dataclass(frozen=True)
class SurrogateResult:
    """What one configuration costs in accuracy. Accuracies in percent (0-100), differences in points."""

    config: SurrogateConfig
    seeds: tuple[int, ...]
    runs: tuple[dict[str, Any], ...]  # per seed: {"bp": run, "scheme": run, "null": run}
    cached: bool = False
    wall_s: float = 0.0  # wall time of this call
    compute_s: float = field(default=0.0)  # summed wall time of the training runs (as stored)

    def _values(self, role: str, key: str) -> list[float]:
        return [float(r[role][key]) for r in self.runs]

    @property
    def accuracy(self) -> float:
        return _mean(self._values("scheme", "accuracy"))

    @property
    def accuracy_bp(self) -> float:
        return _mean(self._values("bp", "accuracy"))

    @property
    def accuracy_null(self) -> float:
        return _mean(self._values("null", "accuracy"))

    @property
    def accuracy_drop(self) -> float:
        return self.accuracy_bp - self.accuracy

    @property
    def predictor_gain(self) -> float:
        return self.accuracy - self.accuracy_null

    @property
    def gp_fraction(self) -> float:
        return _mean(self._values("scheme", "gp_fraction"))

    def to_dict(self) -> dict[str, Any]:
        acc = self._values("scheme", "accuracy")
        bp = self._values("bp", "accuracy")
        null = self._values("null", "accuracy")
        gp = self._values("scheme", "gp_fraction")
        drop = [b - a for a, b in zip(acc, bp)]
        gain = [a - n for a, n in zip(acc, null)]
        per_seed = []
        for s, r in zip(self.seeds, self.runs):
            m = r["scheme"]
            per_seed.append(
                {
                    "seed": s,
                    "accuracy": m["accuracy"],
                    "accuracy_bp": r["bp"]["accuracy"],
                    "accuracy_null": r["null"]["accuracy"],
                    "accuracy_drop": r["bp"]["accuracy"] - m["accuracy"],
                    "predictor_gain": m["accuracy"] - r["null"]["accuracy"],
                    "gp_fraction": m["gp_fraction"],
                    "cos": m["cos"],
                    "relerr": m["relerr"],
                    "diverged": m["diverged"],
                    "phases": m["phases"],
                    "epochs": m["epochs"],
                }
            )
        cos = [r["scheme"]["cos"] for r in self.runs if r["scheme"]["cos"] is not None]
        rel = [r["scheme"]["relerr"] for r in self.runs if r["scheme"]["relerr"] is not None]
        first = self.runs[0]["scheme"]
        return {
            "config": self.config.to_dict(),
            "scheme": self.config.scheme,
            "seeds": list(self.seeds),
            "accuracy": _mean(acc),
            "accuracy_std": _std(acc),
            "accuracy_bp": _mean(bp),
            "accuracy_bp_std": _std(bp),
            "accuracy_null": _mean(null),
            "accuracy_null_std": _std(null),
            "accuracy_drop": _mean(drop),
            "accuracy_drop_std": _std(drop),
            "predictor_gain": _mean(gain),
            "predictor_gain_std": _std(gain),
            "gp_fraction": _mean(gp),
            "gp_fraction_std": _std(gp),
            "cos": _mean(cos) if cos else None,
            "relerr": _mean(rel) if rel else None,
            "steps": first["steps"],
            "warmup_steps": first["warmup_steps"],
            "predictor_params": first["predictor_params"],
            "network_params": first["network_params"],
            "timeline": first["epochs"],
            "per_seed": per_seed,
            "cached": self.cached,
            "wall_s": self.wall_s,
            "compute_s": self.compute_s,
        }


def _run(cfg: SurrogateConfig, kind: str, seed: int, cache: bool, replay_from=None):
    knobs = cfg.bp_key() if kind == "bp" else cfg.to_dict()
    path = _path(kind, _key(kind, knobs, seed))
    if cache:
        hit = _load(path)
        if hit is not None:
            return hit, True
    from models.surrogate.train import phases_to_mask, train_run

    replay = phases_to_mask(replay_from["phases"]) if replay_from is not None else None
    out = train_run(cfg, kind, seed, replay=replay)
    if cache:
        _store(path, out)
    return out, False


def evaluate(
    config: Optional[SurrogateConfig] = None,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    cache: bool = True,
    progress: Optional[Callable[[int, int, str], None]] = None,
) -> SurrogateResult:
    """Train ``config`` (default: the committed default ADA-GP setting) on each seed with its BP
    reference and its null control; ``progress(done, total, label)`` is called after each run."""
    t0 = time.perf_counter()
    cfg = SurrogateConfig() if config is None else config
    seeds = tuple(int(s) for s in seeds)
    if not seeds:
        raise ValueError("seeds: at least one seed")
    total = 3 * len(seeds)
    done = 0
    all_cached = True
    runs = []
    compute = 0.0

    def tick(label):
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, label)

    for s in seeds:
        bp, hit = _run(cfg, "bp", s, cache)
        all_cached &= hit
        tick(f"seed {s}: bp")
        if cfg.scheme == "bp":
            main, null = bp, bp
            tick(f"seed {s}: bp")
            tick(f"seed {s}: bp")
        else:
            gen = "adagp" if cfg.scheme == "null" else cfg.scheme
            main, hit = _run(cfg, gen, s, cache)
            all_cached &= hit
            tick(f"seed {s}: {gen}")
            null, hit = _run(cfg, "null", s, cache, replay_from=main)
            all_cached &= hit
            tick(f"seed {s}: null")
            if cfg.scheme == "null":
                main = null
        compute += bp["wall_s"] + (0.0 if main is bp else main["wall_s"]) + (0.0 if null is bp else null["wall_s"])
        runs.append({"bp": bp, "scheme": main, "null": null})
    return SurrogateResult(
        config=cfg,
        seeds=seeds,
        runs=tuple(runs),
        cached=all_cached,
        wall_s=time.perf_counter() - t0,
        compute_s=compute,
    )
