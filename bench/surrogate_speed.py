"""Benchmark of the training surrogate.

1. One run of a scheme (one seed: BP reference, the scheme, its three controls), then the cache hit of the
   same call. Targets: an ``efb`` or ``local`` run under 10 s and a cache hit under 10 ms on a 2-core machine.
2. The 1-D convolution's forward and backward on the default network's three layers (batch 32): the
   current implementation (zero padding into a kept buffer) against the previous one (``np.pad`` on every
   forward, kept here only as the baseline), checked to give identical arrays.

    python bench/surrogate_speed.py [--scheme efb] [--seeds 1] [--repeat 20]

Uses a fresh temporary cache directory (so the first call really trains; the MNIST-1D data set is
generated once beforehand and its time reported separately). Prints ``uptime``: on a loaded machine the
timings are upper bounds.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _forward_np_pad(layer, x):
    """The previous Conv1d.forward's padding (np.pad on every call) before the same im2col: the baseline."""
    p = layer.pad
    layer.pad = 0
    try:
        return layer.forward(np.pad(x, ((0, 0), (p, p), (0, 0))))
    finally:
        layer.pad = p


def conv_bench(number: int = 2000) -> None:
    from models.surrogate.layers import Conv1d

    rng = np.random.default_rng(0)
    shapes = [(1, 40), (25, 20), (25, 10)]  # (in channels, length) of the default cnn's convolutions
    layers = [Conv1d(c, 25, 5, stride=2, pad=2, rng=rng) for c, _ in shapes]
    xs = [rng.standard_normal((32, n, c)).astype(np.float32) for c, n in shapes]
    dys = [rng.standard_normal((32, l.out_len(n), 25)).astype(np.float32) for l, (_, n) in zip(layers, shapes)]

    def step(forward):
        for layer, x, dy in zip(layers, xs, dys):
            forward(layer, x)
            layer.backward(dy, need_dx=True)

    for layer, x, dy in zip(layers, xs, dys):  # identical results
        a = _forward_np_pad(layer, x).copy()
        layer.backward(dy)
        dw = layer.dW.copy()
        b = layer.forward(x)
        layer.backward(dy)
        assert np.array_equal(a, b) and np.array_equal(dw, layer.dW)
    res = {}
    for name, fwd in (("np.pad (before)", _forward_np_pad), ("kept buffer (now)", lambda l, x: l.forward(x))):
        times = []
        for _ in range(5):
            t = time.process_time()
            for _ in range(number // 5):
                step(fwd)
            times.append((time.process_time() - t) / (number // 5))
        res[name] = min(times)
    before, now = res["np.pad (before)"], res["kept buffer (now)"]
    print(f"conv1d forward+backward of the default net's 3 layers (batch 32), CPU time, best of 5 x {number // 5}: "
          f"np.pad {before * 1e6:.0f} us, kept buffer {now * 1e6:.0f} us: {before / now:.2f}x faster "
          f"(identical arrays)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", default="efb", help="scheme of the timed run (default efb)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=20, help="cache-hit repetitions (median reported)")
    args = ap.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = tmp
        from models.surrogate import SurrogateConfig, evaluate
        from models.surrogate.evaluate import CONTROLS
        from models.surrogate.tasks import load_task

        cfg = SurrogateConfig(scheme=args.scheme)
        t = time.perf_counter()
        load_task(cfg.task)
        gen = time.perf_counter() - t
        seeds = tuple(range(args.seeds))
        t, c = time.perf_counter(), time.process_time()
        res = evaluate(cfg, seeds=seeds)
        run, cpu = time.perf_counter() - t, time.process_time() - c
        hits = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            hit = evaluate(cfg, seeds=seeds)
            hits.append(time.perf_counter() - t)
        assert hit.cached
        d = res.to_dict()
        print(f"data set generation ({cfg.task}, first use only): {gen:.2f} s")
        print(f"{cfg.scheme} run at GP {cfg.gp_fraction}, {len(seeds)} seed(s) (bp + {cfg.scheme} + "
              f"{' + '.join(CONTROLS)}): {run:.2f} s wall, {cpu:.2f} s CPU  (target < 10 s; on a loaded "
              f"machine the CPU time is the closer estimate of the unloaded wall time)")
        r0 = res.runs[0]
        print("  per run: " + ", ".join(f"{k} {r0[k]['wall_s']:.2f} s" for k in ("bp", "scheme", *CONTROLS)))
        print(f"cache hit: median {statistics.median(hits) * 1e3:.2f} ms, max {max(hits) * 1e3:.2f} ms "
              f"over {len(hits)} calls  (target < 10 ms)")
        print(f"accuracy {d['accuracy']:.1f} %, bp {d['accuracy_bp']:.1f} %, null {d['accuracy_null']:.1f} %, "
              f"gp_fraction {d['gp_fraction']:.3f}")
    conv_bench()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
