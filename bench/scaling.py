"""Surrogate runs per second and front quality of the quick start with 1 and 2 local workers.

    python bench/scaling.py [--study studies/quickstart.toml] [--seeds 0 1 2] [--trials N]

For each seed, the study runs twice from an empty surrogate cache, as the command line runs it: `dse run
FILE --workers 1 --quiet` (one process, SQLite) and `dse run FILE --workers 2 --quiet` (two `dse worker` processes on
a journal file, start-up included). A surrogate run is a training setting the hybrid strategy trained
(the expensive part); its rate is settings trained / wall time. Prints per seed and as mean ± sample std:
wall time, surrogate runs, runs per second, the ratio 2/1 (target >= 1.6), the budget met, and the final
hypervolume (same front quality within seed noise). On a shared machine the times are upper bounds; the
load average is printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _once(study: Path, seed: int, workers: int, trials: int | None, tmp: Path) -> dict:
    import optuna

    import dse

    folder = tmp / f"s{seed}-w{workers}"
    folder.mkdir()
    f = folder / study.name
    f.write_text(study.read_text())
    env = dict(os.environ, DSE_CACHE_DIR=str(folder / "cache"))
    env.pop("DSE_STORAGE", None)
    cmd = [sys.executable, "-m", "dse.cli", "run", str(f), "--quiet", "--seed", str(seed)]
    if trials:
        cmd += ["--trials", str(trials)]
    cmd += ["--workers", str(workers)]  # explicit: the file may ask for several ([study] workers)
    t0, load0 = time.perf_counter(), os.getloadavg()[0]
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    spec = dse.load_study(f).with_overrides(seed=seed, trials=trials)
    url = f"sqlite:///{folder / (spec.name + '.db')}" if workers == 1 else \
        f"journal:///{folder / (spec.name + '.journal')}"
    from dse.search.runner import BudgetTracker

    study = dse.open_study(spec, storage=url)
    st = study.status()
    outer = optuna.load_study(study_name=f"{spec.name}.training", storage=study.optuna._storage)
    runs = sum(1 for t in outer.get_trials(deepcopy=False) if t.user_attrs.get("trained"))
    done = BudgetTracker(study.optuna).refresh()["done"]
    return {"wall": wall, "runs": runs, "rate": runs / wall, "hv": st["hypervolume"], "done": done,
            "budget": spec.trials, "load": (load0 + os.getloadavg()[0]) / 2}


def _ms(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.4g} ± {statistics.stdev(xs):.2g}" if len(xs) > 1 else f"{xs[0]:.4g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=Path, default=ROOT / "studies/quickstart.toml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--trials", type=int, default=None, help="budget override (default: the file's)")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in a.seeds:
            one = _once(a.study, seed, 1, a.trials, Path(tmp))
            two = _once(a.study, seed, 2, a.trials, Path(tmp))
            rows.append((seed, one, two))
            print(f"seed {seed}: 1 worker {one['wall']:.1f} s, {one['runs']} runs, {one['rate']:.3f} runs/s, "
                  f"{one['done']}/{one['budget']} trials, HV {one['hv']:.4g} | 2 workers {two['wall']:.1f} s, "
                  f"{two['runs']} runs, {two['rate']:.3f} runs/s, {two['done']}/{two['budget']} trials, "
                  f"HV {two['hv']:.4g} | ratio {two['rate'] / one['rate']:.2f} | load ~{one['load']:.1f}/"
                  f"{two['load']:.1f}", flush=True)
    print(f"\n{a.study.name}, cold surrogate cache, seeds {a.seeds}:")
    print(f"  runs/s, 1 worker : {_ms([r[1]['rate'] for r in rows])}")
    print(f"  runs/s, 2 workers: {_ms([r[2]['rate'] for r in rows])}")
    print(f"  ratio 2/1        : {_ms([r[2]['rate'] / r[1]['rate'] for r in rows])} (target >= 1.6)")
    print(f"  hypervolume 1 w. : {_ms([r[1]['hv'] for r in rows])}")
    print(f"  hypervolume 2 w. : {_ms([r[2]['hv'] for r in rows])}")
    import dse

    if dse.load_study(a.study).runs is None:
        print(f"  budget met exactly: {all(r[i]['done'] == r[i]['budget'] for r in rows for i in (1, 2))}")
    else:  # the study ends at its run budget, before its trials
        print("  trial budget: not what ends this study (its run budget, [study] runs, does)")


if __name__ == "__main__":
    main()
