"""Figures beyond a single study's (seaborn/matplotlib, PNG): fronts of several studies overlaid, sweeps.

Conventions shared with :mod:`dse.figures.plots`: one colour per study or method, taken from :func:`colours` in
the order the studies are given, so the same study keeps its colour in every figure of one command; a
2-D front is drawn as the staircase of the non-dominated set of the points shown (:func:`staircase`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

__all__ = ["colours", "method_colours", "METHODS", "nondominated_2d", "staircase", "figure_suffixes", "compare_figure",
           "sweep_figure"]


def colours(names: list[str]) -> dict[str, str]:
    """One colour per name (seaborn's colour-blind palette, in order)."""
    import seaborn as sns

    pal = sns.color_palette("colorblind", max(len(names), 1)).as_hex()
    return {n: pal[i % len(pal)] for i, n in enumerate(names)}


#: search methods, each with its own colour (seaborn "colorblind" indices) in every figure
#: (bench/search_quality.py): random grey, qmc cyan, grid yellow, tpe orange, nsga2 blue, nsga3 brown, auto
#: purple, gp pink, hybrid green
METHODS = {"random": 7, "qmc": 9, "grid": 8, "tpe": 1, "nsga2": 0, "nsga3": 5, "auto": 4, "gp": 6, "hybrid": 2}


def method_colours(names) -> dict[str, str]:
    """A colour per search-method label, fixed by the method (the label's first word: "hybrid
    (front_size 4)" is a hybrid); further labels of one method get darker shades of its colour."""
    import matplotlib.colors as mc
    import seaborn as sns

    pal = sns.color_palette("colorblind", 10).as_hex()
    out, seen = {}, {}
    for n in sorted(names, key=str):
        fam = str(n).split()[0]
        i = METHODS.get(fam, 3)  # red, the one colour no listed method has, for a method not listed
        key = fam if fam in METHODS else None  # unlisted labels share red, each a darker shade
        k = seen.get(key, 0)
        seen[key] = k + 1
        out[n] = mc.to_hex(np.array(mc.to_rgb(pal[i])) * (1 - min(0.4 * k, 0.8)))
    return out


def nondominated_2d(x: np.ndarray, y: np.ndarray, dx: str, dy: str) -> np.ndarray:
    """Indices of the 2-D non-dominated points of (x, y) under directions dx, dy, sorted by x ascending."""
    if len(x) == 0:
        return np.zeros(0, dtype=int)
    a = np.where(dx == "maximize", -np.asarray(x, float), np.asarray(x, float))
    b = np.where(dy == "maximize", -np.asarray(y, float), np.asarray(y, float))
    order = np.lexsort((b, a))  # by a, then b (both to be minimised)
    keep, best = [], np.inf
    for i in order:
        if b[i] < best:
            keep.append(i)
            best = b[i]
    keep = np.asarray(keep, dtype=int)
    return keep[np.argsort(np.asarray(x, float)[keep], kind="stable")]


def staircase(ax, x, y, dx: str, dy: str, **kw):
    """Draw the 2-D front of (x, y) as a staircase (each point's region of dominance outlined)."""
    idx = nondominated_2d(np.asarray(x), np.asarray(y), dx, dy)
    if not len(idx):
        return idx
    xs, ys = np.asarray(x, float)[idx], np.asarray(y, float)[idx]
    # between two front points sorted by x, the step holds the value of the one that is better in x
    where = "post" if dx == "minimize" else "pre"
    ax.step(xs, ys, where=where, **kw)
    return idx


def _mark_reference(ax, rx: float, ry: float) -> None:
    """The hypervolume reference as a black x; the axes keep to the data, so a reference outside them is
    drawn at the nearest edge (a hollow x) with its coordinates written beside it."""
    ax.autoscale_view()
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    inside = x0 <= rx <= x1 and y0 <= ry <= y1
    px, py = min(max(rx, x0), x1), min(max(ry, y0), y1)
    ax.scatter([px], [py], marker="x", s=60, color="black" if inside else "grey", label="hypervolume reference",
               clip_on=False, zorder=5)
    if not inside:
        ax.annotate(f"reference ({rx:.3g}, {ry:.3g})", (px, py), fontsize=7, color="grey",
                    xytext=(-4, 4), textcoords="offset points", ha="right")
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)


def _finite_or_nan(v) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return np.nan
    return v if np.isfinite(v) else np.nan


