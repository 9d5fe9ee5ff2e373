"""What the quick start's seeding costs and buys: adaptive seeds (the shipped ``seeds_min``/``seeds_max``) against
one seed per setting, side by side, each with a cold surrogate cache.

    python bench/quickstart_seeds.py [--study studies/quickstart.toml] [--reproducibility] [--json]

For each seeding it runs ``dse run`` (the file's workers) in a scratch folder and prints the wall time, the
surrogate runs trained, the front's size, the seeds its points rest on and how many are distinguishable (the
noise-aware front, dse.search.noise); then the ratio of the wall times (the target: at most 1.5).

``--reproducibility`` also runs each seeding on disjoint surrogate seeds (``first_seed`` 0 and 100) and prints,
for each, the share of the training settings on one run's noise-aware front that are on the other's (both
directions and their mean): how much of a front's choice of training settings survives a change of seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def variant(text: str, name: str, *, adaptive: bool, first_seed: int) -> str:
    """The study file with [study] name, the seeding and first_seed set."""
    text = re.sub(r'(?m)^name = "[^"]*"', f'name = "{name}"', text, count=1)
    text = re.sub(r"(?m)^(seeds|seeds_min|seeds_max|first_seed) = .*\n", "", text)
    seeding = "seeds_min = 1\nseeds_max = 3\n" if adaptive else "seeds = 1\n"
    return text.replace("[study]\n", f"[study]\n{seeding}first_seed = {first_seed}\n", 1)


def run(text: str, folder: Path) -> dict:
    """``dse run`` of ``text`` in ``folder`` with a cold cache of its own; its figures."""
    import optuna

    from dse.search.noise import noise_aware_front
    from dse.search.pareto import front
    from dse.search.study import load_points, open_study
    from dse.search.studyfile import load_study

    folder.mkdir(parents=True)
    path = folder / "study.toml"
    path.write_text(text)
    env = {**os.environ, "DSE_CACHE_DIR": str(folder / "cache")}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dse.cli", "run", str(path)], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"dse run failed ({r.returncode}): {r.stderr.strip()}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ["DSE_CACHE_DIR"] = env["DSE_CACHE_DIR"]
    spec = load_study(path)
    pts = load_points(open_study(spec, create=False), spec)
    fr = front(pts, spec.directions)
    aware = noise_aware_front(pts, spec.metrics, spec.directions)
    runs = sum(1 for _ in (folder / "cache").rglob("*.json"))
    seeds = [int(p.metrics.get("seeds", 1)) for p in fr]
    return {"wall_s": round(wall, 1), "surrogate_runs": runs, "front": len(fr), "distinguishable": len(aware),
            "front_seeds_min": min(seeds), "front_seeds_max": max(seeds),
            "settings": sorted({_setting(p) for p in pts}), "aware_settings": sorted({_setting(p) for p in aware})}


def _setting(p) -> str:
    return json.dumps({k: v for k, v in sorted(p.params.items()) if k.startswith("training.")})


def share(a: list, b: list) -> float:
    return len(set(a) & set(b)) / len(a) if a else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=ROOT / "studies" / "quickstart.toml")
    ap.add_argument("--reproducibility", action="store_true", help="also run on first_seed 100 and compare")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    text = a.study.read_text()
    out: dict = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="dse-seeds-") as tmp:
        for label, adaptive in (("one_seed", False), ("adaptive", True)):
            out[label] = run(variant(text, f"qs-{label}", adaptive=adaptive, first_seed=0), Path(tmp) / label)
            if not a.json:
                r = out[label]
                print(f"{label:9s} cold: {r['wall_s']:6.1f} s, {r['surrogate_runs']} surrogate runs, front "
                      f"{r['front']} ({r['distinguishable']} distinguishable), front points on "
                      f"{r['front_seeds_min']}-{r['front_seeds_max']} seeds, {len(r['settings'])} settings")
        out["ratio"] = round(out["adaptive"]["wall_s"] / out["one_seed"]["wall_s"], 2)
        if not a.json:
            print(f"adaptive / one seed: {out['ratio']:.2f}x wall time (target <= 1.5)")
        if a.reproducibility:
            for label, adaptive in (("one_seed", False), ("adaptive", True)):
                other = run(variant(text, f"qs-{label}-100", adaptive=adaptive, first_seed=100),
                            Path(tmp) / f"{label}-100")
                x, y = out[label]["aware_settings"], other["aware_settings"]
                rep = {"first_seed_0": len(x), "first_seed_100": len(y), "common": len(set(x) & set(y)),
                       "share_0_in_100": round(share(x, y), 3), "share_100_in_0": round(share(y, x), 3),
                       "settings_0": len(out[label]["settings"]), "settings_100": len(other["settings"]),
                       "trained_in_both": len(set(out[label]["settings"]) & set(other["settings"]))}
                out[f"reproducibility_{label}"] = rep
                if not a.json:
                    print(f"{label:9s} noise-aware fronts on seeds from 0 and from 100: {rep['first_seed_0']} and "
                          f"{rep['first_seed_100']} training settings, {rep['common']} on both "
                          f"({rep['share_0_in_100']:.0%} and {rep['share_100_in_0']:.0%}); "
                          f"{rep['trained_in_both']} settings trained by both runs")
    out["load_after"] = os.getloadavg()[0]
    if a.json:
        for r in (out["one_seed"], out["adaptive"]):
            r.pop("settings"), r.pop("aware_settings")
        print(json.dumps(out))
    else:
        print(f"load average (1 min) before {out['load_before']:.2f}, after {out['load_after']:.2f}")


if __name__ == "__main__":
    main()
