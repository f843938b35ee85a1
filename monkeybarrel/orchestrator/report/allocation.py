"""The report's equal-compute section: allocation policies replayed on the experiment's own samples.

Every policy draws from the same stored samples of each problem (random orders, without
replacement) under the same budgets; the labels act as the reliable checker of ``until_solved``
and ``difficulty``. Written to ``metrics.json`` (``equal_compute``), ``report.md`` and
``allocation.png``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ...allocation.equal_compute import equal_compute_table, outcomes_from_selection
from ...core.metrics import default_ks
from ...core.selection_data import SelectionData

MAX_CELLS_X_SAMPLES = 200_000
"""Larger stores are left to ``benchmarks/allocation_replay.py`` (the report stays fast)."""


def equal_compute_metrics(data: SelectionData, labels: np.ndarray, orders: int = 8, seed: int = 0) -> dict[str, Any]:
    """Rows of ``equal_compute_table`` for budgets 1, 2, 4, ... samples per problem, or why there are none."""
    if data.n_candidates == 0:
        return {}
    outcomes = outcomes_from_selection(data, labels)
    G, P, N = outcomes.shape
    if N < 2:
        return {"skipped": "fewer than 2 samples per problem"}
    if G * P * N > MAX_CELLS_X_SAMPLES:
        return {"skipped": f"{G * P * N} cell samples > {MAX_CELLS_X_SAMPLES}: run benchmarks/allocation_replay.py"}
    budgets = [float(k) for k in default_ks(int(outcomes.available.min()))]
    return {"orders": orders, "rows": equal_compute_table(outcomes, budgets, orders=orders, seed=seed)}


def _pct(value: float) -> str:
    return "–" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def render_section(equal_compute: dict[str, Any], plot_name: str | None) -> str:
    """Markdown for ``report.md`` (empty when nothing was computed)."""
    if not equal_compute:
        return ""
    lines = ["", "## Allocation at equal compute", ""]
    if "skipped" in equal_compute:
        return "\n".join([*lines, f"Not computed: {equal_compute['skipped']}.", ""])
    lines += [f"Policies replayed on this experiment's samples ({equal_compute['orders']} random orders; labels as "
              "the checker of until_solved and difficulty; confident_majority stops by itself).", "",
              "| policy | budget (samples/problem) | used (samples/problem) | coverage (%) | majority (%) |",
              "|---|---:|---:|---:|---:|"]
    for row in equal_compute["rows"]:
        budget = "–" if row["budget"] is None else f"{row['budget']:g}"
        lines.append(f"| {row['policy']} | {budget} | {row['samples_per_problem']:.2f} | {_pct(row['coverage'])} | "
                     f"{_pct(row['majority'])} |")
    if plot_name:
        lines += ["", f"![coverage and majority accuracy against samples per problem, per policy]({plot_name})"]
    return "\n".join(lines) + "\n"


PANELS = {"coverage": "coverage (%)", "majority": "majority vote (%)", "coverage_kept": "coverage kept (%)"}


def plot_equal_compute(equal_compute: dict[str, Any], path: Path, title: str = "",
                       panels: tuple[str, ...] = ("coverage", "majority")) -> Path | None:
    """Each ``panels`` metric against samples per problem, one line per policy; None if no rows."""
    rows = equal_compute.get("rows") if equal_compute else None
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), dpi=120, squeeze=False)
    axes = axes[0]
    for ax, key in zip(axes, panels):
        label = PANELS.get(key, key)
        for name in dict.fromkeys(r["policy"] for r in rows if r["budget"] is not None):
            points = [r for r in rows if r["policy"] == name]
            style = "s--" if name.startswith("ceiling") else "o-"  # yardsticks that peek, not policies
            ax.plot([r["samples_per_problem"] for r in points], [100 * r[key] for r in points], style, label=name)
        adaptive = [r for r in rows if r["budget"] is None]
        if adaptive:
            ax.plot([r["samples_per_problem"] for r in adaptive], [100 * r[key] for r in adaptive], "k^",
                    label="confident_majority (thresholds)")
        highest = max((100 * r[key] for r in rows if key in r and not math.isnan(r[key])), default=0.0)
        ax.set_ylim(0, max(5.0, 1.05 * highest))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("samples per problem (mean)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
