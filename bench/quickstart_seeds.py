"""What the quick start's seeding costs and buys: adaptive seeds (the shipped ``seeds_min``/``seeds_max``) against
one seed per setting, side by side, each with a cold surrogate cache.

    python bench/quickstart_seeds.py [--study studies/quickstart.toml] [--reproducibility] [--json]

For each seeding it runs ``dse run`` (the file's workers) in a scratch folder with a cold surrogate cache (no
run trained; the proxy's data set, generated once beforehand and its time printed separately, is copied in:
it is a one-time cost of the first use, not of the seeding) and prints the wall time, the
surrogate runs trained, the front's size, the seeds its points rest on and how many are distinguishable (the
noise-aware front, dse.search.noise); then the ratio of the wall times (the target: at most 1.5).

``--reproducibility`` also runs each seeding in one worker on disjoint surrogate seeds (``first_seed`` 0 and
100) and prints, for each, the share of the training settings on one run's noise-aware front that are on the
other's (both directions, over every setting and over those both runs trained): how much of a front's choice
of training settings survives a change of seeds. ``--no-timing`` skips the timed pair.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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


def data_sets(study: Path, folder: Path) -> float:
    """Generate the study's proxy data sets into ``folder``/data once (a child process, its own cache folder);
    the seconds it took."""
    code = ("import sys; from dse.search.studyfile import load_study; from models.surrogate.tasks import load_task\n"
            "cfg = load_study(sys.argv[1]).base.training\n"
            "for task in (cfg.tasks or [cfg.task]): load_task(task)")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(study)], env={**os.environ, "DSE_CACHE_DIR": str(folder)},
                   check=True)
    return time.perf_counter() - t0


def run(text: str, folder: Path, workers: int | None = None, data: Path | None = None) -> dict:
    """``dse run`` of ``text`` in ``folder`` with a cold cache of its own holding only the data sets copied from
    ``data`` (``workers``: the file's unless given); its figures."""
    import optuna

    from dse.search.noise import noise_aware_front
    from dse.search.pareto import front
    from dse.search.study import load_points, open_study
    from dse.search.studyfile import load_study

    folder.mkdir(parents=True)
    path = folder / "study.toml"
    path.write_text(text)
    env = {**os.environ, "DSE_CACHE_DIR": str(folder / "cache")}
    if data is not None and data.is_dir():
        shutil.copytree(data, folder / "cache" / "data")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "dse.cli", "run", str(path)] + ([] if workers is None else ["--workers", str(workers)])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
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
    ap.add_argument("--no-timing", action="store_true", help="skip the timed pair (with --reproducibility)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    text = a.study.read_text()
    out: dict = {"load_before": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="dse-seeds-") as tmp:
        data = Path(tmp) / "gen" / "data"
        out["data_generation_s"] = round(data_sets(a.study, Path(tmp) / "gen"), 1)
        if not a.json:
            print(f"proxy data set generation (once, copied into each cold cache): {out['data_generation_s']} s")
        for label, adaptive in (() if a.no_timing else (("one_seed", False), ("adaptive", True))):
            out[label] = run(variant(text, f"qs-{label}", adaptive=adaptive, first_seed=0), Path(tmp) / label,
                             data=data)
            if not a.json:
                r = out[label]
                print(f"{label:9s} cold: {r['wall_s']:6.1f} s, {r['surrogate_runs']} surrogate runs, front "
                      f"{r['front']} ({r['distinguishable']} distinguishable), front points on "
                      f"{r['front_seeds_min']}-{r['front_seeds_max']} seeds, {len(r['settings'])} settings")
        if not a.no_timing:
            out["ratio"] = round(out["adaptive"]["wall_s"] / out["one_seed"]["wall_s"], 2)
            if not a.json:
                print(f"adaptive / one seed: {out['ratio']:.2f}x wall time (target <= 1.5)")
        if a.reproducibility:
            for label, adaptive in (("one_seed", False), ("adaptive", True)):
                # one worker: a single process gives the same results for the same file and seeds, so the
                # comparison is between the seeds, not between two schedules of the workers
                one, other = (run(variant(text, f"qs-{label}-{f}", adaptive=adaptive, first_seed=f),
                                  Path(tmp) / f"{label}-{f}", workers=1, data=data) for f in (0, 100))
                x, y = one["aware_settings"], other["aware_settings"]
                both = set(one["settings"]) & set(other["settings"])
                xb, yb = [s for s in x if s in both], [s for s in y if s in both]
                rep = {"first_seed_0": len(x), "first_seed_100": len(y), "common": len(set(x) & set(y)),
                       "share_0_in_100": round(share(x, y), 3), "share_100_in_0": round(share(y, x), 3),
                       "settings_0": len(one["settings"]), "settings_100": len(other["settings"]),
                       "trained_in_both": len(both),
                       # among the settings both runs trained: on one noise-aware front, on the other too
                       "share_0_in_100_trained_by_both": round(share(xb, yb), 3),
                       "share_100_in_0_trained_by_both": round(share(yb, xb), 3)}
                out[f"reproducibility_{label}"] = rep
                if not a.json:
                    print(f"{label:9s} noise-aware fronts on seeds from 0 and from 100: {rep['first_seed_0']} and "
                          f"{rep['first_seed_100']} training settings, {rep['common']} on both "
                          f"({rep['share_0_in_100']:.0%} and {rep['share_100_in_0']:.0%}); "
                          f"{rep['trained_in_both']} settings trained by both runs; among those, "
                          f"{rep['share_0_in_100_trained_by_both']:.0%} and "
                          f"{rep['share_100_in_0_trained_by_both']:.0%}")
    out["load_after"] = os.getloadavg()[0]
    if a.json:
        for r in (out.get("one_seed", {}), out.get("adaptive", {})):
            r.pop("settings", None), r.pop("aware_settings", None)
        print(json.dumps(out))
    else:
        print(f"load average (1 min) before {out['load_before']:.2f}, after {out['load_after']:.2f}")


if __name__ == "__main__":
    main()
