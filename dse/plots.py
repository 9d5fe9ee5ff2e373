"""Figures of a study (seaborn, PNG and SVG): objective projections, hypervolume history, importances."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import pandas as pd

from dse.evaluate import METRICS
from dse.pareto import front, hypervolume
from dse.study import hv_reference, load_points
from dse.studyfile import StudySpec

__all__ = ["make_plots"]


def _label(metric: str, direction: str | None = None) -> str:
    unit = METRICS.get(metric, "")
    arrow = {"maximize": " (higher is better)", "minimize": " (lower is better)"}.get(direction or "", "")
    return f"{metric} [{unit}]{arrow}"


def _save(fig, folder: Path, stem: str) -> list[Path]:
    out = []
    for ext in ("png", "svg"):
        p = folder / f"{stem}.{ext}"
        fig.savefig(p, dpi=130, bbox_inches="tight")
        out.append(p)
    return out


def make_plots(study: optuna.Study, spec: StudySpec, folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    folder.mkdir(parents=True, exist_ok=True)
    sns.set_theme(style="whitegrid", context="notebook")
    pts = load_points(study, spec)
    f = front(pts, spec.directions)
    on_front = {p.number for p in f}
    files: list[Path] = []
    df = pd.DataFrame([{**{m: v for m, v in zip(spec.metrics, p.values)}, "trial": p.number,
                        "status": ("Pareto-optimal" if p.number in on_front else
                                   "feasible" if p.feasible else "infeasible")} for p in pts])
    pairs = list(itertools.combinations(range(len(spec.metrics)), 2))
    if len(df):
        n = len(pairs)
        cols = min(n, 3)
        rows = -(-n // cols)
        fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
        palette = {"Pareto-optimal": "#d62728", "feasible": "#7f7f7f", "infeasible": "#1f77b4"}
        markers = {"Pareto-optimal": "o", "feasible": "o", "infeasible": "X"}
        for ax, (i, j) in zip(axes.flat, pairs):
            mi, mj = spec.metrics[i], spec.metrics[j]
            sns.scatterplot(data=df, x=mi, y=mj, hue="status", style="status", palette=palette, markers=markers,
                            hue_order=list(palette), style_order=list(palette), s=36, alpha=0.8, ax=ax)
            if len(spec.metrics) == 2:  # a 2-objective front is a staircase; projections of more are not
                fr = df[df.status == "Pareto-optimal"].sort_values(mi)
                ax.plot(fr[mi], fr[mj], color="#d62728", lw=0.8, alpha=0.5, drawstyle="steps-post")
            ax.set_xlabel(_label(mi, spec.directions[i]))
            ax.set_ylabel(_label(mj, spec.directions[j]))
            ax.legend(fontsize=8, loc="best")
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        fig.suptitle(f"{spec.name}: {len(pts)} complete trials, {len(f)} Pareto-optimal (red: the front of all "
                     f"{len(spec.metrics)} objectives, projected pairwise; blue x: violates a constraint)",
                     fontsize=11)
        fig.tight_layout()
        files += _save(fig, folder, "objectives")
        plt.close(fig)

    # hypervolume history over finished trials
    ref = hv_reference(spec)
    trials = study.get_trials(deepcopy=False)
    by_number = {p.number: p for p in pts}
    hist, seen = [], []
    for t in sorted(trials, key=lambda t: t.number):
        if t.number in by_number:
            seen.append(by_number[t.number])
        hist.append({"trial": t.number, "hypervolume": hypervolume(seen, spec.directions, ref)})
    if hist:
        h = pd.DataFrame(hist)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        sns.lineplot(data=h, x="trial", y="hypervolume", drawstyle="steps-post", ax=ax)
        ax.set_xlabel("trial number")
        refs = ", ".join(f"{m}={r:.4g}" for m, r in zip(spec.metrics, ref))
        ax.set_ylabel("hypervolume [product of objective units]")
        ax.set_title(f"{spec.name}: hypervolume of the feasible front\nreference point {refs}", fontsize=10)
        fig.tight_layout()
        files += _save(fig, folder, "hypervolume")
        plt.close(fig)

    # parameter importance per objective (fANOVA on complete trials)
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.values is not None]
    searched = [n for n, _ in spec.space.searched()]
    if len(complete) >= 4 and searched:
        rows = []
        for i, m in enumerate(spec.metrics):
            try:
                imp = optuna.importance.get_param_importances(
                    study, target=lambda t, i=i: t.values[i], evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
            except (RuntimeError, ValueError, ZeroDivisionError):
                continue
            rows += [{"objective": m, "knob": k, "importance": v} for k, v in imp.items()]
        if rows:
            d = pd.DataFrame(rows)
            fig, ax = plt.subplots(figsize=(7.0, 0.22 * len(set(d.knob)) * len(spec.metrics) + 1.5))
            sns.barplot(data=d, y="knob", x="importance", hue="objective", ax=ax, orient="h")
            ax.set_xlabel("importance (fANOVA share of the objective's variance, 0-1)")
            ax.set_ylabel("knob")
            ax.set_title(f"{spec.name}: which knobs drive each objective", fontsize=10)
            fig.tight_layout()
            files += _save(fig, folder, "importance")
            plt.close(fig)
    return files
