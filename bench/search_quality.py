"""Hypervolume against the number of surrogate runs: random, TPE, NSGA-II (joint) and hybrid.

    python bench/search_quality.py [--study studies/quickstart.toml] [--runs 200] [--hybrid-runs 50] [--max-trials 1500]
                                   [--seeds 0 1 2] [--out docs/search_quality]

A surrogate run is a distinct training setting (the expensive part: seconds of training); trials that
repeat a setting or change only hardware are cache hits and cost milliseconds. Every method runs until it
has spent its surrogate runs (joint methods: --runs; hybrid: --hybrid-runs), on a copy of the study with
the method's sampler and seed. The hypervolume is always taken with the study's fixed reference point
(dse.search.study.hv_reference). Prints a table of the mean and spread over seeds at checkpoints, writes the
curves as CSV and a seaborn plot.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dse.search.pareto import hypervolume
from dse.search.runner import run_study as run
from dse.search.study import hv_reference, load_points, open_study
from dse.search.studyfile import load_study

CHECKPOINTS = (5, 10, 25, 50, 100, 200)


def _setting(params: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in params.items() if k.startswith("training.")))


def distinct_settings(study) -> int:
    return len({_setting(t.params) for t in study.get_trials(deepcopy=False) if t.params})


def curve(study, spec, ref) -> pd.DataFrame:
    """Hypervolume of the feasible points after each new surrogate run, in trial order."""
    pts = {p.number: p for p in load_points(study, spec)}
    seen, settings, rows = [], set(), []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        if not t.params:
            continue
        new = _setting(t.params) not in settings
        settings.add(_setting(t.params))
        if t.number in pts:
            seen.append(pts[t.number])
        if new or not rows:
            rows.append({"runs": len(settings), "trials": t.number + 1,
                         "hypervolume": hypervolume(seen, spec.directions, ref)})
        else:
            rows[-1] = {"runs": len(settings), "trials": t.number + 1,
                        "hypervolume": hypervolume(seen, spec.directions, ref)}
    return pd.DataFrame(rows)


def run_method(spec, method: str, seed: int, runs: int, folder: Path, max_trials: int,
               front_size: int | None = None) -> pd.DataFrame:
    name = f"{spec.name}-{method}-s{seed}"
    s = spec.with_overrides(name=name, seed=seed, sampler="nsga2" if method == "hybrid" else method,
                            strategy="hybrid" if method == "hybrid" else "joint", path=folder / f"{name}.toml",
                            front_size=front_size or spec.front_size)
    url = f"sqlite:///{folder / (name + '.db')}"

    def stop(st) -> bool:
        return distinct_settings(st) >= runs or len(st.get_trials(deepcopy=False)) >= max_trials

    t0 = time.perf_counter()
    run(s, storage=url, trials=100_000, stop=stop)  # the spec's strategy
    st = open_study(s, url, create=False)
    c = curve(st, s, hv_reference(s))
    c["method"], c["seed"], c["seconds"] = method, seed, time.perf_counter() - t0
    return c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="studies/quickstart.toml")
    ap.add_argument("--runs", type=int, default=200, help="surrogate runs for the joint methods")
    ap.add_argument("--hybrid-runs", type=int, default=50, help="surrogate runs for the hybrid method")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--front-size", type=int, default=None,
                    help="hybrid: sub-front points entered per training setting (default: the study's)")
    ap.add_argument("--max-trials", type=int, default=1500,
                    help="stop a method after this many trials even if it has not spent its surrogate runs "
                         "(a converged joint sampler keeps re-proposing the same training settings)")
    ap.add_argument("--methods", nargs="+", default=["random", "tpe", "nsga2", "hybrid"])
    ap.add_argument("--out", default=None, help="output stem (CSV and PNG); default docs/search_quality-<study>")
    ap.add_argument("--combine", nargs="+", default=None, metavar="CSV",
                    help="do not run: combine the curves of earlier runs (their CSV files) into one table and plot")
    a = ap.parse_args()
    spec = load_study(a.study)
    out = Path(a.out or f"docs/search_quality-{spec.name}")
    curves = []
    if a.combine:
        curves = [pd.read_csv(f) for f in a.combine]
        a.seeds = sorted(set(pd.concat(curves).seed))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for method in a.methods:
                for seed in a.seeds:
                    runs = a.hybrid_runs if method == "hybrid" else a.runs
                    c = run_method(spec, method, seed, runs, Path(tmp), a.max_trials, a.front_size)
                    if method == "hybrid":
                        c["method"] = f"hybrid (front_size {a.front_size or spec.front_size})"
                    print(f"{method:7s} seed {seed}: {c.runs.max()} surrogate runs, {c.trials.max()} trials, "
                          f"HV {c.hypervolume.iloc[-1]:.6g}, {c.seconds.iloc[0]:.0f} s", flush=True)
                    curves.append(c)
    df = pd.concat(curves, ignore_index=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out.with_suffix(".csv"), index=False)
    rows = []
    for method, g in df.groupby("method", sort=False):
        r = {"method": method}
        for cp in CHECKPOINTS:
            vals = [sub[sub.runs <= cp].hypervolume.max() for _, sub in g.groupby("seed")]
            vals = [v for v in vals if not np.isnan(v)]
            reached = all(sub.runs.max() >= cp for _, sub in g.groupby("seed"))
            r[f"HV@{cp}"] = f"{np.mean(vals):.4g} ± {np.std(vals):.2g}" if reached and vals else "-"
        rows.append(r)
    table = pd.DataFrame(rows)
    print(f"\nhypervolume (mean ± std over seeds {a.seeds}) after N surrogate runs; reference point "
          f"{dict(zip(spec.metrics, hv_reference(spec)))}")
    print(table.to_string(index=False))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    grid = np.arange(1, df.runs.max() + 1)
    dense = []
    for (method, seed), g in df.groupby(["method", "seed"], sort=False):
        hv = np.interp(grid, g.runs, g.hypervolume, right=np.nan)
        hv = pd.Series(hv).ffill().to_numpy().copy()
        hv[grid > g.runs.max()] = np.nan
        dense.append(pd.DataFrame({"surrogate runs": grid, "hypervolume": hv, "method": method, "seed": seed}))
    d = pd.concat(dense).dropna()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    from dse.figures.charts import method_colours  # one colour per method in every figure

    pal = method_colours(d.method.unique())
    sns.lineplot(data=d, x="surrogate runs", y="hypervolume", hue="method", errorbar=("pi", 100), ax=ax,
                 palette=pal, hue_order=sorted(pal, key=str))
    ax.set_xscale("log")
    ax.set_xlabel("surrogate runs (distinct training settings trained)")
    ax.set_ylabel("hypervolume of the feasible front")
    ax.set_title(f"{spec.name}: search quality per training cost (band: min-max over {len(a.seeds)} seeds)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=130)
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")
    table.to_csv(out.with_name(out.name + "-table.csv"), index=False)


if __name__ == "__main__":
    main()
