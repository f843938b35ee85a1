"""Every selector's accuracy against k: refitted on random k-subsets of each problem's candidates.

The paper's main figure (Weaver, Fig. 1): selection accuracy as the number of samples per problem
grows. At ``k < n`` each configured selector is refitted on ``trials`` random k-subsets of every
problem's candidates (the same subsets for every selector, so the curves are paired) and its
accuracy averaged; at ``k = n`` the selector is fitted on all samples exactly as the select stage
fits it, so the value equals its reported accuracy. Every curve is its selector's own rule: a point is
the label of the candidate the selector picks, so a tie between answers and an answer whose candidates
carry different labels count as the selector counts them (the majority@k it may reuse,
``core.metrics.majority_curve``, applies the majority selector's rule to each subset: tested against exact
enumeration); ``random`` is its expectation (the share of correct samples), as reported. As for majority@k, accuracy at k averages
over the problems with at least k samples, and each point has a 95 % bootstrap interval over those
problems (``accuracy_vs_k_ci95`` in metrics.json).

Verifier scores are per candidate and reused, except ``answer_frequency`` columns, which depend on
the candidate pool and are recomputed on each subset below n (share of the subset's candidates with
an equivalent answer; no answer = 0).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from ...core.config import ExperimentConfig
from ...core.intervals import DEFAULT_RESAMPLES, LEVEL, bootstrap_ci
from ...core.metrics import selection_hits
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
    """``{selector name: {str(k): accuracy}}`` (see ``accuracy_vs_k_with_intervals``)."""
    return accuracy_vs_k_with_intervals(config, data, labels, ks, trials, seed, known)[0]


def accuracy_vs_k_with_intervals(config: ExperimentConfig, data: SelectionData, labels: np.ndarray, ks: list[int],
                                 trials: int | None = None, seed: int | None = None,
                                 known: dict[str, dict[str, float | None]] | None = None,
                                 known_ci95: dict[str, dict[str, list | None]] | None = None
                                 ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, list | None]]]:
    """Curves ``{selector name: {str(k): accuracy}}`` of the configured selectors (``evaluate.selector_curves``)
    and their 95 % bootstrap intervals over problems ``{name: {str(k): [low, high]}}``.

    Args:
        config: the experiment's config (selectors, evaluate options, seed).
        data, labels: all candidates and their correctness (labels go only to label-based selectors).
        ks: the values of k.
        trials: subsets per k below n (default ``evaluate.selector_trials``; 0 = no curves).
        seed: seed of the subset draws and the bootstrap (default the experiment's).
        known: curves already computed for a selector type, ``{type: {str(k): accuracy}}``: selectors of
            that type without options take it instead of being refitted (the evaluate stage passes its
            majority@k, the same quantity with more subsets per k); ``known_ci95`` their intervals.
    """
    trials = config.evaluate.selector_trials if trials is None else trials
    seed = config.seed if seed is None else seed
    wanted = config.evaluate.selector_curves
    specs = [(i, s) for i, s in enumerate(config.selectors) if wanted is None or s.name in wanted]
    if trials == 0 or not specs or data.n_candidates == 0:
        return {}, {}
    known, known_ci95 = known or {}, known_ci95 or {}
    reused = {s.name: {str(k): known[s.type][str(k)] for k in ks if known[s.type].get(str(k)) is not None}
              for _, s in specs if s.type in known and not s.options}
    reused_ci95 = {s.name: {k: (known_ci95.get(s.type) or {}).get(k) for k in reused[s.name]}
                   for _, s in specs if s.name in reused}
    specs = [(i, s) for i, s in specs if s.name not in reused]
    if not specs:
        return reused, reused_ci95
    rng = np.random.default_rng(seed)
    frequency_columns = [j for j, name in enumerate(data.verifiers)
                         if any(v.name == name and v.type == "answer_frequency" for v in config.verifiers)]
    sizes = np.bincount(data.groups, minlength=data.n_problems)
    share = np.bincount(data.groups, weights=labels.astype(np.float64), minlength=data.n_problems) / np.maximum(sizes, 1)
    hits = {spec.name: {} for _, spec in specs}  # name -> k -> [P] mean hit over the draws (NaN: < k samples)
    for k in ks:
        if not (sizes >= k).any():
            continue
        every = bool(np.all(sizes == k))  # k = n: all samples, fitted as the select stage fits them
        totals = {spec.name: np.zeros(data.n_problems) for _, spec in specs}
        draws = 1 if every or np.all(sizes[sizes >= k] == k) else trials
        for _ in range(draws):
            rows = np.arange(data.n_candidates) if every else random_k_subset(data.groups, data.n_problems, k, rng)
            sub, sub_labels = data.subset(rows), labels[rows]
            if frequency_columns and not every:
                scores = sub.scores.copy()
                scores[:, frequency_columns] = pool_answer_frequency(sub)[:, None]
                sub = replace(sub, scores=scores)
            origin = np.empty(sub.n_problems, dtype=np.int64)  # the problem of each of the subset's groups
            origin[sub.groups] = data.groups[rows]
            for index, spec in specs:
                if spec.type == "random":  # the expectation of a uniform pick, as the random row reports it
                    totals[spec.name][origin] += share[origin]
                    continue
                selector = build_selector(config, spec, f"selectors[{index}]")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # tiny subsets: fallbacks warn on every draw
                    chosen = fit_selector(selector, sub, sub_labels).select(sub)
                totals[spec.name][origin] += selection_hits(chosen, sub_labels)
        for name in totals:
            hits[name][k] = np.where(sizes >= k, totals[name] / draws, np.nan)
    curves, intervals = dict(reused), dict(reused_ci95)
    for name, by_k in hits.items():
        ordered = list(by_k)
        if not ordered:
            curves[name], intervals[name] = {}, {}
            continue
        matrix = np.stack([by_k[k] for k in ordered], axis=1)
        bounds = bootstrap_ci(matrix, DEFAULT_RESAMPLES, seed, LEVEL)
        curves[name] = {str(k): _round(np.nanmean(by_k[k])) for k in ordered}
        intervals[name] = {str(k): None if np.isnan(low) else [_round(low), _round(high)]
                           for k, (low, high) in zip(ordered, bounds)}
    return curves, intervals


def _round(value: float) -> float:
    """Rounded as metrics.json rounds every accuracy (12 digits), so k = n equals the reported value."""
    return round(float(value), 12)
