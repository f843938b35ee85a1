"""Weaver (Saad-Falcon et al., 2025): weak-supervision ensembling of many weak verifiers.

Pipeline, fitted on the score matrix of a whole dataset without labels:

1. normalise each verifier's scores over the dataset (``ScoreNormalizer``);
2. binarise: a verifier votes "correct" when its normalised score is >= ``threshold``, i.e.
   when its raw score is >= its cutoff (``cutoffs_``); a missing score (NaN) is an abstain,
   never a negative vote. ``n_bins > 2`` splits each verifier into that many ordered bins
   instead (an extension: less information is thrown away);
3. drop degenerate verifiers (almost no votes, almost always the same vote, a near-copy of an
   earlier verifier) and, after a first fit, near-random ones (|TPR - FPR| < ``min_gap``);
4. fit the latent-class (Dawid–Skene) label model: the hidden Y ~ Bern(prior) and the votes are
   independent given Y, with per-verifier TPR = P(vote 1 | Y=1) and FPR = P(vote 1 | Y=0). EM
   runs until the log-likelihood stops changing (``tol``), starting from the soft majority vote,
   and a label-flip guard keeps the solution where the verifiers beat chance;
5. score each candidate by its posterior log-odds of being correct; pick the argmax per problem.

A few labels (``y`` in ``fit``; ``dev_fraction`` of the problems in the selector) can set the
class prior and choose the threshold on those problems.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning

from ..core.groups import group_argmax
from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector

NORMALIZATIONS = ("quantile", "minmax", "weaver", "none")
THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""Thresholds tried by ``threshold="search"`` (the paper's 0.05-step grid)."""


