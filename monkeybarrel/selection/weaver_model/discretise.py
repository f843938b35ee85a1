"""From raw verifier scores to the bins the label model counts.

Shapes: ``X [n, m]`` raw scores (one row per candidate, one column per verifier), NaN = missing (an
abstain). ``ScoreNormalizer`` maps each column to [0, 1] over the dataset (the empirical CDF by default,
so a level of 0.5 is the verifier's median). ``bin_cutoffs`` gives every verifier its cut points on its
own raw scale, ``[B - 1, m]`` ascending (``+inf`` pads a verifier with fewer bins), and ``bin_codes``
the int8 bin of every score ``[n, m]`` (``B`` = abstain, for NaN).

How many bins (``n_bins``):

* ``"auto"`` (default): per verifier, equal-count bins of its scores, as many as its data carry: at most
  ``MAX_BINS``, at least ``MIN_BIN_COUNT`` observed scores per bin on average, fewer where ties make cut
  points coincide (a binary verdict keeps 2, unit tests passed out of 5 keep up to 6). A strong verifier
  keeps its information: where few candidates are right, its top bins separate them, which a single
  split at the median cannot;
* an integer: that many bins at equally spaced normalised levels for every verifier;
* ``threshold`` (a level in (0, 1]): Weaver's binary votes, 1 when the normalised score is >= it.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

NORMALIZATIONS = ("quantile", "minmax", "weaver", "none")
MAX_BINS = 8
"""Most bins a verifier gets with ``n_bins="auto"``."""
MIN_BIN_COUNT = 30
"""With ``n_bins="auto"``, a verifier gets at most (observed scores / this) bins."""
BLOCK_ROWS = 8192
"""``bin_codes`` compares this many rows at a time."""


def as_matrix(estimator: BaseEstimator, X: Any, reset: bool) -> np.ndarray:
    """``X`` as a dense ``[n_candidates, n_verifiers]`` float64 array, checked by scikit-learn (2-D, not
    sparse or complex, no infinity: NaN is the missing score; ``n_features_in_`` set or checked)."""
    return validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")


class ScoreNormalizer(TransformerMixin, BaseEstimator):
    """Per-verifier, dataset-level normalisation to [0, 1]; NaN stays NaN.

    Args:
        method: ``quantile`` (the empirical CDF over the dataset, ties at their mid-rank, as
            scikit-learn's uniform ``QuantileTransformer``; robust to the unbounded logits of
            reward models, and a level of 0.5 is the verifier's median), ``minmax``,
            ``weaver`` (min-max unless the scores already lie in [0, 1], as the reference
            implementation does) or ``none``.
        n_quantiles: CDF knots kept per verifier by the ``quantile`` method (all points when there
            are fewer); each knot is the score of the nearest rank, so knots are scores that occur.
        subsample: the ``quantile`` knots come from at most this many rows (a seeded sample; all rows
            when there are fewer), so fitting 10^6 rows costs what 10^5 do.

    Attributes:
        quantiles_: ``[n_quantiles, m]`` score at each CDF level (``quantile``; NaN for all-NaN columns).
        references_: ``[n_quantiles]`` the CDF levels of the knots.
        low_, high_: ``[m]`` the range mapped to [0, 1] (``minmax``/``weaver``; NaN = left alone).
    """

    def __init__(self, method: str = "quantile", n_quantiles: int = 1000, subsample: int = 100_000) -> None:
        self.method = method
        self.n_quantiles = n_quantiles
        self.subsample = subsample

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN stays NaN (a missing score)
        return tags

    def fit(self, X: Any, y: Any = None) -> "ScoreNormalizer":
        if self.method not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {self.method!r}")
        X = as_matrix(self, X, reset=True)
        if self.method == "quantile":
            self._fit_quantiles(X)
        elif self.method in ("minmax", "weaver"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
                self.low_, self.high_ = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
            if self.method == "weaver":
                inside = (self.low_ >= 0.0) & (self.high_ <= 1.0)
                self.low_[inside], self.high_[inside] = np.nan, np.nan
        return self

    def _fit_quantiles(self, X: np.ndarray) -> None:
        if X.shape[0] > self.subsample:
            rows = np.sort(np.random.default_rng(0).choice(X.shape[0], self.subsample, replace=False))
            X = X[rows]
        finite = (~np.isnan(X)).sum(axis=0)
        self.references_ = np.linspace(0.0, 1.0, max(2, min(self.n_quantiles, max(int(finite.max()), 2))))
        self.quantiles_ = np.full((self.references_.size, X.shape[1]), np.nan)
        for j in np.flatnonzero(finite):  # one column at a time: a strided copy, then numpy's vectorised sort
            nearest = np.floor(self.references_ * (finite[j] - 1) + 0.5).astype(np.int64)
            self.quantiles_[:, j] = np.sort(X[:, j])[nearest]  # knots are scores (NaN sorts last)

    def transform_column(self, x: np.ndarray, j: int) -> np.ndarray:
        """``[k]`` normalised values of the finite scores ``x [k]`` of column ``j``."""
        if self.method == "quantile":
            q, levels = self.quantiles_[:, j], self.references_
            if np.isnan(q[0]):
                return x.copy()
            # a value equal to a run of knots gets the middle of their levels; between knots, linear
            right = np.searchsorted(q, x, side="right")
            left = right.copy()
            tied = np.flatnonzero((right > 0) & (q[np.maximum(right - 1, 0)] == x))
            left[tied] = np.searchsorted(q, x[tied], side="left")
            tied = (levels[np.minimum(left, q.size - 1)] + levels[np.maximum(right - 1, 0)]) / 2
            below, above = np.clip(left - 1, 0, q.size - 1), np.clip(left, 0, q.size - 1)
            span = q[above] - q[below]
            with np.errstate(invalid="ignore", divide="ignore"):
                between = levels[below] + (x - q[below]) * (levels[above] - levels[below]) / span
            out = np.where(right > left, tied, np.where(span > 0, between, levels[above]))
            return np.where(left >= q.size, 1.0, np.where(right == 0, 0.0, out))
        if self.method == "none" or np.isnan(self.low_[j]):
            return x.copy()
        span = self.high_[j] - self.low_[j]
        return np.clip((x - self.low_[j]) / span, 0.0, 1.0) if span > 0 else np.zeros_like(x)

    def transform(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        X = as_matrix(self, X, reset=False)
        out = X.copy()
        for j in range(X.shape[1]):
            rows = ~np.isnan(X[:, j])
            out[rows, j] = self.transform_column(X[rows, j], j)
        return out

    def _quantile_cutoff(self, j: int, level: float) -> float:
        """Smallest x with normalised score >= level: the first knot reaching it, refined inside its
        segment, where the normalised score is linear between distinct knots."""
        q = self.quantiles_[:, j]
        reached = np.flatnonzero(self.transform_column(q, j) >= level - 1e-12)
        if reached.size == 0:
            return np.inf
        i = reached[0]
        if i == 0 or q[i - 1] == q[i]:
            return float(q[i])
        low, high = q[i - 1], q[i]
        a, b = low + (high - low) / 3, low + 2 * (high - low) / 3
        za, zb = self.transform_column(np.array([a, b]), j)
        if zb <= za:
            return float(high)
        x = a + (level - 1e-12 - za) * (b - a) / (zb - za)
        x = min(max(x, np.nextafter(low, np.inf)), high)
        while self.transform_column(np.array([x]), j)[0] < level - 1e-12 and x < high:  # rounding: step up
            x = np.nextafter(x, np.inf)
        return float(x)

    def cutoffs(self, level: float) -> np.ndarray:
        """``[m]`` the smallest raw score whose normalised score is >= ``level``, per verifier.

        ``+inf`` when no score reaches it, NaN for an all-NaN verifier; ``X >= cutoffs(t)`` equals
        ``transform(X) >= t``.
        """
        check_is_fitted(self)
        out = np.full(self.n_features_in_, np.nan)
        for j in range(self.n_features_in_):
            if self.method == "quantile":
                if not np.isnan(self.quantiles_[0, j]):
                    out[j] = self._quantile_cutoff(j, level)
            elif self.method == "none" or np.isnan(self.low_[j]):
                out[j] = level
            else:
                span = self.high_[j] - self.low_[j]
                out[j] = self.low_[j] + level * span if span > 0 else (self.low_[j] if level <= 0 else np.inf)
        return out


def bin_cutoffs(normalizer: ScoreNormalizer, quantiles: ScoreNormalizer, observed: np.ndarray, n_bins: int | str,
                threshold: float | None) -> np.ndarray:
    """``[B - 1, m]`` ascending raw cut points of every verifier (see the module docstring).

    Args:
        normalizer: the fitted normaliser that defines ``threshold``'s scale and the integer bins' levels.
        quantiles: a fitted ``quantile`` normaliser (the auto bins are equal-count).
        observed: ``[m]`` observed (non-NaN) scores per verifier.
        n_bins: ``"auto"`` or an integer >= 2.
        threshold: a level in (0, 1]: one cut per verifier (binary votes); overrides ``n_bins``.
    """
    if threshold is not None:
        return normalizer.cutoffs(threshold)[None, :]
    if n_bins != "auto":
        return np.stack([normalizer.cutoffs(level) for level in np.arange(1, n_bins) / n_bins])
    m = observed.size
    cuts = []
    for j in range(m):
        q = quantiles.quantiles_[:, j]
        count = int(np.clip(observed[j] // MIN_BIN_COUNT, 2, MAX_BINS))
        if np.isnan(q[0]):
            cuts.append(np.zeros(0))
            continue
        levels = np.arange(1, count) / count
        z = quantiles.transform_column(q, j)  # cut at knots (data values), so ties never leave a bin empty
        first = np.searchsorted(z, levels - 1e-12, side="left")
        points = np.unique(q[first[first < q.size]])
        cuts.append(points[points > q[0]])  # no empty bin below the minimum
    out = np.full((max(1, max(c.size for c in cuts)), m), np.inf)
    for j, c in enumerate(cuts):
        out[:c.size, j] = c
    return out


def bins_per_verifier(cutoffs: np.ndarray) -> np.ndarray:
    """``[m]`` number of bins of each verifier (finite cut points + 1)."""
    return np.isfinite(cutoffs).sum(axis=0) + 1


def bin_codes(X: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """``[n, m]`` int8 bin of every score: the number of its verifier's cut points it reaches (>=);
    ``B = cutoffs.shape[0] + 1`` for NaN (an abstain).

    Args:
        X: ``[n, m]`` raw scores, NaN = abstain.
        cutoffs: ``[B - 1, m]`` ascending raw cut points per column (+inf = unused); with one cut point,
            bin 1 is the positive vote and bin 0 the negative one.
    """
    codes = np.empty(X.shape, dtype=np.int8)
    abstain = cutoffs.shape[0] + 1
    levels = [cut for cut in cutoffs if np.isfinite(cut).any()]  # rows of +inf (or NaN) pads count nothing
    for lo in range(0, X.shape[0], BLOCK_ROWS):  # blocks of rows: contiguous, cache-sized comparisons
        x = X[lo:lo + BLOCK_ROWS]
        block = np.zeros(x.shape, dtype=np.int8)
        with np.errstate(invalid="ignore"):
            for cut in levels:
                block += x >= cut
        block[np.isnan(x)] = abstain
        codes[lo:lo + BLOCK_ROWS] = block
    return codes


def bin_indicators(X: np.ndarray, cutoffs: np.ndarray) -> list[np.ndarray]:
    """One ``[n, m]`` float indicator matrix (column-major) per bin; a NaN score is in none."""
    codes = np.asfortranarray(bin_codes(X, cutoffs))
    return [(codes == b).astype(np.float64, order="F") for b in range(cutoffs.shape[0] + 1)]
