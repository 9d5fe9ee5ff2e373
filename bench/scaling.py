"""Trials per second for 1 and 2 local workers on hardware-only trials (the surrogate cached).

    python bench/scaling.py [--trials 200] [--model resnet18]

The study varies only hardware knobs, so after the first trial every surrogate call is a cache hit and a
trial costs the accelerator model plus Optuna's bookkeeping. One worker runs in this process on a SQLite
file; two workers are `dse run --workers 2` on a journal file (process start-up included). Prints both
rates and their ratio. On 2 cores the ratio is bounded by 2 and eaten into by storage contention.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STUDY = """
[study]
name = "{name}"
sampler = "random"
seed = 0
trials = {trials}
seeds = 1

[workload]
models = ["{model}"]
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
rows = [8, 16, 32, 64, 128]
cols = [8, 16, 32, 64, 128]
ifmap_kb = [64.0, 128.0, 256.0, 512.0]
filter_kb = [64.0, 128.0, 256.0, 512.0]
bandwidth_gbps = [12.8, 25.6, 51.2, 102.4]
dataflow = ["os", "ws", "is"]

[[objectives]]
metric = "speedup"

[[objectives]]
metric = "energy_j"
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--model", default="resnet18")
    a = ap.parse_args()
    from dse.study import run
    from dse.studyfile import load_study

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = str(Path(tmp) / "cache")
        warm = Path(tmp) / "warm.toml"
        warm.write_text(STUDY.format(name="warm", trials=2, model=a.model))
        run(load_study(warm))  # fills the surrogate cache and imports everything
        one = Path(tmp) / "one.toml"
        one.write_text(STUDY.format(name="one", trials=a.trials, model=a.model))
        t = time.perf_counter()
        run(load_study(one))
        t1 = time.perf_counter() - t
        two = Path(tmp) / "two.toml"
        two.write_text(STUDY.format(name="two", trials=a.trials, model=a.model))
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dse.cli", "run", str(two), "--workers", "2", "--quiet"],
                       check=True, env=dict(os.environ))
        t2 = time.perf_counter() - t
    r1, r2 = a.trials / t1, a.trials / t2
    print(f"hardware-only trials of {a.model}, surrogate cached, {a.trials} trials each")
    print(f"1 worker  (SQLite, in process):        {r1:7.1f} trials/s  ({t1:.1f} s)")
    print(f"2 workers (journal file, subprocesses): {r2:7.1f} trials/s  ({t2:.1f} s, start-up included)")
    print(f"ratio 2/1: {r2 / r1:.2f}")


if __name__ == "__main__":
    main()
