"""Speed of the accelerator model (prints figures; not a timed test).

    .venv/bin/python bench/accel_speed.py

1. one hardware configuration over every zoo model's training ops (all GEMM and vector rows), batch 32:
   target < 5 ms per model;
2. 10,000 random configurations over resnet50's training ops (GEMMs and vector ops, reduced per
   configuration and phase with ``sum_over``): target < 2 s;
3. when ``scalesim`` is importable (e.g. /tmp/scalesim-venv/bin/python with the repo on PYTHONPATH), the
   ratio of SCALE-Sim's time to ours on the same layer;
4. the quick start's hardware grid (``studies/quickstart.toml``: 1,458 points, weight stationary) over
   ResNet-18/CIFAR-10's training GEMMs (batch 128): ``gemm_cost`` now against the same call on earlier
   versions of ``accel/`` taken from git history (:data:`EARLIER`, run in a subprocess; skipped without
   git), and the hardware model per training setting of the hybrid search (``dse.evaluation.evaluator.hardware_metrics``
   over the grid, then ``evaluate_hardware`` for each of the ``front_size`` points entered).

Times are the best of a few runs, wall clock and CPU (the process's own): on a shared machine the CPU time
is the steadier figure; the load average is printed beside them.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _timing import best_cpu, best_of

from accel import Hardware, HardwareArray, gemm_cost, op_im2col, vector_cost


def load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def cost_model(ops, hw, sum_over_phase=False):
    g = ops.repeat > 0
    W = None
    if sum_over_phase:
        phases = np.unique(ops.phase)
        W = (ops.phase[:, None] == phases[None, :]).astype(float)
    gc = gemm_cost(ops.M[g], ops.K[g], ops.N[g], ops.repeat[g], hw=hw,
                   sum_over=None if W is None else W[g], im2col=op_im2col(ops, g))
    vc = vector_cost(ops.vec_elems[~g], hw=hw, sum_over=None if W is None else W[~g])
    return gc, vc


def zoo_one_config():
    from models.zoo import build, names

    hw = Hardware(rows=32, cols=32, dataflow="ws", ifmap_kb=256, filter_kb=256, ofmap_kb=128,
                  bandwidth_gbps=50)
    print("1) one configuration (32x32 WS, 256/256/128 KiB, 50 GB/s) over each zoo model, batch 32, all ops")
    print(f"   {'model':<18}{'ops':>6}{'best ms':>10}{'median ms':>11}{'CPU ms':>8}{'step ms (model)':>17}"
          f"   ({load()})")
    worst = worst_cpu = 0.0
    for name in names():
        ops = build(name).training_ops(batch=32)
        best, med = best_of(lambda: cost_model(ops, hw), repeat=7)
        _, cpu = best_cpu(lambda: cost_model(ops, hw), repeat=7)
        gc, vc = cost_model(ops, hw)
        step = (gc.time_s.sum() + vc.time_s.sum()) * 1e3
        worst, worst_cpu = max(worst, best), max(worst_cpu, cpu)
        print(f"   {name:<18}{len(ops):>6}{best * 1e3:>10.2f}{med * 1e3:>11.2f}{cpu * 1e3:>8.2f}{step:>17.1f}")
    print(f"   slowest model: {worst * 1e3:.2f} ms wall, {worst_cpu * 1e3:.2f} ms CPU (target < 5 ms) -> "
          f"{'OK' if worst < 5e-3 else 'OK in CPU time (wall time is the load)' if worst_cpu < 5e-3 else 'MISSED'}")


def sweep_10k():
    from models.zoo import build

    ops = build("resnet50").training_ops(batch=32)
    rng = np.random.default_rng(0)
    H = 10_000
    hw = HardwareArray.from_dict(dict(
        rows=rng.choice([8, 16, 32, 64, 128, 256], H), cols=rng.choice([8, 16, 32, 64, 128, 256], H),
        dataflow=rng.choice(["os", "ws", "is"], H), ifmap_kb=rng.choice([64, 128, 256, 512, 1024], H),
        filter_kb=rng.choice([64, 128, 256, 512, 1024], H), ofmap_kb=rng.choice([64, 128, 256, 512], H),
        bandwidth_gbps=rng.uniform(10, 200, H), clock_ghz=rng.choice([0.5, 1.0, 1.5], H)))
    best, cpu = best_cpu(lambda: cost_model(ops, hw, sum_over_phase=True), repeat=3)
    print(f"2) 10,000 configurations x resnet50 ({len(ops)} ops: {int((ops.repeat > 0).sum())} GEMM, "
          f"{int((ops.repeat == 0).sum())} vector), reduced per phase: best {best:.3f} s wall, {cpu:.3f} s CPU "
          f"(target < 2 s; {load()}) -> "
          f"{'OK' if best < 2 else 'OK in CPU time (wall time is the load)' if cpu < 2 else 'MISSED'}")


def scalesim_ratio():
    try:
        from scalesim.scale_sim import scalesim as ScaleSim
    except ImportError:
        print("3) scalesim not importable here: skipped (run with /tmp/scalesim-venv/bin/python, see "
              "tests/data/scalesim/README.md)")
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gen_scalesim_reference import CONFIG

    # a resnet-like 3x3 conv: 28x28x64 -> 64 filters (26x26 output), 32x32 WS array
    m, k, n, rows, cols, df = 26 * 26, 3 * 3 * 64, 64, 32, 32, "ws"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "c.cfg").write_text(CONFIG.format(rows=rows, cols=cols, dataflow=df, ifmap_kb=64, filter_kb=64,
                                                 ofmap_kb=64))
        (tmp / "t.csv").write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                                   "Channels, Num Filter, Strides,\nl0, 28, 28, 3, 3, 64, 64, 1,\n")
        (tmp / "l.csv").write_text("Layer name, IFMAP SRAM Bank Num, IFMAP SRAM Bank Port,\n")
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            sim = ScaleSim(save_disk_space=True, verbose=False, config=str(tmp / "c.cfg"),
                           topology=str(tmp / "t.csv"), layout=str(tmp / "l.csv"), input_type_gemm=False)
            sim.run_scale(top_path=str(tmp))
        t_sim = time.perf_counter() - t0
        layer = sim.runner.single_layer_sim_object_list[0]
        layer.calc_report_data()
    hw = Hardware(rows=rows, cols=cols, dataflow=df)
    ours, _ = best_of(lambda: gemm_cost([m], [k], [n], hw=hw), repeat=20)
    cyc = gemm_cost([m], [k], [n], hw=hw).compute_cycles[0]
    print(f"3) one conv layer (M={m} K={k} N={n}, 32x32 WS): SCALE-Sim {t_sim:.2f} s, ours {ours * 1e6:.0f} us "
          f"-> {t_sim / ours:,.0f}x faster; compute cycles SCALE-Sim {int(layer.total_cycles)}, ours {int(cyc)}")


#: earlier versions of the model to time against: label -> git commit
EARLIER = {"before the per-dataflow energy model": "3688f8b",
           "that model before this speed-up": "be1186f"}

_REPO = Path(__file__).resolve().parents[1]

#: run in a subprocess with an earlier accel/ first on the path: time gemm_cost on the saved inputs
_EARLIER_SCRIPT = """
import inspect, sys, time, numpy as np
from accel import Hardware, HardwareArray, gemm_cost
d = np.load(sys.argv[1], allow_pickle=True)
hw = HardwareArray.from_dict(d["hw"].item())
one = Hardware.from_dict(d["one"].item())
kw = dict(include_leakage=False)
if "im2col" in inspect.signature(gemm_cost).parameters:
    from accel.gemm import Im2col
    kw["im2col"] = Im2col.from_table(d["geo"])
