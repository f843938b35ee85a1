"""Evaluate stage: coverage (pass@k), majority@k, each selector's accuracy, with 95% intervals.

Every accuracy is a mean over problems and carries a percentile bootstrap interval over problems
(``<name>_ci95`` / ``ci95``: ``[low, high]``), all from one set of resamples. "random (pass@1)" is
the exact expectation of a uniformly random pick (mean over problems of correct / samples), not one
draw. Without labels every accuracy is null (``labelled_candidates`` says how many have one).
Values that do not exist are null in ``metrics.json`` (``to_json``), never NaN.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from ...core.config import ExperimentConfig
from ...core.groups import group_argmax, group_sizes, group_sum
from ...core.intervals import DEFAULT_RESAMPLES, LEVEL, bootstrap_ci
from ...core.metrics import coverage_per_problem, default_ks, majority_per_problem, selection_accuracy, selection_hits
from ...core.scaling_laws import coverage_at_k, fit_coverage_law, log_spaced_ks
from ...core.selection_data import SelectionData


def evaluate(config: ExperimentConfig, data: SelectionData, labels: np.ndarray,
             selections: dict[str, dict[str, Any]], labelled: np.ndarray | None = None) -> dict[str, Any]:
    """All metrics as plain data (written to ``metrics.json`` through ``to_json``).

    Args:
        labels: ``[n]`` bool correctness aligned with ``data``.
        selections: per method ``{"chosen": [P] row or -1, "uses_labels", "type"}``.
        labelled: ``[n]`` bool, which candidates have a label (default: all).
    """
    sizes = group_sizes(data.groups, data.n_problems) if data.n_candidates else np.zeros(0, int)
    n_min = int(sizes.min()) if sizes.size else 0
    ks = sorted(k for k in (config.evaluate.ks or default_ks(n_min)) if k >= 1)
    n_labelled = int(labelled.sum()) if labelled is not None else int(labels.size)
    metrics: dict[str, Any] = {
        "n_problems": data.n_problems,
        "n_candidates": data.n_candidates,
        "labelled_candidates": n_labelled,
        "samples_per_problem": {"min": n_min, "max": int(sizes.max()) if sizes.size else 0},
        "sample_accuracy": None,
        "ks": ks,
        "coverage": {},
        "majority": {},
        "selection": {},
        "per_generator": {},
        "verifiers": {},
        "scaling_law": {},
        "intervals": {"method": "percentile bootstrap over problems", "level": LEVEL,
                      "resamples": DEFAULT_RESAMPLES, "seed": config.seed},
    }
    if data.n_candidates == 0:
        return metrics
    for name, info in selections.items():
        metrics["selection"][name] = {"accuracy": None, "ci95": None, "uses_labels": info["uses_labels"],
                                      "type": info["type"], "abstained": int((info["chosen"] < 0).sum()),
                                      "notes": list(info.get("notes", []))}
        heldout = info.get("heldout")
        if heldout is not None and heldout.any() and n_labelled:  # fitted on the other problems: not transductive
            metrics["selection"][name]["heldout"] = {
                "problems": int(heldout.sum()), "accuracy": selection_accuracy(info["chosen"][heldout], labels)}
    if n_labelled == 0:  # no ground truth: nothing to score against (not 0 %)
        metrics["coverage"] = metrics["majority"] = {str(k): None for k in ks}
        return metrics

    columns: dict[tuple, np.ndarray] = {}  # (path...) -> [P] per-problem values; bootstrapped together
    correct = group_sum(labels.astype(np.float64), data.groups, data.n_problems)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(sizes > 0, correct / np.maximum(sizes, 1), np.nan)
    columns[("sample_accuracy",)] = share
    for k, values in coverage_per_problem(labels, data.groups, data.n_problems, ks).items():
        columns[("coverage", str(k))] = values
    trials = majority_trials(config.evaluate.majority_trials, data.n_problems)
    metrics["majority_trials"] = trials
    majority = majority_per_problem(data.answers, labels, data.groups, data.tiebreak, data.n_problems, ks,
                                    trials=trials, seed=config.seed)
    for k, values in majority.items():
        columns[("majority", str(k))] = values
    for name, info in selections.items():
        if info["type"] == "random":  # the expectation of a uniform pick; a problem without candidates is wrong
            columns[("selection", name)] = np.nan_to_num(share, nan=0.0)
        else:
            columns[("selection", name)] = selection_hits(info["chosen"], labels).astype(np.float64)
    generator_ids = data.generator_id.astype(str)
    for generator in sorted(set(generator_ids)):
        rows = generator_ids == generator
        n_g = group_sizes(data.groups[rows], data.n_problems)
        c_g = group_sum(labels[rows].astype(np.float64), data.groups[rows], data.n_problems)
        with np.errstate(invalid="ignore", divide="ignore"):
            columns[("per_generator", generator, "sample_accuracy")] = np.where(n_g > 0, c_g / np.maximum(n_g, 1), np.nan)
        gen_ks = [k for k in ks if k <= int(n_g.max(initial=0))]
        for k, values in coverage_per_problem(labels[rows], data.groups[rows], data.n_problems, gen_ks).items():
            columns[("per_generator", generator, "coverage", str(k))] = values
        metrics["per_generator"][generator] = {"n_candidates": int(rows.sum()), "coverage": {}, "coverage_ci95": {}}
    quality = verifier_quality(data, labels)
    for name, info in quality.items():
        columns[("verifiers", name, "top1_accuracy")] = info.pop("top1_hits")
    metrics["verifiers"] = quality
    metrics["scaling_law"] = scaling_laws(data, labels, n_min)

    keys = list(columns)
    matrix = np.stack([columns[key] for key in keys], axis=1)
    with np.errstate(invalid="ignore"):
        counted = ~np.isnan(matrix)
        means = np.where(counted, matrix, 0).sum(axis=0) / counted.sum(axis=0)
    intervals = bootstrap_ci(matrix, DEFAULT_RESAMPLES, config.seed, LEVEL)
    for key, mean, interval in zip(keys, means, intervals):
        _place(metrics, key, _number(mean), [_number(interval[0]), _number(interval[1])])
    return metrics


def majority_trials(configured: int, n_problems: int, reference_problems: int = 1000, floor: int = 32) -> int:
    """Monte Carlo orderings per problem for majority@k: the configured number up to 1,000 problems, then
    ``configured * 1000 / n_problems`` (at least ``floor``), so the total work stays bounded while the
    Monte Carlo error of the mean over problems stays below ~0.1 points (std <= 0.5 / sqrt(trials * P))."""
    if n_problems <= reference_problems:
        return configured
    return max(min(floor, configured), -(-configured * reference_problems // n_problems))


def _place(metrics: dict[str, Any], key: tuple, mean: float | None, interval: list) -> None:
    """Store a statistic and its interval at its place in the metrics tree."""
    if interval[0] is None:
        interval = None
    if key[0] == "sample_accuracy":
        metrics["sample_accuracy"], metrics["sample_accuracy_ci95"] = mean, interval
    elif key[0] in ("coverage", "majority"):
        metrics[key[0]][key[1]] = mean
        metrics.setdefault(f"{key[0]}_ci95", {})[key[1]] = interval
    elif key[0] == "selection":
        metrics["selection"][key[1]].update(accuracy=mean, ci95=interval)
    elif key[0] == "per_generator":
        entry = metrics["per_generator"][key[1]]
        if key[2] == "sample_accuracy":
            entry["sample_accuracy"], entry["sample_accuracy_ci95"] = mean, interval
        else:
            entry["coverage"][key[3]], entry["coverage_ci95"][key[3]] = mean, interval
    elif key[0] == "verifiers":
        metrics["verifiers"][key[1]].update(top1_accuracy=mean, top1_accuracy_ci95=interval)


def _number(value: float) -> float | None:
    value = float(value)
    return None if math.isnan(value) else round(value, 12)  # 1/16 from two formulas prints the same


def to_json(metrics: dict[str, Any], compact: bool = False) -> str:
    """``metrics`` as strict JSON: NaN and infinities become null. ``compact``: no indentation, which also
    lets ``json`` use its C encoder (for large blobs such as report.html's data)."""
    if compact:
        try:  # plain finite data (report.html's drill-down) goes straight to the C encoder
            return json.dumps(metrics, allow_nan=False, separators=(",", ":"))
        except (ValueError, TypeError):  # NaN / infinity, or numpy scalars: convert first
            return json.dumps(_finite(metrics), allow_nan=False, separators=(",", ":"))
    return json.dumps(_finite(metrics), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, np.generic):
        return _finite(value.item())
    return value


def verifier_quality(data: SelectionData, labels: np.ndarray) -> dict[str, dict[str, Any]]:
    """Per verifier, against the labels (evaluation only): share of failed (NaN) scores, per-problem hits
    of picking each problem's top-scored candidate (``top1_hits``, ``[P]``), and AUROC over all
    candidates (None if one class)."""
    quality = {}
    for j, name in enumerate(data.verifiers):
        scores = data.scores[:, j]
        finite = ~np.isnan(scores)
        chosen = group_argmax(scores, data.groups, data.n_problems, data.tiebreak)
        both_classes = finite.any() and 0 < labels[finite].mean() < 1
        quality[name] = {
            "failed": float(1 - finite.mean()),
            "top1_hits": selection_hits(chosen, labels).astype(np.float64),
            "auroc": auroc(labels[finite], scores[finite]) if both_classes else None,
        }
    return quality


def auroc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half): the Mann-Whitney U statistic from average ranks.

    Args:
        labels: ``[n]`` bool (or 0/1), both classes present.
        scores: ``[n]`` finite floats.
    """
    labels = np.asarray(labels, dtype=bool)  # 0/1 integers too (never read as row indices)
    order = np.argsort(scores, kind="stable")
    ranked = scores[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    ends = np.r_[starts[1:], ranked.size]
    ranks = np.empty(scores.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # 1-based average rank of each tie group
    positives = int(labels.sum())
    negatives = labels.size - positives
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


LAW_TARGETS = (0.5, 0.9, 0.99)
"""Coverage levels for which ``metrics.json`` reports the samples the fitted law needs."""


def scaling_laws(data: SelectionData, labels: np.ndarray, k_max: int) -> dict[str, dict[str, float]]:
    """``c(k) = exp(a k^b)`` fitted to the coverage curve of all candidates and of each generator (on
    k = 1..``k_max`` evenly spaced in log k), with the samples each needs for ``LAW_TARGETS`` coverage;
    ``{}`` when fewer than two samples per problem."""
    if k_max < 2:
        return {}
    generators = data.generator_id.astype(str)
    names = ["all", *sorted(set(generators))] if len(set(generators)) > 1 else ["all"]
    n = np.zeros((len(names), data.n_problems))
    c = np.zeros_like(n)
    for m, name in enumerate(names):
        rows = np.ones(labels.size, bool) if name == "all" else generators == name
        n[m] = group_sizes(data.groups[rows], data.n_problems)
        c[m] = group_sum(labels[rows].astype(np.float64), data.groups[rows], data.n_problems)
    ks = log_spaced_ks(k_max)
    law = fit_coverage_law(ks, coverage_at_k(n, c, ks))
    needed = {t: law.samples_for(t) for t in LAW_TARGETS}
    return {name: {**law.row(m), **{f"samples_for_{t}": float(needed[t][m]) for t in LAW_TARGETS}}
            for m, name in enumerate(names)}