def _single_threaded_blas():
    """BLAS on one thread: the products here are thin (n x m with m ~ 10-100) and memory-bound;
    OpenBLAS threads only add overhead, and make them 10-50x slower on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _as_matrix(X: Any, name: str = "X") -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [n_candidates, n_verifiers] array, got shape {X.shape}")
    if np.isinf(X).any():
        raise ValueError(f"{name} holds infinite scores; use NaN for a missing score")
    return X


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# ---- normalisation ----------------------------------------------------------------------------
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

    def fit(self, X: Any, y: Any = None) -> "ScoreNormalizer":
        if self.method not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {self.method!r}")
        X = _as_matrix(X)
        self.n_features_in_ = X.shape[1]
        finite = (~np.isnan(X)).sum(axis=0)
        if self.method == "quantile":
            # sklearn's QuantileTransformer computes the same knots but spends ~1 s in nanpercentile at 50k x 30
            ordered = np.sort(np.asfortranarray(X), axis=0)  # NaN sorts last
            self.references_ = np.linspace(0.0, 1.0, max(2, min(self.n_quantiles, max(int(finite.max()), 2))))
            self.quantiles_ = np.full((self.references_.size, X.shape[1]), np.nan)
            for j in np.flatnonzero(finite):
                position = self.references_ * (finite[j] - 1)
                low = np.floor(position).astype(np.int64)
                high = np.minimum(low + 1, finite[j] - 1)
                column = ordered[:, j]
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
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} verifier columns, the normaliser was fitted on {self.n_features_in_}")
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


# ---- the label model --------------------------------------------------------------------------
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


def fit_latent_class(votes: np.ndarray, prior: float | None = None, smoothing: float = 0.5,
                     max_iter: int = 1000, tol: float = 1e-8) -> dict[str, Any]:
    """EM for the binary latent-class model with abstains, to convergence.

    Args:
        votes: ``[n, m]`` in {0, 1} with NaN = abstain.
        prior: fixed P(Y = 1); estimated when None.
        smoothing: Beta pseudo-count added to each rate's numerator (twice to its denominator).
        max_iter: most EM iterations.
        tol: stop when the mean log-likelihood per row changes by less than this.

    Returns:
        ``{"prior", "tpr" [m], "fpr" [m], "posterior" [n], "n_iter", "converged", "flipped"}``.
    """
    votes = np.asarray(votes, dtype=np.float64)
    fit = _em(bin_indicators(votes, np.full((1, votes.shape[1]), 0.5)), prior, smoothing, max_iter, tol)
    return {**fit, "tpr": fit["theta"][1, 1], "fpr": fit["theta"][0, 1]}


def _em(bins: list[np.ndarray], prior: float | None, smoothing: float, max_iter: int, tol: float) -> dict[str, Any]:
    """EM over ordered bins, ``theta[c, b, k]`` = P(verifier k in bin b | Y = c), accelerated by SQUAREM.

    Each cycle takes two EM steps, extrapolates along them (Varadhan & Roland, 2008, scheme S3) and
    takes one EM step from there; the extrapolation is kept only if it does not lower the objective
    (the log posterior: log-likelihood plus the Beta/Dirichlet ``smoothing`` term, which EM never
    lowers). Stops when a cycle changes the objective per row by less than ``tol``; ``n_iter``
    counts EM steps (``max_iter`` of them at most).
    """
    n_bins, (n, m) = len(bins), bins[0].shape
    observed = sum(bins)
    count = observed.sum(axis=1)
    totals = np.stack([ind.sum(axis=0) for ind in bins])  # [B, m]
    obs_total = observed.sum(axis=0)

    def m_step(q: np.ndarray) -> np.ndarray:
        """Prior and class-conditional bin frequencies from soft labels q, packed as one vector."""
        q_bins = np.stack([q @ ind for ind in bins])  # [B, m]
        q_obs = q_bins.sum(axis=0)
        theta = np.stack([(totals - q_bins + smoothing) / (obs_total - q_obs + n_bins * smoothing),
                          (q_bins + smoothing) / (q_obs + n_bins * smoothing)])
        return np.concatenate([[float(q.mean()) if prior is None else prior], theta.ravel()])

    def unpack(params: np.ndarray) -> tuple[float, np.ndarray]:
        return float(params[0]), params[1:].reshape(2, n_bins, m)

    def e_step(params: np.ndarray) -> tuple[np.ndarray, float]:
        """Posterior P(Y = 1) per row and the objective per row at ``params``."""
        pi, theta = unpack(params)
        joint = _log_joint(bins, pi, theta)
        objective = np.logaddexp(joint[:, 0], joint[:, 1]).sum() + smoothing * np.log(np.clip(theta, 1e-12, 1)).sum()
        return _sigmoid(joint[:, 1] - joint[:, 0]), float(objective) / n

    def project(params: np.ndarray) -> np.ndarray:
        """Back into the parameter space after an extrapolation."""
        pi, theta = unpack(params)
        theta = np.clip(theta, 1e-9, None)
        theta = theta / theta.sum(axis=1, keepdims=True)
        pi = min(max(pi, 1e-6), 1 - 1e-6) if prior is None else prior
        return np.concatenate([[pi], theta.ravel()])

    # start from the soft majority vote: the side where the verifiers beat chance
    rank = sum(b * ind for b, ind in enumerate(bins)) / max(n_bins - 1, 1)  # 0 = lowest bin, 1 = highest
    q = np.clip(np.divide(rank.sum(axis=1), count, out=np.full(n, 0.5), where=count > 0), 1e-3, 1 - 1e-3)
    params, steps, previous, converged = m_step(q), 1, -np.inf, False
    while steps + 3 <= max_iter:
        q0, objective0 = e_step(params)
        first = m_step(q0)
        q1, objective1 = e_step(first)
        second = m_step(q1)
        steps += 2
        r, v = first - params, second - 2 * first + params
        step_length = np.sqrt((r @ r) / (v @ v)) if v @ v > 0 else 1.0
        jump = project(params + 2 * step_length * r + step_length ** 2 * v)  # alpha = -step_length
        q_jump, objective_jump = e_step(jump)
        if step_length > 1 and objective_jump >= objective1:
            params = m_step(q_jump)  # the stabilising EM step from the extrapolated point
            steps += 1
            objective = objective_jump
        else:
            params, objective = second, objective1
        if abs(objective - previous) < tol:
            converged = True
            break
        previous = objective
    q, _ = e_step(params)
    pi, theta = unpack(params)
    theta = theta.copy()
    levels = np.arange(n_bins)[:, None]
    shift = ((theta[1] - theta[0]) * levels).sum(axis=0)  # E[bin | Y=1] - E[bin | Y=0] per verifier
    flipped = bool(shift.sum() < 0)  # the mirror solution: the verifiers "worse than chance" on the whole
    if flipped:
        theta, q = theta[::-1].copy(), 1.0 - q
        pi = 1.0 - pi if prior is None else pi
    return {"prior": pi, "theta": theta, "posterior": q, "n_iter": steps, "converged": converged,
            "flipped": flipped}


def _log_joint(bins: list[np.ndarray], prior: float, theta: np.ndarray, clip: float = 1e-6) -> np.ndarray:
    """``[n, 2]`` log P(Y = c, votes of the row) for c = 0, 1."""
    theta = np.clip(theta, clip, 1.0)
    prior = min(max(prior, clip), 1 - clip)
    out = np.tile(np.log([1 - prior, prior]), (bins[0].shape[0], 1))
    for b, ind in enumerate(bins):
        out += ind @ np.log(theta[:, b].T)  # [n, m] @ [m, 2]: both classes in one pass over the votes
    return out


def vote_correlations(positive: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """``[m, m]`` phi coefficient of every verifier pair over the rows where both vote (NaN if undefined)."""
    observed = positive + negative
    n11, n1o, noo = positive.T @ positive, positive.T @ observed, observed.T @ observed
    n10, n01 = n1o - n11, n1o.T - n11
    n00 = noo - n11 - n10 - n01
    with np.errstate(invalid="ignore", divide="ignore"):
        return (n11 * n00 - n10 * n01) / np.sqrt((n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00))


# ---- the estimator ----------------------------------------------------------------------------
class WeaverModel(ClassifierMixin, BaseEstimator):
    """Weaver's label model as a scikit-learn estimator over a ``[n, m]`` score matrix with NaN.

    Args:
        normalize: per-verifier normalisation that defines the threshold's scale (``ScoreNormalizer``).
        threshold: a vote is 1 when the normalised score is >= this; ``"search"`` picks it from
            ``THRESHOLD_GRID`` by selection accuracy on the labelled problems (needs ``y`` and
            ``groups`` in ``fit``).
        n_bins: 2 = Weaver's binary votes; more splits each verifier into that many bins at
            equally spaced normalised levels (ignores ``threshold``).
        min_coverage: drop verifiers that vote (non-NaN) on fewer than this share of rows.
        rate_bounds: drop verifiers whose share of positive votes lies outside ``[low, high]``
            (with ``n_bins > 2``: whose fullest bin holds more than ``high`` of their votes).
        max_correlation: drop a verifier whose votes correlate (phi) above this with an earlier kept one.
        min_gap: after a first fit, drop verifiers with ``|TPR - FPR| < min_gap`` (total-variation
            distance between the classes' bin frequencies when ``n_bins > 2``) and refit.
        prior: fixed P(correct); default: the labelled rows' mean when ``y`` is given, else EM's estimate.
        smoothing: Beta/Dirichlet pseudo-count for the rate estimates.
        max_iter: most EM iterations.
        tol: EM stops when the mean log-likelihood per row changes by less than this.

    Attributes:
        normalizer_: the fitted ``ScoreNormalizer``.
        threshold_: the binarisation threshold (normalised scale).
        cutoffs_: ``[n_bins - 1, m]`` the same cutoffs on each verifier's raw scale: verifier j
            votes 1 when its raw score is >= ``cutoffs_[0, j]``.
        keep_: ``[m]`` bool, verifiers in the label model; ``dropped_``: ``{column: reason}`` for the rest.
        prior_: P(correct).
        tpr_, fpr_: ``[m]`` P(vote 1 | correct), P(vote 1 | incorrect) (upper half of the bins when
            ``n_bins > 2``; NaN for dropped verifiers).
        theta_: ``[2, n_bins, m]`` P(bin | class), class 1 = correct.
        weights_: ``[n_bins, m]`` log-likelihood ratio added for a vote in each bin.
        n_iter_, converged_, flipped_: EM diagnostics (``flipped_``: the label-flip guard fired).
        fallback_: None, or ``"vote_count"`` when fewer than 3 verifiers survive (the model is
            then not identifiable and the votes are counted instead).

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> y = rng.random(2000) < 0.3
        >>> X = np.where(y[:, None], rng.random((2000, 5)) < 0.8, rng.random((2000, 5)) < 0.2).astype(float)
        >>> model = WeaverModel().fit(X)
        >>> bool(np.all(np.abs(model.tpr_ - 0.8) < 0.05) and np.all(np.abs(model.fpr_ - 0.2) < 0.05))
        True
        >>> model.predict_proba(X).shape
        (2000, 2)
    """

    def __init__(self, normalize: str = "quantile", threshold: float | str = 0.5, n_bins: int = 2,
                 min_coverage: float = 0.01, rate_bounds: tuple[float, float] = (0.02, 0.98),
                 max_correlation: float = 0.95, min_gap: float = 0.02, prior: float | None = None,
                 smoothing: float = 0.5, max_iter: int = 1000, tol: float = 1e-8) -> None:
        self.normalize = normalize
        self.threshold = threshold
        self.n_bins = n_bins
        self.min_coverage = min_coverage
        self.rate_bounds = rate_bounds
        self.max_correlation = max_correlation
        self.min_gap = min_gap
        self.prior = prior
        self.smoothing = smoothing
        self.max_iter = max_iter
        self.tol = tol

    def _check_params(self) -> None:
        if not (self.threshold == "search" or (isinstance(self.threshold, (int, float)) and 0 < self.threshold <= 1)):
            raise ValueError(f"threshold must be in (0, 1] or 'search', got {self.threshold!r}")
        if not isinstance(self.n_bins, (int, np.integer)) or self.n_bins < 2:
            raise ValueError(f"n_bins must be an integer >= 2, got {self.n_bins!r}")
        if self.n_bins > 2 and self.threshold == "search":
            raise ValueError("threshold='search' needs n_bins=2")
        low, high = self.rate_bounds
        if not 0 <= low < high <= 1:
            raise ValueError(f"rate_bounds must satisfy 0 <= low < high <= 1, got {self.rate_bounds!r}")
        if self.prior is not None and not 0 < self.prior < 1:
            raise ValueError(f"prior must be in (0, 1), got {self.prior!r}")
        if self.max_iter < 1 or self.tol <= 0 or self.smoothing < 0:
            raise ValueError("max_iter >= 1, tol > 0 and smoothing >= 0 are required")

    # ---- fitting -----------------------------------------------------------------------------
    def fit(self, X: Any, groups: Any = None, y: Any = None) -> "WeaverModel":
        """Fit without labels on ``X`` ``[n, m]`` (NaN = missing score).

        Args:
            X: verifier scores, one row per candidate.
            groups: ``[n]`` problem of each row (needed by ``threshold="search"``).
            y: optional ``[n]`` labels, 1 correct / 0 incorrect / NaN or -1 unknown; the known ones
                set the prior (unless ``prior`` is given) and drive ``threshold="search"``.
        """
        with _single_threaded_blas():
            return self._fit(X, groups, y)

    def _fit(self, X: Any, groups: Any, y: Any) -> "WeaverModel":
        self._check_params()
        X = _as_matrix(X)
        n, m = X.shape
        if n == 0 or m == 0:
            raise ValueError(f"X must have at least one row and one verifier column, got shape {X.shape}")
        labelled = self._labels(y, n)
        self.n_features_in_ = m
        self.classes_ = np.array([0, 1])
        self.normalizer_ = ScoreNormalizer(self.normalize).fit(X)
        prior = self.prior
        if prior is None and labelled is not None and (~np.isnan(labelled)).any():
            prior = float(np.clip(np.nanmean(labelled), 0.01, 0.99))
        if self.threshold == "search":
            self.threshold_ = self._search_threshold(X, groups, labelled, prior)
        else:
            self.threshold_ = float(self.threshold)
        self.cutoffs_ = self._cutoffs(self.threshold_)
        self._fit_bins(bin_indicators(X, self.cutoffs_), prior)
        return self

    def _labels(self, y: Any, n: int) -> np.ndarray | None:
        if y is None:
            return None
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} rows, X has {n}")
        y = np.where(y < 0, np.nan, y)  # -1 also means unknown
        if np.any((y != 0) & (y != 1) & ~np.isnan(y)):
            raise ValueError("y must hold 1 (correct), 0 (incorrect) or NaN/-1 (unknown)")
        return y

    def _cutoffs(self, threshold: float) -> np.ndarray:
        levels = [threshold] if self.n_bins == 2 else np.arange(1, self.n_bins) / self.n_bins
        return np.stack([self.normalizer_.cutoffs(level) for level in levels])

    def _fit_bins(self, bins: list[np.ndarray], prior: float | None) -> None:
        """Screen the verifiers, fit the label model (again if near-random ones go), set the weights."""
        m = bins[0].shape[1]
        self.keep_, self.dropped_ = self._screen(bins)
        self.theta_ = np.full((2, self.n_bins, m), np.nan)
        self.weights_ = np.zeros((self.n_bins, m))
        self.n_iter_, self.converged_, self.flipped_, self.fallback_ = 0, True, False, None
        columns = np.flatnonzero(self.keep_)
        if columns.size < 3:
            self.fallback_ = "vote_count"
            warnings.warn(f"only {columns.size} usable verifier(s): the label model needs at least 3; "
                          "counting votes instead", UserWarning, stacklevel=4)
            self.prior_ = 0.5 if prior is None else prior
            self.weights_[:, columns] = np.linspace(-1.0, 1.0, self.n_bins)[:, None]
            self.tpr_, self.fpr_ = np.full(m, np.nan), np.full(m, np.nan)
            return
        fit = self._em(bins, columns, prior)
        gap = 0.5 * np.abs(fit["theta"][1] - fit["theta"][0]).sum(axis=0)
        weak = gap < self.min_gap
        if weak.any() and (~weak).sum() >= 3:
            for j, g in zip(columns[weak], gap[weak]):
                self.dropped_[int(j)] = f"near random: |TPR - FPR| = {g:.3f}"
            self.keep_[columns[weak]] = False
            columns = columns[~weak]
            fit = self._em(bins, columns, prior)
        self.prior_ = fit["prior"]
        self.theta_[:, :, columns] = fit["theta"]
        self.n_iter_, self.converged_, self.flipped_ = fit["n_iter"], fit["converged"], fit["flipped"]
        theta = np.clip(fit["theta"], 1e-6, 1.0)
        self.weights_[:, columns] = np.log(theta[1] / theta[0])
        upper = self.theta_[:, self.n_bins // 2:, :].sum(axis=1)
        self.tpr_, self.fpr_ = np.where(self.keep_, upper[1], np.nan), np.where(self.keep_, upper[0], np.nan)
        if not fit["converged"]:
            warnings.warn(f"EM did not converge in {self.max_iter} iterations (tol {self.tol})",
                          ConvergenceWarning, stacklevel=4)

    def _em(self, bins: list[np.ndarray], columns: np.ndarray, prior: float | None) -> dict[str, Any]:
        return _em([ind[:, columns] for ind in bins], prior, self.smoothing, self.max_iter, self.tol)

    def _screen(self, bins: list[np.ndarray]) -> tuple[np.ndarray, dict[int, str]]:
        """Keep mask and drop reasons from vote coverage, vote balance and correlation."""
        n, m = bins[0].shape
        per_bin = np.stack([ind.sum(axis=0) for ind in bins])  # [B, m]
        votes = per_bin.sum(axis=0)
        share = np.divide(per_bin, votes, out=np.zeros_like(per_bin), where=votes > 0)
        keep, dropped = np.ones(m, dtype=bool), {}
        low, high = self.rate_bounds
        for j in range(m):
            if votes[j] == 0 or votes[j] < self.min_coverage * n:
                dropped[j] = f"votes on {100 * votes[j] / n:.1f}% of candidates"
            elif self.n_bins == 2 and not low <= share[1, j] <= high:
                dropped[j] = f"positive on {100 * share[1, j]:.1f}% of its votes (outside {low:g}-{high:g})"
            elif self.n_bins > 2 and share[:, j].max() > high:
                dropped[j] = f"{100 * share[:, j].max():.1f}% of its votes in one bin (above {high:g})"
        keep[list(dropped)] = False
        half = self.n_bins // 2  # correlation on the median split (the vote itself when n_bins = 2)
        positive, negative = sum(bins[half:]), sum(bins[:half])
        phi = vote_correlations(positive, negative)
        for j in range(m):
            twins = [k for k in range(j) if keep[k] and abs(phi[k, j]) > self.max_correlation] if keep[j] else []
            if twins:
                keep[j] = False
                dropped[j] = f"votes like column {twins[0]} (phi {phi[twins[0], j]:.3f})"
        return keep, dropped

    def _search_threshold(self, X: np.ndarray, groups: Any, labelled: np.ndarray | None, prior: float | None) -> float:
        """The grid threshold with the best selection accuracy on the labelled problems (ties: nearest 0.5)."""
        if labelled is None or groups is None or not (~np.isnan(labelled)).any():
            raise ValueError("threshold='search' needs labels for some rows (y) and their problems (groups)")
        groups = np.asarray(groups).reshape(-1)
        if groups.shape[0] != X.shape[0]:
            raise ValueError(f"groups has {groups.shape[0]} rows, X has {X.shape[0]}")
        rows = np.flatnonzero(~np.isnan(labelled))
        codes, dev_groups = np.unique(groups[rows], return_inverse=True)
        best, best_accuracy = 0.5, -1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for t in sorted(THRESHOLD_GRID, key=lambda t: (abs(t - 0.5), t)):
                self.cutoffs_ = self._cutoffs(float(t))
                self._fit_bins(bin_indicators(X, self.cutoffs_), prior)
                chosen = group_argmax(self._decision(X[rows]), dev_groups, codes.size, np.arange(rows.size))
                accuracy = float(np.sum(labelled[rows][chosen[chosen >= 0]] == 1)) / codes.size
                if accuracy > best_accuracy + 1e-12:
                    best, best_accuracy = float(t), accuracy
        self.dev_accuracy_ = best_accuracy
        return best

    # ---- prediction --------------------------------------------------------------------------
    def _decision(self, X: np.ndarray) -> np.ndarray:
        """Log-odds computed once per distinct vote pattern, so equal votes give bitwise-equal scores
        (a BLAS product may round identical rows differently, which would break ties arbitrarily)."""
        codes = bin_codes(X, self.cutoffs_)
        m = codes.shape[1]
        keys = np.ascontiguousarray(codes).view(np.dtype((np.void, m))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        table = np.vstack([self.weights_, np.zeros((1, m))])  # the last row: abstain
        values = np.log(self.prior_ / (1 - self.prior_)) + table[codes[first], np.arange(m)].sum(axis=1)
        return values[inverse.reshape(-1)]

    def decision_function(self, X: Any) -> np.ndarray:
        """``[n]`` posterior log-odds that each candidate is correct (monotone in P(correct))."""
        X = _as_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} verifier columns, the model was fitted on {self.n_features_in_}")
        with _single_threaded_blas():
            return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """``[n, 2]``: P(incorrect), P(correct) given the candidate's votes."""
        p = _sigmoid(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """``[n]`` 1 where P(correct) > 0.5."""
        return (self.decision_function(X) > 0).astype(np.int64)


# ---- the selector -----------------------------------------------------------------------------
def majority_column(data: SelectionData) -> np.ndarray:
    """``[n]`` 1.0 for candidates carrying a most frequent answer of their problem, 0.0 otherwise.

    Weaver's majority-vote pseudo-verifier in its binarised form; candidates without an answer score 0.
    """
    answers = data.answers
    present = answers >= 0
    counts = np.zeros(data.n_candidates)
    if present.any():
        counts[present] = np.bincount(answers[present])[answers[present]]
    top = np.zeros(data.n_problems)
    np.maximum.at(top, data.groups, counts)
    return (present & (counts == top[data.groups])).astype(np.float64)


def verifier_columns(data: SelectionData, verifiers: Sequence[str] | None) -> np.ndarray:
    """Column indices of ``verifiers`` in ``data`` (all when None); unknown names raise ValueError."""
    if verifiers is None:
        return np.arange(len(data.verifiers))
    if isinstance(verifiers, str):
        raise ValueError(f"verifiers must be a list of names, got the string {verifiers!r}")
    missing = [v for v in verifiers if v not in data.verifiers]
    if missing:
        raise ValueError(f"verifiers {missing} are not in the data (it has {list(data.verifiers)})")
    return np.array([data.verifiers.index(v) for v in verifiers], dtype=np.int64)


def feature_matrix(data: SelectionData, verifiers: Sequence[str] | None, majority_verifier: bool
                   ) -> tuple[np.ndarray, tuple[str, ...]]:
    """``[n, m']`` score columns of ``verifiers`` (plus the majority pseudo-verifier) and their names."""
    columns = verifier_columns(data, verifiers)
    X = data.scores[:, columns]
    names = tuple(data.verifiers[c] for c in columns)
    if majority_verifier:
        X = np.column_stack([X, majority_column(data)])
        names = (*names, "majority_vote")
    return X, names


def dev_problem_mask(data: SelectionData, fraction: float, seed: int) -> np.ndarray:
    """``[n]`` bool: candidates of a seeded random ``fraction`` of the problems (at least one problem).

    Problems are drawn from their sorted ids, so the draw does not depend on row order.
    """
    ids = np.sort(data.problems.astype(str))
    count = min(max(1, int(round(fraction * ids.size))), ids.size)
    chosen = np.random.default_rng(seed).choice(ids, size=count, replace=False)
    return np.isin(data.problem_id.astype(str), chosen)


def tied_at_top(primary: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``[n]`` bool: rows sharing their problem's largest finite ``primary`` with another row."""
    finite = ~np.isnan(primary)
    top = np.full(n_groups, -np.inf)
    np.maximum.at(top, groups[finite], primary[finite])
    at_top = finite & (primary == top[groups])
    return at_top & (np.bincount(groups[at_top], minlength=n_groups)[groups] > 1)


def select_with_secondary(primary: np.ndarray, secondary: np.ndarray, data: SelectionData) -> np.ndarray:
    """Per problem, the row with the largest ``primary``; ties by larger ``secondary``, then smaller tiebreak.

    NaN in ``primary`` is never chosen; NaN in ``secondary`` ranks last among tied rows.
    """
    chosen = np.full(data.n_problems, -1, dtype=np.int64)
    rows = np.flatnonzero(~np.isnan(primary))
    if rows.size == 0:
        return chosen
    second = np.where(np.isnan(secondary[rows]), -np.inf, secondary[rows])
    order = rows[np.lexsort((data.tiebreak[rows], -second, -primary[rows], data.groups[rows]))]
    first = np.ones(order.size, dtype=bool)
    first[1:] = data.groups[order][1:] != data.groups[order][:-1]
    chosen[data.groups[order[first]]] = order[first]
    return chosen


@SELECTORS.register("weaver")
class WeaverSelector(Selector):
    """Weaver selection: argmax per problem of the label model's P(correct | verifier votes).

    Label-free unless ``dev_fraction > 0``: then the labels of a seeded random share of the
    problems set the class prior and (with ``threshold: search``) the threshold, and the method
    is reported as label-based.

    Args:
        verifiers: score columns to use (default: all).
        majority_verifier: add Weaver's majority-vote pseudo-verifier (1 for candidates with a
            most frequent answer). The correlation filter drops it when an ``answer_frequency``
            verifier already votes the same way.
        normalize, threshold, n_bins, min_coverage, rate_bounds, max_correlation, min_gap, prior,
        smoothing, max_iter, tol: see ``WeaverModel``.
        dev_fraction: share of problems whose labels may be used (0 = label-free).
        seed: seed of the dev-problem draw.
        tie_break: ``mean_score`` (tied posteriors go to the higher mean normalised score of the
            kept verifiers, then the smaller tiebreak rank) or ``index`` (smaller tiebreak rank).

    Attributes:
        model_: the fitted ``WeaverModel``.
        feature_names_: the columns given to the model.
        dev_rows_: ``[n]`` bool, candidates whose labels were used (when ``dev_fraction > 0``).
    """

    def __init__(self, verifiers: list[str] | None = None, majority_verifier: bool = True,
                 normalize: str = "quantile", threshold: float | str = 0.5, n_bins: int = 2,
                 min_coverage: float = 0.01, rate_bounds: tuple[float, float] = (0.02, 0.98),
                 max_correlation: float = 0.95, min_gap: float = 0.02, prior: float | None = None,
                 smoothing: float = 0.5, max_iter: int = 1000, tol: float = 1e-8, dev_fraction: float = 0.0,
                 seed: int = 0, tie_break: str = "mean_score") -> None:
        self.verifiers = verifiers
        self.majority_verifier = majority_verifier
        self.normalize = normalize
        self.threshold = threshold
        self.n_bins = n_bins
        self.min_coverage = min_coverage
        self.rate_bounds = rate_bounds
        self.max_correlation = max_correlation
        self.min_gap = min_gap
        self.prior = prior
        self.smoothing = smoothing
        self.max_iter = max_iter
        self.tol = tol
        self.dev_fraction = dev_fraction
        self.seed = seed
        self.tie_break = tie_break

    @property
    def uses_labels(self) -> bool:  # type: ignore[override]
        """Label-based exactly when ``dev_fraction > 0``."""
        return self.dev_fraction > 0

    def model(self) -> WeaverModel:
        """An unfitted ``WeaverModel`` with this selector's parameters."""
        return WeaverModel(normalize=self.normalize, threshold=self.threshold, n_bins=self.n_bins,
                           min_coverage=self.min_coverage, rate_bounds=tuple(self.rate_bounds),
                           max_correlation=self.max_correlation, min_gap=self.min_gap, prior=self.prior,
                           smoothing=self.smoothing, max_iter=self.max_iter, tol=self.tol)

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "WeaverSelector":
        if not 0 <= self.dev_fraction <= 1:
            raise ValueError(f"dev_fraction must be in [0, 1], got {self.dev_fraction!r}")
        if self.tie_break not in ("mean_score", "index"):
            raise ValueError(f"tie_break must be 'mean_score' or 'index', got {self.tie_break!r}")
        super().fit(data, labels)
        X, self.feature_names_ = feature_matrix(data, self.verifiers, self.majority_verifier)
        y = None
        if labels is not None:
            self.dev_rows_ = dev_problem_mask(data, self.dev_fraction, self.seed)
            y = np.where(self.dev_rows_, np.asarray(labels, dtype=np.float64), np.nan)
        self.model_ = self.model().fit(X, data.problem_id.astype(str), y)
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` posterior log-odds of correctness (monotone in ``predict_proba``)."""
        X, _ = feature_matrix(data, self.verifiers, self.majority_verifier)
        return self.model_.decision_function(X)

    def predict_proba(self, data: SelectionData) -> np.ndarray:
        """``[n]`` P(correct | votes)."""
        return _sigmoid(self.decision_function(data))

    def select(self, data: SelectionData) -> np.ndarray:
        X, _ = feature_matrix(data, self.verifiers, self.majority_verifier)
        primary = self.model_.decision_function(X)
        if self.tie_break == "index":
            return group_argmax(primary, data.groups, data.n_problems, data.tiebreak)
        secondary = np.full(data.n_candidates, np.nan)
        tied = np.flatnonzero(tied_at_top(primary, data.groups, data.n_problems))
        kept = np.flatnonzero(self.model_.keep_)
        if tied.size and kept.size:  # normalise only the rows that need it
            Z = self.model_.normalizer_.transform(X[tied])[:, kept]
            count = (~np.isnan(Z)).sum(axis=1)
            secondary[tied] = np.divide(np.nansum(Z, axis=1), count, out=np.full(tied.size, np.nan), where=count > 0)
        return select_with_secondary(primary, secondary, data)