def figure_suffixes() -> tuple[str, ...]:
    """The file suffixes matplotlib writes a figure as (``.png``, ``.svg``, ``.pdf``, ...), ``.png`` first."""
    from matplotlib.backend_bases import FigureCanvasBase

    return (".png", *sorted(f".{k}" for k in FigureCanvasBase.get_supported_filetypes() if k != "png"))


def compare_figure(fronts: dict[str, dict], objectives: list[str], directions: list[str], labels: list[str],
                   reference: list[float], out: Path) -> Path:
    """Each pair of objectives: every study's front points and its 2-D staircase, one colour per study,
    the common hypervolume reference point marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dse.results.views import unit_of

    pairs = list(itertools.combinations(range(len(objectives)), 2))
    cols = min(len(pairs), 3)
    rows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
    col = colours(list(fronts))
    for ax, (i, j) in zip(axes.flat, pairs):
        for name, fr in fronts.items():
            v = np.asarray(fr["values"], dtype=float).reshape(-1, len(objectives))
            v = v[np.isfinite(v).all(axis=1)]  # a non-finite value is not drawn
            ax.scatter(v[:, i], v[:, j], s=22, color=col[name], alpha=0.75, label=f"{name} ({len(v)} points)")
            staircase(ax, v[:, i], v[:, j], directions[i], directions[j], color=col[name], lw=1.2, alpha=0.9)
        _mark_reference(ax, reference[i], reference[j])
        ax.set_xlabel(labels[i])
        ax.set_ylabel(labels[j])
        format_axis(ax.xaxis, unit_of(objectives[i]))  # as dse plot: 60 kJ, not 60000 and a 1e4 above the axis
        format_axis(ax.yaxis, unit_of(objectives[j]))
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=min(len(names), 4), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle("fronts overlaid (each study's Pareto-optimal feasible trials; lines: the 2-D front of each "
                 "pair)", fontsize=10, y=1.04)
    fig.tight_layout()
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out


def sweep_figure(rows: list[dict], knobs: list[str], metrics: list[str], labels: dict[str, str],
                 out: Path) -> Path:
    """One panel per metric: the metric against the first knob, one line per value of the second."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def varies(m):
        vals = [r.get(m) for r in rows]
        return len({round(v, 12) if isinstance(v, float) else v for v in vals}) > 1

    constant = [m for m in metrics if not varies(m)]
    metrics = [m for m in metrics if varies(m)] or metrics[:1]
    cols = min(len(metrics), 3)
    nrows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.6 * nrows), squeeze=False)
    def order(v):
        return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))

    series = sorted({r[knobs[1]] for r in rows}, key=order) if len(knobs) > 1 else [None]
    col = colours([str(s) for s in series])
    numeric = all(isinstance(r[knobs[0]], (int, float)) and not isinstance(r[knobs[0]], bool) for r in rows)
    xs_all = list(dict.fromkeys(r[knobs[0]] for r in rows))
    for ax, m in zip(axes.flat, metrics):
        for s in series:
            sel = [r for r in rows if s is None or r[knobs[1]] == s]
            x = [r[knobs[0]] if numeric else xs_all.index(r[knobs[0]]) for r in sel]
            y = [_finite_or_nan(r.get(m)) for r in sel]  # a gap where a value is missing or not finite
            ax.plot(x, y, marker="o", color=col[str(s)], label=None if s is None else f"{knobs[1]}={s}")
        if not numeric:
            ax.set_xticks(range(len(xs_all)), [str(v) for v in xs_all], rotation=30, fontsize=8)
        elif all(v > 0 for v in xs_all) and max(xs_all) / min(xs_all) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(knobs[0])
        ax.set_ylabel(labels.get(m, m), fontsize=9)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    if len(knobs) > 1:
        h, n = axes.flat[0].get_legend_handles_labels()
        fig.legend(h, n, loc="upper center", ncol=min(len(n), 5), fontsize=9, frameon=False,
                   bbox_to_anchor=(0.5, 1.02))
    if constant:
        fig.text(0.5, -0.01, "the same at every point: " + ", ".join(
            f"{m} = {rows[0][m]:.4g}" if isinstance(rows[0].get(m), (int, float)) and not isinstance(
                rows[0].get(m), bool) else m for m in constant),  # (an integer too: seeds = 3)
            ha="center", va="top", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out


# -- figures of one study (called by dse.figures.plots.make_plots) ----------------------------------------------
def reference_configuration(spec):
    """The study's reference job: plain BP on one reference accelerator (what every speed-up and energy saving
    is against, a study over several accelerators too: ``[parallel]`` dropped)."""
    from dataclasses import replace

    return replace(spec.base, hardware=spec.base.reference, training=spec.base.training.replace(scheme="bp"),
                   parallel=None)


def reference_metrics(spec) -> dict[str, float]:
    """The reference accelerator running plain BP, in the study's metrics (what every speed-up is against):
    every hardware metric the model gives it (speed-ups 1, its energy, area, power, throughput, ...), no
    accuracy drop, GP fraction 0."""
    from dse.evaluation.evaluator import evaluate_hardware

    return {**evaluate_hardware(reference_configuration(spec), 0.0)["metrics"], "accuracy_drop": 0.0,
            "gp_fraction": 0.0}


def format_axis(axis, unit: str) -> None:
    """Tick labels of ``axis`` (a matplotlib x or y axis) in ``unit``: SI-prefixed with the unit for a unit
    that takes a prefix (``60 kJ``, ``25.6 GB/s``; a prefixed unit such as pJ is converted first), else plain
    numbers without an offset or a power of ten (the axis label carries the unit)."""
    from matplotlib.ticker import EngFormatter, FuncFormatter, ScalarFormatter

    from dse.results.formats import SI_UNITS, to_base

    factor, base = to_base(unit)
    if base in SI_UNITS:
        eng = EngFormatter(unit=base, sep=" ")
        axis.set_major_formatter(FuncFormatter(lambda v, pos: eng(v * factor)))
    else:
        f = ScalarFormatter(useOffset=False)
        f.set_scientific(False)
        axis.set_major_formatter(f)


def standard_errors(pts, metric: str) -> np.ndarray | None:
    """Per point, the standard error of ``metric`` over the surrogate seeds (``<metric>_se``; 0 where a point
    has none, as one-seed points), or None when no point has one."""
    key = f"{metric}_se"
    if not any(key in p.metrics for p in pts):
        return None
    e = np.array([p.metrics.get(key) if p.metrics.get(key) is not None else np.nan for p in pts], dtype=float)
    return np.where(np.isfinite(e), e, 0.0)


#: more trials than this, and the objective pairs' grey trials (not the front) are drawn as an image inside
#: the SVG: at 10^4 trials the file was 9 MB of markers and took seconds to write and to open
RASTER_ABOVE = 2000


def objective_pairs(spec, pts, on_front: set, label, colour: str = "#0173b2", complete: int | None = None):
    """Per pair of objectives: every complete trial (grey; infeasible as x), the 2-D non-dominated set of
    the feasible ones as a staircase, the trials on the full front ringed (with error bars on an accuracy
    axis whose points carry a standard error), the reference accelerator (plain BP) as a star, and constraint
    limits as dashed lines with the infeasible side shaded. ``complete``: the study's complete trials, when
    some of them are not among ``pts`` (no value of an objective the study has now)."""
    import matplotlib.pyplot as plt

    from dse.results.views import unit_of

    m, d = spec.metrics, spec.directions
    pairs = list(itertools.combinations(range(len(m)), 2))
    cols = min(len(pairs), 3)
    rows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.3 * rows), squeeze=False)
    v = np.array([p.values for p in pts], dtype=float).reshape(len(pts), len(m))
    feas = np.array([p.feasible for p in pts], dtype=bool)
    fr = np.array([p.number in on_front for p in pts], dtype=bool)
    ref = reference_metrics(spec)
    se = {k: standard_errors(pts, k) for k in m}
    flat = len(pts) > RASTER_ABOVE  # the grey background of a large study drawn as an image in the SVG
    for ax, (i, j) in zip(axes.flat, pairs):
        ax.scatter(v[feas & ~fr, i], v[feas & ~fr, j], s=14, color="#9e9e9e", alpha=0.55, label="feasible trial",
                   rasterized=flat)
        ax.scatter(v[~feas, i], v[~feas, j], s=18, marker="x", color="#b0b0b0", alpha=0.7,
                   label="violates a constraint", rasterized=flat)
        ax.scatter(v[fr, i], v[fr, j], s=34, facecolors="none", edgecolors=colour, lw=1.0,
                   label=f"on the {len(m)}-objective front")
        idx = np.flatnonzero(feas)
        nd = idx[nondominated_2d(v[idx, i], v[idx, j], d[i], d[j])]
        staircase(ax, v[nd, i], v[nd, j], d[i], d[j], color=colour, lw=1.4, label="2-D front of this pair")
        ax.scatter(v[nd, i], v[nd, j], s=20, color=colour, zorder=4)
        xerr, yerr = se[m[i]], se[m[j]]
        if xerr is not None or yerr is not None:  # the noise of an accuracy axis, on the front's points
            ax.errorbar(v[fr, i], v[fr, j], xerr=None if xerr is None else xerr[fr],
                        yerr=None if yerr is None else yerr[fr], fmt="none", ecolor=colour, alpha=0.45,
                        lw=0.8, capsize=1.5, zorder=3, label="± standard error over the surrogate seeds")
        if m[i] in ref and m[j] in ref:
            ax.scatter([ref[m[i]]], [ref[m[j]]], marker="*", s=160, color="black", zorder=5,
                       label="reference accelerator, plain BP")
        for axis, k in (("x", i), ("y", j)):
            for c in spec.constraints:
                if c.metric != m[k]:
                    continue
                for lim, bad_above in ((c.max, True), (c.min, False)):
                    if lim is None:
                        continue
                    line = ax.axvline if axis == "x" else ax.axhline
                    line(lim, color="#d55e00", ls="--", lw=1.0, label=f"constraint {c}")
                    lo, hi = (ax.get_xlim() if axis == "x" else ax.get_ylim())
                    span = (lim, max(hi, lim)) if bad_above else (min(lo, lim), lim)
                    (ax.axvspan if axis == "x" else ax.axhspan)(*span, color="#d55e00", alpha=0.06)
        ax.set_xlabel(label(m[i], d[i]), fontsize=9)
        ax.set_ylabel(label(m[j], d[j]), fontsize=9)
        format_axis(ax.xaxis, unit_of(m[i]))
        format_axis(ax.yaxis, unit_of(m[j]))
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    handles, names = {}, []
    for ax in axes.flat:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in handles:
                handles[n] = h
                names.append(n)
    fig.legend([handles[n] for n in names], names, loc="lower center", ncol=min(len(names), 4), fontsize=8,
               frameon=False, bbox_to_anchor=(0.5, -0.02))
    shown = (f"{len(pts)} complete trials" if complete is None or complete == len(pts) else
             f"{len(pts)} of {complete} complete trials (the others recorded no value of an objective it has now)")
    fig.suptitle(f"{spec.name}: {shown}, {int(fr.sum())} on the {len(m)}-objective front", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def parallel_front(spec, front_pts, label, colour_by: int = 0):
    """The full front in parallel coordinates: one line per Pareto-optimal trial over every objective and
    every searched knob that varies on the front (a bundle as its fields; a categorical knob's values spaced
    evenly along its axis and named beside it), each numeric axis from its front minimum to maximum with the
    ends labelled in their unit; the knobs constant on the front are listed under the figure."""
    import matplotlib as mpl
    import matplotlib.pyplot as plt

    from dse.results.formats import fmt_with_unit, is_missing, knob_unit, wrap_name
    from dse.results.views import front_rows, unit_of

    rows = front_rows(spec, front_pts)
    knobs = [c for c in (rows[0] if rows else {}) if "." in c]
    constant, cols = {}, list(spec.metrics)
    for k in knobs:
        vals = [r[k] for r in rows if not is_missing(r[k])]
        if len({repr(v) for v in vals}) > 1:
            cols.append(k)
        elif vals:
            constant[k] = vals[0]
    z = np.zeros((len(rows), len(cols)))
    ends: list[tuple[str, str]] = []
    cats: dict[int, list] = {}
    for i, c in enumerate(cols):
        vals = [r.get(c) for r in rows]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            x = np.asarray(vals, dtype=float)
            lo, hi = float(x.min()), float(x.max())
            z[:, i] = (x - lo) / (hi - lo) if hi > lo else 0.5
            unit = unit_of(c) or knob_unit(c)
            ends.append((fmt_with_unit(lo, unit), fmt_with_unit(hi, unit)))
        else:  # categorical: the values in first-seen order, evenly spaced
            levels = list(dict.fromkeys(str(v) for v in vals))
            cats[i] = levels
            z[:, i] = [levels.index(str(v)) / max(len(levels) - 1, 1) for v in vals]
            ends.append(("", ""))
    fig, ax = plt.subplots(figsize=(max(6.5, 1.15 * len(cols) + 1.5), 4.8))
    raw = np.array([r[spec.metrics[colour_by]] for r in rows], dtype=float)
    norm = mpl.colors.Normalize(raw.min(), raw.max() if raw.max() > raw.min() else raw.min() + 1)
    cmap = mpl.colormaps["viridis"]
    for r, k in zip(z, raw):
        ax.plot(range(len(cols)), r, color=cmap(norm(k)), alpha=0.6, lw=1.0)
    for i in range(len(cols)):
        ax.axvline(i, color="#555", lw=0.6)
        if i in cats:
            n = len(cats[i])
            for j, level in enumerate(cats[i]):
                ax.text(i + 0.04, j / max(n - 1, 1), level, ha="left", va="center", fontsize=7,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=0.5))
        else:
            ax.text(i, -0.06, ends[i][0], ha="center", va="top", fontsize=7)
            ax.text(i, 1.04, ends[i][1], ha="center", va="bottom", fontsize=7)

    def name(c):
        if c in spec.metrics:
            d = spec.directions[spec.metrics.index(c)]
            return "\n".join(wrap_name(c, 12)) + f"\n[{unit_of(c)}]\n({'higher' if d == 'maximize' else 'lower'} " \
                "is better)"
        return "\n".join(wrap_name(c.split(".", 1)[1], 12))

    ax.set_xticks(range(len(cols)), [name(c) for c in cols], fontsize=7)
    ax.tick_params(axis="x", pad=14)
    ax.set_yticks([])
    ax.set_ylim(-0.12, 1.12)
    ax.set_xlim(-0.4, len(cols) - 0.4)
    sm = mpl.cm.ScalarMappable(norm=norm, cmap=cmap)
    bar = fig.colorbar(sm, ax=ax, pad=0.01)
    bar.set_label(label(spec.metrics[colour_by]), fontsize=8)
    format_axis(bar.ax.yaxis, unit_of(spec.metrics[colour_by]))
    ax.set_title(f"{spec.name}: the {len(front_pts)} Pareto-optimal trials over every objective and every knob "
                 "that varies on the front\n(each numeric axis from its front minimum to maximum; knobs by field "
                 "name)", fontsize=9)
    if constant:
        fig.text(0.5, 0.0, "constant on the front: " + ", ".join(
            f"{k} = {fmt_with_unit(v, knob_unit(k))}" for k, v in constant.items()), ha="center", va="top",
            fontsize=8)
    fig.tight_layout()
    return fig


