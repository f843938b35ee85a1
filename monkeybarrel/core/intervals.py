"""Bootstrap confidence intervals over problems, for many statistics at once.

Every reported accuracy is a mean over problems of a per-problem value (1/0 for a selector's pick,
pass@k or majority@k in [0, 1]). Problems are the sampling unit: resampling them with replacement
gives the spread a re-drawn benchmark of the same size would show. One set of resampling weights
serves all statistics, so intervals of different methods are paired (see ``paired_difference_ci``).
"""

from __future__ import annotations

import numpy as np

DEFAULT_RESAMPLES = 2000
LEVEL = 0.95


def bootstrap_means(values: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                    block: int = 250) -> np.ndarray:
    """Means of each column over bootstrap resamples of the rows (problems).

    Args:
        values: ``[P, S]`` per-problem values of S statistics (NaN = the problem does not count
            for that statistic, e.g. fewer than k samples).
        resamples: bootstrap replicates B.
        seed: the resampling seed (the same seed and P give the same resamples).

    Returns:
        ``[B, S]`` resampled means (NaN where a resample holds no counted problem).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    n_problems, n_stats = values.shape
    counted = ~np.isnan(values)
    filled = np.where(counted, values, 0.0)
    rng = np.random.default_rng(seed)
    out = np.empty((resamples, n_stats))
    for first in range(0, resamples, block):
        size = min(block, resamples - first)
        weights = rng.multinomial(n_problems, np.full(n_problems, 1.0 / n_problems), size=size).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[first:first + size] = (weights @ filled) / (weights @ counted)
    return out


def percentile_interval(replicates: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """``[S, 2]`` (low, high) percentile interval of each column of ``[B, S]`` replicates (NaN if none)."""
    tail = 100 * (1 - level) / 2
    out = np.full((replicates.shape[1], 2), np.nan)
    for s in range(replicates.shape[1]):
        finite = replicates[:, s][~np.isnan(replicates[:, s])]
        if finite.size:
            out[s] = np.percentile(finite, [tail, 100 - tail])
    return out


def bootstrap_ci(values: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                 level: float = LEVEL) -> np.ndarray:
    """``[S, 2]`` 95% percentile bootstrap intervals of the column means of ``[P, S]`` per-problem values.

    Examples:
        >>> low, high = bootstrap_ci(np.array([1.0, 0.0] * 50))[0]
        >>> bool(0.35 < low < 0.5 < high < 0.65)
        True
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    if values.shape[0] == 0:
        return np.full((values.shape[1], 2), np.nan)
    return percentile_interval(bootstrap_means(values, resamples, seed), level)


def paired_difference_ci(a: np.ndarray, b: np.ndarray, resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                         level: float = LEVEL) -> tuple[float, float]:
    """95% bootstrap interval of ``mean(b) - mean(a)`` over the same problems (``[P]`` each, paired)."""
    replicates = bootstrap_means(np.stack([a, b], axis=1), resamples, seed)
    low, high = percentile_interval((replicates[:, 1] - replicates[:, 0])[:, None], level)[0]
    return float(low), float(high)
