"""The figures of docs/pipeline.md: every schedule, with and without ADA-GP, for ResNet-50 and the
Transformer on 4 and 8 accelerators; a Gantt picture; the 2BP arithmetic.

    .venv/bin/python bench/pipeline_figures.py [--out docs/img]

Prints markdown tables (throughput, bubble rate, peak activation memory per device, speed-ups) computed by
``dse.evaluation.evaluator.evaluate_hardware`` -- the numbers a study computes -- and writes
``pipeline-gantt.png`` (ResNet-50 on 4 accelerators: 1F1B, ZB-H1, ZB-H2, 2BP and an ADA-GP GP step, to one
time scale).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accel import Hardware
from accel.pipeline import SCHEDULES, StageCosts, simulate
from dse.config.configuration import Configuration
from dse.config.parallel import ParallelConfig
from dse.config.workload import Workload
from dse.evaluation.evaluator import evaluate_hardware
from models.surrogate import SurrogateConfig

#: one accelerator of the pipeline: 64x64 weight-stationary, 3 x 256 KiB, 51.2 GB/s, a time-shared predictor
HW = Hardware(rows=64, cols=64, dataflow="ws", ifmap_kb=256.0, filter_kb=256.0, ofmap_kb=256.0,
              bandwidth_gbps=51.2)
BATCH, MICRO = 64, 16
MODELS = {"resnet50": "ResNet-50 (ImageNet)", "transformer_base": "Transformer base (128+128 tokens)"}


def config(model: str, stages: int, schedule: str, gp: float | None, chunks: int = 1) -> Configuration:
    training = SurrogateConfig(scheme="bp") if gp is None else SurrogateConfig(scheme="adagp", warmup=0.0)
    par = ParallelConfig(stages=stages, microbatches=MICRO, schedule=schedule, chunks=chunks, link_gbps=50.0,
                         link_latency_us=5.0)
    return Configuration(workload=Workload(models=(model,), batch=BATCH, dataset_size=BATCH * 1000, epochs=1),
                         training=training, hardware=HW, reference=HW, parallel=par)


def table(model: str, stages: int) -> list[str]:
    c1 = config(model, 1, "1f1b", None)
    full = evaluate_hardware(Configuration(workload=c1.workload, training=SurrogateConfig(scheme="bp"),
                                           hardware=HW, reference=HW), 0.0)["summary"]
    one = evaluate_hardware(c1, 0.0)["summary"]  # one device, the same micro-batches (gradient accumulation)
    base = evaluate_hardware(config(model, stages, "1f1b", None), 0.0)["summary"]["throughput"]
    lines = ["| schedule | ADA-GP GP fraction | samples/s | vs 1F1B (BP) | vs one device (BP, same micro-batches) | "
             "bubble rate | peak activations per device (MB) | energy per sample (mJ) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, sch in SCHEDULES.items():
        v = 2 if sch.chunked else 1
        for gp in (None, 0.2, 0.5):
            s = evaluate_hardware(config(model, stages, name, gp, v), gp or 0.0)["summary"]
            label = name + (f" (v = {v})" if v > 1 else "")
            lines.append(f"| {label} | {'BP only' if gp is None else gp} | {s['throughput']:.1f} | "
                         f"{s['throughput'] / base:.2f} | {s['throughput'] / one['throughput']:.2f} | "
                         f"{s['bubble_rate']:.3f} | {s['peak_act_bytes'] / 1e6:.0f} | "
                         f"{1e3 * s['energy_j'] / (BATCH * 1000):.1f} |")
    lines.append(f"\nOne device, plain BP: {one['throughput']:.1f} samples/s with the {MICRO} micro-batches in turn "
                 f"({one['peak_act_bytes'] / 1e6:.0f} MB of activations), {full['throughput']:.1f} samples/s with the "
                 f"batch of {BATCH} at once ({full['peak_act_bytes'] / 1e6:.0f} MB).")
    return lines


def two_bp() -> list[str]:
    lines = ["| p | m | 1F1B / 2BP step time, F = B = W | W / (F + B) that 1.70x would need |", "|---|---|---|---|"]
    for p in (4,):
        for m in (1, 2, 4, 8, 16):
            c = StageCosts.uniform(p, 1.0, 1.0, 1.0)
            r = simulate(c, "1f1b", m).makespan / simulate(c, "2bp", m).makespan
            # (m+p-1)(x+W) / ((m+p-1)x + mW) = 1.7  ->  W/x = 0.7 (m+p-1) / ((m+p-1) - 1.7 m)
            k = m + p - 1
            need = 0.7 * k / (k - 1.7 * m) if k > 1.7 * m else float("inf")
            lines.append(f"| {p} | {m} | {r:.3f} | {'impossible' if need == float('inf') else f'{need:.2f}'} |")
    return lines


def gantt_png(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dse.cli.pipeline import model_steps

    colors = {"F": "#4c72b0", "B": "#dd8452", "BW": "#dd8452", "W": "#55a868", "P": "#8172b3", "U": "#937860",
              "R": "#cccccc"}
    panels = []
    for name in ("1f1b", "zb-h1", "zb-h2", "2bp"):
        bp, _, _ = model_steps(config("resnet50", 4, name, None), name, 0.0)
        panels.append((f"{name}, BP step", bp))
    _, gp, _ = model_steps(config("resnet50", 4, "1f1b", 0.5), "1f1b", 0.5)
    panels.append(("ADA-GP GP step (any schedule)", gp))
    t_max = max(s.makespan for _, s in panels) * 1e3
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.25 * len(panels) + 0.6), sharex=True)
    for ax, (title, s) in zip(axes, panels):
        for r in s.timeline:
            if r.end > r.start:
                ax.barh(r.device, (r.end - r.start) * 1e3, left=r.start * 1e3, height=0.8,
                        color=colors[r.kind], edgecolor="white", linewidth=0.3)
        ax.set_yticks(range(s.stages), [f"dev {d}" for d in range(s.stages)])
        ax.invert_yaxis()
        ax.set_xlim(0, t_max)
        ax.set_title(f"{title}: span {s.span * 1e3:.0f} ms, bubble {s.bubble_rate:.2f}", fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel("ms")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[k]) for k in ("F", "B", "W", "P", "U")]
    fig.legend(handles, ["forward", "backward (input gradient; 1F1B: whole)", "weight gradient",
                         "predictor (GP step)", "update"], loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(f"ResNet-50, batch {BATCH} as {MICRO} micro-batches, on 4 accelerators "
                 "(64x64 WS, 51.2 GB/s, 50 GB/s links)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "pipeline-gantt.png", dpi=110)
    print(f"\nwrote {out / 'pipeline-gantt.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    args = ap.parse_args()
    for model, title in MODELS.items():
        for p in (4, 8):
            print(f"\n### {title} on {p} accelerators\n")
            print("\n".join(table(model, p)))
    print("\n### 2BP against 1F1B, schedule only\n")
    print("\n".join(two_bp()))
    gantt_png(args.out)


if __name__ == "__main__":
    main()
