"""Weaver (Saad-Falcon et al., 2025): weak-supervision ensembling of many weak verifiers.

Pipeline, fitted on the score matrix of a whole dataset without labels:

1. normalise each verifier's scores over the dataset and binarise them at a threshold (``score_bins``);
   a missing score (NaN) is an abstain, never a negative vote; ``n_bins > 2`` keeps more bins;
2. drop degenerate verifiers (almost no votes, almost always the same vote) and weight copies of each
   other down (composite likelihood: correlated verifiers share one vote);
3. fit the latent-class (Dawid–Skene) label model by EM to convergence (``label_model``): a hidden
   correct/incorrect label, per-verifier TPR = P(vote 1 | correct) and FPR = P(vote 1 | incorrect);
4. with final answers (the default of the selector), the label belongs to an *answer*: the candidates
   giving it are repeated evidence about it, the answer's share of the samples is one more
   observation (the majority evidence), and reliability may depend on the problem: problems are
   stratified by how much their samples agree, a verifier whose rates differ significantly between
   strata gets its own rates in each, and where the verifiers contradict the majority evidence in a
   stratum its weight there is re-estimated from the verifiers alone (``answer_structure``);
5. score each candidate by the posterior log-odds that its answer is correct; pick the argmax per problem.

A few labels (``y`` in ``fit``; ``dev_fraction`` of the problems in the selector) fix those items'
labels in EM, set the class prior, orient the model and can choose the threshold.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ..core.groups import group_argmax
from ..core.selection_data import SelectionData
from . import label_model as lm
from .answer_structure import (CELL_ALONE, CELL_NO_ANSWER, N_CELLS, AnswerStructure, agreement_edges,
                               answer_structure, cell_name, is_most_frequent)
from .base import SELECTORS, Selector
from .score_bins import NORMALIZATIONS, ScoreNormalizer, as_matrix, bin_codes, bin_indicators  # noqa: F401 (re-exported)

NEAR_RANDOM_GAP = 0.02
"""Kept verifiers with |TPR - FPR| below this are reported as near random (their weight is ~0)."""
AMBIGUOUS_SHARE = 1 / 3
"""Without final answers, the orientation is reported ambiguous when this weighted share of the verifier
evidence points the other way (the mirror solution always fits the votes as well)."""
ANSWER_ORIENTATION_MARGIN = np.log(20.0)
"""With final answers, the two orientations are compared by how well each fits "at most one answer per
problem is right"; a log-likelihood difference below this leaves the verifiers' direction to decide."""
NO_ANSWER_LOG_ODDS = -1000.0
"""With final answers, a candidate without one is graded wrong: its log-odds are its own votes' plus this, so it
ranks after every answered candidate (and only its own votes order it among the unanswered)."""
START_TOP_SHARES = (0.2, 0.05, 0.01)
START_STEPS = 12
"""EM's label-free starts: the soft majority vote plus hard starts at these top shares of it, each run
``START_STEPS`` EM steps (on at most ``START_ROWS`` rows); the best objective goes on."""
START_ROWS = 20_000
FIT_ROWS = 60_000
"""On more rows than this, EM and its tests run on a seeded sample of whole problems first, then EM
continues on every row from there (a few steps: the sample's solution is close)."""
CORRELATION_ROWS = 60_000
"""Vote correlations (dependence weights) are estimated on at most this many rows (a seeded sample)."""
HETEROGENEITY_P = 1e-6
"""The notes name a verifier whose rates differ between agreement strata at this significance (G test on the
soft counts); every verifier's per-stratum rates are shrunk towards its rates over all strata regardless."""
UNANIMITY = 0.75
SANITY_MARGIN = 0.1
MAX_RIGHT_ANSWERS = 2.0
"""The verifiers alone are trusted to check the majority evidence unless they are too weak to stand alone
(then the joint model is kept): on problems where at least ``UNANIMITY`` of the samples agree, they pick
the agreed answer more than ``SANITY_MARGIN`` less often than the model fitted with it, or they expect
more than ``MAX_RIGHT_ANSWERS`` right answers per problem (at most one can be)."""
THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""Thresholds tried by ``threshold="search"`` (the paper's 0.05-step grid)."""


def _single_threaded_blas():
    """BLAS on one thread: the products here are thin (n x m with m ~ 10-100) and memory-bound;
    OpenBLAS threads only add overhead, and make them 10-50x slower on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def fit_latent_class(votes: np.ndarray, prior: float | None = None, smoothing: float = 0.5,
                     max_iter: int = 1000, tol: float = 1e-8) -> dict[str, Any]:
    """EM for the binary latent-class model with abstains, to convergence (every row its own item).

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
    data = lm.build_em_data(bin_codes(votes, np.full((1, votes.shape[1]), 0.5)), 2)
    m = votes.shape[1]
    em = lm.LatentClassEM(data, lm.Model(np.ones(m), np.zeros(m, bool), np.zeros((1, 0), bool), prior, smoothing))
    start = lm.best_start(em, lm.soft_vote(data, np.ones(m)), START_TOP_SHARES, START_STEPS)
    fit = lm.fit(em, start, max_iter, tol)
    params, q = fit["params"], fit["posterior"]
    flipped = bool(orientation_shift(params.theta[0]).sum() < 0)
    if flipped:
        params, q = mirrored(params, prior), 1.0 - q
    return {"prior": params.prior, "tpr": params.theta[0, 1, 1], "fpr": params.theta[0, 0, 1],
            "posterior": q[data.inverse], "n_iter": fit["n_iter"], "converged": fit["converged"], "flipped": flipped}


def mirrored(params: lm.Params, fixed_prior: float | None) -> lm.Params:
    """The label-swapped solution (same likelihood): classes exchanged."""
    prior = 1.0 - params.prior if fixed_prior is None else params.prior
    return lm.Params(prior, params.theta[:, ::-1].copy(), params.cells[::-1].copy())


def orientation_shift(theta: np.ndarray) -> np.ndarray:
    """``[m]`` E[bin | Y=1] - E[bin | Y=0] per verifier (> 0: better than chance) from ``theta [2, B, m]``."""
    levels = np.arange(theta.shape[1])[:, None]
    return ((theta[1] - theta[0]) * levels).sum(axis=0)


def answer_orientation(evidence: np.ndarray, problem_of_item: np.ndarray) -> float:
    """Log-likelihood advantage of the fitted orientation over its mirror under "at most one answer per
    problem is right", over problems with several answers.

    Each answer has log-likelihood ratio ``evidence`` (its candidates' votes and its cell; no prior). Per
    problem of k answers, the constrained likelihood ratio against "all wrong" is
    ``rho + (1 - rho) / k * sum_a exp(evidence_a)`` (none right with probability rho, else one answer
    uniformly); the mirror negates every ratio and pays ``sum_a evidence_a`` for relabelling. ``rho`` is
    fitted for each orientation (a grid), so neither wins by the prior alone. ``problem_of_item``:
    ``[I]`` problem of each answer item, -1 for items that are not answers.
    """
    answered = problem_of_item >= 0
    if not answered.any():
        return 0.0
    _, problem = np.unique(problem_of_item[answered], return_inverse=True)
    several = np.bincount(problem)[problem] >= 2
    if not several.any():
        return 0.0
    _, problem = np.unique(problem[several], return_inverse=True)
    llr = evidence[answered][several]
    n = int(problem.max()) + 1
    count = np.bincount(problem, minlength=n)
    rho = np.linspace(0.01, 0.99, 50)[:, None]

    def best(gain: np.ndarray) -> float:
        top = np.full(n, -np.inf)
        np.maximum.at(top, problem, gain)
        top = np.maximum(top, 0.0)
        mean = np.bincount(problem, np.exp(gain - top[problem]), n) / count  # scaled by exp(-top)
        values = top + np.log(rho * np.exp(-top) + (1 - rho) * mean)  # [grid, n]
        return float(values.sum(axis=1).max())

    return best(llr) - (best(-llr) + float(llr.sum()))


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
        max_iter: most EM iterations (per fit; the model is refitted after each test).
        tol: EM stops when the mean log-likelihood per item changes by less than this.
        n_strata: with final answers (``fit(..., answers=)``), problems are split into up to this many
            strata of equal size by their agreement (largest answer share); 1 = no strata.

    Attributes:
        normalizer_: the fitted ``ScoreNormalizer``.
        threshold_: the binarisation threshold (normalised scale).
        cutoffs_: ``[n_bins - 1, m]`` the same cutoffs on each verifier's raw scale: verifier j
            votes 1 when its raw score is >= ``cutoffs_[0, j]``.
        keep_: ``[m]`` bool, verifiers in the label model; ``dropped_``: ``{column: reason}`` for the rest.
        dependence_weights_: ``[m]`` weight of each kept verifier (1 = independent; 0 for dropped ones).
        dependence_: ``{column: (other column, phi within classes)}`` for verifiers weighted below 0.95.
        near_random_: ``[m]`` bool, kept verifiers with |TPR - FPR| < 0.02 (their weight is ~0).
        prior_: P(correct) of an item (an answer with answers, else a candidate).
        tpr_, fpr_: ``[m]`` P(vote 1 | correct), P(vote 1 | incorrect) over all strata (upper half of
            the bins when ``n_bins > 2``; NaN for dropped verifiers).
        theta_: ``[2, n_bins, m]`` P(bin | class) over all strata, class 1 = correct.
        weights_: ``[n_bins, m]`` log-likelihood ratio added for a vote in each bin (all strata).
        answers_: whether the fit grouped candidates by final answer (``answers`` given to ``fit``).
        unanswered_: candidates without an answer left out of the fit (graded wrong; they rank after every
            answered candidate, ``NO_ANSWER_LOG_ODDS``).
        strata_edges_: ``[S - 1]`` agreement cut points of the strata (empty: one stratum).
        strata_theta_, strata_weights_: ``[S, 2, n_bins, m]`` / ``[S, n_bins, m]`` the same per stratum.
        per_stratum_: ``[m]`` bool, verifiers with (shrunk) rates of their own in each stratum;
            ``heterogeneity_``: ``[m]`` G statistic of how much their rates differ between strata (NaN
            for dropped verifiers; the notes name those significant at ``HETEROGENEITY_P``).
        cell_llr_: ``[S, n_cells]`` log-likelihood ratio of an answer's share cell per stratum
            (``answer_structure.cell_name``); zeros without the majority evidence. ``cell_counts_``: the
            fitted answers in each.
        majority_: how the majority evidence was used: ``"checked"`` (the verifiers alone fit the
            label, and each stratum's share evidence is what their posterior supports),
            ``"joint"`` (fitted with the verifiers: they are too weak to check it) or None (not used).
        majority_check_: ``{"checked", "joint"}`` share of the problems where >= ``UNANIMITY`` of the
            samples agree on which each model picks the agreed answer; ``majority_dev_accuracy_``
            the dev selection accuracy of both (with dev labels); ``joint_cell_llr_`` the joint
            model's share evidence.
        n_iter_, converged_, flipped_: EM diagnostics (``flipped_``: the label-flip guard fired).
        orientation_: how the label was oriented: ``"labels"`` (on the labelled rows), ``"answers"``
            (at most one answer per problem is right fits one orientation clearly better),
            ``"verifiers"`` (most verifier evidence better than chance) or ``"ambiguous"`` (neither
            decides: the mirror solution fits as well and a weighted share >= ``AMBIGUOUS_SHARE`` of the
            evidence points the other way; give labels or a prior).
        answer_orientation_: log-likelihood advantage of the chosen orientation under "at most one
            answer per problem is right" (0 without answers).
        fallback_: None, or ``"vote_count"`` when fewer than 3 verifiers survive (the model is
            then not identifiable and the votes are counted instead).
        n_patterns_: rows EM ran on (distinct vote patterns when rows are merged).

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
                 smoothing: float = 0.5, max_iter: int = 1000, tol: float = 1e-8, n_strata: int = 3) -> None:
        self.normalize, self.threshold, self.n_bins = normalize, threshold, n_bins
        self.min_coverage, self.rate_bounds, self.dependence, self.prior = min_coverage, rate_bounds, dependence, prior
        self.smoothing, self.max_iter, self.tol, self.n_strata = smoothing, max_iter, tol, n_strata

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
        if not isinstance(self.n_strata, (int, np.integer)) or self.n_strata < 1:
            raise ValueError(f"n_strata must be an integer >= 1, got {self.n_strata!r}")

    # ---- fitting -----------------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, *, groups: Any = None, answers: Any = None,
            answer_share: bool = True) -> "WeaverModel":
        """Fit on ``X`` ``[n, m]`` (NaN = missing score), without labels unless ``y`` is given.

        Args:
            X: verifier scores, one row per candidate.
            y: optional ``[n]`` labels, 1 correct / 0 incorrect / NaN or -1 unknown; the known ones
                are fixed in EM, set the prior (unless ``prior`` is given), orient the label model
                and drive ``threshold="search"``.
            groups: ``[n]`` problem of each row (keyword only; needed by ``answers`` and
                ``threshold="search"``).
            answers: ``[n]`` int final-answer code of each row (equal codes within a problem =
                equivalent answers, -1 = none): the label then belongs to the answer (see the
                module docstring). Without any answer the rows are independent candidates.
            answer_share: with ``answers``, use each answer's share of its problem's samples as
                evidence (the majority evidence).
        """
        with _single_threaded_blas():
            return self._fit(X, groups, y, answers, answer_share)

    def _fit(self, X: Any, groups: Any, y: Any, answers: Any, answer_share: bool) -> "WeaverModel":
        self._check_params()
        X = as_matrix(self, X, reset=True)
        n, m = X.shape
        labelled = self._labels(y, n)
        self.dev_labels_ = bool(labelled is not None and (~np.isnan(labelled)).any())
        structure = self._structure(groups, answers, n)
        self.answers_, self.answer_share_ = structure is not None, bool(answer_share and structure is not None)
        self.unanswered_ = 0
        if structure is not None:  # a candidate without an answer is graded wrong: the model is about the others
            answered = np.flatnonzero(structure.cells != CELL_NO_ANSWER)
            self.unanswered_ = int(n - answered.size)
            if self.unanswered_:
                X, structure = X[answered], structure.subset(answered)
                groups = np.asarray(groups).reshape(-1)[answered]
                labelled = None if labelled is None else labelled[answered]
        self.classes_ = np.array([0, 1])
        self.normalizer_ = ScoreNormalizer(self.normalize).fit(X)
        prior = self.prior
        if prior is None and labelled is not None and (~np.isnan(labelled)).any():
            prior = float(np.clip(np.nanmean(labelled), 0.01, 0.99))
        if self.threshold == "search" and self.dev_labels_ and (labelled is None or np.isnan(labelled).all()):
            warnings.warn("threshold='search': no labelled candidate has an answer (the rest are graded wrong "
                          "and left out); using 0.5", UserWarning, stacklevel=3)
            self.threshold_, self.dev_accuracy_ = 0.5, float("nan")
        elif self.threshold == "search":
            self.threshold_ = self._search_threshold(X, groups, labelled, prior, structure)
        else:
            self.threshold_ = float(self.threshold)
        self.cutoffs_ = self._cutoffs(self.threshold_)
        self._fit_codes(bin_codes(X, self.cutoffs_), prior, labelled, structure)
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

    @staticmethod
    def _structure(groups: Any, answers: Any, n: int) -> AnswerStructure | None:
        if answers is None:
            return None
        answers = np.asarray(answers).reshape(-1)
        if answers.shape[0] != n or groups is None or np.asarray(groups).reshape(-1).shape[0] != n:
            raise ValueError(f"answers and groups must both have one entry per row ({n})")
        if not np.issubdtype(answers.dtype, np.integer):
            raise ValueError("answers must be integer answer codes (-1 = none)")
        if not (answers >= 0).any():
            return None
        return answer_structure(np.asarray(groups).reshape(-1), answers)

    def _cutoffs(self, threshold: float) -> np.ndarray:
        levels = [threshold] if self.n_bins == 2 else np.arange(1, self.n_bins) / self.n_bins
        return np.stack([self.normalizer_.cutoffs(level) for level in levels])

    def _fit_codes(self, codes: np.ndarray, prior: float | None, labelled: np.ndarray | None,
                   structure: AnswerStructure | None) -> None:
        """Screen the verifiers, fit the label model with dependence weights, test per-stratum rates and
        the majority evidence, orient it, and set the weights."""
        n, m = codes.shape
        B = self.n_bins
        self.keep_, self.dropped_ = self._screen(codes)
        self._reset(m, structure)
        columns = np.flatnonzero(self.keep_)
        if columns.size < 3:
            self.fallback_ = "vote_count"
            warnings.warn(f"only {columns.size} usable verifier(s): the label model needs at least 3; "
                          "counting votes instead", UserWarning, stacklevel=4)
            self.prior_ = 0.5 if prior is None else prior
            self.weights_[:, columns] = np.linspace(-1.0, 1.0, B)[:, None]
            self.strata_weights_[:] = self.weights_
            return
        kept = np.ascontiguousarray(codes[:, columns])
        k = columns.size
        sample = structure.sample(FIT_ROWS) if structure is not None else (
            _row_sample(n, FIT_ROWS) if n > FIT_ROWS else None)
        rows = np.arange(n) if sample is None else sample
        part = None if structure is None else structure.subset(rows)
        em = self._em(kept[rows], part, None if labelled is None else labelled[rows], prior, k)
        self.n_patterns_ = int(em.data.F.shape[0])
        fit = self._fit_phases(em, kept[rows], part, labelled, prior, columns)
        if sample is not None:  # EM on a sample of problems first, then on every row from there
            full = self._em(kept, structure, labelled, prior, k)
            full.model = lm.Model(em.model.weights, em.model.per_stratum, em.model.crossfit, prior, self.smoothing,
                                  full.model.clamp, em.model.cell_weight, em.model.shrink)
            fit, em = self._polish(full, fit), full
            self.n_patterns_ = int(em.data.F.shape[0])
        if em.data.n_strata > 1:
            self.heterogeneity_[columns] = lm.heterogeneity(em, fit["posterior"])
        if em.data.n_cells:
            d = em.data
            has = d.item_cell != lm.CELL_NONE
            self.cell_counts_ = np.bincount(d.item_stratum[has] * d.n_cells + d.item_cell[has],
                                            minlength=d.n_strata * d.n_cells).reshape(d.n_strata, d.n_cells)
        self._store(fit, columns, em)

    def _em(self, kept: np.ndarray, structure: AnswerStructure | None, labelled: np.ndarray | None,
            prior: float | None, k: int) -> lm.LatentClassEM:
        """The EM problem of these rows: answers as items, share cells, agreement strata when answered."""
        strata = items = cells = None
        if structure is not None:
            strata, items = structure.strata(self.strata_edges_), structure.items
            cells = structure.cells if self.answer_share_ else None
        S = self.strata_edges_.size + 1 if structure is not None else 1
        data = lm.build_em_data(kept, self.n_bins, strata, items, cells, N_CELLS if cells is not None else 0,
                                n_strata=S)
        model = lm.Model(np.ones(k), np.zeros(k, bool), np.zeros((S, data.n_cells), bool), prior, self.smoothing,
                         self._clamp(labelled, data))
        return lm.LatentClassEM(data, model)

    def _fit_phases(self, em: lm.LatentClassEM, kept: np.ndarray, structure: AnswerStructure | None,
                    labelled: np.ndarray | None, prior: float | None, columns: np.ndarray) -> dict[str, Any]:
        """Dependence weights, EM, per-stratum rates, orientation and the majority check, on ``em``'s rows."""
        data, model, B = em.data, em.model, self.n_bins
        sample = _row_sample(kept.shape[0], CORRELATION_ROWS)
        half = B // 2  # correlations on the median split (the vote itself when n_bins = 2)
        positive = ((kept[sample] >= half) & (kept[sample] < B)).astype(np.float64)
        negative = (kept[sample] < half).astype(np.float64)
        if self.dependence is not None:
            model.weights = dependence_weights(vote_correlations(positive, negative), self.dependence)
        fit = lm.fit(em, self._start(em, structure), self.max_iter, self.tol)
        if self.dependence is not None:
            posterior = data.to_rows(fit["posterior"])[data.inverse[sample]]
            phi = conditional_correlations(positive, negative, np.ones(sample.size), posterior)
            model.weights = dependence_weights(phi, self.dependence)
            self._record_dependence(columns, model.weights, phi)
            fit = self._refit(em, fit, fit["n_iter"])
        if data.n_strata > 1:  # rates per agreement stratum, each shrunk towards the rates of all strata
            ones = em.soft_counts(fit["posterior"]).reshape(data.n_strata, B, data.m)
            zeros = data.totals.reshape(data.n_strata, B, data.m) - ones
            model.shrink = np.stack([lm.shrink_factors(c, self.smoothing) for c in (zeros, ones)])
            model.per_stratum = model.shrink.max(axis=0) > 0
            fit = self._refit(em, fit, fit["n_iter"])
        fit = self._orient(em, fit, structure, labelled, prior)
        if data.n_cells:
            fit = self._check_majority(em, fit, structure)
        return fit

    def _polish(self, em: lm.LatentClassEM, fit: dict[str, Any]) -> dict[str, Any]:
        """EM on every row from the sample's solution, with the sample's decisions (weights, strata, majority)."""
        model = em.model
        if self.majority_ == "checked":
            model.cell_weight, model.crossfit = 0.0, np.zeros_like(model.crossfit)
        polished = self._refit(em, fit, fit["n_iter"])
        if self.majority_ == "checked":
            model.cell_weight, model.crossfit = 1.0, np.ones_like(model.crossfit)
            q, objective, log_joint = em.e_step(polished["params"])
            polished = dict(polished, posterior=q, objective=objective, joint=log_joint)
        if em.data.n_cells:
            self.cell_llr_ = em.cell_tables(polished["params"], em.log_terms(polished["params"])[0])
        return polished

    def _check_majority(self, em: lm.LatentClassEM, joint: dict[str, Any], structure: AnswerStructure) -> dict[str, Any]:
        """The majority evidence, checked by the verifiers (a test of whether it helps).

        Fitted jointly, the answers' shares can take over the hidden label: on hard problems the most
        frequent answer is often a favourite wrong one, and verifiers that share the generator's
        mistakes agree with it. So the model is refitted on the verifiers alone (from the joint
        solution), and each (stratum, cell) gets the share evidence its stratum's verifier posterior
        supports (cross-fitted). That model is kept unless the verifiers are too weak to stand alone:
        on problems where >= ``UNANIMITY`` of the samples agree, it must pick the agreed answer at most
        ``SANITY_MARGIN`` less often than the joint model. With dev labels, the one with the better dev
        selection accuracy is kept instead.
        """
        model = em.model
        joint_tables = em.cell_tables(joint["params"], em.log_terms(joint["params"])[0])
        model.cell_weight = 0.0
        alone = self._refit(em, joint, joint["n_iter"])
        problem_of_item = self._answer_problems(em.data, structure)
        evidence = alone["joint"][:, 1] - alone["joint"][:, 0] - np.log(alone["params"].prior / (1 - alone["params"].prior))
        if answer_orientation(evidence, problem_of_item) <= -ANSWER_ORIENTATION_MARGIN:  # the answers say: the mirror
            alone = dict(alone, params=mirrored(alone["params"], model.prior), posterior=1.0 - alone["posterior"])
        model.cell_weight, model.crossfit = 1.0, np.ones_like(model.crossfit)
        q, objective, log_joint = em.e_step(alone["params"])
        checked = dict(alone, posterior=q, objective=objective, joint=log_joint)
        problem = structure.problems[em.data.row_of[em.data.item_start]]
        cells = em.data.item_cell
        modal = is_most_frequent(cells)
        agreed = np.isin(problem, np.flatnonzero((structure.agreement >= UNANIMITY) & (structure.sizes > 1)))
        picks = {}
        for name, fit in (("checked", checked), ("joint", joint)):
            picks[name] = _item_picks(fit["joint"][:, 1] - fit["joint"][:, 0], problem)
        self.majority_check_ = {name: float(modal[rows][np.isin(problem[rows], problem[agreed])].mean())
                                if agreed.any() else float("nan") for name, rows in picks.items()}
        answered = problem_of_item >= 0
        right = np.bincount(problem_of_item[answered], _sigmoid(log_joint[answered, 1] - log_joint[answered, 0]))
        several = np.bincount(problem_of_item[answered]) >= 2
        self.majority_check_["right_answers_per_problem"] = float(right[several].mean()) if several.any() else 0.0
        if self.dev_labels_ and model.clamp is not None:
            known = ~np.isnan(model.clamp)
            dev = {name: _dev_accuracy(rows, model.clamp, problem, known) for name, rows in picks.items()}
            self.majority_dev_accuracy_ = dev
            use_checked = dev["checked"] >= dev["joint"]
        else:
            check = self.majority_check_
            plausible = check["right_answers_per_problem"] <= MAX_RIGHT_ANSWERS
            use_checked = plausible and (not agreed.any() or check["checked"] >= check["joint"] - SANITY_MARGIN)
        self.majority_ = "checked" if use_checked else "joint"
        if use_checked:
            self.joint_cell_llr_ = joint_tables
            self.cell_llr_ = em.cell_tables(checked["params"], em.log_terms(checked["params"])[0])
            return checked
        model.crossfit[:] = False
        self.cell_llr_ = joint_tables
        return joint

    def _reset(self, m: int, structure: AnswerStructure | None) -> None:
        B = self.n_bins
        self.strata_edges_ = (agreement_edges(structure, self.n_strata) if structure is not None and self.n_strata > 1
                              else np.zeros(0))
        S = self.strata_edges_.size + 1
        self.theta_ = np.full((2, B, m), np.nan)
        self.strata_theta_ = np.full((S, 2, B, m), np.nan)
        self.weights_ = np.zeros((B, m))
        self.strata_weights_ = np.zeros((S, B, m))
        self.dependence_weights_ = np.where(self.keep_, 1.0, 0.0)
        self.dependence_, self.near_random_ = {}, np.zeros(m, dtype=bool)
        self.per_stratum_, self.heterogeneity_ = np.zeros(m, dtype=bool), np.full(m, np.nan)
        n_cells = N_CELLS if self.answer_share_ else 0
        self.cell_llr_, self.joint_cell_llr_ = np.zeros((S, n_cells)), np.zeros((S, n_cells))
        self.cell_counts_ = np.zeros((S, n_cells), dtype=np.int64)
        self.majority_, self.majority_check_, self.majority_dev_accuracy_ = None, {}, {}
        self.n_iter_, self.converged_, self.flipped_, self.fallback_ = 0, True, False, None
        self.orientation_, self.answer_orientation_, self.n_patterns_ = "verifiers", 0.0, 0
        self.tpr_, self.fpr_ = np.full(m, np.nan), np.full(m, np.nan)

    @staticmethod
    def _clamp(labelled: np.ndarray | None, data: lm.EMData) -> np.ndarray | None:
        """``[I]`` known labels of the items (an answer is known when one of its candidates is labelled)."""
        if labelled is None or not (~np.isnan(labelled)).any():
            return None
        rows = labelled[data.row_of]
        known = ~np.isnan(rows)
        hits = data.per_item(np.where(known, rows, 0.0))
        seen = data.per_item(known.astype(np.float64))
        return np.where(seen > 0, np.round(hits / np.maximum(seen, 1)), np.nan)

    def _start(self, em: lm.LatentClassEM, structure: AnswerStructure | None) -> lm.Params:
        """The best label-free start, chosen on at most ``START_ROWS`` rows (whole problems when answered)."""
        data = em.data
        n = data.inverse.size
        rows = (structure.sample(START_ROWS, seed=1) if structure is not None else
                (_row_sample(n, START_ROWS) if n > START_ROWS else None))
        if rows is None:
            return lm.best_start(em, lm.soft_vote(data, em.model.weights), START_TOP_SHARES, START_STEPS)
        part = None if structure is None else structure.subset(rows)
        clamp = None if em.model.clamp is None else _row_labels(em, rows)
        kept = _row_codes(data, rows)
        small = self._em(kept, part, clamp, em.model.prior, data.m)
        small.model.weights, small.model.per_stratum, small.model.shrink = (em.model.weights, em.model.per_stratum,
                                                                            em.model.shrink)
        return lm.best_start(small, lm.soft_vote(small.data, small.model.weights), START_TOP_SHARES, START_STEPS)

    def _refit(self, em: lm.LatentClassEM, fit: dict[str, Any], n_iter: int) -> dict[str, Any]:
        """EM again from the previous solution (after a change of weights, strata or cells)."""
        refit = lm.fit(em, fit["params"], self.max_iter, self.tol)
        refit["n_iter"] += n_iter
        refit["flipped"] = fit.get("flipped", False)
        return refit

    def _orient(self, em: lm.LatentClassEM, fit: dict[str, Any], structure: AnswerStructure | None,
                labelled: np.ndarray | None, prior: float | None) -> dict[str, Any]:
        """Choose between the solution and its mirror: by the labelled items, else by the answer
        structure, else by the verifiers being better than chance on the whole."""
        weights = em.model.weights
        if em.model.clamp is not None:
            return self._orient_on_labels(em, fit, prior)
        params = fit["params"]
        pooled = params.theta.mean(axis=0) if em.data.n_strata > 1 else params.theta[0]
        shift = orientation_shift(pooled) * weights
        against = np.abs(shift[shift < 0]).sum() / max(np.abs(shift).sum(), 1e-12)
        flip = shift.sum() < 0
        decided_by_answers = False
        if structure is not None:
            problem_of_item = self._answer_problems(em.data, structure)
            advantage = answer_orientation(fit["joint"][:, 1] - fit["joint"][:, 0] - np.log(params.prior / (1 - params.prior)),
                                           problem_of_item)
            if abs(advantage) >= ANSWER_ORIENTATION_MARGIN:
                flip, decided_by_answers = advantage < 0, True
                self.orientation_ = "answers"
            self.answer_orientation_ = abs(advantage)
        if flip:
            fit = dict(fit, params=mirrored(params, prior), posterior=1.0 - fit["posterior"],
                       joint=fit["joint"][:, ::-1].copy(), flipped=True)
            against = 1.0 - against
        if not decided_by_answers and against >= AMBIGUOUS_SHARE:
            self.orientation_ = "ambiguous"
            warnings.warn(f"label orientation is ambiguous: {100 * against:.0f}% of the verifier evidence says "
                          "the opposite and nothing else decides; the mirror solution fits equally well "
                          "(give dev labels or a prior)", UserWarning, stacklevel=5)
        return fit

    @staticmethod
    def _answer_problems(data: lm.EMData, structure: AnswerStructure) -> np.ndarray:
        """``[I]`` problem of each item that is an answer (-1 for candidates without an answer)."""
        first = data.row_of[data.item_start]
        has_answer = structure.cells[first] != 0
        return np.where(has_answer, structure.problems[first], -1)

    def _orient_on_labels(self, em: lm.LatentClassEM, fit: dict[str, Any], prior: float | None) -> dict[str, Any]:
        """Check the orientation on the labelled items; refit from the mirrored posterior if it is wrong."""
        clamp = em.model.clamp
        known = ~np.isnan(clamp)
        truth = clamp[known] == 1
        if truth.all() or not truth.any():
            return fit
        self.orientation_ = "labels"
        # the unlabelled items' posterior must separate like the labels do on the labelled ones
        em.model.clamp = None
        q, _, _ = em.e_step(fit["params"])
        em.model.clamp = clamp
        if q[known][truth].mean() >= q[known][~truth].mean():
            return fit
        mirror = lm.fit(em, mirrored(fit["params"], prior), self.max_iter, self.tol)
        mirror["n_iter"] += fit["n_iter"]
        mirror["flipped"] = True
        return mirror

    def _record_dependence(self, columns: np.ndarray, weights: np.ndarray, phi: np.ndarray) -> None:
        phi = np.nan_to_num(np.abs(phi))
        np.fill_diagonal(phi, 0.0)
        for i in np.flatnonzero(weights < 0.95):
            k = int(np.argmax(phi[i]))
            self.dependence_[int(columns[i])] = (int(columns[k]), float(phi[i, k]))

    def _store(self, fit: dict[str, Any], columns: np.ndarray, em: lm.LatentClassEM) -> None:
        params, model = fit["params"], em.model
        self.prior_ = params.prior
        self.n_iter_, self.converged_, self.flipped_ = fit["n_iter"], fit["converged"], bool(fit.get("flipped", False))
        self.dependence_weights_[columns] = model.weights
        self.per_stratum_[columns] = model.per_stratum
        self.strata_theta_[:, :, :, columns] = params.theta
        pooled = self._pooled_theta(em, params, fit["posterior"])
        self.theta_[:, :, columns] = pooled
        theta = np.clip(params.theta, 1e-6, 1.0)
        self.strata_weights_[:, :, columns] = np.log(theta[:, 1] / theta[:, 0]) * model.weights
        pooled = np.clip(pooled, 1e-6, 1.0)
        self.weights_[:, columns] = np.log(pooled[1] / pooled[0]) * model.weights
        gap = 0.5 * np.abs(self.theta_[1] - self.theta_[0]).sum(axis=0)
        self.near_random_[columns] = gap[columns] < NEAR_RANDOM_GAP
        upper = self.theta_[:, self.n_bins // 2:, :].sum(axis=1)
        self.tpr_, self.fpr_ = np.where(self.keep_, upper[1], np.nan), np.where(self.keep_, upper[0], np.nan)
        if not fit["converged"]:
            warnings.warn(f"EM did not converge in {self.max_iter} iterations (tol {self.tol})",
                          ConvergenceWarning, stacklevel=5)

    @staticmethod
    def _pooled_theta(em: lm.LatentClassEM, params: lm.Params, q: np.ndarray) -> np.ndarray:
        """``[2, B, k]`` rates over all strata (the shared rates; for per-stratum verifiers the rates of
        their soft counts summed over the strata)."""
        if params.theta.shape[0] == 1 or not em.model.per_stratum.any():
            return params.theta[0]
        d, sm = em.data, em.model.smoothing
        ones = em.soft_counts(q).sum(axis=0).reshape(d.n_bins, d.m)
        zeros = d.totals.sum(axis=0).reshape(d.n_bins, d.m) - ones
        return np.stack([(c + sm) / (c.sum(axis=0) + d.n_bins * sm) for c in (zeros, ones)])

    def _screen(self, codes: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
        """Keep mask and drop reasons (plain words) from vote coverage and vote balance."""
        n, m = codes.shape
        per_bin = np.stack([(codes == b).sum(axis=0) for b in range(self.n_bins)]).astype(np.float64)  # [B, m]
        votes = per_bin.sum(axis=0)
        share = np.divide(per_bin, votes, out=np.zeros_like(per_bin), where=votes > 0)
        dropped = {}
        low, high = self.rate_bounds
        for j in range(m):
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
        keep = np.ones(m, dtype=bool)
        keep[list(dropped)] = False
        return keep, dropped

    def _search_threshold(self, X: np.ndarray, groups: Any, labelled: np.ndarray | None, prior: float | None,
                          structure: AnswerStructure | None) -> float:
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
                self._fit_codes(bin_codes(X, self.cutoffs_), prior, labelled, structure)
                scores = self._log_odds(bin_codes(X, self.cutoffs_), structure)[rows]
                chosen = group_argmax(scores, dev_groups, codes.size, np.arange(rows.size))
                accuracy = float(np.sum(labelled[rows][chosen[chosen >= 0]] == 1)) / codes.size
                if accuracy > best_accuracy + 1e-12:
                    best, best_accuracy = float(t), accuracy
        self.dev_accuracy_ = best_accuracy
        return best

    # ---- prediction --------------------------------------------------------------------------
    def _row_evidence(self, codes: np.ndarray, strata: np.ndarray | None) -> np.ndarray:
        """``[n]`` log-likelihood ratio of each row's votes (its stratum's weights; all strata's without
        ``strata``), accumulated column by column so rows with equal votes in one stratum get bitwise-equal
        values."""
        n, m = codes.shape
        B = self.n_bins
        weights = self.weights_[None] if strata is None else self.strata_weights_
        tables = np.concatenate([weights, np.zeros((weights.shape[0], 1, m))], axis=1)  # [S, B + 1, m]; abstain 0
        offset = 0 if strata is None or weights.shape[0] == 1 else (np.asarray(strata, dtype=np.intp) * (B + 1))
        out = np.zeros(n)
        for j in np.flatnonzero(self.keep_):
            out += tables[:, :, j].ravel()[codes[:, j] + offset]
        return out

    def _log_odds(self, codes: np.ndarray, structure: AnswerStructure | None) -> np.ndarray:
        """``[n]`` posterior log-odds of each row's item: its answer's (votes of all its candidates, its
        share cell, its stratum's weights) with answers, else the row's own."""
        prior = np.log(self.prior_ / (1 - self.prior_))
        if structure is None or not self.answers_:
            return prior + self._row_evidence(codes, None)
        strata = structure.strata(self.strata_edges_)
        evidence = self._row_evidence(codes, strata)
        # sum per item in a fixed order (by value), so answers with equal evidence tie exactly
        order = np.lexsort((evidence, structure.items))
        items = structure.items[order]
        starts = np.flatnonzero(np.concatenate([[True], items[1:] != items[:-1]]))
        totals = np.zeros(int(structure.items.max()) + 1)
        totals[items[starts]] = np.add.reduceat(evidence[order], starts)
        cell = self.cell_llr_[strata, structure.cells] if self.answer_share_ else 0.0
        out = prior + totals[structure.items] + cell
        unanswered = structure.cells == CELL_NO_ANSWER  # graded wrong: after every answered candidate
        out[unanswered] = prior + evidence[unanswered] + NO_ANSWER_LOG_ODDS
        return out

    def decision_function(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n]`` posterior log-odds that each candidate is correct (monotone in P(correct)).

        With ``groups`` and ``answers`` (as in ``fit``) and a model fitted with answers, the log-odds
        that the candidate's *answer* is correct (all its candidates' votes, its share, its problem's
        stratum); otherwise from the candidate's own votes with the rates over all strata.
        """
        return self.answer_scores(X, groups=groups, answers=answers)[0]

    def answer_scores(self, X: Any, *, groups: Any = None, answers: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``([n] log-odds of the candidate's answer (see ``decision_function``), [n] log-odds from the
        candidate's own votes alone)``, from one pass over the scores."""
        check_is_fitted(self)
        X = as_matrix(self, X, reset=False)
        structure = self._structure(groups, answers, X.shape[0]) if answers is not None else None
        codes = bin_codes(X, self.cutoffs_)
        own = np.log(self.prior_ / (1 - self.prior_)) + self._row_evidence(codes, None)
        if structure is not None and self.answers_:
            return self._log_odds(codes, structure), own
        return own, own

    def predict_proba(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n, 2]``: P(incorrect), P(correct) given the votes (see ``decision_function``)."""
        p = _sigmoid(self.decision_function(X, groups=groups, answers=answers))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n]`` 1 where P(correct) > 0.5."""
        return (self.decision_function(X, groups=groups, answers=answers) > 0).astype(np.int64)


def _item_picks(log_odds: np.ndarray, problem: np.ndarray) -> np.ndarray:
    """Index of the best item of each problem (items ``[I]`` with their problem), ties to the first."""
    order = np.lexsort((-log_odds, problem))
    first = np.concatenate([[True], problem[order][1:] != problem[order][:-1]])
    return order[first]


def _dev_accuracy(picks: np.ndarray, clamp: np.ndarray, problem: np.ndarray, known: np.ndarray) -> float:
    """Share of the labelled problems whose picked item is known correct."""
    labelled = np.unique(problem[known])
    chosen = picks[np.isin(problem[picks], labelled)]
    return float(np.nansum(clamp[chosen] == 1)) / max(labelled.size, 1)


def _row_sample(n: int, limit: int) -> np.ndarray:
    """Sorted indices of a seeded random sample of at most ``limit`` of ``n`` rows (all when n <= limit)."""
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).choice(n, size=limit, replace=False))


