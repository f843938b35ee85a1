"""Which verifiers the label model may use: coverage and balance of their bins, with reasons in plain words.

Input: ``codes [n, m]`` int8 bins (``abstain`` = missing) and ``bins [m]`` per verifier. A verifier is
dropped when it scores (non-NaN) no candidate or fewer than ``min_coverage`` of them, when every score
falls in one bin, or when its bins are too unbalanced: with two bins (votes) a positive share outside
``rate_bounds``, with more a fullest bin above ``rate_bounds[1]``.
"""

from __future__ import annotations

import numpy as np

NEAR_RANDOM_GAP = 0.02
"""Kept verifiers whose mean bin position (0 = lowest bin, 1 = highest) differs by less than this between
the classes (|TPR - FPR| with two bins) are reported as near random (their weight is ~0)."""


def screen(codes: np.ndarray, bins: np.ndarray, scores: np.ndarray, min_coverage: float,
           rate_bounds: tuple[float, float]) -> tuple[np.ndarray, dict[int, str]]:
    """``([m] keep mask, {column: reason dropped})``.

    Args:
        codes: ``[n, m]`` int8 bins (values >= ``bins[j]`` are abstains).
        bins: ``[m]`` number of bins of each verifier.
        scores: ``[n, m]`` the raw scores (only read to describe a constant column).
        min_coverage: least share of rows a verifier must score.
        rate_bounds: ``(low, high)`` bounds on the positive share (two bins) or the fullest bin (more).
    """
    n, m = codes.shape
    per_bin = np.stack([(codes == b).sum(axis=0) for b in range(int(bins.max(initial=1)))]).astype(np.float64)
    votes = per_bin.sum(axis=0)
    share = np.divide(per_bin, votes, out=np.zeros_like(per_bin), where=votes > 0)
    low, high = rate_bounds
    dropped = {}
    for j in range(m):
        if votes[j] == 0:
            dropped[j] = "no scores: missing on every candidate"
        elif votes[j] < min_coverage * n:
            dropped[j] = f"too few scores: {100 * votes[j] / n:.1f}% of candidates (min_coverage {min_coverage:g})"
        elif share[:, j].max() == 1.0:
            dropped[j] = _constant(scores[:, j], bins[j])
        elif bins[j] == 2 and not low <= share[1, j] <= high:
            dropped[j] = f"almost constant: {100 * share[1, j]:.1f}% of its votes positive (rate_bounds {low:g}-{high:g})"
        elif bins[j] > 2 and share[:, j].max() > high:
            dropped[j] = f"almost constant: {100 * share[:, j].max():.1f}% of its scores in one bin (above {high:g})"
    keep = np.ones(m, dtype=bool)
    keep[list(dropped)] = False
    return keep, dropped


def _constant(column: np.ndarray, bins: int) -> str:
    """Why a verifier whose scores all fall in one bin is dropped, in words."""
    values, counts = np.unique(column[~np.isnan(column)], return_counts=True)
    if values.size == 1:
        return f"constant: every score is {values[0]:g}"
    top = int(np.argmax(counts))
    if bins == 2:
        return (f"constant: every vote {'positive' if top == values.size - 1 else 'negative'} "
                f"({counts.sum() - counts[top]} scores differ from {values[top]:g}, too few to split)")
    return f"almost constant: all but {counts.sum() - counts[top]} scores equal {values[top]:g}, too few to bin"
