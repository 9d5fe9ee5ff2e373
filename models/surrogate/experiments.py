"""The experiments behind the tables of ``docs/surrogate.md``.

``python -m models.surrogate.experiments [--seeds N]`` re-runs them (cached, so a second run is instant) and
prints the Markdown tables. Every figure is a mean over paired seeds 0..N-1 with its sample standard
deviation; differences (drop, gain) are computed per seed, then averaged.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Sequence

from models.surrogate.config import SurrogateConfig
from models.surrogate.evaluate import _mean, _run, _std, evaluate

__all__ = ["row", "oracle_row", "tables"]


def row(label: str, cfg: SurrogateConfig, seeds: Sequence[int]) -> dict[str, Any]:
    d = evaluate(cfg, seeds=seeds).to_dict()
    d["label"] = label
    return d


def oracle_row(label: str, cfg: SurrogateConfig, seeds: Sequence[int], kind: str = "oracle") -> dict[str, Any]:
    """A diagnostic run against its null control: ``oracle`` (GP steps apply the true gradient of an
    independent batch) or ``stale`` (GP steps apply the layer's last true gradient)."""
    acc, bp, null, gp = [], [], [], []
    for s in seeds:
        b, _ = _run(cfg, "bp", s, True)
        o, _ = _run(cfg, kind, s, True)
        n, _ = _run(cfg, "null", s, True, replay_from=o)
        acc.append(o["accuracy"])
        bp.append(b["accuracy"])
        null.append(n["accuracy"])
        gp.append(o["gp_fraction"])
    drop = [b - a for a, b in zip(acc, bp)]
    gain = [a - n for a, n in zip(acc, null)]
    return {
        "label": label, "accuracy": _mean(acc), "accuracy_std": _std(acc), "accuracy_bp": _mean(bp),
        "accuracy_null": _mean(null), "accuracy_null_std": _std(null), "accuracy_drop": _mean(drop),
        "accuracy_drop_std": _std(drop), "predictor_gain": _mean(gain), "predictor_gain_std": _std(gain),
        "gp_fraction": _mean(gp), "cos": None, "relerr": None, "predictor_params": 0,
    }


def _f(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| setting | GP fraction | accuracy | BP | null | drop | gain | cos | relerr | pred. params |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['label']} | {r['gp_fraction']:.2f} | {r['accuracy']:.2f} ± {r['accuracy_std']:.2f} | "
            f"{r['accuracy_bp']:.2f} | {r['accuracy_null']:.2f} ± {r['accuracy_null_std']:.2f} | "
            f"{r['accuracy_drop']:.2f} ± {r['accuracy_drop_std']:.2f} | "
            f"{r['predictor_gain']:+.2f} ± {r['predictor_gain_std']:.2f} | {_f(r['cos'], '.3f')} | "
            f"{_f(r['relerr'], '.3f')} | {r['predictor_params']} |"
        )
    return "\n".join(lines)


def tables(seeds: Sequence[int]) -> dict[str, str]:
    base = SurrogateConfig()
    adaptive = base.replace(adaptive=True)
    adaptive_row = row("adaptive (cos>=0.3, relerr<=1.0, GP 1..16, BP 4)", adaptive, seeds)
    frac = round(adaptive_row["gp_fraction"], 2)
    out = {}
    out["default"] = markdown([
        adaptive_row,
        row(f"fixed schedule, gp_fraction={frac}", base.replace(adaptive=False, gp_fraction=frac), seeds),
        row("adaptive, reckless thresholds (cos>=-1, relerr<=10)",
            adaptive.replace(cos_threshold=-1.0, relerr_threshold=10.0), seeds),
        row("adaptive, undersized predictor (width 2, head 4)", adaptive.replace(pred_width=2, pred_head=4), seeds),
        row("default (fixed 0.2)", base, seeds),
        row("default, undersized predictor (width 2, head 4)", base.replace(pred_width=2, pred_head=4), seeds),
        oracle_row("default schedule, oracle gradient", base, seeds),
    ])
    fixed = []
    for f in (0.2, 0.35, 0.5, 0.65):
        cfg = base.replace(adaptive=False, gp_fraction=f)
        fixed.append(row(f"adagp, fixed {f}", cfg, seeds))
        fixed.append(row(f"adagp + layer code, fixed {f}", cfg.replace(pred_layer_code=True), seeds))
        fixed.append(row(f"adagp, undersized, fixed {f}", cfg.replace(pred_width=2, pred_head=4), seeds))
    out["fixed"] = markdown(fixed)
    half = base.replace(adaptive=False, gp_fraction=0.5)
    out["schemes"] = markdown([
        row("adagp (default predictor)", half, seeds),
        row("adagp, pred_lr 0.01", half.replace(pred_lr=0.01), seeds),
        row("adagp, 2 x 256 hidden", half.replace(pred_hidden_layers=2, pred_width=256), seeds),
        row("adagp, pred_input 16", half.replace(pred_input=16), seeds),
        row("adagp + AGENT correction", half.replace(agent=True), seeds),
        row("adagp, classifier predicted too", half.replace(true_output_grad=False), seeds),
        row("dni (cDNI, linear modules)", half.replace(scheme="dni"), seeds),
        oracle_row("oracle: true gradient of an independent batch", half, seeds),
    ])
    out["diagnosis"] = markdown([
        row("adagp, fixed 0.2 (default)", base, seeds),
        row("adagp, deviation input, fixed 0.2", base.replace(pred_features="deviation"), seeds),
        row("adagp, deviation input + factored output, fixed 0.2",
            base.replace(pred_features="deviation", pred_output="factored"), seeds),
        row("adagp, fixed 0.4", base.replace(gp_fraction=0.4), seeds),
        row("adagp, deviation input, fixed 0.4", base.replace(gp_fraction=0.4, pred_features="deviation"), seeds),
        row("adagp, deviation input, fixed 0.5", half.replace(pred_features="deviation"), seeds),
        row("adagp, deviation + factored, fixed 0.5", half.replace(pred_features="deviation", pred_output="factored"),
            seeds),
        row("adagp, deviation + factored, 4 Adam steps per BP batch, fixed 0.5",
            half.replace(pred_features="deviation", pred_output="factored", pred_steps=4), seeds),
        row("adagp, level + deviation + factored, fixed 0.5",
            half.replace(pred_features="both", pred_output="factored"), seeds),
        row("adagp, factored output (level input), fixed 0.5", half.replace(pred_output="factored"), seeds),
        row("adagp, fixed 0.5, BP phases of 1 step", half.replace(bp_phase=1), seeds),
        oracle_row("stale: last true gradient, fixed 0.5, BP phases of 4", half, seeds, "stale"),
        oracle_row("stale: last true gradient, fixed 0.5, BP phases of 1", half.replace(bp_phase=1), seeds, "stale"),
        oracle_row("stale: last true gradient, fixed 0.4, BP phases of 1",
                   base.replace(gp_fraction=0.4, bp_phase=1), seeds, "stale"),
    ])
    out["longer"] = markdown([
        row("adagp, fixed 0.5, 20 epochs", half.replace(epochs=20), seeds),
        oracle_row("oracle, fixed 0.5, 20 epochs", half.replace(epochs=20), seeds),
    ])
    out["digits"] = markdown([
        row("digits cnn, 5 epochs, adagp fixed 0.5", half.replace(task="digits", epochs=5), seeds),
    ])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    for name, text in tables(range(args.seeds)).items():
        print(f"### {name}\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
