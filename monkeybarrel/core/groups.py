"""Vectorised per-problem (group) operations over flat candidate arrays.

Candidates of all problems lie in flat arrays of length n; ``groups[i]`` is the index of
candidate i's problem in ``0..n_groups-1``. Everything here is numpy, no Python loop over rows.
"""

from __future__ import annotations

import numpy as np


def factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes ``[n]`` int64 and the unique values, ordered by first appearance."""
    uniques, first, codes = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    remap = np.empty_like(order)
    remap[order] = np.arange(len(order))
    return remap[codes.reshape(-1)].astype(np.int64), uniques[order]


def group_argmax(values: np.ndarray, groups: np.ndarray, n_groups: int, tiebreak: np.ndarray) -> np.ndarray:
    """Row index of the largest value in each group, -1 for a group with no finite value.

    Ties go to the row with the smallest ``tiebreak`` rank, so the result does not depend on
    the order of the rows.

    Args:
        values: ``[n]`` float; NaN rows are never chosen.
        groups: ``[n]`` int group index.
        n_groups: number of groups.
        tiebreak: ``[n]`` int rank (unique per group), smaller wins ties.

    Returns:
        ``[n_groups]`` int64 row indices.
    """
    values = np.asarray(values, dtype=np.float64)
    finite = ~np.isnan(values)
    rows = np.flatnonzero(finite)
    chosen = np.full(n_groups, -1, dtype=np.int64)
    if rows.size == 0:
        return chosen
    order = np.lexsort((tiebreak[rows], -values[rows], groups[rows]))
    ordered = rows[order]
    first = np.ones(ordered.size, dtype=bool)
    first[1:] = groups[ordered][1:] != groups[ordered][:-1]
    chosen[groups[ordered[first]]] = ordered[first]
    return chosen


def group_sizes(groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``[n_groups]`` number of rows per group."""
    return np.bincount(groups, minlength=n_groups)


def group_sum(values: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``[n_groups]`` sum of ``values`` per group."""
    return np.bincount(groups, weights=values, minlength=n_groups)


def rank_by_votes(votes: np.ndarray, lengths: np.ndarray, groups: np.ndarray, n_groups: int,
                  tiebreak: np.ndarray | None = None) -> list[np.ndarray]:
    """Per group, its rows best first: most votes, then the shortest text, then the smallest tiebreak; NaN votes last.

    The one ranking of test voting (CodeMonkeys): the ``test_voting`` and ``swe_votes`` selectors and the
    SWE-bench candidate filter all use it.

    Args:
        votes: ``[n]`` float votes (e.g. generated tests passed); NaN = no votes.
        lengths: ``[n]`` int text lengths (shorter wins a tie in votes).
        groups: ``[n]`` int group index.
        n_groups: number of groups.
        tiebreak: ``[n]`` int rank, smaller wins the remaining ties (default: row order).

    Returns:
        ``n_groups`` int64 arrays of row indices (a group without rows gets an empty one).
    """
    votes = np.asarray(votes, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    tiebreak = np.arange(votes.size) if tiebreak is None else np.asarray(tiebreak)
    missing = np.isnan(votes)
    order = np.lexsort((tiebreak, np.asarray(lengths), -np.where(missing, -np.inf, votes), missing, groups))
    bounds = np.searchsorted(groups[order], np.arange(n_groups + 1))
    return [order[bounds[g]:bounds[g + 1]] for g in range(n_groups)]
