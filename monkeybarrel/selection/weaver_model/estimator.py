"""``WeaverModel``: Weaver's label model as a scikit-learn estimator over a ``[n, m]`` score matrix with NaN.

``fit`` runs, in order: normalise and discretise every verifier (``discretise``), screen them
(``screening``), read the answers (``answers``: items, share cells, agreement strata), fit the label model
(``fitting``: dependence weights, EM, per-stratum rates, orientation), and keep the tables that score
every candidate in one pass (``scoring``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ...core.groups import group_argmax
from .answers import CELL_NO_ANSWER, N_CELLS, AnswerStructure, agreement_edges, answer_structure
from .discretise import ScoreNormalizer, as_matrix, bin_codes, bin_cutoffs, bins_per_verifier
from .em import cell_table, sigmoid
from .fitting import LabelModelFit, Settings, fit_label_model
from .screening import NEAR_RANDOM_GAP, screen
from .scoring import abstain_tables, answer_log_odds, row_evidence
from .notes import convergence_message, orientation_messages
from .orientation import orientation_shift

THRESHOLD_GRID = np.round(np.arange(0.05, 0.951, 0.05), 2)
"""Thresholds tried by ``threshold="search"`` (the paper's 0.05-step grid)."""


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


def _single_threaded_blas():
    """BLAS on one thread: the products here are thin (n x m with m ~ 10-100) and memory-bound; OpenBLAS
    threads only add overhead, and make them 10-50x slower on a busy machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


class WeaverModel(ClassifierMixin, BaseEstimator):
    """Weaver's label model as a scikit-learn estimator over a ``[n, m]`` score matrix with NaN.

    Args:
        normalize: per-verifier normalisation that defines ``threshold``'s scale (``ScoreNormalizer``).
        n_bins: ``"auto"`` (each verifier as many equal-count bins as its scores carry, up to 8),
            or an integer >= 2: that many bins at equally spaced normalised levels for every verifier.
        threshold: None, or binary votes (1 when the normalised score is >= this; 2 bins, as in the
            paper); ``"search"`` picks it from ``THRESHOLD_GRID`` by selection accuracy on the
            labelled problems (needs ``y`` and ``groups`` in ``fit``).
        min_coverage: drop verifiers that score (non-NaN) fewer than this share of rows.
        rate_bounds: drop verifiers whose positive share (two bins) or fullest bin (more) lies outside
            ``[low, high]``.
        dependence: ``(low, high)`` phi ramp of the dependence weights (``dependence``); ``None``
            treats every verifier as independent given the label.
        prior: fixed P(correct); default: the labelled rows' mean when ``y`` is given, else EM's estimate.
        smoothing: Beta/Dirichlet pseudo-count for the rate estimates.
        max_iter: most EM steps per EM run (the fit runs EM up to three times).
        tol: EM stops when the objective per item changes by less than this.
        n_strata: with final answers, problems are split into up to this many strata of equal size by
            their agreement (largest answer share); 1 = no strata.

    Attributes:
        normalizer_: the fitted ``ScoreNormalizer``; ``threshold_``: the binary threshold (None: bins).
        cutoffs_: ``[B - 1, m]`` each verifier's raw cut points (+inf: unused); verifier j's score is in
            bin b when it reaches b of them. ``bins_``: ``[m]`` bins of each verifier.
        keep_: ``[m]`` bool, verifiers in the label model; ``dropped_``: ``{column: reason}`` for the rest.
        dependence_weights_: ``[m]`` weight of each kept verifier (1 = independent; 0 for dropped ones);
            ``dependence_``: ``{column: (other column, phi within classes)}`` for those weighted below 0.95.
        near_random_: ``[m]`` bool, kept verifiers whose mean bin position (0 lowest, 1 highest) differs by less
            than ``NEAR_RANDOM_GAP`` between the classes (|TPR - FPR| with two bins).
        prior_: P(correct) of an item (an answer with answers, else a candidate).
        theta_: ``[2, B, m]`` P(bin | class) over all strata, class 1 = correct (0 for bins a verifier
            lacks, NaN for dropped verifiers); ``tpr_``, ``fpr_``: ``[m]`` P(upper half of its bins | class).
        weights_: ``[B, m]`` log-likelihood ratio added for a score in each bin (all strata).
        answers_: the fit grouped candidates by final answer; ``unanswered_``: candidates without one
            (graded wrong, left out of the fit).
        strata_edges_: ``[S - 1]`` agreement cut points; ``strata_theta_``, ``strata_weights_``:
            ``[S, 2, B, m]`` / ``[S, B, m]`` per stratum; ``per_stratum_``: ``[m]`` bool, verifiers with
            (shrunk) rates of their own per stratum; ``heterogeneity_``: ``[m]`` G statistic of them.
        cell_llr_: ``[n_cells]`` log-likelihood ratio of each share cell (``answers.cell_name``);
            ``cell_counts_``: ``[S, n_cells]`` fitted answers in each.
        majority_: ``"joint"`` when the answer shares are in the fit (fitted with the verifiers), else None.
        orientation_: ``labels``, ``answers``, ``verifiers`` or ``ambiguous`` (``orientation``);
            ``orientation_against_``: share of the verifier evidence against it; ``answer_orientation_``:
            its log-likelihood advantage under "at most one right answer per problem";
            ``consensus_``: picks of the agreed answer on near-unanimous problems (chosen / mirror).
        n_iter_, converged_, flipped_: EM diagnostics; ``stop_``: how the last EM run ended.
        fallback_: None, or ``"vote_count"`` when fewer than 3 verifiers survive.
        n_patterns_: rows EM ran on; ``fit_rows_``: candidates the label model was fitted on (a sample of
            whole problems above ``fitting.FIT_ROWS``), of ``n_rows_`` answered candidates.

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

    def __init__(self, normalize: str = "quantile", n_bins: int | str = "auto", threshold: float | str | None = None,
                 min_coverage: float = 0.01, rate_bounds: tuple[float, float] = (0.02, 0.98),
                 dependence: tuple[float, float] | None = (0.3, 0.9), prior: float | None = None,
                 smoothing: float = 0.5, max_iter: int = 1000, tol: float = 1e-8, n_strata: int = 3) -> None:
        self.normalize, self.n_bins, self.threshold = normalize, n_bins, threshold
        self.min_coverage, self.rate_bounds, self.dependence, self.prior = min_coverage, rate_bounds, dependence, prior
        self.smoothing, self.max_iter, self.tol, self.n_strata = smoothing, max_iter, tol, n_strata

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True  # NaN = the verifier did not score the candidate (an abstain)
        tags.target_tags.required = False  # label-free; y is optional and partial
        tags.classifier_tags.multi_class = False  # classes are fixed: 0 incorrect, 1 correct
        return tags

    def _check_params(self) -> None:
        # each check names ``self.<param>`` itself: `validate` runs these statements from the source and reports
        # the parameters a refusing statement reads (core.plugin_source)
        if not (self.threshold is None or self.threshold == "search"
                or (isinstance(self.threshold, (int, float)) and 0 < self.threshold <= 1)):
            raise ValueError(f"threshold must be None, in (0, 1] or 'search', got {self.threshold!r}")
        if not (self.n_bins == "auto" or (isinstance(self.n_bins, (int, np.integer)) and self.n_bins >= 2)):
            raise ValueError(f"n_bins must be 'auto' or an integer >= 2, got {self.n_bins!r}")
        if self.threshold is not None and self.n_bins not in ("auto", 2):
            raise ValueError(f"threshold {self.threshold!r} means binary votes: it needs n_bins='auto' or 2, "
                             f"got {self.n_bins!r}")
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

    def fit(self, X: Any, y: Any = None, *, groups: Any = None, answers: Any = None,
            answer_share: bool = True, verifier_names: Any = None) -> "WeaverModel":
        """Fit on ``X`` ``[n, m]`` (NaN = missing score), without labels unless ``y`` is given.

        Args:
            X: verifier scores, one row per candidate.
            y: optional ``[n]`` labels, 1 correct / 0 incorrect / NaN or -1 unknown: the known ones are
                fixed in EM, set the prior (unless ``prior`` is given), orient the label model and drive
                ``threshold="search"``.
            groups: ``[n]`` problem of each row (keyword only; needed by ``answers`` and ``"search"``).
            answers: ``[n]`` int final-answer code of each row (equal codes within a problem = equivalent
                answers, -1 = none): the label then belongs to the answer. Without any answer the rows
                are independent candidates.
            answer_share: with ``answers``, use each answer's share of its problem's samples as evidence.
            verifier_names: ``[m]`` names of the columns, for the warnings (default: ``feature_names_in_`` or
                "column j").
        """
        self._names = verifier_names
        with _single_threaded_blas():
            self._check_params()
            X = as_matrix(self, X, reset=True)
            labelled = _labels(y, X.shape[0])
            self.dev_labels_ = bool(labelled is not None and (~np.isnan(labelled)).any())
            structure = _structure(groups, answers, X.shape[0])
            self.answers_, self.answer_share_ = structure is not None, bool(answer_share and structure is not None)
            self.unanswered_, self.classes_ = 0, np.array([0, 1])
            if structure is not None:  # a candidate without an answer is graded wrong: the model is about the others
                answered = np.flatnonzero(structure.cells != CELL_NO_ANSWER)
                self.unanswered_ = int(X.shape[0] - answered.size)
                if self.unanswered_:
                    X, structure = X[answered], structure.subset(answered)
                    groups = np.asarray(groups).reshape(-1)[answered]
                    labelled = None if labelled is None else labelled[answered]
            self.normalizer_ = ScoreNormalizer(self.normalize).fit(X)
            prior = self.prior
            if prior is None and self.dev_labels_ and labelled is not None and (~np.isnan(labelled)).any():
                prior = float(np.clip(np.nanmean(labelled), 0.01, 0.99))
            if self.threshold == "search":
                self.threshold_ = self._search_threshold(X, groups, labelled, prior, structure)
            else:
                self.threshold_ = None if self.threshold is None and self.n_bins != 2 else float(self.threshold or 0.5)
            self._fit_at(X, self.threshold_, prior, labelled, structure)
            return self

    def _fit_at(self, X: np.ndarray, threshold: float | None, prior: float | None, labelled: np.ndarray | None,
                structure: AnswerStructure | None) -> None:
        """Discretise at ``threshold`` (or in bins), screen, fit the label model and keep its tables."""
        observed = (~np.isnan(X)).sum(axis=0)
        quantiles = self.normalizer_ if self.normalize == "quantile" else ScoreNormalizer().fit(X)
        self.cutoffs_ = bin_cutoffs(self.normalizer_, quantiles, observed, self.n_bins, threshold)
        self.bins_ = bins_per_verifier(self.cutoffs_)
        codes = bin_codes(X, self.cutoffs_)
        self.keep_, self.dropped_ = screen(codes, self.bins_, X, self.min_coverage, self.rate_bounds)
        self.strata_edges_ = (agreement_edges(structure, self.n_strata) if structure is not None and self.n_strata > 1
                              else np.zeros(0))
        self._reset(X.shape[1], structure)
        self.n_rows_ = X.shape[0]
        columns = np.flatnonzero(self.keep_)
        if columns.size < 3:
            self._vote_count(columns, prior)
            return
        settings = Settings(self.dependence, prior, self.smoothing, self.max_iter, self.tol)
        fit = fit_label_model(np.ascontiguousarray(codes[:, columns]), self.bins_[columns], structure,
                              self.strata_edges_, self.answer_share_, labelled, settings)
        self._store(fit, columns)

    def _reset(self, m: int, structure: AnswerStructure | None) -> None:
        B, S = int(self.bins_.max()), self.strata_edges_.size + 1
        self.theta_, self.strata_theta_ = np.full((2, B, m), np.nan), np.full((S, 2, B, m), np.nan)
        self.weights_, self.strata_weights_ = np.zeros((B, m)), np.zeros((S, B, m))
        self.dependence_weights_, self.dependence_ = np.where(self.keep_, 1.0, 0.0), {}
        self.near_random_, self.per_stratum_ = np.zeros(m, dtype=bool), np.zeros(m, dtype=bool)
        self.heterogeneity_, self.tpr_, self.fpr_ = np.full(m, np.nan), np.full(m, np.nan), np.full(m, np.nan)
        self.cell_llr_ = np.zeros(N_CELLS if self.answer_share_ else 0)
        self.cell_counts_ = np.zeros((S, self.cell_llr_.size), dtype=np.int64)
        self.majority_ = "joint" if self.answer_share_ else None
        self.n_iter_, self.converged_, self.flipped_, self.fallback_, self.stop_ = 0, True, False, None, None
        self.orientation_, self.orientation_against_, self.answer_orientation_ = "verifiers", 0.0, 0.0
        self.consensus_, self.agreement_check_, self.n_patterns_, self.fit_rows_ = {}, {}, 0, 0

    def _vote_count(self, columns: np.ndarray, prior: float | None) -> None:
        self.fallback_, self.majority_ = "vote_count", None
        warnings.warn(f"only {columns.size} usable verifier(s): the label model needs at least 3; counting votes "
                      "instead", UserWarning, stacklevel=4)
        self.prior_ = 0.5 if prior is None else prior
        for j in columns:
            self.weights_[: self.bins_[j], j] = np.linspace(-1.0, 1.0, self.bins_[j])
        self.strata_weights_[:] = self.weights_
        self.cell_llr_[:] = 0.0

    def _store(self, fit: LabelModelFit, columns: np.ndarray) -> None:
        params, B = fit.params, fit.params.theta.shape[2]
        self.prior_, self.n_iter_, self.stop_ = params.prior, fit.n_iter, fit.iteration
        self.converged_, self.flipped_ = fit.iteration.converged, fit.orientation.flipped
        self.n_patterns_, self.fit_rows_ = fit.n_patterns, fit.sampled
        self.dependence_weights_[columns] = fit.weights
        self.dependence_ = {int(columns[i]): (int(columns[k]), phi) for i, (k, phi) in fit.copies.items()}
        self.per_stratum_[columns] = fit.shrink.max(axis=0) > 0 if fit.shrink is not None else False
        self.heterogeneity_[columns] = fit.heterogeneity
        self.strata_theta_[:, :, :B, columns] = params.theta
        self.theta_[:, :B, columns] = fit.pooled_theta
        self.theta_[:, B:, columns] = 0.0
        mask = np.arange(B)[:, None] < self.bins_[columns][None, :]
        theta = np.clip(params.theta, 1e-6, 1.0)
        self.strata_weights_[:, :B, columns] = np.log(theta[:, 1] / theta[:, 0]) * fit.weights * mask
        pooled = np.clip(fit.pooled_theta, 1e-6, 1.0)
        self.weights_[:B, columns] = np.log(pooled[1] / pooled[0]) * fit.weights * mask
        self.near_random_[columns] = np.abs(orientation_shift(fit.pooled_theta, mask)) < NEAR_RANDOM_GAP
        upper = np.arange(B)[:, None] >= (self.bins_[columns] + 1)[None, :] // 2
        self.tpr_[columns] = (fit.pooled_theta[1] * upper).sum(axis=0)
        self.fpr_[columns] = (fit.pooled_theta[0] * upper).sum(axis=0)
        if self.answer_share_:
            self.cell_llr_, self.cell_counts_ = cell_table(params), fit.cell_counts
        o = fit.orientation
        self.orientation_, self.orientation_against_, self.answer_orientation_ = o.how, o.against, o.answer_margin
        self.consensus_, self.agreement_check_ = o.consensus, fit.problems
        names = self._names if self._names is not None else getattr(
            self, "feature_names_in_", [f"column {j}" for j in range(self.keep_.size)])
        for message in orientation_messages(self, names):
            warnings.warn(message, UserWarning, stacklevel=5)
        if not fit.iteration.converged:
            warnings.warn(convergence_message(self), ConvergenceWarning, stacklevel=5)

    def _search_threshold(self, X: np.ndarray, groups: Any, labelled: np.ndarray | None, prior: float | None,
                          structure: AnswerStructure | None) -> float:
        """The grid threshold with the best selection accuracy on the labelled problems (ties: nearest 0.5)."""
        if labelled is None or groups is None or not (~np.isnan(labelled)).any():
            if self.dev_labels_:  # labels were given, but only for candidates without an answer
                warnings.warn("threshold='search': no labelled candidate has an answer (the rest are graded wrong "
                              "and left out); using 0.5", UserWarning, stacklevel=4)
                self.dev_accuracy_ = float("nan")
                return 0.5
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
                self._fit_at(X, float(t), prior, labelled, structure)
                scores = self._log_odds(X[rows], None if structure is None else structure.subset(rows))[0]
                chosen = group_argmax(scores, dev_groups, codes.size, np.arange(rows.size))
                accuracy = float(np.sum(labelled[rows][chosen[chosen >= 0]] == 1)) / codes.size
                if accuracy > best_accuracy + 1e-12:
                    best, best_accuracy = float(t), accuracy
        self.dev_accuracy_ = best_accuracy
        return best

    def _log_odds(self, X: np.ndarray, structure: AnswerStructure | None) -> tuple[np.ndarray, np.ndarray]:
        """``([n] log-odds of each row's item, [n] log-odds from the row's own bins over all strata)``."""
        codes = bin_codes(X, self.cutoffs_)
        columns = np.flatnonzero(self.keep_)
        prior = float(np.log(self.prior_ / (1 - self.prior_)))
        own = prior + row_evidence(codes, abstain_tables(self.weights_[None]), columns, None)
        if structure is None or not self.answers_:
            return own, own
        strata = structure.strata(self.strata_edges_)
        evidence = row_evidence(codes, abstain_tables(self.strata_weights_), columns, strata)
        cells = self.cell_llr_ if self.answer_share_ else None
        return answer_log_odds(evidence, structure, cells, prior), own

    def answer_scores(self, X: Any, *, groups: Any = None, answers: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``([n] log-odds of the candidate's answer (see ``decision_function``), [n] log-odds from the
        candidate's own bins alone)``, from one pass over the scores."""
        check_is_fitted(self)
        X = as_matrix(self, X, reset=False)
        structure = _structure(groups, answers, X.shape[0]) if answers is not None else None
        return self._log_odds(X, structure)

    def decision_function(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n]`` posterior log-odds that each candidate is correct (monotone in P(correct)).

        With ``groups`` and ``answers`` (as in ``fit``) and a model fitted with answers, the log-odds that
        the candidate's *answer* is correct (all its candidates' bins, its share cell, its problem's
        stratum); otherwise from the candidate's own bins with the rates over all strata.
        """
        return self.answer_scores(X, groups=groups, answers=answers)[0]

    def predict_proba(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n, 2]``: P(incorrect), P(correct) given the scores (see ``decision_function``)."""
        p = sigmoid(self.decision_function(X, groups=groups, answers=answers))
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any, *, groups: Any = None, answers: Any = None) -> np.ndarray:
        """``[n]`` 1 where P(correct) > 0.5."""
        return (self.decision_function(X, groups=groups, answers=answers) > 0).astype(np.int64)


def _labels(y: Any, n: int) -> np.ndarray | None:
    """``[n]`` float labels (1, 0, NaN unknown; -1 also means unknown), checked."""
    if y is None:
        return None
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} rows, X has {n}")
    if np.isinf(y).any():
        raise ValueError("Input y contains infinity; y must hold 1 (correct), 0 (incorrect) or NaN/-1 (unknown)")
    y = np.where(y < 0, np.nan, y)
    if np.any((y != 0) & (y != 1) & ~np.isnan(y)):
        raise ValueError("Only binary classification is supported: y must hold 1 (correct), 0 (incorrect) "
                         "or NaN/-1 (unknown)")
    return y


def _structure(groups: Any, answers: Any, n: int) -> AnswerStructure | None:
    """Items, cells and agreement from ``groups`` and ``answers`` (None when no row has an answer)."""
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
