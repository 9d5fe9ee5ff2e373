"""Speed of the pipeline model (prints figures; not a timed test).

    .venv/bin/python bench/pipeline_speed.py [--repeat 20]

1. one step of each schedule at p = 8 stages, m = 64 micro-batches (explicit times, a link delay):
   target < 50 ms;
2. one study trial with a ``[parallel]`` table (ResNet-18 on CIFAR-10, batch 128, 4 stages x 8 micro-batches,
   ZB-H1, ADA-GP): a new accelerator each time (nothing of the pipeline cached: partition, per-stage costs,
   both step kinds, the job), the training surrogate a cache hit as in a study: target < 100 ms. Also the
   objective of a real Optuna trial (sampling, the configuration, evaluation, user attributes) on an
   in-memory storage.

Timings are best-of-N and median wall times on this machine; print ``uptime`` beside them (other processes
load the machine: a figure measured under load is an upper bound).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import best_of

STUDY = """
[study]
name = "pipeline-bench"
sampler = "random"
seed = 0
trials = 1
seeds = 1

[workload]
models = ["resnet18"]
dataset = "cifar10"
batch = 128
dataset_size = 50000
epochs = 30

[training]
scheme = "adagp"
task = "digits"
network = "mlp"
epochs = 2

[hardware]
dataflow = "ws"

[parallel]
stages = 4
microbatches = 8
schedule = "zb-h1"

[space.hardware]
rows = {low = 8, high = 128}
cols = {low = 8, high = 128}

[[objectives]]
metric = "throughput"

[[objectives]]
metric = "energy_j"
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    from accel.pipeline import SCHEDULES, StageCosts, simulate

    print("\n1. one step, p = 8, m = 64 (target < 50 ms)")
    worst = 0.0
    for name, sch in SCHEDULES.items():
        v = 2 if sch.chunked else 1
        c = StageCosts.uniform(8, 1.0, 1.0, 0.5, comm=0.05, chunks=v)
        b, med = best_of(lambda: simulate(c, name, 64), args.repeat)
        worst = max(worst, med)
        print(f"   {name:18s} chunks {v}: best {b * 1e3:6.2f} ms, median {med * 1e3:6.2f} ms")
    print(f"   slowest median {worst * 1e3:.2f} ms = {worst / 0.050:.2f} x the 50 ms target")

    print("\n2. a study trial with [parallel] (target < 100 ms)")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = tmp
        import tomllib

        import numpy as np
        import optuna

        from dse.evaluation.evaluator import evaluate
        from dse.search.study import evaluate_trial
        from dse.search.studyfile import spec_from_dict

        spec = spec_from_dict(tomllib.loads(STUDY))
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        evaluate(spec.configuration({"hardware.rows": 32, "hardware.cols": 32}), seeds=(0,))
        print(f"   first call (trains the surrogate once, builds the model): {time.perf_counter() - t:.2f} s")
        sizes = iter(rng.integers(8, 129, size=(10 * args.repeat, 2)).tolist())

        def one():
            r, c = next(sizes)
            evaluate(spec.configuration({"hardware.rows": r, "hardware.cols": c}), seeds=(0,))

        b, med = best_of(one, args.repeat)
        print(f"   evaluate, a new accelerator each time: best {b * 1e3:.1f} ms, median {med * 1e3:.1f} ms "
              f"= {med / 0.100:.2f} x the 100 ms target")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(directions=spec.directions, sampler=optuna.samplers.RandomSampler(seed=1))
        spec1 = spec.with_overrides(seeds=1)

        def trial():
            study.optimize(lambda tr: evaluate_trial(tr, spec1), n_trials=1)

        b, med = best_of(trial, args.repeat)
        print(f"   an Optuna trial (in-memory storage, sampling + objective): best {b * 1e3:.1f} ms, "
              f"median {med * 1e3:.1f} ms = {med / 0.100:.2f} x the 100 ms target")


if __name__ == "__main__":
    main()
