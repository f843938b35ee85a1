"""Drawing coverage curves with their fitted ``exp(a k^b)`` laws (used by ``report.md`` and the recipes)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ...core.scaling_laws import CoverageLaw, predict_coverage


def new_figure(width: float, height: float, ncols: int = 1, dpi: int = 120):
    """``(figure, [axes])`` drawn with Agg, without pyplot (no global state, half the import time)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=dpi)
    axes = figure.subplots(1, ncols, squeeze=False)[0]
    return figure, list(axes)


def save_figure(figure, path: Path) -> Path:
    """Write ``figure`` as a PNG at ``path`` (folders created)."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def law_label(a: float, b: float, error_mean: float, error_std: float) -> str:
    return f"exp({a:.2f} k^{b:.3f}), err {error_mean:.4f}±{error_std:.4f}"


def draw_law(ax, ks: np.ndarray, a: float, b: float, color=None, label: str | None = None, k_max: float | None = None):
    """Draw ``100 · exp(a k^b)`` (percent) over ``ks`` (dashed); nothing for an unfitted law."""
    if not (np.isfinite(a) and np.isfinite(b)):
        return
    grid = np.geomspace(1, max(float(k_max or ks[-1]), 1.0), 200)
    ax.plot(grid, 100 * predict_coverage(np.array([a]), np.array([b]), grid)[0], "--", color=color, linewidth=1,
            label=label)


def plot_coverage_laws(ks: np.ndarray, coverage: np.ndarray, law: CoverageLaw, labels: Sequence[str], path: Path,
                       title: str = "") -> Path:
    """One PNG: for each curve ``m``, measured coverage (points) and its fitted law (dashed), log k axis."""
    import matplotlib

    fig, (ax,) = new_figure(7, 4.5)
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for m, label in enumerate(labels):
        color = colors[m % len(colors)]
        ax.plot(ks, 100 * coverage[m], "o", markersize=2.5, color=color, label=label)
        draw_law(ax, ks, law.a[m], law.b[m], color=color,
                 label=f"  fit a={law.a[m]:.2f}, b={law.b[m]:.3f}" if np.isfinite(law.a[m]) else None)
    ax.set_xscale("log")
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("coverage pass@k (%)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=6, ncol=2)
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)
