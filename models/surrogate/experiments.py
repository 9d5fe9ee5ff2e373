"""The experiments behind the tables of ``docs/surrogate.md``.

``python -m models.surrogate.experiments [--seeds N] [--first-seed S] [--only NAME ...]`` re-runs them
(cached, so a second run is instant) and prints the Markdown tables. Every figure is a mean over paired
seeds S..S+N-1 with its sample standard deviation; differences (drop, gains) are computed per seed, then
averaged. ``--only schemes`` prints just the gradient-scheme comparison (its tables schemes, controls, sizes,
adaptive, high); ``--only check --first-seed 5`` the check of the best settings on seeds nobody tuned on.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Sequence

from models.schemes.registry import CONTROLS, GAIN_KEYS
from models.surrogate.config import SurrogateConfig
from models.surrogate.evaluation import cached_run, evaluate
from models.surrogate.stats import mean, pm, std

__all__ = ["row", "oracle_row", "tables", "with_null", "gain_heads", "gain_cells", "control_cells"]


def row(label: str, cfg: SurrogateConfig, seeds: Sequence[int]) -> dict[str, Any]:
    d = evaluate(cfg, seeds=seeds).to_dict()
    d["label"] = label
    return d


def with_null(cfg: SurrogateConfig, kind: str, seed: int) -> tuple[dict, dict, dict]:
    """One seed's plain-BP run, its ``kind`` run and the null control replaying that run's BP/GP steps."""
    b, _ = cached_run(cfg, "bp", seed, True)
    r, _ = cached_run(cfg, kind, seed, True)
    n, _ = cached_run(cfg, "null", seed, True, replay_from=r)
    return b, r, n


def oracle_row(label: str, cfg: SurrogateConfig, seeds: Sequence[int], kind: str = "oracle") -> dict[str, Any]:
    """A diagnostic run against its null control: ``oracle`` (GP steps apply the true gradient of an
    independent batch) or ``stale`` (GP steps apply the layer's last true gradient)."""
    acc, bp, null, gp = [], [], [], []
    for s in seeds:
        b, o, n = with_null(cfg, kind, s)
        acc.append(o["accuracy"])
        bp.append(b["accuracy"])
        null.append(n["accuracy"])
        gp.append(o["gp_fraction"])
    drop = [b - a for a, b in zip(acc, bp)]
    gain = [a - n for a, n in zip(acc, null)]
    return {
        "label": label, "accuracy": mean(acc), "accuracy_std": std(acc), "accuracy_bp": mean(bp),
        "accuracy_null": mean(null), "accuracy_null_std": std(null), "accuracy_drop": mean(drop),
        "accuracy_drop_std": std(drop), "predictor_gain": mean(gain), "predictor_gain_std": std(gain),
        "gp_fraction": mean(gp), "cos": None, "relerr": None, "predictor_params": 0,
    }


def _f(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def gain_heads() -> str:
    """Column heads of a scheme's gains against the controls (:data:`CONTROLS` order), for a Markdown row."""
    return " | ".join(("gain vs " if i == 0 else "vs ") + c for i, c in enumerate(CONTROLS))


def gain_cells(r: dict[str, Any]) -> str:
    """A result row's gains against the controls (mean ± standard deviation), under :func:`gain_heads`."""
    return " | ".join(pm(r, GAIN_KEYS[c]) for c in CONTROLS)


def control_cells(r: dict[str, Any]) -> str:
    """A result row's accuracies of the controls (mean ± standard deviation), under their names."""
    return " | ".join(f"{r[f'accuracy_{c}']:.2f} ± {r[f'accuracy_{c}_std']:.2f}" for c in CONTROLS)


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


def markdown_controls(rows: list[dict[str, Any]]) -> str:
    """A scheme row against every control, with its quality against the minibatch and the large-batch
    gradient (``cos`` / ``cos_large``, the true minibatch gradient's ``cos_large_bp`` beside it) and the
    probe subset's one-step loss decrease (prediction / true minibatch gradient, x 1e-3)."""
    head = (f"| setting | GP fraction | accuracy | drop | {gain_heads()} | cos | "
            "cos large (BP) | loss decr. x1e-3 (BP) | params |\n"
            "|---|" + "---:|" * (len(CONTROLS) + 7))
    lines = [head]
    for r in rows:
        dec = ("-" if r["loss_decrease"] is None
               else f"{r['loss_decrease'] * 1e3:.2f} ({r['loss_decrease_bp'] * 1e3:.2f})")
        cl = "-" if r["cos_large"] is None else f"{r['cos_large']:.3f} ({r['cos_large_bp']:.3f})"
        lines.append(
            f"| {r['label']} | {r['gp_fraction']:.2f} | {r['accuracy']:.2f} ± {r['accuracy_std']:.2f} | "
            f"{pm(r, 'accuracy_drop', '.2f')} | {gain_cells(r)} | "
            f"{_f(r['cos'], '.3f')} | {cl} | {dec} | {r['predictor_params']} |"
        )
    return "\n".join(lines)


def markdown_reference(rows: list[dict[str, Any]]) -> str:
    """The reference and the controls' own accuracies at each GP fraction."""
    lines = ["| GP fraction | BP | " + " | ".join(CONTROLS) + " |", "|---:|---:|" + "---:|" * len(CONTROLS)]
    for r in rows:
        lines.append(f"| {r['gp_fraction']:.2f} | {r['accuracy_bp']:.2f} ± {r['accuracy_bp_std']:.2f} | "
                     + control_cells(r) + " |")
    return "\n".join(lines)


#: each scheme's setting in the comparison (the defaults of its knobs)
SCHEME_ROWS = (("adagp (default predictor)", {"scheme": "adagp"}), ("efb (rank 10)", {"scheme": "efb"}),
               ("local (width 4)", {"scheme": "local", "local_width": 4}),
               ("dni (cDNI, linear modules)", {"scheme": "dni"}))
#: adaptive settings compared with the fixed schedule at the same GP fraction: thresholds near each
#: scheme's own mean cosine at fixed 0.4 (seeds 0-4), relative error not used, GP phases of 1..8 steps
ADAPTIVE = {"adagp": 0.01, "efb": 0.8, "local": 0.55, "dni": 0.2}


def scheme_tables(seeds: Sequence[int]) -> dict[str, str]:
    base = SurrogateConfig()
    out = {}
    rows, ref = [], []
    for f in (0.2, 0.4, 0.5):
        for label, kw in SCHEME_ROWS:
            rows.append(row(f"{label}, fixed {f}", base.replace(gp_fraction=f, **kw), seeds))
        ref.append(rows[-1])
    out["schemes"] = markdown_controls(rows)
    out["controls"] = markdown_reference(ref)
    sizes = []
    at = base.replace(gp_fraction=0.4)
    for r in (1, 2, 5, 10):
        sizes.append(row(f"efb, rank {r}, fixed 0.4", at.replace(scheme="efb", efb_rank=r), seeds))
    for d in (0.5, 0.99):
        sizes.append(row(f"efb, rank 10, decay {d}, fixed 0.4", at.replace(scheme="efb", efb_decay=d), seeds))
    for w in (1, 2, 4, 8, 20):
        sizes.append(row(f"local, width {w}, fixed 0.4", at.replace(scheme="local", local_width=w), seeds))
    sizes.append(row("adagp, undersized (width 2, head 4), fixed 0.4", at.replace(pred_width=2, pred_head=4), seeds))
    sizes.append(row("adagp, default (width 64), fixed 0.4", at, seeds))
    out["sizes"] = markdown_controls(sizes)
    out["adaptive"] = adaptive_table(seeds)
    out["high"] = markdown_controls(high_rows(seeds))
    return out


def high_rows(seeds: Sequence[int]) -> list[dict[str, Any]]:
    """The best sizes at high GP fractions: fixed, and the predictor preset's adaptive setting (cosine
    threshold 0.5, GP phases of 1..16 steps), whose GP fraction the fixed rows match."""
    base = SurrogateConfig()
    adaptive = base.replace(adaptive=True, cos_threshold=0.5)
    return [
        row("local, width 8, fixed 0.5", base.replace(scheme="local", local_width=8, gp_fraction=0.5), seeds),
        row("local, width 8, fixed 0.74", base.replace(scheme="local", local_width=8, gp_fraction=0.74), seeds),
        row("local, width 8, adaptive (cos >= 0.5, GP 1..16)", adaptive.replace(scheme="local", local_width=8), seeds),
        row("efb, rank 10, fixed 0.78", base.replace(scheme="efb", gp_fraction=0.78), seeds),
        row("efb, rank 10, adaptive (cos >= 0.5, GP 1..16)", adaptive.replace(scheme="efb"), seeds),
    ]


def _paired(cfg: SurrogateConfig, seeds: Sequence[int]) -> dict[str, list]:
    """The scheme's runs and their BP references only (no controls), per seed."""
    runs = [(cached_run(cfg, "bp", s, True)[0], cached_run(cfg, cfg.scheme, s, True)[0]) for s in seeds]
    return {"acc": [r["accuracy"] for _, r in runs], "bp": [b["accuracy"] for b, _ in runs],
            "gp": [r["gp_fraction"] for _, r in runs], "cos": [r["cos"] for _, r in runs]}


def adaptive_table(seeds: Sequence[int]) -> str:
    """Adaptive schedule vs the fixed schedule at the same GP fraction (the adaptive runs' mean, rounded to
    0.01), per scheme: accuracy, drop, and the paired difference adaptive - fixed."""
    base = SurrogateConfig()
    lines = ["| scheme | adaptive setting | GP fraction adaptive / fixed | accuracy adaptive | accuracy fixed | "
             "drop adaptive | drop fixed | adaptive - fixed | cos (adaptive) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for _, kw in SCHEME_ROWS:
        name = kw["scheme"]
        cfg = base.replace(adaptive=True, cos_threshold=ADAPTIVE[name], relerr_threshold=10.0, gp_phase_min=1,
                           gp_phase_max=8, gp_phase_init=4, **kw)
        a = _paired(cfg, seeds)
        frac = round(mean(a["gp"]), 2)
        f = _paired(base.replace(gp_fraction=frac, **kw), seeds)
        diff = [x - y for x, y in zip(a["acc"], f["acc"])]
        da = [b - x for b, x in zip(a["bp"], a["acc"])]
        dfx = [b - x for b, x in zip(f["bp"], f["acc"])]
        lines.append(
            f"| {name} | cos >= {ADAPTIVE[name]}, GP phases 1..8, BP 4 | {mean(a['gp']):.2f} / {mean(f['gp']):.2f} | "
            f"{mean(a['acc']):.2f} ± {std(a['acc']):.2f} | {mean(f['acc']):.2f} ± {std(f['acc']):.2f} | "
            f"{mean(da):.2f} ± {std(da):.2f} | {mean(dfx):.2f} ± {std(dfx):.2f} | "
            f"{mean(diff):+.2f} ± {std(diff):.2f} | {mean(a['cos']):.3f} |")
    return "\n".join(lines)


def check_tables(seeds: Sequence[int]) -> dict[str, str]:
    """The best settings (tuned on seeds 0-4) on other seeds."""
    base = SurrogateConfig()
    rows = []
    for f in (0.4, 0.5):
        at = base.replace(gp_fraction=f)
        rows.append(row(f"efb, rank 10, fixed {f}", at.replace(scheme="efb"), seeds))
        rows.append(row(f"efb, rank 1, fixed {f}", at.replace(scheme="efb", efb_rank=1), seeds))
        for w in (4, 8):
            rows.append(row(f"local, width {w}, fixed {f}", at.replace(scheme="local", local_width=w), seeds))
    return {"check": markdown_controls(rows), "check_high": markdown_controls(high_rows(seeds))}


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


#: table groups: name -> function of the seeds returning {table: markdown}
GROUPS = {"adagp": tables, "schemes": scheme_tables, "check": check_tables}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", choices=sorted(GROUPS), default=None,
                    help="table groups to print (default: all)")
    args = ap.parse_args(argv)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    for group in args.only or list(GROUPS):
        for name, text in GROUPS[group](seeds).items():
            print(f"### {name}\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
