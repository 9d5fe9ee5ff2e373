"""Each gradient scheme's cost per training step on the accelerator (deterministic figures, not timings).

    .venv/bin/python bench/scheme_costs.py [--markdown]

For the surrogate's default network (MNIST-1D 1-D CNN, batch 32), ResNet-18 / CIFAR-10 (batch 128) and
ResNet-50 / ImageNet (batch 32), on the quick start's reference accelerator (32x32 weight-stationary, 3 x 128
KiB, 25.6 GB/s, 1 GHz) with a dedicated 16x16 predictor unit of 48 KiB, per scheme and size: its own
parameters; a GP step's time, energy, extra MACs (feedback / heads / modules / predictor), main-array
backward MACs (weight-gradient GEMMs the scheme still computes) and the activations it keeps (and how much
of them goes off chip); the BP-phase step's overhead over plain BP; and the speed-up over plain BP on the
same hardware (``speedup_same_hw``) at GP fractions 0.2 / 0.4 / 0.5 with a 10% warm-up -- for the zoo
models the figure ``dse evaluate`` reports (``dse.evaluation.evaluator.evaluate_hardware``), for the surrogate's network
the same formula (``accel.schedule.job_cost``).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel import Hardware
from accel.schedule import job_cost, step_costs
from dse.config.configuration import Configuration
from dse.config.workload import Workload
from dse.evaluation.evaluator import evaluate_hardware
from models.schemes import DNIShape, dni_ops, scheme_plan
from models.surrogate import SurrogateConfig
from models.surrogate.workload import surrogate_net
from models.zoo import build

HW = Hardware(rows=32, cols=32, dataflow="ws", ifmap_kb=128.0, filter_kb=128.0, ofmap_kb=128.0,
              bandwidth_gbps=25.6, clock_ghz=1.0, vector_width=32, pred_rows=16, pred_cols=16, pred_kb=48.0)
FRACTIONS = (0.2, 0.4, 0.5)
WARMUP = 0.1

#: (label, training knobs) per row
SETTINGS = [
    ("adagp (default predictor)", {"scheme": "adagp"}),
    ("efb, rank 1", {"scheme": "efb", "efb_rank": 1}),
    ("efb, rank 2", {"scheme": "efb", "efb_rank": 2}),
    ("efb, rank 5", {"scheme": "efb", "efb_rank": 5}),
    ("efb, rank 10", {"scheme": "efb", "efb_rank": 10}),
    ("local, width 1", {"scheme": "local", "local_width": 1}),
    ("local, width 2", {"scheme": "local", "local_width": 2}),
    ("local, width 4", {"scheme": "local", "local_width": 4}),
    ("local, width 8", {"scheme": "local", "local_width": 8}),
    ("dni (dense modules)", {"scheme": "dni"}),
    ("null", {"scheme": "null"}),
    ("null_momentum", {"scheme": "null_momentum"}),
    ("truncated", {"scheme": "truncated"}),
]

#: (title, network builder, zoo workload or None, batch, steps of the job)
NETS = [
    ("surrogate default (MNIST-1D 1-D CNN, 25 channels), batch 32", lambda: surrogate_net("cnn", 25, "mnist1d"),
     None, 32, 1250),
    ("ResNet-18 / CIFAR-10, batch 128", lambda: build("resnet18", dataset="cifar10"),
     {"models": ["resnet18"], "dataset": "cifar10", "batch": 128, "dataset_size": 50000, "epochs": 30}, 128,
     None),
    ("ResNet-50 / ImageNet, batch 32", lambda: build("resnet50", dataset="imagenet"),
     {"models": ["resnet50"], "dataset": "imagenet", "batch": 32, "dataset_size": 1281167, "epochs": 90}, 32,
     None),
]


def _knobs(d: dict) -> SurrogateConfig:
    return SurrogateConfig().replace(**d)


def conv_dni(cfg, net, batch):
    """A what-if beside the surrogate's dense modules: DNI with 3x3 convolutional modules (not trainable
    in the surrogate), with the dense plan's other ops (the classifier's true gradient)."""
    plan = scheme_plan(cfg, net, batch)
    train, params, _ = dni_ops(net, batch, DNIShape(kernel=3), train=True)
    gp, _, _ = dni_ops(net, batch, DNIShape(kernel=3), train=False)
    cols = ("layer", "phase", "M", "K", "N", "repeat", "vec_elems", "stash_bytes")
    keep = plan.gp.layer < 0  # the whole step's ops
    rows = list(zip(*[getattr(gp, c).tolist() for c in cols])) + \
        list(zip(*[getattr(plan.gp, c)[keep].tolist() for c in cols]))
    gp = type(gp).from_rows(net, batch, gp.optimizer, gp.word_bytes, rows)
    return replace(plan, train=train, gp=gp, params=params)


def rows_for(title, make, workload, batch, steps):
    net = make()
    ops = net.training_ops(batch)
    w = Workload.from_dict(workload) if workload else None
    n_steps = w.steps if w else steps
    out = []
    for label, d in SETTINGS + [("dni, 3x3 conv modules (what-if)", {"scheme": "dni", "conv": True})]:
        conv = d.pop("conv", False)
        cfg = _knobs(d)
        plan = conv_dni(cfg, net, batch) if conv else scheme_plan(cfg, net, batch)
        s = step_costs(ops, plan=plan, hw=HW)
        bp_job = job_cost(s, n_steps=n_steps, scheme="bp")
        speed = []
        for f in FRACTIONS:
            j = job_cost(s, n_steps=n_steps, warmup_frac=WARMUP, gp_fraction=f)
            sp = float(bp_job.time_s / j.time_s)
            if w is not None and not conv:  # the figure `dse evaluate` gives, checked to be the same formula
                c = Configuration(workload=w, training=cfg.replace(warmup=WARMUP), hardware=HW, reference=HW,
                                  gp_fraction=f)
                ev = evaluate_hardware(c, f)["models"][0]["speedup_same_hw"]
                assert abs(ev - sp) <= 1e-9 * sp, (label, f, ev, sp)
            speed.append(sp)
        keep = np.zeros(len(net.layers), dtype=bool)
        keep[list(plan.gp_stash)] = True
        kept = float(ops.stash_bytes[keep[ops.layer]].sum())
        gp_bwd = (np.isin(ops.phase, ("wgrad",)) & np.isin(ops.layer, plan.gp_wgrad)) | \
                 (np.isin(ops.phase, ("igrad",)) & np.isin(ops.layer, plan.gp_igrad))
        out.append({
            "setting": label,
            "params": plan.params + plan.state,
            "gp_ms": s.scheme_gp.time_s * 1e3,
            "gp_mj": s.scheme_gp.energy_total_pj * 1e-9,
            "bp_ms": s.bp.time_s * 1e3,
            "extra_gmacs": float(plan.gp.macs.sum()) / 1e9,
            "bwd_gmacs": float(ops.macs[gp_bwd].sum()) / 1e9,
            "stash_mb": kept / 1e6,
            "stash_off_mb": float(s.scheme_gp.dram_bytes - step_costs(ops, plan=replace(plan, gp_stash=()),
                                                                        hw=HW).scheme_gp.dram_bytes) / 2e6,
            "bp_overhead": float(s.scheme_bp.time_s / s.bp.time_s - 1.0),
            "speedup": speed,
        })
    return out


def main(markdown: bool) -> None:
    for title, make, workload, batch, steps in NETS:
        rows = rows_for(title, make, workload, batch, steps)
        print(f"\n{title}: plain BP step {rows[0]['bp_ms']:.4g} ms\n")
        head = ["setting", "params + state", "GP step ms", "GP step mJ", "extra GMAC", "wgrad GMAC",
                "kept MB (off chip)", "BP-phase step", "speed-up at GP 0.2 / 0.4 / 0.5"]
        if markdown:
            print("| " + " | ".join(head) + " |")
            print("|---|" + "---:|" * (len(head) - 1))
        for r in rows:
            cells = [r["setting"], f"{r['params']:.3g}", f"{r['gp_ms']:.4g}", f"{r['gp_mj']:.4g}",
                     f"{r['extra_gmacs']:.3g}", f"{r['bwd_gmacs']:.3g}",
                     f"{r['stash_mb']:.3g} ({r['stash_off_mb']:.3g})", f"{100 * r['bp_overhead']:+.1f}%",
                     " / ".join(f"{x:.3f}x" for x in r["speedup"])]
            print(("| " + " | ".join(cells) + " |") if markdown else "  ".join(cells))


if __name__ == "__main__":
    main("--markdown" in sys.argv[1:])
