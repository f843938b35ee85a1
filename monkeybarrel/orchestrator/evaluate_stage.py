"""Evaluate stage: coverage (pass@k), majority@k, and each selector's accuracy."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.config import ExperimentConfig
from ..core.groups import group_argmax, group_sizes, group_sum
from ..core.metrics import coverage_curve, default_ks, majority_curve, selection_accuracy
from ..core.scaling_laws import coverage_at_k, fit_coverage_law, log_spaced_ks
from ..core.selection_data import SelectionData


def evaluate(config: ExperimentConfig, data: SelectionData, labels: np.ndarray,
             selections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """All metrics as plain data (written to ``metrics.json``)."""
    sizes = np.bincount(data.groups, minlength=data.n_problems) if data.n_candidates else np.zeros(0, int)
    n_min = int(sizes.min()) if sizes.size else 0
    ks = sorted(k for k in (config.evaluate.ks or default_ks(n_min)) if k >= 1)
    metrics: dict[str, Any] = {
        "n_problems": data.n_problems,
        "n_candidates": data.n_candidates,
        "samples_per_problem": {"min": n_min, "max": int(sizes.max()) if sizes.size else 0},
        "sample_accuracy": float(labels.mean()) if labels.size else float("nan"),
        "ks": ks,
        "coverage": {},
        "majority": {},
        "selection": {},
        "per_generator": {},
        "verifiers": {},
        "scaling_law": {},
    }
    if data.n_candidates == 0:
        return metrics
    metrics["coverage"] = {str(k): v for k, v in coverage_curve(labels, data.groups, data.n_problems, ks).items()}
    curve = majority_curve(data.answers, labels, data.groups, data.tiebreak, data.n_problems, ks,
                           trials=config.evaluate.majority_trials, seed=config.seed)
    metrics["majority"] = {str(k): curve[k] for k in ks}
    for name, info in selections.items():
        metrics["selection"][name] = {
            "accuracy": selection_accuracy(info["chosen"], labels),
            "uses_labels": info["uses_labels"],
            "type": info["type"],
            "abstained": int((info["chosen"] < 0).sum()),
            "notes": list(info.get("notes", [])),
        }
        heldout = info.get("heldout")
        if heldout is not None and heldout.any():  # fitted on the other problems: not transductive
            metrics["selection"][name]["heldout"] = {
                "problems": int(heldout.sum()), "accuracy": selection_accuracy(info["chosen"][heldout], labels)}
    metrics["verifiers"] = verifier_quality(data, labels)
    metrics["scaling_law"] = scaling_laws(data, labels, n_min)
    for generator in sorted(set(data.generator_id.astype(str))):
        rows = data.generator_id.astype(str) == generator
        sub = data.subset(np.flatnonzero(rows))
        metrics["per_generator"][generator] = {
            "n_candidates": int(rows.sum()),
            "sample_accuracy": float(labels[rows].mean()),
            "coverage": {str(k): v for k, v in coverage_curve(labels[rows], sub.groups, sub.n_problems, ks).items()},
        }
    return metrics


def verifier_quality(data: SelectionData, labels: np.ndarray) -> dict[str, dict[str, float]]:
    """Per verifier, against the labels (evaluation only): share of failed (NaN) scores, accuracy of
    picking each problem's top-scored candidate, and AUROC over all candidates (NaN if one class)."""
    from sklearn.metrics import roc_auc_score

    quality = {}
    for j, name in enumerate(data.verifiers):
        scores = data.scores[:, j]
        finite = ~np.isnan(scores)
        chosen = group_argmax(scores, data.groups, data.n_problems, data.tiebreak)
        both_classes = finite.any() and 0 < labels[finite].mean() < 1
        quality[name] = {
            "failed": float(1 - finite.mean()),
            "top1_accuracy": selection_accuracy(chosen, labels),
            "auroc": float(roc_auc_score(labels[finite], scores[finite])) if both_classes else float("nan"),
        }
    return quality


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
