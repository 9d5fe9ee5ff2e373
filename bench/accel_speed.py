"""Speed of the accelerator model (prints figures; not a timed test).

    .venv/bin/python bench/accel_speed.py

1. one hardware configuration over every zoo model's training ops (all GEMM and vector rows), batch 32:
   target < 5 ms per model;
2. 10,000 random configurations over resnet50's training ops (GEMMs and vector ops, reduced per
   configuration and phase with ``sum_over``): target < 2 s;
3. when ``scalesim`` is importable (e.g. /tmp/scalesim-venv/bin/python with the repo on PYTHONPATH), the
   ratio of SCALE-Sim's time to ours on the same layer.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel import Hardware, HardwareArray, gemm_cost, op_im2col, vector_cost  # noqa: E402


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times), statistics.median(times)


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
    print(f"   {'model':<18}{'ops':>6}{'best ms':>10}{'median ms':>11}{'step ms (model)':>17}")
    worst = 0.0
    for name in names():
        ops = build(name).training_ops(batch=32)
        best, med = best_of(lambda: cost_model(ops, hw), repeat=7)
        gc, vc = cost_model(ops, hw)
        step = (gc.time_s.sum() + vc.time_s.sum()) * 1e3
        worst = max(worst, best)
        print(f"   {name:<18}{len(ops):>6}{best * 1e3:>10.2f}{med * 1e3:>11.2f}{step:>17.1f}")
    print(f"   slowest model: {worst * 1e3:.2f} ms (target < 5 ms) -> {'OK' if worst < 5e-3 else 'MISSED'}")


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
    best, med = best_of(lambda: cost_model(ops, hw, sum_over_phase=True), repeat=3)
    print(f"2) 10,000 configurations x resnet50 ({len(ops)} ops: {int((ops.repeat > 0).sum())} GEMM, "
          f"{int((ops.repeat == 0).sum())} vector), reduced per phase: best {best:.3f} s, median {med:.3f} s "
          f"(target < 2 s) -> {'OK' if best < 2 else 'MISSED'}")


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


def main():
    try:
        import models.zoo  # noqa: F401
        have_zoo = True
    except ImportError as exc:
        print(f"models.zoo not importable ({exc}): zoo benchmarks skipped")
        have_zoo = False
    if have_zoo:
        zoo_one_config()
        sweep_10k()
    scalesim_ratio()


if __name__ == "__main__":
    main()