def _row_codes(data: lm.EMData, rows: np.ndarray) -> np.ndarray:
    """``[len(rows), m]`` int8 bin codes of original ``rows`` read back from the indicators (abstain = n_bins)."""
    F = data.F[data.inverse[rows]].reshape(rows.size, data.n_bins, data.m)
    observed = F.sum(axis=1) > 0
    return np.where(observed, F.argmax(axis=1), data.n_bins).astype(np.int8)


def _row_labels(em: lm.LatentClassEM, rows: np.ndarray) -> np.ndarray:
    """Labels of original ``rows`` from the clamped items of ``em`` (NaN where unknown)."""
    item_of_row = em.data.item_of_row()[em.data.inverse]
    return em.model.clamp[item_of_row[rows]]


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
    whole = columns.size == data.scores.shape[1] and np.array_equal(columns, np.arange(columns.size))
    X = data.scores if whole else data.scores[:, columns]  # no copy of a large score matrix when all are used
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


def tied_with(chosen: np.ndarray, keys: Sequence[np.ndarray], data: SelectionData) -> np.ndarray:
    """``[n]`` bool: rows equal in every key to their problem's chosen row, in problems where several are."""
    made = chosen >= 0
    best = np.full(data.n_problems, -1)
    best[made] = chosen[made]
    rows = best[data.groups]
    same = rows >= 0
    for key in keys:
        same &= key == key[np.maximum(rows, 0)]
    return same & (np.bincount(data.groups[same], minlength=data.n_problems)[data.groups] > 1)


