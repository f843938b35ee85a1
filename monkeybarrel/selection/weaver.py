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
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from ..core.groups import group_argmax
from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector

NORMALIZATIONS = ("quantile", "minmax", "weaver", "none")
NEAR_RANDOM_GAP = 0.02
"""Kept verifiers with |TPR - FPR| below this are reported as near random (their weight is ~0)."""
AMBIGUOUS_SHARE = 0.25
"""Label-free orientation is reported ambiguous when this share of the weighted evidence points the other way."""
START_TOP_SHARES = (0.2, 0.05, 0.01)
START_STEPS = 12
"""EM's label-free starts: the soft majority vote plus hard starts at these top shares of it, each run
``START_STEPS`` EM steps; the best objective goes on."""
THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""Thresholds tried by ``threshold="search"`` (the paper's 0.05-step grid)."""


def _single_threaded_blas():
    """BLAS on one thread: the products here are thin (n x m with m ~ 10-100) and memory-bound;
    OpenBLAS threads only add overhead, and make them 10-50x slower on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _as_matrix(estimator: BaseEstimator, X: Any, reset: bool) -> np.ndarray:
    """``X`` as a dense ``[n_candidates, n_verifiers]`` float64 array, checked by scikit-learn (2-D, not
    sparse or complex, no infinity: NaN is the missing score; ``n_features_in_`` set or checked)."""
    return validate_data(estimator, X, reset=reset, dtype=np.float64, ensure_all_finite="allow-nan")


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

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN stays NaN (a missing score)
        return tags

    def fit(self, X: Any, y: Any = None) -> "ScoreNormalizer":
        if self.method not in NORMALIZATIONS:
            raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {self.method!r}")
        X = _as_matrix(self, X, reset=True)
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
        check_is_fitted(self)
        X = _as_matrix(self, X, reset=False)
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
    patterns = VotePatterns(bin_codes(votes, np.full((1, votes.shape[1]), 0.5)), n_bins=2)
    fit = _em(patterns.bins, prior, smoothing, max_iter, tol, counts=patterns.counts)
    return {**fit, "posterior": fit["posterior"][patterns.inverse], "tpr": fit["theta"][1, 1],
            "fpr": fit["theta"][0, 1]}


class VotePatterns:
    """The distinct rows of a ``[n, m]`` bin-code matrix and how often each occurs.

    EM's cost is linear in the rows it visits, and verifier votes repeat: 32,000 candidates x 10
    binary verifiers hold at most 3^10 and in practice a few hundred patterns.

    Attributes:
        codes: ``[p, m]`` int8 distinct code rows (``n_bins`` = abstain).
        counts: ``[p]`` float, rows per pattern.
        inverse: ``[n]`` pattern of each original row.
        bins: ``n_bins`` indicator matrices ``[p, m]`` (column-major floats).
    """

    def __init__(self, codes: np.ndarray, n_bins: int) -> None:
        codes = np.ascontiguousarray(codes, dtype=np.int8)
        keys = codes.view(np.dtype((np.void, codes.shape[1]))).ravel() if codes.shape[1] else np.zeros(codes.shape[0])
        _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        self.codes, self.inverse, self.counts = codes[first], inverse.reshape(-1), counts.astype(np.float64)
        fortran = np.asfortranarray(self.codes)
        self.bins = [(fortran == b).astype(np.float64, order="F") for b in range(n_bins)]

    def columns(self, columns: np.ndarray) -> list[np.ndarray]:
        return [np.asfortranarray(ind[:, columns]) for ind in self.bins]


def _em(bins: list[np.ndarray], prior: float | None, smoothing: float, max_iter: int, tol: float,
        counts: np.ndarray | None = None, weights: np.ndarray | None = None, start: np.ndarray | None = None,
        orient: bool = True) -> dict[str, Any]:
    """EM over ordered bins, ``theta[c, b, k]`` = P(verifier k in bin b | Y = c), accelerated by SQUAREM.

    Args:
        bins: per bin a ``[p, m]`` indicator matrix of vote patterns (a NaN score is in none).
        counts: ``[p]`` rows per pattern (default 1 each).
        weights: ``[m]`` verifier weights in (0, 1]: a verifier's log-likelihood counts ``weights[k]``
            times (a composite likelihood: correlated verifiers share one vote between them);
            default 1 each.
        start: ``[p]`` initial P(Y = 1) per pattern; default the soft (weighted) majority vote.
        orient: apply the label-flip guard (verifiers better than chance on the whole).

    Each cycle takes two EM steps, extrapolates along them (Varadhan & Roland, 2008, scheme S3) and
    takes one EM step from there; the extrapolation is kept only if it does not lower the objective
    (the weighted log posterior: log-likelihood plus the Beta/Dirichlet ``smoothing`` term, which EM
    never lowers). Stops when a cycle changes the objective per row by less than ``tol``; ``n_iter``
    counts EM steps (``max_iter`` of them at most).
    """
    n_bins, (p, m) = len(bins), bins[0].shape
    counts = np.ones(p) if counts is None else np.asarray(counts, dtype=np.float64)
    weights = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    n = counts.sum()
    observed = sum(bins)
    totals = np.stack([counts @ ind for ind in bins])  # [B, m]
    obs_total = totals.sum(axis=0)

    def m_step(q: np.ndarray) -> np.ndarray:
        """Prior and class-conditional bin frequencies from soft labels q, packed as one vector."""
        qc = q * counts
        q_bins = np.stack([qc @ ind for ind in bins])  # [B, m]
        q_obs = q_bins.sum(axis=0)
        theta = np.stack([(totals - q_bins + smoothing) / (obs_total - q_obs + n_bins * smoothing),
                          (q_bins + smoothing) / (q_obs + n_bins * smoothing)])
        return np.concatenate([[float(qc.sum() / n) if prior is None else prior], theta.ravel()])

    def unpack(params: np.ndarray) -> tuple[float, np.ndarray]:
        return float(params[0]), params[1:].reshape(2, n_bins, m)

    def e_step(params: np.ndarray) -> tuple[np.ndarray, float]:
        """Posterior P(Y = 1) per pattern and the objective per row at ``params``."""
        pi, theta = unpack(params)
        joint = _log_joint(bins, pi, theta, weights)
        objective = (counts @ np.logaddexp(joint[:, 0], joint[:, 1])
                     + smoothing * (np.log(np.clip(theta, 1e-12, 1)).sum(axis=(0, 1)) @ weights))
        return _sigmoid(joint[:, 1] - joint[:, 0]), float(objective) / n

    def project(params: np.ndarray) -> np.ndarray:
        """Back into the parameter space after an extrapolation."""
        pi, theta = unpack(params)
        theta = np.clip(theta, 1e-9, None)
        theta = theta / theta.sum(axis=1, keepdims=True)
        pi = min(max(pi, 1e-6), 1 - 1e-6) if prior is None else prior
        return np.concatenate([[pi], theta.ravel()])

    def iterate(params: np.ndarray, budget: int) -> tuple[np.ndarray, int, bool]:
        """SQUAREM cycles from ``params`` until converged or ``budget`` EM steps are spent."""
        steps, previous = 0, -np.inf
        while steps + 3 <= budget:
            q0, _ = e_step(params)
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
                return params, steps, True
            previous = objective
        return params, steps, False

    steps = 0
    if start is None:
        # the soft majority vote (the side where the verifiers beat chance), and hard starts at its
        # top 20 %, 5 % and 1 % of rows: at a low prior the soft start sits near 0.5 and EM crawls
        rank = sum(b * ind for b, ind in enumerate(bins)) / max(n_bins - 1, 1)  # 0 = lowest bin, 1 = highest
        support, voters = rank @ weights, observed @ weights
        share = np.divide(support, voters, out=np.full(p, 0.5), where=voters > 0)
        order = np.argsort(-share, kind="stable")
        above = np.cumsum(counts[order]) / n
        starts = [share] + [np.isin(np.arange(p), order[: np.searchsorted(above, top) + 1]).astype(np.float64)
                            for top in START_TOP_SHARES]
        trials = []
        for candidate in starts:
            params, used, _ = iterate(m_step(np.clip(candidate, 1e-3, 1 - 1e-3)), START_STEPS)
            steps += used + 1
            trials.append((e_step(params)[1], params))
        params = max(trials, key=lambda trial: trial[0])[1]
    else:
        params, steps = m_step(np.clip(start, 1e-3, 1 - 1e-3)), 1
    params, used, converged = iterate(params, max(max_iter - steps, 3))
    steps += used
    q, objective = e_step(params)
    pi, theta = unpack(params)
    theta = theta.copy()
    shift = orientation_shift(theta)
    flipped = bool(orient and shift @ weights < 0)  # the mirror solution: the verifiers "worse than chance" on the whole
    if flipped:
        theta, q = theta[::-1].copy(), 1.0 - q
        pi = 1.0 - pi if prior is None else pi
    return {"prior": pi, "theta": theta, "posterior": q, "n_iter": steps, "converged": converged,
            "flipped": flipped, "objective": objective}


def orientation_shift(theta: np.ndarray) -> np.ndarray:
    """``[m]`` E[bin | Y=1] - E[bin | Y=0] per verifier (> 0: better than chance) from ``theta [2, B, m]``."""
    levels = np.arange(theta.shape[1])[:, None]
    return ((theta[1] - theta[0]) * levels).sum(axis=0)


def _log_joint(bins: list[np.ndarray], prior: float, theta: np.ndarray, weights: np.ndarray | None = None,
               clip: float = 1e-6) -> np.ndarray:
    """``[p, 2]`` (weighted) log P(Y = c, votes of the pattern) for c = 0, 1."""
    theta = np.clip(theta, clip, 1.0)
    prior = min(max(prior, clip), 1 - clip)
    log_theta = np.log(theta)
    if weights is not None:
        log_theta = log_theta * weights
    out = np.tile(np.log([1 - prior, prior]), (bins[0].shape[0], 1))
    for b, ind in enumerate(bins):
        out += ind @ log_theta[:, b].T  # [p, m] @ [m, 2]: both classes in one pass over the votes
    return out


def vote_correlations(positive: np.ndarray, negative: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """``[m, m]`` phi coefficient of every verifier pair over the rows where both vote (NaN if undefined).

    ``counts``: ``[n]`` weight of each row (pattern multiplicities, or posterior class weights).
    """
    observed = positive + negative
    weighted_positive, weighted_observed = ((positive, observed) if counts is None
                                            else (positive * counts[:, None], observed * counts[:, None]))
    n11, n1o, noo = positive.T @ weighted_positive, weighted_positive.T @ observed, observed.T @ weighted_observed
    n10, n01 = n1o - n11, n1o.T - n11
    n00 = noo - n11 - n10 - n01
    with np.errstate(invalid="ignore", divide="ignore"):
        return (n11 * n00 - n10 * n01) / np.sqrt((n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00))


def dependence_weights(phi: np.ndarray, ramp: tuple[float, float]) -> np.ndarray:
    """``[m]`` weight 1 / (effective number of copies) of each verifier from pairwise ``|phi|``.

    A pair counts as ``clip((|phi| - low) / (high - low), 0, 1)`` of a copy, so an exact duplicate
    halves both weights and weakly related verifiers keep weight 1; smooth in phi, no cliff.
    """
    low, high = ramp
    share = np.clip((np.nan_to_num(np.abs(phi)) - low) / max(high - low, 1e-12), 0.0, 1.0)
    np.fill_diagonal(share, 1.0)
    return 1.0 / share.sum(axis=1)


def conditional_correlations(positive: np.ndarray, negative: np.ndarray, counts: np.ndarray,
                             posterior: np.ndarray) -> np.ndarray:
    """``[m, m]`` phi within each class (rows weighted by the posterior), averaged over the classes.

    Verifiers that are independent given the label have ~0 here however strong they are;
    copies of each other keep their correlation.
    """
    mass = np.array([counts @ (1 - posterior), counts @ posterior])
    within = [vote_correlations(positive, negative, counts * (1 - posterior)),
              vote_correlations(positive, negative, counts * posterior)]
    return (mass[0] * np.nan_to_num(within[0]) + mass[1] * np.nan_to_num(within[1])) / max(mass.sum(), 1e-12)


SKLEARN_INAPPLICABLE_CHECKS = {
    "check_estimators_dtypes": "fits y with three classes; the classes here are fixed: 0 incorrect, 1 correct",
    "check_classifier_data_not_an_array": "fits y with three classes (the classes are fixed: 0, 1)",
    "check_classifiers_classes": "fits string class labels ('one', 'two'); the classes are fixed: 0, 1",
    "check_classifiers_train": "asserts accuracy learned from y; the label model learns from the votes alone "
                               "(y only sets the prior and the orientation)",
    "check_classifiers_regression_target": "expects 'Unknown label type' for a continuous y; a non-binary y is "
                                           "refused with 'Only binary classification is supported'",
    "check_supervised_y_no_nan": "NaN in y means 'unknown label', which is the point of a partially labelled fit",
    "check_supervised_y_2d": "y is a 1-D label vector with NaN for unknown; a column vector is flattened silently",
    "check_fit2d_1feature": "fits one feature with three classes; one verifier is a documented vote-count fallback",
}
"""scikit-learn ``check_estimator`` checks that ``WeaverModel``'s documented signature makes inapplicable, with
why; every other check passes (tests/test_selection_weaver.py)."""


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
        dependence: ``(low, high)`` phi ramp of the dependence weights: a verifier pair whose votes
            correlate by |phi| counts as ``clip((|phi| - low) / (high - low), 0, 1)`` copies of
            each other, and each verifier's log-likelihood is weighted by 1 / its number of copies
            (first from the plain correlations, then refitted on the correlations within each
            class); ``None`` treats every verifier as independent given the label.
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
        dependence_weights_: ``[m]`` weight of each kept verifier (1 = independent; 0 for dropped ones).
        dependence_: ``{column: (other column, phi within classes)}`` for verifiers weighted below 0.95.
        near_random_: ``[m]`` bool, kept verifiers with |TPR - FPR| < 0.02 (their weight is ~0).
        prior_: P(correct).
        tpr_, fpr_: ``[m]`` P(vote 1 | correct), P(vote 1 | incorrect) (upper half of the bins when
            ``n_bins > 2``; NaN for dropped verifiers).
        theta_: ``[2, n_bins, m]`` P(bin | class), class 1 = correct.
        weights_: ``[n_bins, m]`` log-likelihood ratio added for a vote in each bin.
        n_iter_, converged_, flipped_: EM diagnostics (``flipped_``: the label-flip guard fired).
        orientation_: how the label was oriented: ``"labels"`` (checked on the labelled rows),
            ``"verifiers"`` (most verifier evidence better than chance) or ``"ambiguous"`` (a
            weighted share >= 0.25 of the evidence points the other way: the mirror solution, where
            those verifiers are the good ones, fits the votes equally well; give labels or a prior).
        fallback_: None, or ``"vote_count"`` when fewer than 3 verifiers survive (the model is
            then not identifiable and the votes are counted instead).
        n_patterns_: distinct vote patterns EM ran on.

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
                 dependence: tuple[float, float] | None = (0.3, 0.9), prior: float | None = None,
                 smoothing: float = 0.5, max_iter: int = 1000, tol: float = 1e-8) -> None:
        self.normalize, self.threshold, self.n_bins = normalize, threshold, n_bins
        self.min_coverage, self.rate_bounds, self.dependence, self.prior = min_coverage, rate_bounds, dependence, prior
        self.smoothing, self.max_iter, self.tol = smoothing, max_iter, tol

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN = the verifier did not score the candidate (an abstain)
        tags.target_tags.required = False  # label-free; y is optional and partial
        tags.classifier_tags.multi_class = False  # classes are fixed: 0 incorrect, 1 correct
        return tags

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
        if self.dependence is not None and not (len(self.dependence) == 2 and 0 <= self.dependence[0] < self.dependence[1] <= 1):
            raise ValueError(f"dependence must be None or (low, high) with 0 <= low < high <= 1, got {self.dependence!r}")
        if self.prior is not None and not 0 < self.prior < 1:
            raise ValueError(f"prior must be in (0, 1), got {self.prior!r}")
        if self.max_iter < 1 or self.tol <= 0 or self.smoothing < 0:
            raise ValueError("max_iter >= 1, tol > 0 and smoothing >= 0 are required")

    # ---- fitting -----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, *, groups: Any = None) -> "WeaverModel":
        """Fit on ``X`` ``[n, m]`` (NaN = missing score), without labels unless ``y`` is given.

        Args:
            X: verifier scores, one row per candidate.
            y: optional ``[n]`` labels, 1 correct / 0 incorrect / NaN or -1 unknown; the known ones
                set the prior (unless ``prior`` is given), orient the label model and drive
                ``threshold="search"``.
            groups: ``[n]`` problem of each row (keyword only; needed by ``threshold="search"``).
        """
        with _single_threaded_blas():
            return self._fit(X, groups, y)

    def _fit(self, X: Any, groups: Any, y: Any) -> "WeaverModel":
        self._check_params()
        X = _as_matrix(self, X, reset=True)
        n, m = X.shape
        labelled = self._labels(y, n)
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
        self._fit_codes(bin_codes(X, self.cutoffs_), prior, labelled)
        return self

    def _labels(self, y: Any, n: int) -> np.ndarray | None:
        if y is None:
            return None
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} rows, X has {n}")
        if np.isinf(y).any():
            raise ValueError("Input y contains infinity; y must hold 1 (correct), 0 (incorrect) or NaN/-1 (unknown)")
        y = np.where(y < 0, np.nan, y)  # -1 also means unknown
        if np.any((y != 0) & (y != 1) & ~np.isnan(y)):
            raise ValueError("Only binary classification is supported: y must hold 1 (correct), 0 (incorrect) "
                             "or NaN/-1 (unknown)")
        return y

    def _cutoffs(self, threshold: float) -> np.ndarray:
        levels = [threshold] if self.n_bins == 2 else np.arange(1, self.n_bins) / self.n_bins
        return np.stack([self.normalizer_.cutoffs(level) for level in levels])

    def _fit_codes(self, codes: np.ndarray, prior: float | None, labelled: np.ndarray | None) -> None:
        """Screen the verifiers, fit the label model with dependence weights, orient it, set the weights."""
        m = codes.shape[1]
        patterns = VotePatterns(codes, self.n_bins)
        self.n_patterns_ = int(patterns.counts.size)
        self.keep_, self.dropped_ = self._screen(patterns)
        self.theta_ = np.full((2, self.n_bins, m), np.nan)
        self.weights_ = np.zeros((self.n_bins, m))
        self.dependence_weights_ = np.where(self.keep_, 1.0, 0.0)
        self.dependence_, self.near_random_ = {}, np.zeros(m, dtype=bool)
        self.n_iter_, self.converged_, self.flipped_, self.fallback_, self.orientation_ = 0, True, False, None, "verifiers"
        columns = np.flatnonzero(self.keep_)
        if columns.size < 3:
            self.fallback_ = "vote_count"
            warnings.warn(f"only {columns.size} usable verifier(s): the label model needs at least 3; "
                          "counting votes instead", UserWarning, stacklevel=4)
            self.prior_ = 0.5 if prior is None else prior
            self.weights_[:, columns] = np.linspace(-1.0, 1.0, self.n_bins)[:, None]
            self.tpr_, self.fpr_ = np.full(m, np.nan), np.full(m, np.nan)
            return
        bins = patterns.columns(columns)
        half = self.n_bins // 2  # correlations on the median split (the vote itself when n_bins = 2)
        positive, negative = sum(bins[half:]), sum(bins[:half])
        weights, n_iter = np.ones(columns.size), 0
        if self.dependence is not None:
            weights = dependence_weights(vote_correlations(positive, negative, patterns.counts), self.dependence)
            fit = self._em(bins, patterns.counts, prior, weights)
            phi = conditional_correlations(positive, negative, patterns.counts, fit["posterior"])
            weights = dependence_weights(phi, self.dependence)
            n_iter = fit["n_iter"]
            self._record_dependence(columns, weights, phi)
            fit = self._em(bins, patterns.counts, prior, weights, start=fit["posterior"])
        else:
            fit = self._em(bins, patterns.counts, prior, weights)
        fit["n_iter"] += n_iter
        if labelled is not None:
            fit = self._orient_on_labels(fit, bins, patterns, prior, weights, labelled)
        self.prior_ = fit["prior"]
        self.theta_[:, :, columns] = fit["theta"]
        self.n_iter_, self.converged_, self.flipped_ = fit["n_iter"], fit["converged"], fit["flipped"]
        self.dependence_weights_[columns] = weights
        theta = np.clip(fit["theta"], 1e-6, 1.0)
        self.weights_[:, columns] = np.log(theta[1] / theta[0]) * weights
        gap = 0.5 * np.abs(fit["theta"][1] - fit["theta"][0]).sum(axis=0)
        self.near_random_[columns] = gap < NEAR_RANDOM_GAP
        if self.orientation_ != "labels":
            shift = orientation_shift(fit["theta"]) * weights
            against = np.abs(shift[shift < 0]).sum() / max(np.abs(shift).sum(), 1e-12)
            if against >= AMBIGUOUS_SHARE:
                self.orientation_ = "ambiguous"
                warnings.warn(f"label orientation is ambiguous: {100 * against:.0f}% of the verifier evidence says "
                              "the opposite; the mirror solution fits equally well (give dev labels or a prior)",
                              UserWarning, stacklevel=4)
        upper = self.theta_[:, self.n_bins // 2:, :].sum(axis=1)
        self.tpr_, self.fpr_ = np.where(self.keep_, upper[1], np.nan), np.where(self.keep_, upper[0], np.nan)
        if not fit["converged"]:
            warnings.warn(f"EM did not converge in {self.max_iter} iterations (tol {self.tol})",
                          ConvergenceWarning, stacklevel=4)

    def _record_dependence(self, columns: np.ndarray, weights: np.ndarray, phi: np.ndarray) -> None:
        phi = np.nan_to_num(np.abs(phi))
        np.fill_diagonal(phi, 0.0)
        for i in np.flatnonzero(weights < 0.95):
            k = int(np.argmax(phi[i]))
            self.dependence_[int(columns[i])] = (int(columns[k]), float(phi[i, k]))

    def _orient_on_labels(self, fit: dict[str, Any], bins: list[np.ndarray], patterns: VotePatterns,
                          prior: float | None, weights: np.ndarray, labelled: np.ndarray) -> dict[str, Any]:
        """Check the orientation on the labelled rows; refit from the mirrored posterior if it is wrong."""
        known = ~np.isnan(labelled)
        posterior = fit["posterior"][patterns.inverse[known]]
        truth = labelled[known] == 1
        if truth.all() or not truth.any():
            return fit
        self.orientation_ = "labels"
        if posterior[truth].mean() >= posterior[~truth].mean():
            return fit
        mirrored = self._em(bins, patterns.counts, prior, weights, start=1.0 - fit["posterior"], orient=False)
        mirrored["n_iter"] += fit["n_iter"]
        mirrored["flipped"] = True
        return mirrored

    def _em(self, bins: list[np.ndarray], counts: np.ndarray, prior: float | None, weights: np.ndarray,
            start: np.ndarray | None = None, orient: bool = True) -> dict[str, Any]:
        return _em(bins, prior, self.smoothing, self.max_iter, self.tol, counts=counts, weights=weights,
                   start=start, orient=orient)

    def _screen(self, patterns: VotePatterns) -> tuple[np.ndarray, dict[int, str]]:
        """Keep mask and drop reasons (plain words) from vote coverage and vote balance."""
        n = patterns.counts.sum()
        per_bin = np.stack([patterns.counts @ ind for ind in patterns.bins])  # [B, m]
        votes = per_bin.sum(axis=0)
        share = np.divide(per_bin, votes, out=np.zeros_like(per_bin), where=votes > 0)
        dropped = {}
        low, high = self.rate_bounds
        for j in range(per_bin.shape[1]):
            if votes[j] == 0:
                dropped[j] = "no scores: missing on every candidate"
            elif votes[j] < self.min_coverage * n:
                dropped[j] = f"too few scores: {100 * votes[j] / n:.1f}% of candidates (min_coverage {self.min_coverage:g})"
            elif share[:, j].max() == 1.0:
                dropped[j] = ("constant: every vote positive" if self.n_bins == 2 and share[1, j] == 1.0 else
                              "constant: every vote negative" if self.n_bins == 2 else "constant: every score in one bin")
            elif self.n_bins == 2 and not low <= share[1, j] <= high:
                dropped[j] = f"almost constant: {100 * share[1, j]:.1f}% of its votes positive (rate_bounds {low:g}-{high:g})"
            elif self.n_bins > 2 and share[:, j].max() > high:
                dropped[j] = f"almost constant: {100 * share[:, j].max():.1f}% of its scores in one bin (above {high:g})"
        keep = np.ones(per_bin.shape[1], dtype=bool)
        keep[list(dropped)] = False
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
                self._fit_codes(bin_codes(X, self.cutoffs_), prior, labelled)
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
        check_is_fitted(self)
        X = _as_matrix(self, X, reset=False)
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


def problem_share_mask(data: SelectionData, fraction: float, seed: int) -> np.ndarray:
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
    problems set the class prior, orient the label model and (with ``model__threshold: search``)
    choose the threshold, and the method is reported as label-based.

    Args:
        verifiers: score columns to use (default: all).
        majority_verifier: add Weaver's majority-vote pseudo-verifier (1 for candidates with a
            most frequent answer). The dependence weights halve it and an ``answer_frequency``
            verifier that votes the same way.
        model: the ``WeaverModel`` (its parameters are nested: ``model__threshold``,
            ``model__n_bins``, ...; configs write them the same way). Default ``WeaverModel()``.
        dev_fraction: share of problems whose labels may be used (0 = label-free).
        train_fraction: share of problems the label model is fitted on (1 = all, transductive as
            in the paper); the others are only scored, and the report gives the accuracy on them.
        seed: seed of the dev- and train-problem draws.
        tie_break: ``mean_score`` (tied posteriors go to the higher mean normalised score of the
            kept verifiers, then the smaller tiebreak rank) or ``index`` (smaller tiebreak rank).

    Attributes:
        model_: the fitted ``WeaverModel`` (a clone of ``model``).
        feature_names_: the columns given to the model.
        dev_rows_: ``[n]`` bool, candidates whose labels were used (when ``dev_fraction > 0``).
        train_rows_: ``[n]`` bool, candidates the model was fitted on.
    """

    def __init__(self, verifiers: list[str] | None = None, majority_verifier: bool = True,
                 model: WeaverModel | None = None, dev_fraction: float = 0.0, train_fraction: float = 1.0,
                 seed: int = 0, tie_break: str = "mean_score") -> None:
        self.verifiers = verifiers
        self.majority_verifier = majority_verifier
        self.model = WeaverModel() if model is None else model  # an instance, so model__* parameters can be set
        self.dev_fraction = dev_fraction
        self.train_fraction = train_fraction
        self.seed = seed
        self.tie_break = tie_break

    @property
    def uses_labels(self) -> bool:  # type: ignore[override]
        """Label-based exactly when ``dev_fraction > 0``."""
        return self.dev_fraction > 0

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "WeaverSelector":
        if not 0 <= self.dev_fraction <= 1:
            raise ValueError(f"dev_fraction must be in [0, 1], got {self.dev_fraction!r}")
        if not 0 < self.train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {self.train_fraction!r}")
        if self.tie_break not in ("mean_score", "index"):
            raise ValueError(f"tie_break must be 'mean_score' or 'index', got {self.tie_break!r}")
        super().fit(data, labels)
        X, self.feature_names_ = feature_matrix(data, self.verifiers, self.majority_verifier)
        self.train_rows_ = (np.ones(data.n_candidates, dtype=bool) if self.train_fraction >= 1
                            else problem_share_mask(data, self.train_fraction, self.seed + 1))
        rows = np.flatnonzero(self.train_rows_)
        y = None
        if labels is not None:
            self.dev_rows_ = problem_share_mask(data.subset(rows), self.dev_fraction, self.seed)
            y = np.where(self.dev_rows_, np.asarray(labels, dtype=np.float64)[rows], np.nan)
            self.dev_rows_ = np.isin(np.arange(data.n_candidates), rows[self.dev_rows_])
        self.model_ = clone(self.model).fit(X[rows], y, groups=data.problem_id[rows].astype(str))
        return self

    def heldout_problems(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` bool: problems the model was not fitted on (none when ``train_fraction`` = 1)."""
        check_is_fitted(self)
        fitted = np.zeros(data.n_problems, dtype=bool)
        fitted[data.groups[self.train_rows_]] = True
        return ~fitted

    def notes(self) -> list[str]:
        """What the fit did that a reader of the report should know, in plain words."""
        check_is_fitted(self)
        return describe_fit(self.model_, self.feature_names_)

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


def describe_fit(model: WeaverModel, names: Sequence[str]) -> list[str]:
    """Plain-word notes on a fitted ``WeaverModel``: drops, down-weighted copies, near-random
    verifiers, the vote-count fallback, an ambiguous orientation, non-convergence."""
    notes = [f"dropped {names[j]}: {reason}" for j, reason in sorted(model.dropped_.items())]
    for j, (k, phi) in sorted(model.dependence_.items()):
        notes.append(f"down-weighted {names[j]} to {model.dependence_weights_[j]:.2f}: votes like {names[k]} "
                     f"(phi {phi:.2f} within each class)")
    notes += [f"{names[j]} is near random (|TPR - FPR| < {NEAR_RANDOM_GAP:g}): weight ~0"
              for j in np.flatnonzero(model.near_random_)]
    if model.fallback_ == "vote_count":
        notes.append(f"fallback: only {int(model.keep_.sum())} usable verifier(s), the label model needs 3; votes counted")
    if model.orientation_ == "ambiguous":
        notes.append("orientation ambiguous: many verifiers disagree with the rest, and the mirror solution "
                     "(those verifiers right, the others wrong) fits equally well; give dev labels (dev_fraction) or a prior")
    elif model.flipped_ and model.orientation_ == "labels":
        notes.append("orientation corrected on the dev labels: the label-free fit had taken the mirror solution")
    if not model.converged_:
        notes.append(f"EM did not converge in {model.max_iter} steps")
    return notes
