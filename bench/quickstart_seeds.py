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

``--judge N`` asks which seeding chooses better settings for the same training: each seeding searches on
surrogate seeds from 100 with sampler seeds 0..N-1 (one worker, one shared cache), and the settings it chose
are judged on independent seeds, 0-2: the hypervolume, as a share of the true front's (every setting of the
space on seeds 0-2, ``bench/search_quality.py``'s truth), of the feasible points of the whole hardware grid of
(a) every setting it trained and (b) the settings on its noise-aware front, with their seeds-0-2 values; and
how far the accuracy it reported for its front's settings is from their seeds-0-2 values (the mean error: a
front chosen on noisy values flatters its points, the winner's curse; beside it the same mean over every
setting it trained, what its seeds differ from seeds 0-2 by in common; and the root mean square). The
truth trains seeds 0-2 of every setting unless the surrogate cache (``DSE_CACHE_DIR``) holds them (about 20
minutes on 2 cores cold; ``--jobs``).
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ENV = threading.Lock()


def variant(text: str, name: str, *, adaptive: bool, first_seed: int, seed: int | None = None) -> str:
    """The study file with [study] name, the seeding and first_seed (and the sampler's seed) set."""
    text = re.sub(r'(?m)^name = "[^"]*"', f'name = "{name}"', text, count=1)
    if seed is not None:
        text = re.sub(r"(?m)^seed = \d+", f"seed = {seed}", text, count=1)
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


def run(text: str, folder: Path, workers: int | None = None, data: Path | None = None,
        cache: Path | None = None) -> dict:
    """``dse run`` of ``text`` in ``folder`` with a cold cache of its own holding only the data sets copied from
    ``data`` (``workers``: the file's unless given; ``cache``: this cache folder instead); its figures."""
    import optuna

    from dse.search.noise import noise_aware_front
    from dse.search.pareto import front
    from dse.search.study import load_points, open_study
    from dse.search.studyfile import load_study

    folder.mkdir(parents=True)
    path = folder / "study.toml"
    path.write_text(text)
    env = {**os.environ, "DSE_CACHE_DIR": str(cache or folder / "cache")}
    if data is not None and data.is_dir() and cache is None:
        shutil.copytree(data, folder / "cache" / "data")
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "dse.cli", "run", str(path)] + ([] if workers is None else ["--workers", str(workers)])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"dse run failed ({r.returncode}): {r.stderr.strip()}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with _ENV:  # the study's points are read with its cache (--judge runs searches in threads)
        before = os.environ.get("DSE_CACHE_DIR")
        os.environ["DSE_CACHE_DIR"] = env["DSE_CACHE_DIR"]
        try:
            spec = load_study(path)
            pts = load_points(open_study(spec, create=False), spec)
        finally:
            if before is None:
                os.environ.pop("DSE_CACHE_DIR")
            else:
                os.environ["DSE_CACHE_DIR"] = before
    fr = front(pts, spec.directions)
    aware = noise_aware_front(pts, spec.metrics, spec.directions)
    runs = sum(1 for _ in (folder / "cache").rglob("*.json")) if cache is None else None
    seeds = [int(p.metrics.get("seeds", 1)) for p in fr]
    from dse.evaluation import metrics as registry

    acc = next((m for m in spec.metrics if m in registry.seeded()), None)
    return {"front_accuracy": {_setting(p): float(p.metrics[acc]) for p in fr} if acc else {}, "accuracy_metric": acc,
            "accuracy": {_setting(p): float(p.metrics[acc]) for p in pts} if acc else {},
            "wall_s": round(wall, 1), "surrogate_runs": runs, "front": len(fr), "distinguishable": len(aware),
            "front_seeds_min": min(seeds), "front_seeds_max": max(seeds),
            "settings": sorted({_setting(p) for p in pts}), "aware_settings": sorted({_setting(p) for p in aware})}


def _setting(p) -> str:
    return json.dumps({k: v for k, v in sorted(p.params.items()) if k.startswith("training.")})


def share(a: list, b: list) -> float:
    return len(set(a) & set(b)) / len(a) if a else float("nan")