def select_with_secondary(primary: np.ndarray, secondary: np.ndarray | Sequence[np.ndarray], data: SelectionData
                          ) -> np.ndarray:
    """Per problem, the row with the largest ``primary``; ties by larger ``secondary`` (one array, or several
    applied in turn), then smaller tiebreak.

    NaN in ``primary`` is never chosen; NaN in a secondary key ranks last among tied rows.
    """
    chosen = np.full(data.n_problems, -1, dtype=np.int64)
    rows = np.flatnonzero(~np.isnan(primary))
    if rows.size == 0:
        return chosen
    keys = [secondary] if isinstance(secondary, np.ndarray) else list(secondary)
    seconds = [-np.where(np.isnan(key[rows]), -np.inf, key[rows]) for key in keys]
    order = rows[np.lexsort((data.tiebreak[rows], *seconds[::-1], -primary[rows], data.groups[rows]))]
    first = np.ones(order.size, dtype=bool)
    first[1:] = data.groups[order][1:] != data.groups[order][:-1]
    chosen[data.groups[order[first]]] = order[first]
    return chosen


AGGREGATIONS = ("answer", "candidate")


@SELECTORS.register("weaver")
class WeaverSelector(Selector):
    """Weaver selection: argmax per problem of the label model's P(correct | verifier votes).

    Label-free unless ``dev_fraction > 0``: then the labels of a seeded random share of the
    problems are fixed in EM, set the class prior, orient the label model and (with
    ``model__threshold: search``) choose the threshold, and the method is reported as label-based.

    Args:
        verifiers: score columns to use (default: all).
        majority_verifier: use the majority evidence: with ``aggregate="answer"`` each answer's share
            of its problem's samples (tested per agreement stratum against the verifiers); with
            ``aggregate="candidate"`` Weaver's majority-vote pseudo-verifier column (1 for candidates
            with a most frequent answer), as in the paper.
        model: the ``WeaverModel`` (its parameters are nested: ``model__threshold``,
            ``model__n_bins``, ...; configs write them the same way). Default ``WeaverModel()``.
        dev_fraction: share of problems whose labels may be used (0 = label-free).
        train_fraction: share of problems the label model is fitted on (1 = all, transductive as
            in the paper); the others are only scored, and the report gives the accuracy on them.
        seed: seed of the dev- and train-problem draws.
        tie_break: ``mean_score`` (tied posteriors go to the candidate whose own votes say more, then to
            the higher mean normalised score of the kept verifiers, then the smaller tiebreak rank) or
            ``index`` (the candidate's own votes, then the smaller tiebreak rank).
        aggregate: ``answer`` (default: the label belongs to a final answer, so the candidates giving
            it are pooled, and problems are stratified by agreement; candidates without answers stay
            single) or ``candidate`` (every candidate on its own, as in the paper).

    Attributes:
        model_: the fitted ``WeaverModel`` (a clone of ``model``).
        feature_names_: the columns given to the model.
        dev_rows_: ``[n]`` bool, candidates whose labels were used (when ``dev_fraction > 0``).
        train_rows_: ``[n]`` bool, candidates the model was fitted on.
    """

    def __init__(self, verifiers: list[str] | None = None, majority_verifier: bool = True,
                 model: WeaverModel | None = None, dev_fraction: float = 0.0, train_fraction: float = 1.0,
                 seed: int = 0, tie_break: str = "mean_score", aggregate: str = "answer") -> None:
        self.verifiers = verifiers
        self.majority_verifier = majority_verifier
        self.model = WeaverModel() if model is None else model  # an instance, so model__* parameters can be set
        self.dev_fraction = dev_fraction
        self.train_fraction = train_fraction
        self.seed = seed
        self.tie_break = tie_break
        self.aggregate = aggregate

    @property
    def uses_labels(self) -> bool:  # type: ignore[override]
        """Label-based exactly when ``dev_fraction > 0``."""
        return self.dev_fraction > 0

    def _features(self, data: SelectionData) -> tuple[np.ndarray, tuple[str, ...]]:
        return feature_matrix(data, self.verifiers, self.majority_verifier and self.aggregate == "candidate")

    def _answers(self, data: SelectionData) -> np.ndarray | None:
        return data.answers if self.aggregate == "answer" else None

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "WeaverSelector":
        if not 0 <= self.dev_fraction <= 1:
            raise ValueError(f"dev_fraction must be in [0, 1], got {self.dev_fraction!r}")
        if not 0 < self.train_fraction <= 1:
            raise ValueError(f"train_fraction must be in (0, 1], got {self.train_fraction!r}")
        if self.tie_break not in ("mean_score", "index"):
            raise ValueError(f"tie_break must be 'mean_score' or 'index', got {self.tie_break!r}")
        if self.aggregate not in AGGREGATIONS:
            raise ValueError(f"aggregate must be one of {AGGREGATIONS}, got {self.aggregate!r}")
        super().fit(data, labels)
        X, self.feature_names_ = self._features(data)
        self.train_rows_ = (np.ones(data.n_candidates, dtype=bool) if self.train_fraction >= 1
                            else problem_share_mask(data, self.train_fraction, self.seed + 1))
        rows = np.flatnonzero(self.train_rows_)
        y = None
        if labels is not None:
            self.dev_rows_ = problem_share_mask(data.subset(rows), self.dev_fraction, self.seed)
            y = np.where(self.dev_rows_, np.asarray(labels, dtype=np.float64)[rows], np.nan)
            self.dev_rows_ = np.isin(np.arange(data.n_candidates), rows[self.dev_rows_])
        answers = self._answers(data)
        every = rows.size == data.n_candidates  # no copies of the data when fitting on all of it
        pick = (lambda a: a) if every else (lambda a: a[rows])
        self.model_ = clone(self.model).fit(pick(X), y, groups=pick(data.groups),
                                            answers=None if answers is None else pick(answers),
                                            answer_share=self.majority_verifier)
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

    def describe(self) -> str:
        """What the fit did, one note per line (dropped, down-weighted, pooled by answer, stratified, how the
        majority evidence was used, orientation)."""
        return "\n".join(f"- {note}" for note in self.notes())

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` posterior log-odds of correctness (of the candidate's answer with ``aggregate="answer"``)."""
        X, _ = self._features(data)
        return self.model_.decision_function(X, groups=data.groups, answers=self._answers(data))

    def predict_proba(self, data: SelectionData) -> np.ndarray:
        """``[n]`` P(correct | votes)."""
        return _sigmoid(self.decision_function(data))

    def select(self, data: SelectionData) -> np.ndarray:
        X, _ = self._features(data)
        model, answers = self.model_, self._answers(data)
        primary, own = model.answer_scores(X, groups=data.groups, answers=answers)
        keys = [own] if model.answers_ and answers is not None else []  # within an answer: the best-supported candidate
        chosen = select_with_secondary(primary, keys, data)
        if self.tie_break == "index":
            return chosen
        tied = np.flatnonzero(tied_with(chosen, [primary, *keys], data))
        kept = np.flatnonzero(model.keep_)
        if tied.size == 0 or kept.size == 0:
            return chosen
        secondary = np.full(data.n_candidates, np.nan)
        Z = model.normalizer_.transform(X[tied])[:, kept]  # normalise only the rows that need it
        count = (~np.isnan(Z)).sum(axis=1)
        secondary[tied] = np.divide(np.nansum(Z, axis=1), count, out=np.full(tied.size, np.nan), where=count > 0)
        return select_with_secondary(primary, [*keys, secondary], data)


def describe_fit(model: WeaverModel, names: Sequence[str]) -> list[str]:
    """Plain-word notes on a fitted ``WeaverModel``: drops, down-weighted copies, near-random verifiers,
    answers and agreement strata, verifiers with per-stratum weights, majority evidence re-estimated
    from the verifiers, the vote-count fallback, the orientation, non-convergence."""
    notes = [f"dropped {names[j]}: {reason}" for j, reason in sorted(model.dropped_.items())]
    copies = sorted(model.dependence_.items())
    if len(copies) > 4:  # many copies: one note
        weights = model.dependence_weights_[[j for j, _ in copies]]
        listed = ", ".join(names[j] for j, _ in copies[:4])
        notes.append(f"down-weighted {len(copies)} verifiers that vote like each other ({listed}, ...; phi "
                     f"{min(phi for _, (_, phi) in copies):.2f}-{max(phi for _, (_, phi) in copies):.2f} within each class) "
                     f"to weights {weights.min():.2f}-{weights.max():.2f}: together they count about "
                     f"{weights.sum():.1f} votes")
        copies = []
    for j, (k, phi) in copies:
        notes.append(f"down-weighted {names[j]} to {model.dependence_weights_[j]:.2f}: votes like {names[k]} "
                     f"(phi {phi:.2f} within each class)")
    notes += [f"{names[j]} is near random (|TPR - FPR| < {NEAR_RANDOM_GAP:g}): weight ~0"
              for j in np.flatnonzero(model.near_random_)]
    if model.fallback_ == "vote_count":
        notes.append(f"fallback: only {int(model.keep_.sum())} usable verifier(s), the label model needs 3; votes counted")
    notes += _describe_strata(model, names)
    if model.orientation_ == "ambiguous":
        notes.append("orientation ambiguous: many verifiers disagree with the rest, and the mirror solution "
                     "(those verifiers right, the others wrong) fits equally well; give dev labels (dev_fraction) or a prior")
    elif model.flipped_ and model.orientation_ == "labels":
        notes.append("orientation corrected on the dev labels: the label-free fit had taken the mirror solution")
    elif model.flipped_ and model.orientation_ == "answers":
        notes.append("orientation set by the answers (at most one answer per problem is right fits it "
                     f"{model.answer_orientation_:.0f} log-units better than the mirror), against the verifiers' majority")
    if not model.converged_:
        notes.append(f"EM did not converge in {model.max_iter} steps")
    return notes


def _describe_strata(model: WeaverModel, names: Sequence[str]) -> list[str]:
    """Notes on answer pooling, agreement strata, verifiers whose reliability depends on the problem and
    how the majority evidence was used."""
    if not model.answers_ or model.fallback_:
        return []
    from scipy.stats import chi2

    edges = model.strata_edges_
    labels = _stratum_labels(edges)
    notes = ["candidates pooled by final answer: an answer's candidates are repeated evidence about it"
             + (f"; problems in {len(labels)} strata by agreement (largest answer share: {', '.join(labels)}), "
                "each verifier's rates per stratum shrunk towards its rates over all" if edges.size else "")]
    if edges.size:
        limit = chi2.isf(HETEROGENEITY_P, edges.size * 2 * (model.n_bins - 1))
        half = model.n_bins // 2
        for j in np.flatnonzero(model.heterogeneity_ > limit):
            rates = "; ".join(f"{label}: TPR {theta[1, half:].sum():.2f} FPR {theta[0, half:].sum():.2f}"
                              for label, theta in zip(labels, model.strata_theta_[:, :, :, j]))
            notes.append(f"{names[j]}'s reliability depends on the problem (G = {model.heterogeneity_[j]:.0f}): {rates}")
    check = model.majority_check_
    agreed = f"{100 * UNANIMITY:.0f} %"
    measured = np.isfinite(check.get("checked", np.nan)) and np.isfinite(check.get("joint", np.nan))
    if model.majority_ == "checked":
        how = (f"on dev labels the verifiers-checked model selects {100 * model.majority_dev_accuracy_['checked']:.0f} % "
               f"right against {100 * model.majority_dev_accuracy_['joint']:.0f} % for the joint one"
               if model.majority_dev_accuracy_ else
               f"where >= {agreed} of the samples agree, the verifiers alone pick that answer "
               f"{100 * check['checked']:.0f} % of the time (with the majority in the fit: "
               f"{100 * check['joint']:.0f} %), so they can check it" if measured else
               f"no problem has >= {agreed} of its samples agreeing, so nothing contradicts the verifiers")
        notes.append("majority evidence checked by the verifiers: the label is fitted on the verifiers alone and "
                     f"each agreement stratum uses the answer shares only as far as they support them ({how}); "
                     f"log-odds of a stratum's commonest most frequent answer: {_modal_llr(model, labels)}")
    elif model.majority_ == "joint":
        if model.majority_dev_accuracy_:
            how = (f"on dev labels the joint model selects {100 * model.majority_dev_accuracy_['joint']:.0f} % right "
                   f"against {100 * model.majority_dev_accuracy_['checked']:.0f} % for the verifiers alone")
        elif check.get("right_answers_per_problem", 0.0) > MAX_RIGHT_ANSWERS:
            how = (f"the verifiers alone expect {check['right_answers_per_problem']:.1f} right answers per problem, "
                   "where at most one can be: they are too weak to stand alone")
        elif measured:
            how = (f"where >= {agreed} of the samples agree, the verifiers alone pick that answer only "
                   f"{100 * check['checked']:.0f} % of the time (with it: {100 * check['joint']:.0f} %): "
                   "they are too weak to stand alone")
        else:
            how = "the verifiers alone were not kept"
        notes.append(f"majority evidence fitted with the verifiers ({how})")
    return notes


def _modal_llr(model: WeaverModel, labels: list[str]) -> str:
    """Per stratum, the share evidence of its commonest kind of most frequent answer, in words."""
    modal = is_most_frequent(np.arange(model.cell_llr_.shape[1])) & (np.arange(model.cell_llr_.shape[1]) != CELL_ALONE)
    parts = []
    for label, counts, llr in zip(labels, model.cell_counts_, model.cell_llr_):
        if counts[modal].sum():
            cell = int(np.flatnonzero(modal)[np.argmax(counts[modal])])
            parts.append(f"{label}: {llr[cell]:+.1f} for a {cell_name(cell)}")
    return "; ".join(parts) or "no most frequent answers"


def _stratum_labels(edges: np.ndarray) -> list[str]:
    if edges.size == 0:
        return ["all"]
    bounds = [f"{100 * e:.0f} %" for e in edges]
    return [f"< {bounds[0]}", *[f"{a}-{b}" for a, b in zip(bounds[:-1], bounds[1:])], f">= {bounds[-1]}"]
