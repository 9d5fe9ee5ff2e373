"""Figures of a study (seaborn, PNG and SVG): each pair of objectives with its 2-D front, the reference
accelerator and the constraint limits; the front in parallel coordinates; energy by component for chosen
points; hypervolume history; parameter importance per objective (honest for hybrid studies)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pandas as pd

from dse.results.views import label_of as _label
from dse.search.pareto import ProgressFront, front
from dse.search.study import hv_reference, points_of
from dse.search.studyfile import StudySpec

#: the hypervolume history's points at most (evenly spaced over the trials; a step curve at screen resolution)
HISTORY_POINTS = 400

__all__ = ["make_plots", "study_figures"]


def _save(fig, folder: Path, stem: str, formats=("png", "svg")) -> list[Path]:
    out = []
    for ext in formats:
        p = folder / f"{stem}.{ext}"
        fig.savefig(p, dpi=130, bbox_inches="tight")
        out.append(p)
    return out


def make_plots(study: optuna.Study, spec: StudySpec, folder: Path, warn=None,
               formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """Write the study's figures (in ``formats``: PNG and SVG) into ``folder``; returns the files.
    ``warn(message)`` is called for what a figure warns about (too few training settings for the importance)."""
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    for stem, fig in study_figures(study, spec, warn):
        files += _save(fig, folder, stem, formats)
        plt.close(fig)
    return files


def study_figures(study: optuna.Study, spec: StudySpec, warn=None):
    """The study's figures, one at a time, as (file stem, matplotlib figure): objectives, front-parallel,
    energy, hypervolume, importance (those the study has data for). The caller closes each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)  # listed once, for every figure
    pts = points_of(trials, spec)
    f = front(pts, spec.directions)
    on_front = {p.number for p in f}
    complete = sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    if complete > len(pts) and warn is not None:  # (an objective changed with --accept-changes)
        warn(f"figures: {complete - len(pts)} of the {complete} complete trials recorded no value of an objective "
             f"the study has now ({', '.join(spec.metrics)}; changed with --accept-changes): the figures show the "
             f"{len(pts)} that did")
    if pts:
        from dse.figures import charts as figures

        yield "objectives", figures.objective_pairs(spec, pts, on_front, _label, complete=complete)
        if len(f) >= 2:
            yield "front-parallel", figures.parallel_front(spec, f, _label)
        if f:
            yield "energy", figures.energy_breakdown(spec, _chosen_points(spec, f))

    # hypervolume history over finished trials: the front kept as trials arrive (each point one comparison),
    # its hypervolume at most HISTORY_POINTS times (it was every prefix's, from scratch: minutes at 10^4 trials)
    ref = hv_reference(spec)
    by_number = {p.number: p for p in pts}
    hist, running = [], ProgressFront(spec, ref)
    stride = max(1, math.ceil(len(trials) / HISTORY_POINTS))
    for i, t in enumerate(trials):
        if t.number in by_number:
            running.add(by_number[t.number])
        if i % stride == 0 or i == len(trials) - 1:
            hist.append({"trial": t.number, "hypervolume": running.hypervolume})
    if hist:
        h = pd.DataFrame(hist)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        sns.lineplot(data=h, x="trial", y="hypervolume", drawstyle="steps-post", ax=ax)
        ax.set_xlabel("trial number")
        from matplotlib.ticker import EngFormatter

        from dse.results.formats import fmt_with_unit
        from dse.results.views import unit_of

        refs = ", ".join(f"{m} = {fmt_with_unit(r, unit_of(m))}" for m, r in zip(spec.metrics, ref))
        ax.set_ylabel("hypervolume\n[product of the objectives' units]", fontsize=9)
        ax.yaxis.set_major_formatter(EngFormatter(sep=" "))  # 20 M, not 2.0 and a 1e7 above the axis
        import textwrap

        ax.set_title(f"{spec.name}: hypervolume of the feasible front\n"
                     + textwrap.fill(f"reference point {refs}", 80), fontsize=9)
        fig.tight_layout()
        yield "hypervolume", fig

    # parameter importance per objective
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.values is not None]
    searched = [n for n, _ in spec.space.searched()]
    if len(complete) >= 4 and searched:
        fig = _importance(study, spec, complete, plt, sns, warn)
        if fig is not None:
            yield "importance", fig


def _chosen_points(spec: StudySpec, f) -> list:
    """The front's knee and its best point in each objective (each once), with their configurations."""
    from dse.search.pareto import knee

    picks = [("knee", knee(f, spec.directions))]
    for i, (m, d) in enumerate(zip(spec.metrics, spec.directions)):
        sign = -1 if d == "maximize" else 1
        p = min(f, key=lambda p: (sign * p.values[i], p.number))
        picks.append((f"best {m}", p))
    names: dict[int, list[str]] = {}  # a trial chosen twice (the knee and a best, two bests): one bar, both names
    by_number = {}
    for name, p in picks:
        names.setdefault(p.number, []).append(name)
        by_number[p.number] = p
    return [(f"trial {n}\n" + "\n".join(f"({x})" for x in names[n]),
             (by_number[n].config, float(by_number[n].metrics.get("gp_fraction", 0.0)))) for n in names]


#: fewer distinct training settings per searched training knob than this: their shares are not separable
MIN_SETTINGS_PER_KNOB = 4
#: at most this many points go into fANOVA's forest (a sample, seed 0, of a hybrid study's costed points or of
#: a joint study's complete trials; fANOVA's time grows with the points), and
#: its trees: on the quick start 16 trees and 1,000 points take about 7 s an objective on a loaded core, and the
#: shares differ from 64 trees' by at most 0.01 (64 trees take 4 times as long)
MAX_IMPORTANCE_POINTS = 1000
FANOVA_TREES = 16


