"""The proxy-task experiments of ``docs/surrogate.md``: the gradient schemes on the image proxy (``fashion``:
the residual CNN with batch norm) against the three controls, and the accuracy drop against the proxy's
training budget on both proxies.

    python -m models.surrogate.proxy_experiments [--only fashion mnist1d budget budget-fashion] [--seeds 5]
        [--budget-seeds 3] [--fractions 0.2 0.5] [--budgets 5 10 20] [--budget-schemes efb adagp]

Cached like every surrogate run (``$DSE_CACHE_DIR``), so a second call is instant. Every figure is a mean
over paired seeds 0..N-1 with its sample standard deviation; drops and gains are per-seed differences.
Cost on one core (wall time of one ``fashion`` run of 8 epochs, measured on the shared 2-core machine): a
control about 9 s, BP 12-18 s, adagp about 15 s, efb about 23 s, local about 35 s, dni about 80 s; so one GP
fraction of the table (5 seeds, four schemes, three shared controls) about 15 minutes. Under 2 s per MNIST-1D
run.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from models.schemes.registry import CONTROLS, PREDICTING
from models.surrogate.config import SurrogateConfig
from models.surrogate.evaluation import evaluate
from models.surrogate.experiments import control_cells, gain_cells, gain_heads, with_null
from models.surrogate.stats import mean, pm, std

__all__ = ["FASHION", "SCHEMES", "scheme_rows", "budget_rows", "markdown_schemes", "markdown_controls",
           "markdown_budget", "main"]

#: the image proxy's committed setting: the task's defaults (``studies/surrogate-fashion.toml`` holds the same)
FASHION = SurrogateConfig.from_dict({"task": "fashion"})
#: the schemes under study, from their name table (``models.schemes.registry``)
SCHEMES = PREDICTING
#: proxy budgets (epochs) compared on each task: half, the default, twice the default
BUDGETS = {"mnist1d": (5, 10, 20), "fashion": (4, 8, 16)}


def _progress(done: int, total: int, label: str) -> None:
    print(f"  [{done}/{total}] {label}", file=sys.stderr, flush=True)


def _row(label: str, cfg: SurrogateConfig, seeds: Sequence[int]) -> dict[str, Any]:
    print(f"{label} ({cfg.task}, {cfg.epochs} epochs)", file=sys.stderr, flush=True)
    d = evaluate(cfg, seeds=seeds, progress=_progress).to_dict()
    d["label"] = label
    return d


def scheme_rows(base: SurrogateConfig, fractions: Sequence[float], seeds: Sequence[int],
                schemes: Sequence[str] = SCHEMES, local_width: int | None = None) -> list[dict[str, Any]]:
    """Each scheme at each fixed GP fraction with its BP reference and the three controls (``local_width``:
    the local heads' size for the ``local`` rows, default the base's)."""
    def cfg(s, f):
        extra = {"local_width": local_width} if s == "local" and local_width is not None else {}
        return base.replace(scheme=s, adaptive=False, gp_fraction=f, **extra)

    return [_row(f"{s}, fixed {f}", cfg(s, f), seeds) for f in fractions for s in schemes]


def budget_rows(base: SurrogateConfig, budgets: Sequence[int], fractions: Sequence[float], seeds: Sequence[int],
                schemes: Sequence[str] = ("efb",)) -> list[dict[str, Any]]:
    """Accuracy drop of the null control and of each scheme at each GP fraction and proxy budget: per seed
    the BP reference, the scheme and the null control replaying its mask (the other two controls are left
    out to keep the budget small; the scheme tables have them)."""
    rows = []
    for e in budgets:
        for f in fractions:
            for name in schemes:
                cfg = base.replace(scheme=name, adaptive=False, gp_fraction=f, epochs=e)
                print(f"{name}, fixed {f}, {e} epochs ({cfg.task})", file=sys.stderr, flush=True)
                acc, bp, null = [], [], []
                for s in seeds:
                    b, m, n = with_null(cfg, name, s)
                    acc.append(m["accuracy"])
                    bp.append(b["accuracy"])
                    null.append(n["accuracy"])
                    print(f"  seed {s}: bp {b['accuracy']:.2f} {name} {m['accuracy']:.2f} null {n['accuracy']:.2f}",
                          file=sys.stderr, flush=True)
                drop = [x - a for a, x in zip(acc, bp)]
                ndrop = [x - a for a, x in zip(null, bp)]
                rows.append({"epochs": e, "gp_fraction": f, "scheme": name, "seeds": len(seeds),
                             "accuracy_bp": mean(bp), "accuracy_bp_std": std(bp),
                             "drop": mean(drop), "drop_std": std(drop),
                             "null_drop": mean(ndrop), "null_drop_std": std(ndrop)})
    return rows


def markdown_schemes(rows: list[dict[str, Any]]) -> str:
    head = (f"| setting | GP fraction | proxy accuracy | BP | drop | {gain_heads()} "
            "| cos | params |\n|---|" + "---:|" * (len(CONTROLS) + 6))
    out = [head]
    for r in rows:
        cos = "-" if r.get("cos") is None else f"{r['cos']:.3f}"
        out.append(f"| {r['label']} | {r['gp_fraction']:.2f} | {r['accuracy']:.2f} ± {r['accuracy_std']:.2f} | "
                   f"{r['accuracy_bp']:.2f} ± {r['accuracy_bp_std']:.2f} | {pm(r, 'accuracy_drop', '.2f')} | "
                   f"{gain_cells(r)} | {cos} | {r['predictor_params']} |")
    return "\n".join(out)


def markdown_controls(rows: list[dict[str, Any]]) -> str:
    """The BP reference and the controls at each GP fraction of the scheme rows (a fixed schedule's
    controls are the same runs for every scheme)."""
    out = ["| GP fraction | BP | " + " | ".join(CONTROLS) + " |\n|---:|---:|" + "---:|" * len(CONTROLS)]
    seen = set()
    for r in rows:
        if r["gp_fraction"] in seen:
            continue
        seen.add(r["gp_fraction"])
        out.append(f"| {r['gp_fraction']:.2f} | {r['accuracy_bp']:.2f} ± {r['accuracy_bp_std']:.2f} | "
                   + control_cells(r) + " |")
    return "\n".join(out)


def markdown_budget(rows: list[dict[str, Any]]) -> str:
    """Drop (BP - x, points) of the null control and of each scheme, by proxy budget and GP fraction."""
    schemes = sorted({r["scheme"] for r in rows}, key=SCHEMES.index)
    head = ("| proxy budget | GP fraction | seeds | BP | drop: null | " + " | ".join(schemes) + " |\n"
            "|---:|---:|---:|---:|---:|" + "---:|" * len(schemes))
    out = [head]
    keyed: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        keyed.setdefault((r["epochs"], r["gp_fraction"]), {})[r["scheme"]] = r
    for (e, f), by in sorted(keyed.items()):
        a = by[schemes[0]] if schemes[0] in by else next(iter(by.values()))
        cells = [f"{by[s]['drop']:.2f} ± {by[s]['drop_std']:.2f}" if s in by else "-" for s in schemes]
        out.append(f"| {e} epochs | {f:.1f} | {a['seeds']} | {a['accuracy_bp']:.2f} ± {a['accuracy_bp_std']:.2f} | "
                   f"{a['null_drop']:.2f} ± {a['null_drop_std']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=["fashion", "mnist1d", "budget", "budget-fashion"],
                    default=["fashion", "mnist1d", "budget", "budget-fashion"])
    ap.add_argument("--seeds", type=int, default=5, help="paired seeds of the scheme tables (0..N-1)")
    ap.add_argument("--seed-list", type=int, nargs="*", default=None,
                    help="these seeds instead of 0..N-1 (to split the work over processes; cached)")
    ap.add_argument("--budget-seeds", type=int, default=3, help="paired seeds of the budget tables")
    ap.add_argument("--fractions", type=float, nargs="*", default=[0.2, 0.5])
    ap.add_argument("--schemes", nargs="*", default=list(SCHEMES), choices=list(SCHEMES))
    ap.add_argument("--budgets", type=int, nargs="*", default=None, help="epochs (default: the task's three)")
    ap.add_argument("--local-width", type=int, default=None, help="local_width of the local rows")
    ap.add_argument("--budget-schemes", nargs="*", default=["efb", "adagp"], choices=list(SCHEMES))
    args = ap.parse_args(argv)
    seeds, bseeds = args.seed_list or range(args.seeds), range(args.budget_seeds)
    for what in args.only:
        if what in ("fashion", "mnist1d"):
            base, lw = (FASHION, args.local_width) if what == "fashion" else (SurrogateConfig(), None)
            rows = scheme_rows(base, args.fractions, seeds, args.schemes, lw)
            text = markdown_schemes(rows) + "\n\n" + markdown_controls(rows)
        elif what == "budget":
            text = markdown_budget(budget_rows(SurrogateConfig(), args.budgets or BUDGETS["mnist1d"],
                                               args.fractions, bseeds, args.budget_schemes))
        else:
            text = markdown_budget(budget_rows(FASHION, args.budgets or BUDGETS["fashion"], args.fractions, bseeds,
                                               args.budget_schemes))
        print(f"### {what}\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
