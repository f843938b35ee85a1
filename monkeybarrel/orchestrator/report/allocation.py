"""The report's equal-compute section: allocation policies replayed on the experiment's own samples.

Every policy draws from the same stored samples of each problem (random orders, without
replacement) under the same budgets; the labels act as the reliable checker of ``until_solved``
and ``difficulty``. Written to ``metrics.json`` (``equal_compute``), ``report.md`` and
``allocation.png``.

The replay refits the ``difficulty`` model every round: seconds at 10^3 candidates, minutes at 10^5.
So a report replays only when asked (``monkeybarrel report DIR --equal-compute``) or when the
experiment itself allocated its samples (a budget or a policy), and keeps the result in
``DIR/equal_compute.parquet`` with a fingerprint of the samples, answers and labels it was computed
on: later reports reuse it while those are unchanged, and otherwise say how to compute it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.metrics import default_ks
from ...core.selection_data import SelectionData
from .coverage_plot import new_figure, save_figure

MAX_CELLS_X_SAMPLES = 200_000
"""Above this a replay the user did not ask for is skipped (``benchmarks/allocation_replay.py`` does it)."""
CACHE_TABLE = "equal_compute"
"""``DIR/equal_compute.parquet``: the replay's rows; its schema metadata holds the fingerprint."""
ON_REQUEST = ("not computed by default (the replay refits a model every round); "
              "`monkeybarrel report DIR --equal-compute` replays the policies on these samples and keeps the result")


def equal_compute_metrics(data: SelectionData, labels: np.ndarray, orders: int = 8, seed: int = 0,
                          max_cells: int | None = MAX_CELLS_X_SAMPLES) -> dict[str, Any]:
    """Rows of ``equal_compute_table`` for budgets 1, 2, 4, ... samples per problem, or why there are none.

    ``max_cells``: skip when generators x problems x samples exceeds it (None: no limit)."""
    # the replay's policies and difficulty model (scipy) load only when a replay runs, not for every report
    from ...allocation.equal_compute import equal_compute_table, outcomes_from_selection

    if data.n_candidates == 0:
        return {}
    outcomes = outcomes_from_selection(data, labels)
    G, P, N = outcomes.shape
    if N < 2:
        return {"skipped": "fewer than 2 samples per problem"}
    if max_cells is not None and G * P * N > max_cells:
        return {"skipped": f"{G * P * N} cell samples > {max_cells}: run benchmarks/allocation_replay.py, or "
                           "`monkeybarrel report DIR --equal-compute`"}
    budgets = [float(k) for k in default_ks(int(outcomes.available.min()))]
    return {"orders": orders, "rows": equal_compute_table(outcomes, budgets, orders=orders, seed=seed)}


def samples_fingerprint(data: SelectionData, labels: np.ndarray, orders: int, seed: int) -> str:
    """A hash of what the replay reads: each candidate's problem, generator, sample index, answer code and label."""
    digest = hashlib.sha256(f"{orders}:{seed}:{data.n_problems}".encode())
    generators, codes = np.unique(data.generator_id.astype(str), return_inverse=True)
    digest.update("\0".join(generators).encode())
    for column in (data.groups, codes, data.sample_index, data.answers, labels):
        digest.update(np.ascontiguousarray(column, dtype=np.int64).tobytes())
    return digest.hexdigest()[:32]


def stored_equal_compute(store, data: SelectionData, labels: np.ndarray, seed: int, compute: bool,
                         orders: int = 8, max_cells: int | None = None) -> dict[str, Any]:
    """The replay for these samples: reused from ``store`` when computed on the same ones, else computed
    (and stored) when ``compute``, else a note saying how to get it.

    Args:
        store: the experiment's ``ExperimentStore``.
        compute: replay when nothing valid is stored (the user asked, or the run allocated its samples).
        max_cells: as in ``equal_compute_metrics`` (None when the user asked).
    """
    path = store.table_path(CACHE_TABLE)
    if not compute and not path.is_file():
        return {"skipped": ON_REQUEST}
    key = samples_fingerprint(data, labels, orders, seed)
    if path.is_file():
        table = store.read_table(CACHE_TABLE)
        if (table.schema.metadata or {}).get(b"fingerprint", b"").decode() == key:
            return {"orders": orders, "rows": [{k: (None if k == "budget" and v is not None and math.isnan(v) else v)
                                                for k, v in row.items()} for row in table.to_pylist()]}
        if not compute:
            return {"skipped": "the stored replay was computed on other samples or labels; " + ON_REQUEST.split("; ")[1]}
    result = equal_compute_metrics(data, labels, orders=orders, seed=seed, max_cells=max_cells)
    if result.get("rows"):
        table = pa.Table.from_pylist([{**row, "budget": math.nan if row["budget"] is None else row["budget"]}
                                      for row in result["rows"]])
        store.write_table(CACHE_TABLE, table.replace_schema_metadata({"fingerprint": key}))
    return result


def _number(value: float | None) -> float:
    """NaN for a missing value (null once read back from metrics.json)."""
    return math.nan if value is None else value


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
    fig, axes = new_figure(5 * len(panels), 4, ncols=len(panels))
    for ax, key in zip(axes, panels):
        label = PANELS.get(key, key)
        for name in dict.fromkeys(r["policy"] for r in rows if r["budget"] is not None):
            points = [r for r in rows if r["policy"] == name]
            style = "s--" if name.startswith("ceiling") else "o-"  # yardsticks that peek, not policies
            ax.plot([r["samples_per_problem"] for r in points], [100 * _number(r[key]) for r in points], style, label=name)
        adaptive = [r for r in rows if r["budget"] is None]
        if adaptive:
            ax.plot([r["samples_per_problem"] for r in adaptive], [100 * _number(r[key]) for r in adaptive], "k^",
                    label="confident_majority (thresholds)")
        highest = max((100 * _number(r[key]) for r in rows if key in r and not math.isnan(_number(r[key]))), default=0.0)
        ax.set_ylim(0, max(5.0, 1.05 * highest))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("samples per problem (mean)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)