def fanova_shares(params: list[dict], values: dict[str, list], space, seed: int = 0) -> dict[str, dict[str, float]]:
    """Per objective, each knob's first-order share of its variance as Optuna's fANOVA computes it
    (:class:`optuna.importance.FanovaImportanceEvaluator` with :data:`FANOVA_TREES` trees, not normalized: the
    shares add up to at most 1;
    the rest is the knobs' interactions and what the forest cannot explain). ``params``: one dict of knob
    values per point; ``values``: objective -> one value per point; ``space``: the study's knobs."""
    from dse.search.study import distribution, optuna_quiet

    dists = {n: distribution(k) for n, k in space.searched()}
    out = {}
    with optuna_quiet():
        for m, ys in values.items():
            study = optuna.create_study(direction="minimize")
            ok = [(p, float(y)) for p, y in zip(params, ys) if np.isfinite(y)]
            study.add_trials([optuna.trial.create_trial(params={k: p[k] for k in dists}, distributions=dists,
                                                        value=y) for p, y in ok])
            try:
                imp = optuna.importance.FanovaImportanceEvaluator(n_trees=FANOVA_TREES, seed=seed).evaluate(study)
            except (RuntimeError, ValueError, ZeroDivisionError):
                continue
            out[m] = {k: max(0.0, float(v)) for k, v in imp.items()}
    return out


def _importance(study, spec: StudySpec, complete, plt, sns, warn=None):
    """Importance per objective: fANOVA (Optuna's, first-order shares that add up to at most 1, the rest
    shown as interactions) over the complete trials, or over the points the study's strategy supplies
    (``Strategy.importance_points``; the hybrid: the hardware points it costed, rebuilt with the vectorized
    model; a sample of at most :data:`MAX_IMPORTANCE_POINTS`). The figure names how many distinct training
    settings the shares rest on, and warns when that is too few to separate the training knobs."""
    from dse.search.strategies import strategy_class
    from dse.search.strategies.base import importance_sample

    train_knobs = [n for n, _ in spec.space.searched() if n.startswith("training.")]
    points = strategy_class(spec.strategy).importance_points(spec, study, MAX_IMPORTANCE_POINTS)
    if points is not None:
        X, values, n_set, n_pts = points  # (a sample, seed 0, when there are more points)
        if not n_pts or not values:
            return None
        n = len(next(iter(values.values())))
        params = [{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in X.items()} for i in range(n)]
        basis = (f"{n:,} of the {n_pts:,} hardware points costed for {n_set} trained settings" if
                 n < n_pts else f"the {n_pts:,} hardware points costed for {n_set} trained settings")
    else:
        from dse.search.study import point_of

        # each trial's values of the study's objectives now (its recorded metrics, as every view reads them)
        placed = [(t, p) for t in complete if (p := point_of(t, spec)) is not None]
        n_all = len(placed)
        placed = [placed[i] for i in importance_sample(n_all, MAX_IMPORTANCE_POINTS)]  # as the hybrid's points
        params = [dict(t.params) for t, _ in placed]
        values = {m: [p.values[i] for _, p in placed] for i, m in enumerate(spec.metrics)}
        basis = (f"{len(placed):,} of the {n_all:,} complete trials" if len(placed) < n_all else
                 f"{n_all} complete trials")
    settings = len({tuple(p.get(k) for k in train_knobs) for p in params}) if train_knobs else 0
    shares = fanova_shares(params, values, spec.space)
    rows = []
    for m, imp in shares.items():
        rows += [{"objective": m, "knob": k, "share": v} for k, v in imp.items()]
        rows.append({"objective": m, "knob": "interactions and the rest", "share": max(0.0, 1 - sum(imp.values()))})
    if not rows:
        return None
    d = pd.DataFrame(rows)
    n_knobs = len(set(d.knob))
    fig, ax = plt.subplots(figsize=(7.5, 0.2 * n_knobs * len(shares) + 2.4))
    sns.barplot(data=d, y="knob", x="share", hue="objective", ax=ax, orient="h")
    ax.set_xlim(0, 1)
    ax.set_xlabel("first-order share of the objective's variance (fANOVA; each objective's shares add up to 1)",
                  fontsize=9)
    ax.set_ylabel("")
    ax.legend(title="objective", fontsize=8, title_fontsize=8, loc="lower right")
    ax.set_title(f"{spec.name}: which knobs drive each objective\n(Optuna's fANOVA over {basis})", fontsize=9)
    note = (f"The training knobs' shares rest on {settings} distinct training setting(s)." if train_knobs else "")
    few = bool(train_knobs) and settings < MIN_SETTINGS_PER_KNOB * len(train_knobs)
    if few:
        msg = (f"importance: only {settings} distinct training settings for {len(train_knobs)} training knobs (at "
               f"least {MIN_SETTINGS_PER_KNOB * len(train_knobs)} separate them): their shares are confounded; "
               "train more settings (a larger budget, or a smaller front_size for the hybrid)")
        note += "\nWarning: " + msg.split(": ", 1)[1]
        if warn is not None:
            warn(msg)
    if note:
        import textwrap

        fig.text(0.01, 0.0, "\n".join(textwrap.fill(ln, 110) for ln in note.split("\n")), ha="left", va="top",
                 fontsize=8, color="#b00000" if few else "#333")
    fig.tight_layout()
    return fig