def best(f, n):
    wall, cpu = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            f()
        wall.append((time.perf_counter() - t0) / n); cpu.append((time.process_time() - c0) / n)
    return min(wall), min(cpu)
print(*best(lambda: gemm_cost(d["M"], d["K"], d["N"], d["R"], hw=hw, **kw), 1),
      *best(lambda: gemm_cost(d["M"], d["K"], d["N"], d["R"], hw=one, sum_over=d["W"], **kw), 50))
"""


def _quickstart():
    from dse.search.strategies.hybrid import hardware_candidates, hardware_of
    from dse.search.studyfile import load_study

    spec = load_study(_REPO / "studies" / "quickstart.toml")
    cands = hardware_candidates(spec, max_points=spec.inner_points, seed=0)
    hws = [h for h in (hardware_of(spec, c) for c in cands) if h is not None]
    return spec, HardwareArray.from_list(hws)


def _earlier(commit: str, npz: Path) -> list[float] | None:
    """(grid wall, grid CPU, one-configuration wall, one-configuration CPU) seconds of an earlier accel/."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            arch = subprocess.run(["git", "-C", str(_REPO), "archive", commit, "accel"], capture_output=True,
                                  check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arch, check=True)
            env = {**os.environ, "PYTHONPATH": tmp}
            out = subprocess.run([sys.executable, "-c", _EARLIER_SCRIPT, str(npz)], capture_output=True,
                                 text=True, check=True, env=env, cwd=tmp).stdout.split()
        except (OSError, subprocess.CalledProcessError):
            return None
    return [float(x) for x in out]