def judge(study: Path, text: str, tmp: Path, data: Path, n: int, jobs: int, quiet: bool) -> dict:
    """Each seeding searches on seeds from 100 (sampler seeds 0..n-1); its choice judged on seeds 0-2 (see the
    module's docstring). Per seeding: per search, the settings trained and the two hypervolume shares."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from search_quality import Truth

    from dse.search.pareto import hypervolume_of
    from dse.search.studyfile import load_study

    cache = tmp / "judge-cache"
    shutil.copytree(data, cache / "data")
    jobs_ = [(label, adaptive, s) for s in range(n) for label, adaptive in (("one_seed", False), ("adaptive", True))]

    def one(job):
        label, adaptive, s = job
        return job, run(variant(text, f"judge-{label}-{s}", adaptive=adaptive, first_seed=100, seed=s),
                        tmp / f"judge-{label}-{s}", workers=1, cache=cache)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each search is one `dse run` process
        found = dict(pool.map(one, jobs_))
    search_s = time.perf_counter() - t0
    spec = load_study(study).with_overrides(seeds=3, seeds_max=3, first_seed=0)
    t0 = time.perf_counter()
    truth = Truth(spec, jobs)
    truth_s = time.perf_counter() - t0

    def index(setting: str) -> int:
        """The truth's row of a setting (its training knobs as JSON)."""
        return truth.setting_index[tuple(json.loads(setting)[k] for k in truth.train_knobs)]

    def hv_share(settings: list[str]) -> float:
        idx = [index(x) for x in settings]
        pts = truth.values[idx][truth.feasible[idx]]
        return hypervolume_of(pts, truth.directions, truth.ref) / truth.hv

    def errors(r: dict, which: str = "front_accuracy") -> np.ndarray:
        """Per front setting (``which = "accuracy"``: per trained setting): its accuracy metric as the search
        reported it minus its value on seeds 0-2."""
        if not r["accuracy_metric"]:
            return np.array([])
        k = spec.metrics.index(r["accuracy_metric"])
        return np.array([v - truth.values[index(x), 0, k] for x, v in r[which].items()])

    out: dict = {"truth_hv": truth.hv, "search_s": round(search_s, 1), "truth_s": round(truth_s, 1)}
    keys = ("share_trained", "share_aware_front", "front_bias", "trained_bias", "front_rmse")
    def row(s: int, r: dict) -> dict:
        e = errors(r)
        return {"seed": s, "settings": len(r["settings"]), "aware_settings": len(r["aware_settings"]),
                "share_trained": round(hv_share(r["settings"]), 4),
                "share_aware_front": round(hv_share(r["aware_settings"]), 4),
                "front_bias": round(float(e.mean()), 3),
                # the same over every trained setting: what the search's seeds differ from 0-2 by in common
                "trained_bias": round(float(errors(r, "accuracy").mean()), 3),
                "front_rmse": round(float(np.sqrt((e ** 2).mean())), 3)}

    for label in ("one_seed", "adaptive"):
        rows = [row(s, r) for (lab, _, s), r in found.items() if lab == label]
        out[label] = {"searches": rows, **{f"{k}_mean": round(float(np.mean([r[k] for r in rows])), 4)
                                           for k in ("settings", *keys)},
                      **{f"{k}_std": round(float(np.std([r[k] for r in rows], ddof=1)), 4) if len(rows) > 1 else None
                         for k in keys}}
        if not quiet:
            o = out[label]
            print(f"{label:9s} judged on seeds 0-2 ({n} searches on seeds from 100): {o['settings_mean']:.1f} "
                  f"settings trained; hypervolume share of the truth, every trained setting "
                  f"{o['share_trained_mean']:.3f} +- {o['share_trained_std'] or 0:.3f}, the noise-aware front's "
                  f"settings {o['share_aware_front_mean']:.3f} +- {o['share_aware_front_std'] or 0:.3f}; the front "
                  f"settings' accuracy as reported minus on seeds 0-2: mean {o['front_bias_mean']:+.2f} +- "
                  f"{o['front_bias_std'] or 0:.2f} (every trained setting {o['trained_bias_mean']:+.2f} +- "
                  f"{o['trained_bias_std'] or 0:.2f}), root mean square {o['front_rmse_mean']:.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=ROOT / "studies" / "quickstart.toml")
    ap.add_argument("--reproducibility", action="store_true", help="also run on first_seed 100 and compare")
    ap.add_argument("--no-timing", action="store_true", help="skip the timed pair (with --reproducibility)")
    ap.add_argument("--judge", type=int, default=0, metavar="N",
                    help="also judge each seeding's choice of settings on independent seeds (N search seeds)")
    ap.add_argument("--jobs", type=int, default=2, help="processes for --judge's searches and truth")
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
        if a.judge:
            out["judge"] = judge(a.study, text, Path(tmp), data, a.judge, a.jobs, a.json)
    out["load_after"] = os.getloadavg()[0]
    if a.json:
        for r in (out.get("one_seed", {}), out.get("adaptive", {})):
            for k in ("settings", "aware_settings", "front_accuracy", "accuracy"):
                r.pop(k, None)
        print(json.dumps(out))
    else:
        print(f"load average (1 min) before {out['load_before']:.2f}, after {out['load_after']:.2f}")


if __name__ == "__main__":
    main()
