"""Cost per trial as a joint study grows: seconds per 1,000 trials, first block against last, in one run.

    python bench/trial_cost.py [--trials 10000] [--block 1000] [--sampler random|nsga2|...] [--storage sqlite|journal]

A hardware-only joint study (the training knobs fixed, so after the first trial every surrogate call is a
cache hit) runs to ``--trials`` in this process through the public API, with the progress callback the
command line uses (the incrementally kept front and its hypervolume). Prints the seconds each block of
``--block`` trials took and the ratio of the last block to the first (the target: at most 1.3), with the
process's CPU time and the load average (on a shared machine a wall-clock figure is an upper bound).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

STUDY = """
[study]
name = "cost"
sampler = "{sampler}"
seed = 0
trials = {trials}
seeds = 1
population = 50

[workload]
models = ["resnet18"]
dataset = "cifar10"
batch = 128
dataset_size = 50000
epochs = 10

[training]
task = "digits"
network = "mlp"
epochs = 2

[reference]
rows = 32
cols = 32

[space.hardware]
rows = {{ low = 4, high = 256 }}
cols = {{ low = 4, high = 256 }}
ifmap_kb = {{ low = 16.0, high = 1024.0, log = true }}
filter_kb = {{ low = 16.0, high = 1024.0, log = true }}
bandwidth_gbps = {{ low = 6.4, high = 204.8, log = true }}
dataflow = ["os", "ws", "is"]

[[objectives]]
metric = "speedup"

[[objectives]]
metric = "energy_j"

[[objectives]]
metric = "area_mm2"

[[constraints]]
metric = "area_mm2"
max = 40.0
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--block", type=int, default=1000)
    ap.add_argument("--sampler", default="random",
                    help="random (default: costs nothing per trial itself, so the figure is dse's and the "
                         "storage's) or any study-file sampler, e.g. nsga2 (Optuna 5's NSGA-II scans every "
                         "complete trial per new trial to find its generation: its own cost grows)")
    ap.add_argument("--storage", choices=("sqlite", "journal"), default="sqlite")
    a = ap.parse_args()
    import dse

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = str(Path(tmp) / "cache")
        warm = Path(tmp) / "warm.toml"  # trains the surrogate once and imports everything
        warm.write_text(STUDY.format(trials=2, sampler="random").replace('name = "cost"', 'name = "warm"'))
        dse.run(dse.load_study(warm))
        f = Path(tmp) / "cost.toml"
        f.write_text(STUDY.format(trials=a.trials, sampler=a.sampler))
        spec = dse.load_study(f)
        url = f"sqlite:///{tmp}/cost.db" if a.storage == "sqlite" else f"journal:///{tmp}/cost.journal"
        marks = []  # (finished, wall, cpu)

        def progress(fig):
            if fig["finished"] % a.block == 0 and (not marks or marks[-1][0] != fig["finished"]):
                marks.append((fig["finished"], time.perf_counter(), time.process_time()))

        marks.append((0, time.perf_counter(), time.process_time()))
        res = dse.run(spec, storage=url, progress=progress)
    print(f"joint study, {a.sampler} sampler, {a.storage} storage, surrogate cached: {res['finished']} trials, "
          f"front {res['front']}; load average {os.getloadavg()[0]:.1f} (1 min)")
    print(f"{'trials':>14} {'wall s':>8} {'cpu s':>8}")
    blocks = []
    for (n0, w0, c0), (n1, w1, c1) in zip(marks, marks[1:]):
        blocks.append((w1 - w0, c1 - c0))
        print(f"{n0:>6}-{n1:<7} {w1 - w0:8.1f} {c1 - c0:8.1f}")
    if len(blocks) >= 2:
        print(f"last/first block: wall {blocks[-1][0] / blocks[0][0]:.2f}x, cpu {blocks[-1][1] / blocks[0][1]:.2f}x "
              "(target <= 1.3x)")


if __name__ == "__main__":
    main()
