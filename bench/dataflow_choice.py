"""Which dataflow wins, and why: the figures behind docs/accelerator.md ("Which dataflow the fronts choose").

    .venv/bin/python bench/dataflow_choice.py

1. For ResNet-18/CIFAR-10 (``studies/dataflows.toml``) and transformer_base (the same grid), one ADA-GP
   setting (GP fraction 0.3, predictor width 32): every hardware point of the study's grid costed with each
   dataflow (``dse.evaluation.evaluator.hardware_metrics``); how often each dataflow has the lowest job energy and the
   highest speed-up, and the median WS/OS and IS/OS ratios.
2. The GEMMs of one training step on a 32x32 array (128 KiB ifmap and filter SRAM, 25.6 GB/s) as the ofmap
   SRAM grows: WS/OS and IS/OS ratios of energy, time and DRAM bytes (``accel.gemm_cost``).

3. What-if: ResNet-18/CIFAR-10's input-gradient GEMMs of stride-1 3x3 convolutions costed as transposed
   convolutions (``dX = im2col(dY) @ W'``: K = out_c * 9, N = in_c, dY read as a raw input) instead of the
   lowering's im2col view (``dX_col = dY @ W^T``, N = in_c * 9), by dataflow.

The fronts themselves come from ``dse run studies/dataflows.toml`` (see that file's header).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from accel import Hardware, HardwareArray, gemm_cost, op_im2col  # noqa: E402 - after the sys.path insert

STUDY = REPO / "studies" / "dataflows.toml"
WORKLOADS = {"resnet18/cifar10": {"models": ["resnet18"], "dataset": "cifar10", "batch": 128},
             "transformer_base": {"models": ["transformer_base"], "batch": 32}}


def _grid(space: dict, base: dict) -> list[dict]:
    """Every hardware point of a [space.hardware] table (bundles expanded), without the dataflow."""
    names = [k for k in space if k != "dataflow"]
    out = []
    for combo in itertools.product(*(space[k] for k in names)):
        hw = dict(base)
        for k, v in zip(names, combo):
            hw.update(v if isinstance(v, dict) else {k: v})
        out.append(hw)
    return out


def grid_comparison():
    from dataclasses import replace

    from dse.config.schema import load_toml
    from dse.config.workload import Workload
    from dse.evaluation.evaluator import hardware_metrics
    from dse.search.studyfile import load_study
    from models.surrogate import SurrogateConfig

    spec = load_study(STUDY)
    raw = load_toml(STUDY)
    points = _grid(raw["space"]["hardware"], raw.get("hardware", {}))
    dfs = raw["space"]["hardware"]["dataflow"]
    print(f"1) {len(points)} hardware points x {len(dfs)} dataflows, GP fraction 0.3, predictor width 32")
    for label, wl in WORKLOADS.items():
        d = {**spec.base.workload.to_dict(), **wl}
        if "dataset" not in wl:
            d.pop("dataset", None)
        work = Workload.from_dict(d)
        training = SurrogateConfig.from_dict({**spec.base.training.to_dict(), "gp_fraction": 0.3,
                                              "pred_width": 32})
        cfg = replace(spec.base, training=training, workload=work)
        hws = HardwareArray.from_list([Hardware.from_dict({**p, "dataflow": d}) for d in dfs for p in points])
        m = hardware_metrics(cfg, hws, 0.3)
        e = m["energy_j"].reshape(len(dfs), -1)
        s = m["speedup"].reshape(len(dfs), -1)
        low_e = np.bincount(np.argmin(e, axis=0), minlength=len(dfs))
        high_s = np.bincount(np.argmax(s, axis=0), minlength=len(dfs))
        os_ = dfs.index("os")
        print(f"   {label}: lowest energy " + ", ".join(f"{d} {n}" for d, n in zip(dfs, low_e))
              + "; highest speed-up " + ", ".join(f"{d} {n}" for d, n in zip(dfs, high_s)))
        for i, d in enumerate(dfs):
            if i != os_:
                print(f"     {d}/os: energy median {np.median(e[i] / e[os_]):.2f} "
                      f"({np.min(e[i] / e[os_]):.2f}-{np.max(e[i] / e[os_]):.2f}), speed-up median "
                      f"{np.median(s[i] / s[os_]):.2f} ({np.min(s[i] / s[os_]):.2f}-{np.max(s[i] / s[os_]):.2f})")


def ofmap_sweep():
    from models.zoo import build

    print("2) one training step's GEMMs, 32x32 array, 128 KiB ifmap and filter SRAM, 25.6 GB/s, "
          "ratios to OS")
    print(f"   {'workload':<18}{'ofmap KiB':>10}{'WS energy':>11}{'WS time':>9}{'WS DRAM':>9}"
          f"{'IS energy':>11}{'IS time':>9}{'IS DRAM':>9}")
    for label, wl in WORKLOADS.items():
        net = build(wl["models"][0], dataset=wl.get("dataset"))
        ops = net.training_ops(batch=wl["batch"])
        g = ops.repeat > 0
        for ofm in (64, 128, 512, 2048, 8192):
            hw = HardwareArray.from_list([Hardware(rows=32, cols=32, dataflow=d, ifmap_kb=128, filter_kb=128,
                                                   ofmap_kb=ofm, bandwidth_gbps=25.6) for d in ("os", "ws", "is")])
            c = gemm_cost(ops.M[g], ops.K[g], ops.N[g], ops.repeat[g], hw=hw, im2col=op_im2col(ops, g),
                          include_leakage=False)
            E = c.energy_pj["total"].sum(1)
            T = c.total_cycles.sum(1)
            D = (c.dram_read_bytes + c.dram_write_bytes).sum(1)
            print(f"   {label:<18}{ofm:>10}" + "".join(f"{E[i] / E[0]:>11.2f}{T[i] / T[0]:>9.2f}{D[i] / D[0]:>9.2f}"
                                                  for i in (1, 2)))


def transposed_igrad():
    from accel.gemm import Im2col
    from models.zoo import build

    ops = build("resnet18", dataset="cifar10").training_ops(batch=128)
    t = np.asarray(ops.im2col)
    fwd = {int(ops.layer[i]): t[i] for i in np.flatnonzero((ops.phase == "fwd") & (t[:, 0] == 1))}
    rows = [i for i in np.flatnonzero(ops.phase == "igrad")
            if int(ops.layer[i]) in fwd and fwd[int(ops.layer[i])][6] == 1 and fwd[int(ops.layer[i])][4] > 1]
    M, K, N, R = ops.M[rows], ops.K[rows], ops.N[rows], ops.repeat[rows]
    g = np.array([fwd[int(ops.layer[i])] for i in rows])
    H, W, C, kh, kw, pad = g[:, 1], g[:, 2], g[:, 3], g[:, 4], g[:, 5], g[:, 8]
    one = np.ones(len(rows), dtype=np.int64)
    # dY (P x Q x out_c) padded by k - 1 - pad, convolved with the flipped kernel, gives dX (H x W x in_c)
    geo = Im2col(one, H + 2 * pad - kh + 1, W + 2 * pad - kw + 1, K, kh, kw, one, one, kh - 1 - pad,
                 kw - 1 - pad, one)
    print(f"3) what-if: resnet18/cifar10's {len(rows)} stride-1 3x3 input-gradient GEMMs (batch 128), 32x32, "
          f"128 KiB ifmap and filter SRAM, 25.6 GB/s")
    print(f"   {'ofmap KiB':>9}  {'costed as':<22}{'OS J':>7}{'WS/OS E':>9}{'IS/OS E':>9}{'WS/OS t':>9}"
          f"{'DRAM GB os/ws/is':>20}")
    for ofm in (64, 128, 512):
        hw = HardwareArray.from_list([Hardware(rows=32, cols=32, dataflow=d, ifmap_kb=128, filter_kb=128,
                                               ofmap_kb=ofm, bandwidth_gbps=25.6) for d in ("os", "ws", "is")])
        views = (("im2col view (today)", gemm_cost(M, K, N, R, hw=hw, include_leakage=False)),
                 ("transposed convolution", gemm_cost(M, K * kh * kw, C, R, hw=hw, include_leakage=False,
                                                      im2col=geo)))
        for label, c in views:
            E = c.energy_pj["total"].sum(1)
            T = c.total_cycles.sum(1)
            D = (c.dram_read_bytes + c.dram_write_bytes).sum(1) / 1e9
            print(f"   {ofm:>9}  {label:<22}{E[0] / 1e12:>7.3f}{E[1] / E[0]:>9.2f}{E[2] / E[0]:>9.2f}"
                  f"{T[1] / T[0]:>9.2f}{D[0]:>9.2f}/{D[1]:.2f}/{D[2]:.2f}")


if __name__ == "__main__":
    grid_comparison()
    ofmap_sweep()
    transposed_igrad()
