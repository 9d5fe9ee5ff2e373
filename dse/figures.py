"""Figures beyond a single study's (seaborn/matplotlib, PNG): fronts of several studies overlaid, sweeps.

Conventions shared with :mod:`dse.plots`: one colour per study or method, taken from :func:`colours` in
the order the studies are given, so the same study keeps its colour in every figure of one command; a
2-D front is drawn as the staircase of the non-dominated set of the points shown (:func:`staircase`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

__all__ = ["colours", "nondominated_2d", "staircase", "compare_figure", "sweep_figure"]


def colours(names: list[str]) -> dict[str, str]:
    """One colour per name (seaborn's colour-blind palette, in order)."""
    import seaborn as sns

    pal = sns.color_palette("colorblind", max(len(names), 1)).as_hex()
    return {n: pal[i % len(pal)] for i, n in enumerate(names)}


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


def compare_figure(fronts: dict[str, dict], objectives: list[str], directions: list[str], labels: list[str],
                   reference: list[float], out: Path) -> Path:
    """Each pair of objectives: every study's front points and its 2-D staircase, one colour per study,
    the common hypervolume reference point marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = list(itertools.combinations(range(len(objectives)), 2))
    cols = min(len(pairs), 3)
    rows = -(-len(pairs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
    col = colours(list(fronts))
    for ax, (i, j) in zip(axes.flat, pairs):
        for name, fr in fronts.items():
            v = np.asarray(fr["values"], dtype=float).reshape(-1, len(objectives))
            ax.scatter(v[:, i], v[:, j], s=22, color=col[name], alpha=0.75, label=f"{name} ({len(v)} points)")
            staircase(ax, v[:, i], v[:, j], directions[i], directions[j], color=col[name], lw=1.2, alpha=0.9)
        _mark_reference(ax, reference[i], reference[j])
        ax.set_xlabel(labels[i])
        ax.set_ylabel(labels[j])
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=min(len(names), 4), fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1.0))
    fig.suptitle("fronts overlaid (each study's Pareto-optimal feasible trials; lines: the 2-D front of each "
                 "pair)", fontsize=10, y=1.04)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
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
            y = [r.get(m, np.nan) for r in sel]
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
            f"{m} = {rows[0][m]:.4g}" if isinstance(rows[0].get(m), float) else m for m in constant),
            ha="center", va="top", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out
