"""From raw verifier scores to votes: per-verifier normalisation over a dataset, and binning at cutoffs.

``ScoreNormalizer`` maps each verifier's scores to [0, 1] (the empirical CDF by default, so a threshold of
0.5 is the verifier's median); ``cutoffs`` gives the same thresholds on each verifier's raw scale, and
``bin_codes`` turns scores into the small integer bins the label model counts (NaN = abstain).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

NORMALIZATIONS = ("quantile", "minmax", "weaver", "none")


def as_matrix(estimator: BaseEstimator, X: Any, reset: bool) -> np.ndarray:
    """``X`` as a dense ``[n_candidates, n_verifiers]`` float64 array, checked by scikit-learn (2-D, not
    sparse or complex, no infinity: NaN is the missing score; ``n_features_in_`` set or checked)."""
    return validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")


class ScoreNormalizer(TransformerMixin, BaseEstimator):
    """Per-verifier, dataset-level normalisation to [0, 1]; NaN stays NaN.

    Args:
        method: ``quantile`` (the empirical CDF over the dataset, ties at their mid-rank, as
            scikit-learn's uniform ``QuantileTransformer``; robust to the unbounded logits of
            reward models, and a threshold of 0.5 is the verifier's median), ``minmax``,
            ``weaver`` (min-max unless the scores already lie in [0, 1], as the reference
            implementation does) or ``none``.
        n_quantiles: CDF knots kept per verifier by the ``quantile`` method (all distinct
            points when there are fewer).

    Attributes:
        quantiles_: ``[n_quantiles, m]`` score at each CDF level (``quantile``; NaN for all-NaN columns).
        low_, high_: ``[m]`` the range mapped to [0, 1] (``minmax``/``weaver``; NaN = left alone).
    """

    def __init__(self, method: str = "quantile", n_quantiles: int = 1000) -> None:
        self.method = method
        self.n_quantiles = n_quantiles

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN stays NaN (a missing score)
        return tags

    def fit(self, X: Any, y: Any = None) -> "ScoreNormalizer":
        if self.method not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {self.method!r}")
        X = as_matrix(self, X, reset=True)
        finite = (~np.isnan(X)).sum(axis=0)
        if self.method == "quantile":
            # sklearn's QuantileTransformer computes the same knots but spends ~1 s in nanpercentile at 50k x 30;
            # one column at a time (a strided copy, then numpy's vectorised sort) beats sorting a transposed copy
            self.references_ = np.linspace(0.0, 1.0, max(2, min(self.n_quantiles, max(int(finite.max()), 2))))
            self.quantiles_ = np.full((self.references_.size, X.shape[1]), np.nan)
            for j in np.flatnonzero(finite):
                position = self.references_ * (finite[j] - 1)
                low = np.floor(position).astype(np.int64)
                high = np.minimum(low + 1, finite[j] - 1)
                column = np.sort(X[:, j])  # NaN sorts last
                self.quantiles_[:, j] = column[low] + (column[high] - column[low]) * (position - low)
        elif self.method in ("minmax", "weaver"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
                self.low_, self.high_ = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
            if self.method == "weaver":
                inside = (self.low_ >= 0.0) & (self.high_ <= 1.0)
                self.low_[inside], self.high_[inside] = np.nan, np.nan
        return self

    def _column(self, x: np.ndarray, j: int) -> np.ndarray:
        """Normalised values of finite scores ``x`` of column ``j``."""
        if self.method == "quantile":
            q, levels = self.quantiles_[:, j], self.references_
            if np.isnan(q[0]):
                return x.copy()
            order = np.argsort(x, kind="stable")  # np.interp is several times faster on sorted input
            xs = x[order]
            # forward and backward interpolation averaged: a value tied over several knots gets their mid-level
            forward = np.interp(xs, q, levels)
            backward = -np.interp(-xs[::-1], -q[::-1], -levels[::-1])[::-1]
            out = np.empty_like(x)
            out[order] = 0.5 * (forward + backward)
            return out
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
            out[rows, j] = self._column(X[rows, j], j)
        return out

    def _quantile_cutoff(self, j: int, level: float) -> float:
        """Smallest x with normalised score >= level: the first knot reaching it, refined inside its
        segment, where the normalised score is linear between distinct knots."""
        q = self.quantiles_[:, j]
        reached = np.flatnonzero(self._column(q, j) >= level - 1e-12)
        if reached.size == 0:
            return np.inf
        i = reached[0]
        if i == 0 or q[i - 1] == q[i]:
            return float(q[i])
        low, high = q[i - 1], q[i]
        a, b = low + (high - low) / 3, low + 2 * (high - low) / 3
        za, zb = self._column(np.array([a, b]), j)
        if zb <= za:
            return float(high)
        x = a + (level - 1e-12 - za) * (b - a) / (zb - za)
        x = min(max(x, np.nextafter(low, np.inf)), high)
        while self._column(np.array([x]), j)[0] < level - 1e-12 and x < high:  # rounding: step up
            x = np.nextafter(x, np.inf)
        return float(x)

    def cutoffs(self, level: float) -> np.ndarray:
        """``[m]`` the smallest raw score whose normalised score is >= ``level``, per verifier.

        ``+inf`` when no score reaches it, NaN for an all-NaN verifier; ``X >= cutoffs(t)`` equals
        ``transform(X) >= t``.
        """
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


def bin_codes(X: np.ndarray, cutoffs: np.ndarray) -> np.ndarray:
    """``[n, m]`` int8 bin of every score: the number of cutoffs it reaches (>=); ``n_bins`` for NaN.

    Args:
        X: ``[n, m]`` raw scores, NaN = abstain.
        cutoffs: ``[n_bins - 1, m]`` ascending raw-score cutoffs; with one cutoff, bin 1 is the
            positive vote and bin 0 the negative one.
    """
    codes = np.zeros(X.shape, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        for cut in cutoffs:
            codes += X >= cut
    codes[np.isnan(X)] = cutoffs.shape[0] + 1
    return codes


def bin_indicators(X: np.ndarray, cutoffs: np.ndarray) -> list[np.ndarray]:
    """One ``[n, m]`` float indicator matrix (column-major) per bin; a NaN score is in none."""
    codes = np.asfortranarray(bin_codes(X, cutoffs))
    return [(codes == b).astype(np.float64, order="F") for b in range(cutoffs.shape[0] + 1)]
