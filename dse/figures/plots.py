"""Figures of a study (seaborn, PNG and SVG): each pair of objectives with its 2-D front, the reference
accelerator and the constraint limits; the front in parallel coordinates; energy by component for chosen
points; hypervolume history; parameter importance per objective (honest for hybrid studies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from dse.results.views import label_of as _label
from dse.search.pareto import front, hypervolume
from dse.search.study import hv_reference, load_points
from dse.search.studyfile import StudySpec

__all__ = ["make_plots"]


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
    if pts:
        from dse.figures import charts as figures

        fig = figures.objective_pairs(spec, pts, on_front, _label)
        files += _save(fig, folder, "objectives")
        plt.close(fig)
        if len(f) >= 2:
            fig = figures.parallel_front(spec, f, _label)
            files += _save(fig, folder, "front-parallel")
            plt.close(fig)
        if f:
            fig = figures.energy_breakdown(spec, _chosen_points(spec, f))
            files += _save(fig, folder, "energy")
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

    # parameter importance per objective
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.values is not None]
    searched = [n for n, _ in spec.space.searched()]
    if len(complete) >= 4 and searched:
        fig = _importance(study, spec, complete, plt, sns)
        if fig is not None:
            files += _save(fig, folder, "importance")
            plt.close(fig)
    return files


def _chosen_points(spec: StudySpec, f) -> list:
    """The front's knee and its best point in each objective (each once), with their configurations."""
    from dse.search.pareto import knee

    picks = [("knee", knee(f, spec.directions))]
    for i, (m, d) in enumerate(zip(spec.metrics, spec.directions)):
        sign = -1 if d == "maximize" else 1
        p = min(f, key=lambda p: (sign * p.values[i], p.number))
        picks.append((f"best {m}", p))
    out, seen = [], set()
    for name, p in picks:
        if p.number in seen:
            continue
        seen.add(p.number)
        out.append((f"trial {p.number}\n({name})", (p.config, float(p.metrics.get("gp_fraction", 0.0)))))
    return out


def _importance(study, spec: StudySpec, complete, plt, sns):
    """Importance per objective: fANOVA over the complete trials, unless the study's strategy supplies its
    own points (``Strategy.importance_points``; the hybrid: the hardware points it costed, rebuilt with the
    vectorized model), over which each knob's first-order share of variance is computed."""
    from dse.search.strategies import strategy_class

    rows = []
    points = strategy_class(spec.strategy).importance_points(spec, study)
    if points is not None:
        from dse.figures.charts import first_order_importance

        X, Y, n_set, n_pts = points
        if not n_pts:
            return None
        for m, y in Y.items():
            ok = np.isfinite(y)
            imp = first_order_importance({k: v[ok] for k, v in X.items()}, y[ok])
            rows += [{"objective": m, "knob": k, "importance": v} for k, v in imp.items()]
        xlabel = "first-order share of the objective's variance (0-1)"
        title = (f"{spec.name} ({spec.strategy}): which knobs drive each objective, over the {n_pts:,} points "
                 f"costed for {n_set} trained settings (not only the {len(complete)} entered trials)")
    else:
        for i, m in enumerate(spec.metrics):
            try:
                imp = optuna.importance.get_param_importances(
                    study, target=lambda t, i=i: t.values[i],
                    evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
            except (RuntimeError, ValueError, ZeroDivisionError):
                continue
            rows += [{"objective": m, "knob": k, "importance": v} for k, v in imp.items()]
        xlabel = "importance (fANOVA share of the objective's variance, 0-1)"
        title = f"{spec.name}: which knobs drive each objective (fANOVA over {len(complete)} complete trials)"
    if not rows:
        return None
    d = pd.DataFrame(rows)
    fig, ax = plt.subplots(figsize=(7.0, 0.22 * len(set(d.knob)) * len(spec.metrics) + 1.5))
    sns.barplot(data=d, y="knob", x="importance", hue="objective", ax=ax, orient="h")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("knob")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig

