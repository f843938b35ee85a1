"""Evaluation metrics over problem groups: unbiased pass@k, majority@k, selection accuracy."""

from __future__ import annotations

import math

import numpy as np

from .groups import group_argmax, group_sizes, group_sum


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int | np.ndarray) -> np.ndarray:
    """Unbiased pass@k per problem: ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021).

    ``n``, ``c`` and ``k`` broadcast against each other, so ``pass_at_k(n[:, None], c[:, None], ks[None, :])``
    gives a ``[P, K]`` grid in one call (log-gamma arithmetic, no huge binomials).

    Args:
        n: ``[P]`` samples per problem.
        c: ``[P]`` correct samples per problem.
        k: samples drawn (an int or an array broadcastable with ``n``).

    Returns:
        float array of the broadcast shape; NaN where ``k > n``.

    Examples:
        >>> pass_at_k(np.array([4]), np.array([1]), 2).round(3).tolist()
        [0.5]
    """
    n, c, k = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(c, dtype=np.float64),
                                  np.asarray(k, dtype=np.float64))
    valid = k <= n
    can_all_fail = valid & (n - c >= k)
    safe_k = np.where(can_all_fail, k, 0.0)
    log_ratio = log_gamma(n - c + 1) - log_gamma(n - c - safe_k + 1) - log_gamma(n + 1) + log_gamma(n - safe_k + 1)
    out = np.where(can_all_fail, -np.expm1(np.where(can_all_fail, log_ratio, 0.0)), 1.0)
    out = np.where(valid & (c == 0), 0.0, out)
    return np.where(valid, out, np.nan)


def log_gamma(x: np.ndarray) -> np.ndarray:
    """``log |Gamma(x)|`` elementwise (``scipy.special.gammaln``; +inf at 0 and the negative integers).

    ``math.lgamma`` once per distinct value: pass@k's arguments are sample counts, a few distinct values
    in any grid (and core/ stays free of scipy, a tenth of a second of every command that reports)."""
    values, inverse = np.unique(np.asarray(x, dtype=np.float64), return_inverse=True)
    logs = np.array([math.lgamma(v) if v > 0 or v % 1 else math.inf for v in values.tolist()], dtype=np.float64)
    return logs[inverse].reshape(np.shape(x))


def coverage_curve(labels: np.ndarray, groups: np.ndarray, n_groups: int, ks: list[int]) -> dict[int, float]:
    """Mean unbiased pass@k over problems for each k (problems with fewer than k samples skipped)."""
    per_problem = coverage_per_problem(labels, groups, n_groups, ks)
    return {k: float(np.nanmean(v)) if (~np.isnan(v)).any() else float("nan") for k, v in per_problem.items()}


def coverage_per_problem(labels: np.ndarray, groups: np.ndarray, n_groups: int, ks: list[int]) -> dict[int, np.ndarray]:
    """``{k: [n_groups]}`` unbiased pass@k of each problem (NaN where it has fewer than k samples)."""
    n = group_sizes(groups, n_groups)
    c = group_sum(labels.astype(np.float64), groups, n_groups)
    return {k: pass_at_k(n, c, k) for k in ks}


def majority_at_k(answers: np.ndarray, labels: np.ndarray, groups: np.ndarray, tiebreak: np.ndarray,
                  n_groups: int, k: int, trials: int = 256, seed: int = 0) -> float:
    """Expected accuracy of majority vote over ``k`` samples per problem (see ``majority_curve``)."""
    return majority_curve(answers, labels, groups, tiebreak, n_groups, [k], trials, seed)[k]


def majority_curve(answers: np.ndarray, labels: np.ndarray, groups: np.ndarray, tiebreak: np.ndarray,
                   n_groups: int, ks: list[int], trials: int = 256, seed: int = 0,
                   block_elements: int = 4_000_000) -> dict[int, float]:
    """Majority-vote accuracy against k, averaged over the problems with at least k samples.

    One rule for the curve and the majority selector, at every k: the selector picks a *candidate*
    carrying the most frequent answer (ties between answers and within the answer to the candidate with
    the smallest ``tiebreak``), and a point is that candidate's label. So a tie between answers and an
    answer whose candidates carry different labels (a split answer) count exactly as the selector counts
    them. At ``k == n`` (all of a problem's samples) the value is exact. At ``k < n`` it is a Monte Carlo
    estimate over ``trials`` random orderings of each problem's samples: the first k of an ordering form
    a uniformly random k-subset, and the rule is applied to it (so the curve is the selector's accuracy on
    random k-subsets). Candidates with no answer (code -1) abstain; a subset with no answer counts as
    wrong. Problems are processed in vectorised blocks of equal sample count.

    Args:
        answers: ``[N]`` int answer codes (-1 = none); equal codes = equivalent answers.
        labels: ``[N]`` bool correctness.
        groups: ``[N]`` problem index in ``0..n_groups-1``.
        tiebreak: ``[N]`` int rank, smaller wins exact (k == n) ties.
        ks: the values of k.
        trials: orderings per problem for k < n.

    Returns:
        ``{k: accuracy}`` (NaN for a k no problem reaches).
    """
    per_problem = majority_per_problem(answers, labels, groups, tiebreak, n_groups, ks, trials, seed, block_elements)
    return {k: float(np.nanmean(v)) if (~np.isnan(v)).any() else float("nan") for k, v in per_problem.items()}


