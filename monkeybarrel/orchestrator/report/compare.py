"""``monkeybarrel compare DIR1 DIR2``: what differs between two experiments and by how much.

Config: every differing key (flattened ``section.key`` paths). Metrics: sample accuracy, coverage
at each common k and each common selector's accuracy, as ``DIR2 - DIR1`` with a 95% bootstrap
interval over problems. On the problems both share the bootstrap is paired (one resample of
problem ids for both, which removes problem difficulty from the spread); with no shared problems
the two are resampled independently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...core.intervals import DEFAULT_RESAMPLES, bootstrap_means, paired_difference_ci, percentile_interval
from ...core.metrics import pass_at_k
from ..experiment import Experiment
from ..store.config_guard import changed_keys
from .drilldown import Drilldown


def per_problem_values(experiment: Experiment) -> tuple[list[str], dict[str, np.ndarray]]:
    """Problem ids and ``{statistic: [P] values}`` whose mean over problems is the reported accuracy."""
    view = Drilldown.load(experiment)
    ids = view.problem_ids()
    n = np.array([view.rows_of[p].size for p in ids], dtype=np.float64)
    correct = np.array([sum(bool(c) for c in view.correct[view.rows_of[p]]) for p in ids], dtype=np.float64)
    labelled = any(c is not None for c in view.correct)
    values: dict[str, np.ndarray] = {}
    if not labelled:
        return ids, values
    values["sample accuracy"] = correct / n
    for k in experiment.metrics().get("ks", []):
        values[f"coverage@{k}"] = pass_at_k(n, correct, int(k))
    for method, by_problem in view.picks.items():
        if method.startswith("random"):
            values[method] = correct / n
            continue
        rows = np.array([by_problem.get(p, -1) for p in ids])
        values[method] = np.array([bool(view.correct[r]) if r >= 0 else False for r in rows], dtype=np.float64)
    return ids, values


def compare(first: str | Path, second: str | Path, seed: int = 0) -> dict[str, Any]:
    """``{"config": [changed keys], "metrics": [{name, first, second, delta, ci95, paired, n}]}``."""
    a, b = Experiment(first), Experiment(second)
    config_changes = changed_keys({"config": _flat(a.config.to_dict())}, {"config": _flat(b.config.to_dict())})
    ids_a, values_a = per_problem_values(a)
    ids_b, values_b = per_problem_values(b)
    shared = sorted(set(ids_a) & set(ids_b))
    pos_a, pos_b = {p: i for i, p in enumerate(ids_a)}, {p: i for i, p in enumerate(ids_b)}
    rows = []
    for name in [n for n in values_a if n in values_b]:
        va, vb = values_a[name], values_b[name]
        if shared:
            sa = va[[pos_a[p] for p in shared]]
            sb = vb[[pos_b[p] for p in shared]]
            interval = paired_difference_ci(sa, sb, seed=seed)
            first_mean, second_mean, n = np.nanmean(sa), np.nanmean(sb), len(shared)
        else:
            ra = bootstrap_means(va, DEFAULT_RESAMPLES, seed)[:, 0]
            rb = bootstrap_means(vb, DEFAULT_RESAMPLES, seed + 1)[:, 0]
            interval = tuple(percentile_interval((rb - ra)[:, None])[0])
            first_mean, second_mean, n = np.nanmean(va), np.nanmean(vb), 0
        rows.append({"name": name, "first": float(first_mean), "second": float(second_mean),
                     "delta": float(second_mean - first_mean), "ci95": [float(interval[0]), float(interval[1])],
                     "paired": bool(shared), "shared_problems": n})
    return {"config": config_changes, "metrics": rows, "problems": {"first": len(ids_a), "second": len(ids_b),
                                                                     "shared": len(shared)}}


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """Lists of named entries become ``name=...`` keyed maps, so reordering is not a change."""
    out = dict(data)
    for section, key in (("generators", "id"), ("verifiers", "name"), ("selectors", "name")):
        if isinstance(out.get(section), list):
            out[section] = {f"{key}={item.get(key)}": item for item in out[section]}
    return out
