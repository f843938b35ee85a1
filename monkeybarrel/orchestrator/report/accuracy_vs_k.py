"""Every selector's accuracy against k: refitted on random k-subsets of each problem's candidates.

The paper's main figure (Weaver, Fig. 1): selection accuracy as the number of samples per problem
grows. At ``k < n`` each configured selector is refitted on ``trials`` random k-subsets of every
problem's candidates (the same subsets for every selector, so the curves are paired) and its
accuracy averaged; at ``k = n`` the value is the selector's accuracy on all samples. As for
majority@k, accuracy at k averages over the problems with at least k samples.

Verifier scores are per candidate and reused, except ``answer_frequency`` columns, which depend on
the candidate pool and are recomputed on each subset (share of the subset's candidates with an
equivalent answer; no answer = 0).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from ...core.config import ExperimentConfig
from ...core.metrics import selection_accuracy
from ...core.selection_data import SelectionData
from ..stages.select import build_selector, fit_selector


def random_k_subset(groups: np.ndarray, n_groups: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted rows of a uniformly random k-subset of each group's rows, for groups with >= k rows."""
    sizes = np.bincount(groups, minlength=n_groups)
    order = np.lexsort((rng.random(groups.size), groups))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.arange(groups.size) - starts[groups[order]]
    chosen = order[(rank < k) & (sizes[groups[order]] >= k)]
    return np.sort(chosen)


def pool_answer_frequency(data: SelectionData) -> np.ndarray:
    """``[n]`` share of the problem's candidates in ``data`` with the same answer code (0 without one)."""
    answers = data.answers
    present = answers >= 0
    out = np.zeros(data.n_candidates)
    if present.any():
        counts = np.bincount(answers[present])
        out[present] = counts[answers[present]]
    return out / np.bincount(data.groups, minlength=data.n_problems)[data.groups]


def accuracy_vs_k(config: ExperimentConfig, data: SelectionData, labels: np.ndarray, ks: list[int],
                  trials: int | None = None, seed: int | None = None,
                  known: dict[str, dict[str, float | None]] | None = None) -> dict[str, dict[str, float]]:
    """``{selector name: {str(k): accuracy}}`` for the configured selectors (``evaluate.selector_curves``).

    Args:
        config: the experiment's config (selectors, evaluate options, seed).
        data, labels: all candidates and their correctness (labels go only to label-based selectors).
        ks: the values of k.
        trials: subsets per k below n (default ``evaluate.selector_trials``; 0 = no curves).
        seed: seed of the subset draws (default the experiment's).
        known: curves already computed for a selector type, ``{type: {str(k): accuracy}}``: selectors of
            that type without options take it instead of being refitted (the evaluate stage passes its
            majority@k, the same quantity with more subsets per k).
    """
    trials = config.evaluate.selector_trials if trials is None else trials
    wanted = config.evaluate.selector_curves
    specs = [(i, s) for i, s in enumerate(config.selectors) if wanted is None or s.name in wanted]
    if trials == 0 or not specs or data.n_candidates == 0:
        return {}
    known = known or {}
    reused = {s.name: {str(k): known[s.type][str(k)] for k in ks if known[s.type].get(str(k)) is not None}
              for _, s in specs if s.type in known and not s.options}
    specs = [(i, s) for i, s in specs if s.name not in reused]
    if not specs:
        return reused
    rng = np.random.default_rng(config.seed if seed is None else seed)
    frequency_columns = [j for j, name in enumerate(data.verifiers)
                         if any(v.name == name and v.type == "answer_frequency" for v in config.verifiers)]
    sizes = np.bincount(data.groups, minlength=data.n_problems)
    hits: dict[str, dict[int, list[float]]] = {spec.name: {k: [] for k in ks} for _, spec in specs}
    for k in ks:
        if not (sizes >= k).any():
            continue
        exact = bool(np.all(sizes[sizes >= k] == k))
        for _ in range(1 if exact else trials):
            rows = random_k_subset(data.groups, data.n_problems, k, rng)
            sub, sub_labels = data.subset(rows), labels[rows]
            if frequency_columns:
                scores = sub.scores.copy()
                scores[:, frequency_columns] = pool_answer_frequency(sub)[:, None]
                sub = replace(sub, scores=scores)
            for index, spec in specs:
                selector = build_selector(config, spec, f"selectors[{index}]")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # tiny subsets: fallbacks warn on every draw
                    chosen = fit_selector(selector, sub, sub_labels).select(sub)
                hits[spec.name][k].append(selection_accuracy(chosen, sub_labels))
    return {**reused, **{name: {str(k): float(np.mean(v)) for k, v in by_k.items() if v} for name, by_k in hits.items()}}

