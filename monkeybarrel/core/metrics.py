"""Evaluation metrics over problem groups: unbiased pass@k, majority@k, selection accuracy."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from .groups import group_sizes, group_sum


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per problem: ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021).

    Args:
        n: ``[P]`` samples per problem.
        c: ``[P]`` correct samples per problem.
        k: samples drawn.

    Returns:
        ``[P]`` float; NaN where ``k > n``.

    Examples:
        >>> pass_at_k(np.array([4]), np.array([1]), 2).round(3).tolist()
        [0.5]
    """
    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    out = np.full(n.shape, np.nan)
    valid = k <= n
    all_fail_possible = valid & (n - c >= k)
    nn, cc = n[all_fail_possible], c[all_fail_possible]
    log_ratio = gammaln(nn - cc + 1) - gammaln(nn - cc - k + 1) - gammaln(nn + 1) + gammaln(nn - k + 1)
    out[all_fail_possible] = 1.0 - np.exp(log_ratio)
    out[valid & ~all_fail_possible] = 1.0
    out[valid & (c == 0)] = 0.0
    return out


def coverage_curve(labels: np.ndarray, groups: np.ndarray, n_groups: int, ks: list[int]) -> dict[int, float]:
    """Mean unbiased pass@k over problems for each k (problems with fewer than k samples skipped)."""
    n = group_sizes(groups, n_groups)
    c = group_sum(labels.astype(np.float64), groups, n_groups)
    return {k: float(np.nanmean(pass_at_k(n, c, k))) if (n >= k).any() else float("nan") for k in ks}


def majority_at_k(answers: np.ndarray, labels: np.ndarray, groups: np.ndarray, tiebreak: np.ndarray,
                  n_groups: int, k: int, trials: int = 256, seed: int = 0) -> float:
    """Expected accuracy of majority vote over ``k`` random samples per problem.

    For each problem, ``trials`` random k-subsets (without replacement) are drawn; the most
    frequent answer in each subset wins (candidates with no answer, code -1, abstain; ties go to the
    answer of the candidate with the smallest ``tiebreak``); the estimate is the share of subsets
    whose winner is correct. With ``k == n`` there is one subset, so the result is exact.

    Args:
        answers: ``[N]`` int answer codes, -1 = none.
        labels: ``[N]`` bool correctness.
        groups: ``[N]`` problem index.
        tiebreak: ``[N]`` rank, smaller wins ties.
        n_groups: number of problems.
        k: subset size; problems with fewer samples are skipped.
    """
    rng = np.random.default_rng(seed)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(n_groups + 1))
    accuracies = []
    for p in range(n_groups):
        rows = order[bounds[p] : bounds[p + 1]]
        n = rows.size
        if n < k or n == 0:
            continue
        local, codes = np.unique(answers[rows], return_inverse=True)
        correct_code = np.zeros(local.size, dtype=bool)
        np.logical_or.at(correct_code, codes, labels[rows].astype(bool))
        rank = tiebreak[rows].argsort().argsort()
        n_trials = 1 if k == n else trials
        picks = np.arange(n)[None, :] if k == n else rng.random((n_trials, n)).argsort(axis=1)[:, :k]
        sub_codes, sub_rank = codes[picks], rank[picks]
        trial_index = np.repeat(np.arange(n_trials), k)
        counts = np.zeros((n_trials, local.size))
        np.add.at(counts, (trial_index, sub_codes.ravel()), 1.0)
        best_rank = np.full((n_trials, local.size), n, dtype=np.float64)
        np.minimum.at(best_rank, (trial_index, sub_codes.ravel()), sub_rank.ravel())
        if local[0] == -1:  # abstentions never win
            counts[:, 0] = 0.0
        score = counts * (n + 1) - best_rank
        score[counts == 0] = -np.inf
        winner = score.argmax(axis=1)
        won = np.isfinite(score[np.arange(n_trials), winner])
        accuracies.append(float(np.mean(correct_code[winner] & won)))
    return float(np.mean(accuracies)) if accuracies else float("nan")


def selection_accuracy(chosen: np.ndarray, labels: np.ndarray) -> float:
    """Share of problems whose chosen row is correct; a problem with no choice (-1) counts as wrong."""
    chosen = np.asarray(chosen)
    if chosen.size == 0:
        return float("nan")
    hit = np.zeros(chosen.shape, dtype=bool)
    made = chosen >= 0
    hit[made] = labels[chosen[made]].astype(bool)
    return float(hit.mean())


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, with n itself included."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n] if n >= 1 else []