def majority_per_problem(answers: np.ndarray, labels: np.ndarray, groups: np.ndarray, tiebreak: np.ndarray,
                         n_groups: int, ks: list[int], trials: int = 256, seed: int = 0,
                         block_elements: int = 4_000_000) -> dict[int, np.ndarray]:
    """``{k: [n_groups]}`` majority@k of each problem (NaN where it has fewer than k samples); see
    ``majority_curve`` for the estimate."""
    rng = np.random.default_rng(seed)
    answers, labels = np.asarray(answers), np.asarray(labels, dtype=bool)
    sizes = np.bincount(groups, minlength=n_groups)
    out = {k: np.full(n_groups, np.nan) for k in ks}
    exact = _majority_exact(answers, labels, groups, tiebreak, n_groups)
    for k in ks:
        at_n = sizes == k
        out[k][at_n] = exact[at_n]
    order = np.lexsort((tiebreak, groups))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    for n in np.unique(sizes):
        ks_below = [k for k in ks if k < n]
        if n == 0 or not ks_below:
            continue
        problems = np.flatnonzero(sizes == n)
        rows = order[starts[problems][:, None] + np.arange(n)[None, :]]  # [P, n]
        block = max(1, block_elements // (trials * n))
        for first in range(0, problems.size, block):
            for k, accuracy in _majority_monte_carlo(answers[rows[first:first + block]], labels[rows[first:first + block]],
                                                     ks_below, trials, rng).items():
                out[k][problems[first:first + block]] = accuracy
    return out


def _majority_exact(answers: np.ndarray, labels: np.ndarray, groups: np.ndarray, tiebreak: np.ndarray,
                    n_groups: int) -> np.ndarray:
    """``[n_groups]`` bool: is the majority answer over all of the problem's samples correct."""
    voting = answers >= 0
    counts = np.bincount(answers[voting], minlength=int(answers.max(initial=-1)) + 1)
    score = np.full(answers.shape, np.nan)
    score[voting] = counts[answers[voting]]
    chosen = group_argmax(score, groups, n_groups, tiebreak)
    correct = np.zeros(n_groups, dtype=bool)
    correct[chosen >= 0] = labels[chosen[chosen >= 0]]
    return correct


def _majority_monte_carlo(answers: np.ndarray, labels: np.ndarray, ks: list[int], trials: int,
                          rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Per problem of a ``[P, n]`` block, the share of random k-subsets whose majority is correct."""
    n_problems, n = answers.shape
    # Local answer codes 0..U-1 per problem (U = most distinct answers in the block); U = abstain.
    # (each row's distinct answers ranked in ascending order, as np.unique would code them, for all rows at once)
    order = np.argsort(answers, axis=1, kind="stable")
    ranked = np.take_along_axis(answers, order, axis=1)
    first = np.ones(ranked.shape, dtype=bool)
    first[:, 1:] = ranked[:, 1:] != ranked[:, :-1]
    codes = np.empty((n_problems, n), dtype=np.int64)
    np.put_along_axis(codes, order, np.cumsum(first, axis=1) - 1, axis=1)
    codes -= (ranked[:, :1] == -1)  # no answer is not an answer: the codes of real answers start at 0
    local = np.where(answers == -1, n, codes)
    width = int(local[local < n].max(initial=-1)) + 1
    local = np.where(local == n, width, local)  # width = abstain
    labels = labels.astype(bool)
    k_max = max(ks)
    result: dict[int, np.ndarray] = {k: np.zeros(n_problems) for k in ks}
    # Sub-blocks keep the [p, T, k_max, width] vote counts and ranks within budget (width varies with the answers).
    step = max(1, 8_000_000 // (trials * k_max * (width + 1)))
    for first in range(0, n_problems, step):
        part = slice(first, first + step)
        for k, share in _majority_subsets(local[part], labels[part], width, ks, k_max, trials, rng).items():
            result[k][part] = share
    return result


def _majority_subsets(local: np.ndarray, labels: np.ndarray, width: int, ks: list[int], k_max: int,
                      trials: int, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Share of ``trials`` random orderings whose first-k majority pick is correct, for each k (vectorised).

    ``local``: ``[p, n]`` codes 0..width-1 (``width`` = abstain), columns in tie-break order; ``labels``:
    ``[p, n]`` bool, the candidates' own labels. Votes of every prefix come from one cumulative sum over
    the ordering; the pick is the drawn candidate with the smallest column among those of the winning
    answer (a cumulative minimum over the same prefix), which also breaks ties between answers.
    """
    p, n = local.shape
    if width == 0:  # nobody answered: every subset is wrong
        return {k: np.zeros(p) for k in ks}
    ordering = np.broadcast_to(np.arange(n, dtype=np.int32), (p, trials, n)).copy()
    rng.permuted(ordering, axis=2, out=ordering)  # uniform permutations, O(n) each
    drawn = np.take_along_axis(np.broadcast_to(local[:, None, :], ordering.shape), ordering[:, :, :k_max], axis=2)
    hits = drawn[..., None] == np.arange(width, dtype=drawn.dtype)  # [p, T, k_max, width]
    counts = np.cumsum(hits, axis=2, dtype=np.int16)
    rank_type = np.int16 if n < np.iinfo(np.int16).max else np.int32
    first_rank = np.minimum.accumulate(np.where(hits, ordering[:, :, :k_max, None].astype(rank_type), n), axis=2)
    padded = np.concatenate([labels, np.zeros((p, 1), dtype=bool)], axis=1)  # column n: no pick
    result = {}
    for k in ks:
        votes = counts[:, :, k - 1, :].astype(np.int32)
        ranks = first_rank[:, :, k - 1, :].astype(np.int64)
        score = np.where(votes > 0, votes * (n + 1) - ranks, -1)
        winner = score.argmax(axis=2)
        won = np.take_along_axis(score, winner[..., None], axis=2)[..., 0] >= 0
        pick = np.where(won, np.take_along_axis(ranks, winner[..., None], axis=2)[..., 0], n)  # [p, T] column
        result[k] = np.take_along_axis(padded, pick, axis=1).mean(axis=1)
    return result


def selection_accuracy(chosen: np.ndarray, labels: np.ndarray) -> float:
    """Share of problems whose chosen row is correct; a problem with no choice (-1) counts as wrong."""
    chosen = np.asarray(chosen)
    return float(selection_hits(chosen, labels).mean()) if chosen.size else float("nan")


def selection_hits(chosen: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[P]`` bool: is each problem's chosen row correct (no choice, -1, is wrong)."""
    chosen = np.asarray(chosen)
    hit = np.zeros(chosen.shape, dtype=bool)
    made = chosen >= 0
    hit[made] = labels[chosen[made]].astype(bool)
    return hit


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, with n itself included."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n] if n >= 1 else []