def energy_breakdown(spec, chosen: list[tuple[str, dict]]):
    """Stacked bars of a training job's energy by component for chosen configurations (and the reference
    accelerator running plain BP), summed over the workload's models."""

    import matplotlib.pyplot as plt

    from dse.config.configuration import Configuration
    from dse.evaluation.evaluator import energy_components, evaluate_hardware

    ref_rows = evaluate_hardware(reference_configuration(spec), 0.0)["models"]
    if spec.base.parallel is not None:  # the other bars are jobs over several accelerators: dynamic, leakage, link
        ref_rows = [{"energy_j_dynamic": sum(r[f"energy_j_{k}"] for k in energy_components([r]) if k != "leakage"),
                     "energy_j_leakage": r.get("energy_j_leakage", 0.0)} for r in ref_rows]
    runs = [("reference, plain BP", ref_rows)]
    runs += [(name, evaluate_hardware(Configuration.from_dict(config), gpf)["models"])
             for name, (config, gpf) in chosen]
    # one accelerator's components (mac ... leakage), or a job over several accelerators' (dynamic, link ...)
    keys = energy_components([r for _, rows in runs for r in rows])
    bars = [(name, {k: sum(r.get(f"energy_j_{k}", 0.0) for r in rows) for k in keys}) for name, rows in runs]
    fig, ax = plt.subplots(figsize=(max(5.5, 1.3 * len(bars) + 2.5), 4.2))
    col = colours(keys)
    bottom = np.zeros(len(bars))
    for k in keys:
        vals = np.array([b[1][k] for b in bars])
        ax.bar(range(len(bars)), vals, bottom=bottom, color=col[k], label=k, width=0.65)
        bottom += vals
    ax.set_xticks(range(len(bars)), [b[0] for b in bars], fontsize=8, rotation=20, ha="right")
    ax.set_ylabel("training-job energy [J]")
    format_axis(ax.yaxis, "J")
    ax.legend(title="component", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"{spec.name}: energy by component (summed over {len(spec.base.workload.models)} model(s))",
                 fontsize=10)
    fig.tight_layout()
    return fig
