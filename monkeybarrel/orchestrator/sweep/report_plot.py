"""``report.png``: accuracy against compute, one row per task and one panel per metric, frontier in black.

A model's points share a colour family and differ in shade, line style and marker (``curve_styles``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MAX_PANELS = 4
"""Metric panels per task: coverage and the first three selectors."""
MODEL_COLOURS = ("Blues", "Oranges", "Greens", "Reds", "Purples", "Greys", "YlOrBr", "PuRd")
"""A colour family (matplotlib colormap) per model: its points get distinct shades of it."""
LINE_STYLES = ("-", (0, (6, 2.5)), (0, (1, 1.6)), (0, (7, 2, 1.5, 2, 1.5, 2)))
"""Solid, long dashes, dots, dash-dot-dot: dash patterns that stay distinct at a 1.4-point line."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LEGEND_POINTS = 12
"""Up to this many points a task's legend names each point; above, only the models."""


def curve_styles(models: list[str], curves: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{point: {"color", "linestyle", "marker"}}`` for one task's curves: the model picks the colour family,
    the point's place among the model's points picks its shade (dark to light), line style and marker, so no
    two points of a task look alike."""
    from matplotlib import colormaps

    points: dict[str, list[str]] = {}
    for curve in curves:
        points.setdefault(curve["model"], [])
        if curve["point"] not in points[curve["model"]]:
            points[curve["model"]].append(curve["point"])
    styles = {}
    for model, names in points.items():
        family = colormaps[MODEL_COLOURS[models.index(model) % len(MODEL_COLOURS)]]
        shades = np.linspace(0.9, 0.45, len(names)) if len(names) > 1 else [0.75]
        for i, (point, shade) in enumerate(zip(names, shades)):
            styles[point] = {"color": family(float(shade)), "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
                             "marker": MARKERS[i % len(MARKERS)]}
    return styles


def plot_report(report: dict[str, Any], path: Path) -> Path | None:
    """Draw the page's figure; None when no task has a curve."""
    tasks = [t for t in report["tasks"] if t["metrics"]]
    if not tasks:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    columns = min(MAX_PANELS, max(len(t["metrics"]) for t in tasks))
    fig, axes = plt.subplots(len(tasks), columns, figsize=(4.4 * columns, 3.5 * len(tasks)), dpi=110,
                             squeeze=False)
    models = list(dict.fromkeys(m for t in tasks for m in t["models"]))
    for row, task in enumerate(tasks):
        style = curve_styles(models, task["curves"])
        for col in range(columns):
            ax = axes[row][col]
            if col >= len(task["metrics"]):
                ax.axis("off")
                continue
            metric = task["metrics"][col]
            for curve in task["curves"]:
                x = np.asarray(curve["budget"], float)
                y = 100 * np.asarray(curve["accuracy"].get(metric, [np.nan] * x.size), float)
                keep = ~np.isnan(y) & np.isfinite(x) & (x > 0)
                if not keep.any():
                    continue
                ax.plot(x[keep], y[keep], markersize=4, linewidth=1.4, label=curve["point"], **style[curve["point"]])
                band = curve["ci95"].get(metric)
                if band is not None:
                    band = 100 * np.asarray(band, float)
                    ok = keep & ~np.isnan(band).any(axis=1)
                    if ok.sum() > 1:
                        ax.fill_between(x[ok], band[ok, 0], band[ok, 1], color=style[curve["point"]]["color"],
                                        alpha=0.1, linewidth=0)
            front = task["frontier"][metric]["pareto"]
            if front:
                ax.step([c["cost"] for c in front], [100 * c["accuracy"] for c in front], "k-", where="post",
                        linewidth=2.4, alpha=0.35, label="frontier")
            ax.set_xscale("log")
            ax.set_ylim(0, max(ax.get_ylim()[1], 1.0))  # all-zero curves: a readable 0-1 % axis
            ax.grid(alpha=0.3)
            ax.set_title(f"{task['task']}: {'coverage (pass@k)' if metric == 'coverage' else metric}", fontsize=9)
            ax.set_xlabel(report["budget_name"], fontsize=8)
            ax.set_ylabel("accuracy (%)", fontsize=8)
            ax.tick_params(labelsize=7)
        first = axes[row][0]
        if len(task["curves"]) <= LEGEND_POINTS:
            first.legend(fontsize=6, loc="best")
        else:
            family = {m: colormaps[MODEL_COLOURS[models.index(m) % len(MODEL_COLOURS)]](0.75) for m in task["models"]}
            first.legend([Line2D([], [], color=family[m]) for m in task["models"]]
                         + [Line2D([], [], color="k", alpha=.35, linewidth=2.4)],
                         [*task["models"], "frontier"], fontsize=6, loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
