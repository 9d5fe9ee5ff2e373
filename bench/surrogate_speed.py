"""Benchmark of the training surrogate.

1. One run of a scheme (one seed: BP reference, the scheme, its three controls), the same without the
   controls (what a study whose objectives need none trains per setting), then the cache hit of the
   full call. Targets: an ``efb`` or ``local`` run under 10 s and a cache hit under 10 ms on a 2-core machine.
2. The 1-D convolution's forward and backward on the default network's three layers (batch 32): the
   current implementation (zero padding into a kept buffer) against the previous one (``np.pad`` on every
   forward, kept here only as the baseline), checked to give identical arrays.

3. ``--fashion``: instead, one plain-BP run per seed of the image proxy as ``[training] task = "fashion"``
   alone gives it (the task's defaults: ``studies/surrogate-fashion.toml``'s residual CNN on the 14x14
   Fashion-MNIST subset; the bench says whether the two are equal), targets at most 10 s and at least 84% test
   accuracy; ``--schemes`` adds one run (seed 0) of each named scheme or control on it. Each timing prints
   the wall time, the process's CPU time and the load average: on a loaded machine the wall time is an upper
   bound, the CPU time what the run itself costs.

4. ``--jobs``: instead, ``dse surrogate --seeds 5 --json`` on the default ADA-GP configuration (all three
   controls), each call on a cold cache (a fresh folder holding only the MNIST-1D data set, generated once
   beforehand), with the default ``--jobs`` (the number of cores) and with ``--jobs 1``, one after the other in
   this run: both wall times, their ratio (target <= 0.6 on 2 cores) and whether the figures are equal (the
   JSON without its timings). ``--rounds N`` alternates the two N times and reports each round.

    python bench/surrogate_speed.py [--scheme efb] [--seeds 1] [--repeat 20]
    python bench/surrogate_speed.py --jobs [--rounds 1]
    python bench/surrogate_speed.py --fashion [--seeds 1] [--first-seed 0] \\
        [--schemes adagp efb local dni null null_momentum truncated]

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
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):  # as in training (multi-threaded BLAS spins on small matrices)
        res = _time_both(step, number)
    before, now = res["np.pad (before)"], res["kept buffer (now)"]
    print(f"conv1d forward+backward of the default net's 3 layers (batch 32), CPU time, best of 5 x {number // 5}: "
          f"np.pad {before * 1e6:.0f} us, kept buffer {now * 1e6:.0f} us: {before / now:.2f}x faster "
          f"(identical arrays)")


def _time_both(step, number):
    res = {}
    for name, fwd in (("np.pad (before)", _forward_np_pad), ("kept buffer (now)", lambda l, x: l.forward(x))):
        times = []
        for _ in range(5):
            t = time.process_time()
            for _ in range(number // 5):
                step(fwd)
            times.append((time.process_time() - t) / (number // 5))
        res[name] = min(times)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", default="efb", help="scheme of the timed run (default efb)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0, help="with --fashion: seeds first..first+N-1")
    ap.add_argument("--repeat", type=int, default=20, help="cache-hit repetitions (median reported)")
    ap.add_argument("--fashion", action="store_true", help="time plain BP on the image proxy instead")
    ap.add_argument("--schemes", nargs="*", default=[], help="with --fashion: also time these schemes/controls")
    ap.add_argument("--jobs", action="store_true", help="time dse surrogate with the default --jobs against --jobs 1")
    ap.add_argument("--rounds", type=int, default=1, help="with --jobs: alternate the two calls this many times")
    args = ap.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    if args.jobs:
        jobs_bench(args.rounds)
        return
    if args.fashion:
        fashion(args.seeds, args.schemes, args.first_seed)
        return
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["DSE_CACHE_DIR"] = tmp
        from models.surrogate import SurrogateConfig, evaluate
        from models.surrogate.evaluation import CONTROLS
        from models.surrogate.tasks import load_task

        cfg = SurrogateConfig(scheme=args.scheme)
        t = time.perf_counter()
        load_task(cfg.task)
        gen = time.perf_counter() - t
        seeds = tuple(range(args.seeds))
        t, c = time.perf_counter(), time.process_time()
        res = evaluate(cfg, seeds=seeds)
        run, cpu = time.perf_counter() - t, time.process_time() - c
        with tempfile.TemporaryDirectory() as tmp2:  # a fresh cache: the scheme and its reference only
            os.environ["DSE_CACHE_DIR"] = tmp2
            load_task(cfg.task)
            t, c = time.perf_counter(), time.process_time()
            evaluate(cfg, seeds=seeds, controls=())
            alone, alone_cpu = time.perf_counter() - t, time.process_time() - c
            os.environ["DSE_CACHE_DIR"] = tmp
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
        print(f"{cfg.scheme} run with its BP reference only (what a study whose objectives need no control trains "
              f"per setting, e.g. studies/predictors.toml): {alone:.2f} s wall, {alone_cpu:.2f} s CPU  (target < 10 s)")
        r0 = res.runs[0]
        print("  per run: " + ", ".join(f"{k} {r0[k]['wall_s']:.2f} s" for k in ("bp", "scheme", *CONTROLS)))
        print(f"cache hit: median {statistics.median(hits) * 1e3:.2f} ms, max {max(hits) * 1e3:.2f} ms "
              f"over {len(hits)} calls  (target < 10 ms)")
        print(f"accuracy {d['accuracy']:.1f} %, bp {d['accuracy_bp']:.1f} %, null {d['accuracy_null']:.1f} %, "
              f"gp_fraction {d['gp_fraction']:.3f}")
    conv_bench()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


def _surrogate_call(cache: Path, data: Path, jobs: int | None) -> tuple[float, dict]:
    """``dse surrogate --seeds 5 --json`` (default configuration) on a cold cache holding only the data set."""
    import json
    import shutil

    if cache.exists():
        shutil.rmtree(cache)
    shutil.copytree(data, cache / "data")
    cmd = [sys.executable, "-m", "dse.cli", "surrogate", "--seeds", "5", "--json"]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    env = {**os.environ, "DSE_CACHE_DIR": str(cache)}
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout
    wall = time.perf_counter() - t
    d = json.loads(out)
    for k in ("wall_s", "compute_s", "cached"):
        d.pop(k)
    for r in d["per_seed"]:
        r.pop("epochs")
    return wall, d


def jobs_bench(rounds: int) -> None:
    """The default --jobs against --jobs 1, cold, side by side."""
    from models.surrogate.evaluation import default_jobs

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["DSE_CACHE_DIR"] = str(tmp / "gen")
        from models.surrogate.tasks import load_task

        load_task("mnist1d")  # generated once; each call copies it into its cold cache
        data = tmp / "gen" / "data"
        print(f"dse surrogate --seeds 5 --json, default ADA-GP configuration, bp + adagp + 3 controls per seed "
              f"(25 runs), cold cache each; default --jobs = {default_jobs()} on {os.cpu_count()} cores")
        ratios = []
        for i in range(rounds):
            w1, d1 = _surrogate_call(tmp / "one", data, 1)
            print(f"round {i + 1}: --jobs 1: {w1:.2f} s wall; {_load()}", flush=True)
            wn, dn = _surrogate_call(tmp / "many", data, None)
            same = d1 == dn
            ratios.append(wn / w1)
            print(f"round {i + 1}: default --jobs: {wn:.2f} s wall; {_load()}", flush=True)
            print(f"round {i + 1}: ratio default / 1 = {wn / w1:.2f} (target <= 0.6); figures equal: {same}",
                  flush=True)
        if rounds > 1:
            print(f"ratio over {rounds} rounds: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
                  f"max {max(ratios):.2f}")


def _load() -> str:
    la = os.getloadavg()
    return f"load average {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} on {os.cpu_count()} cores"


def fashion(n_seeds: int, schemes: list[str], first_seed: int = 0) -> None:
    """Plain BP on the image proxy, one run per seed, then one run per named scheme (seed 0)."""
    from models.surrogate import SurrogateConfig
    from models.surrogate.tasks import load_task
    from models.surrogate.train import phases_to_mask, train_run

    cfg = SurrogateConfig.from_dict({"task": "fashion"})  # the task alone: its defaults
    preset = SurrogateConfig.from_toml(Path(__file__).resolve().parents[1] / "studies" / "surrogate-fashion.toml")
    print(f"task = \"fashion\" alone {'equals' if cfg == preset else 'DIFFERS FROM'} "
          "studies/surrogate-fashion.toml")
    t = time.perf_counter()
    load_task(cfg.task)
    print(f"data set loading ({cfg.task}, from the package): {time.perf_counter() - t:.2f} s")
    print(f"proxy: {cfg.task}, {cfg.network} width {cfg.width}, {cfg.epochs} epochs, batch {cfg.batch_size}")
    accs, cpus = [], []
    for seed in range(first_seed, first_seed + n_seeds):
        w, c = time.perf_counter(), time.process_time()
        r = train_run(cfg.replace(scheme="bp"), "bp", seed)
        w, c = time.perf_counter() - w, time.process_time() - c
        accs.append(r["accuracy"])
        cpus.append(c)
        print(f"bp, seed {seed}: wall {w:.2f} s, CPU {c:.2f} s (target <= 10 s); proxy test accuracy "
              f"{r['accuracy']:.2f} % (target >= 84 % on seed 0); {r['network_params']} parameters; {_load()}",
              flush=True)
    if n_seeds > 1:
        print(f"bp over seeds {first_seed}-{first_seed + n_seeds - 1}: proxy test accuracy "
              f"{statistics.mean(accs):.2f} ± {statistics.stdev(accs):.2f} % (min {min(accs):.2f}; "
              f"{sum(a >= 85 for a in accs)} of {n_seeds} seeds >= 85 %), CPU {statistics.mean(cpus):.2f} s per "
              f"run (max {max(cpus):.2f})")
    mask = None
    for name in schemes:
        sub = cfg.replace(scheme=name) if name not in ("null", "null_momentum", "truncated") else cfg
        if name in ("null", "null_momentum", "truncated") and mask is None:
            mask = phases_to_mask(train_run(cfg, cfg.scheme, 0)["phases"])
        w, c = time.perf_counter(), time.process_time()
        r = train_run(sub, name, 0, replay=mask if name in ("null", "null_momentum", "truncated") else None)
        w, c = time.perf_counter() - w, time.process_time() - c
        print(f"{name}, seed 0, GP {r['gp_fraction']:.2f}: wall {w:.2f} s, CPU {c:.2f} s; proxy test accuracy "
              f"{r['accuracy']:.2f} %; {_load()}", flush=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