def quickstart_grid():
    from dataclasses import replace

    from dse.evaluation.evaluator import evaluate_hardware, hardware_metrics
    from models.surrogate import SurrogateConfig
    from models.zoo import build

    spec, hw = _quickstart()
    ops = build("resnet18", dataset="cifar10").training_ops(batch=spec.base.workload.batch)
    g = ops.repeat > 0
    geo = op_im2col(ops, g)
    args = (ops.M[g], ops.K[g], ops.N[g], ops.repeat[g])
    one = Hardware(rows=32, cols=32, dataflow="ws", ifmap_kb=128, filter_kb=128, ofmap_kb=64)
    phases = np.unique(ops.phase[g])
    W = (ops.phase[g][:, None] == phases[None, :]).astype(float)
    print(f"4) resnet18/cifar10's {int(g.sum())} training GEMMs (batch 128), gemm_cost: over the quick start's "
          f"hardware grid ({len(hw)} points), and on one configuration (32x32 WS) reduced per phase "
          f"(best of 5; {load()}):")
    grid = best_cpu(lambda: gemm_cost(*args, hw=hw, include_leakage=False, im2col=geo))
    single = best_cpu(lambda: [gemm_cost(*args, hw=one, include_leakage=False, im2col=geo, sum_over=W)
                               for _ in range(50)])
    ours = [grid[0], grid[1], single[0] / 50, single[1] / 50]
    print(f"   {'':<48}{'grid wall':>10}{'grid CPU':>10}{'one wall':>10}{'one CPU':>10}")
    print(f"   {'this version':<48}{ours[0]:>9.3f}s{ours[1]:>9.3f}s{ours[2] * 1e3:>8.2f}ms{ours[3] * 1e3:>8.2f}ms")
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "in.npz"
        np.savez(npz, M=args[0], K=args[1], N=args[2], R=args[3], geo=np.asarray(ops.im2col)[g], W=W,
                 hw=np.array(hw.to_dict(), dtype=object), one=np.array(one.to_dict(), dtype=object))
        for label, commit in EARLIER.items():
            r = _earlier(commit, npz)
            if r is None:
                print(f"   {label + ' ' + commit:<48} skipped (git history not available)")
                continue
            print(f"   {label + ' ' + commit:<48}{r[0]:>9.3f}s{r[1]:>9.3f}s{r[2] * 1e3:>8.2f}ms{r[3] * 1e3:>8.2f}ms"
                  f"   this version {r[1] / ours[1]:.2f}x (grid) / {r[3] / ours[3]:.2f}x (one) as fast, CPU")
    tr = {**spec.base.training.to_dict(), "pred_width": 32, "warmup": 0.1}
    cfg = replace(spec.base, training=SurrogateConfig.from_dict(tr), seeds=1)
    hardware_metrics(cfg, hw, 0.3)  # warm the per-model caches (op tables, plans, the reference)
    wall, cpu = best_cpu(lambda: hardware_metrics(cfg, hw, 0.3), repeat=3)
    pts = [hw[i] for i in range(0, len(hw), max(1, len(hw) // spec.front_size))][:spec.front_size]
    w2, c2 = best_cpu(lambda: [evaluate_hardware(replace(cfg, hardware=h), 0.3) for h in pts], repeat=3)
    print(f"   per training setting of the hybrid search: hardware_metrics over the grid {wall:.3f} s wall "
          f"{cpu:.3f} s CPU; evaluate_hardware for {len(pts)} front points {w2:.3f} s wall {c2:.3f} s CPU")


def main():
    try:
        import models.zoo  # noqa: F401 - availability probe
        have_zoo = True
    except ImportError as exc:
        print(f"models.zoo not importable ({exc}): zoo benchmarks skipped")
        have_zoo = False
    if have_zoo:
        zoo_one_config()
        sweep_10k()
    scalesim_ratio()
    if have_zoo:
        quickstart_grid()


if __name__ == "__main__":
    main()
