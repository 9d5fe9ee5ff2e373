"""Benchmark of the training surrogate: one default run (one seed: BP reference, ADA-GP, null control),
then the cache hit of the same call. Targets: under 10 s and under 10 ms on a 2-core machine.

    python bench/surrogate_speed.py [--seeds 1] [--repeat 20]

Uses a fresh temporary cache directory (so the first call really trains; the MNIST-1D data set is
generated once beforehand and its time reported separately).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20, help="cache-hit repetitions (median reported)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = tmp
        from models.surrogate import SurrogateConfig, evaluate
        from models.surrogate.tasks import load_task

        cfg = SurrogateConfig()
        t = time.perf_counter()
        load_task(cfg.task)
        gen = time.perf_counter() - t
        seeds = tuple(range(args.seeds))
        t = time.perf_counter()
        res = evaluate(cfg, seeds=seeds)
        run = time.perf_counter() - t
        hits = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            hit = evaluate(cfg, seeds=seeds)
            hits.append(time.perf_counter() - t)
        assert hit.cached
        d = res.to_dict()
        per = {r["scheme"]["scheme"]: None for r in res.runs}
        print(f"data set generation ({cfg.task}, first use only): {gen:.2f} s")
        print(f"default run, {len(seeds)} seed(s) (bp + {cfg.scheme} + null): {run:.2f} s  (target < 10 s)")
        r0 = res.runs[0]
        print("  per run: " + ", ".join(f"{k} {r0[k]['wall_s']:.2f} s" for k in ("bp", "scheme", "null")))
        print(f"cache hit: median {statistics.median(hits) * 1e3:.2f} ms, max {max(hits) * 1e3:.2f} ms "
              f"over {len(hits)} calls  (target < 10 ms)")
        print(f"accuracy {d['accuracy']:.1f} %, bp {d['accuracy_bp']:.1f} %, null {d['accuracy_null']:.1f} %, "
              f"gp_fraction {d['gp_fraction']:.3f}")
        del per


if __name__ == "__main__":
    main()
