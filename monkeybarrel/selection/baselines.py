"""Selection baselines over verifier scores: best single verifier, naive ensemble, supervised upper bound.

* ``best_single``: one verifier's scores, the verifier picked without labels (highest estimated
  TPR - FPR under Weaver's label model) or named in the config;
* ``best_single_labeled``: the verifier with the best selection accuracy on the labels (the
  paper's oracle pick; label-based);
* ``naive_ensemble``: the unweighted mean of the dataset-normalised scores;
* ``supervised``: logistic regression on the scores, cross-validated across problems
  (GroupKFold), so no problem is scored by a model trained on it; label-based.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from ..core.groups import group_argmax
from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector
from .weaver import ScoreNormalizer, WeaverModel, feature_matrix, verifier_columns


def per_distinct_row(function, X: np.ndarray) -> np.ndarray:
    """``function(rows) -> [k]`` applied once per distinct row of ``X``: equal rows get bitwise-equal
    results, so exact ties stay ties (BLAS may round identical rows differently)."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return np.zeros(0)
    keys = X.view(np.dtype((np.void, X.dtype.itemsize * X.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return np.asarray(function(X[first]), dtype=np.float64)[inverse.reshape(-1)]


def _selection_accuracy_per_column(scores: np.ndarray, labels: np.ndarray, data: SelectionData) -> np.ndarray:
    """``[m]`` selection accuracy (abstentions count as wrong) of each column used alone."""
    out = np.zeros(scores.shape[1])
    for j in range(scores.shape[1]):
        chosen = group_argmax(scores[:, j], data.groups, data.n_problems, data.tiebreak)
        out[j] = labels[chosen[chosen >= 0]].sum() / max(data.n_problems, 1)
    return out


@SELECTORS.register("best_single")
class BestSingle(Selector):
    """Selects by one verifier's score; the verifier is named, or picked without labels.

    Without ``verifier``, Weaver's label model is fitted on the verifier columns and the one with
    the largest estimated TPR - FPR is used (the Youden index of its binarised vote).

    Args:
        verifier: the verifier to use; None = pick without labels.
        verifiers: the candidates for the pick (default: every column).
        normalize, threshold: passed to the ``WeaverModel`` used for the pick.

    Attributes:
        verifier_: the chosen verifier's name.
        estimated_gap_: ``{verifier: TPR - FPR}`` as estimated without labels (when picked).
    """

    def __init__(self, verifier: str | None = None, verifiers: list[str] | None = None, normalize: str = "quantile",
                 threshold: float = 0.5) -> None:
        self.verifier = verifier
        self.verifiers = verifiers
        self.normalize = normalize
        self.threshold = threshold

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "BestSingle":
        super().fit(data, labels)
        if not data.verifiers:
            raise ValueError("best_single needs at least one verifier column")
        if self.verifier is not None:
            verifier_columns(data, [self.verifier])
            self.verifier_ = self.verifier
            return self
        columns = verifier_columns(data, self.verifiers)
        names = [data.verifiers[c] for c in columns]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # too few verifiers: vote-count fallback, gap unknown
            model = WeaverModel(normalize=self.normalize, threshold=self.threshold).fit(data.scores[:, columns])
        gap = model.tpr_ - model.fpr_
        self.estimated_gap_ = {name: float(g) for name, g in zip(names, gap) if np.isfinite(g)}
        if self.estimated_gap_:
            self.verifier_ = max(self.estimated_gap_, key=self.estimated_gap_.get)
        else:  # no label model could be fitted: the verifier that scores the most candidates
            self.verifier_ = names[int(np.argmax((~np.isnan(data.scores[:, columns])).sum(axis=0)))]
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        return data.verifier_scores(self.verifier_).copy()


@SELECTORS.register("best_single_labeled")
class BestSingleLabeled(Selector):
    """Selects by the verifier whose own selection accuracy on the labels is highest (label-based).

    This is the paper's oracle "best verifier" (picked in-sample, on the evaluated problems); ties
    go to the verifier listed first.

    Args:
        verifiers: the candidates for the pick (default: every column).

    Attributes:
        verifier_: the chosen verifier's name.
        accuracy_: ``{verifier: selection accuracy}`` on the labels.
    """

    uses_labels = True

    def __init__(self, verifiers: list[str] | None = None) -> None:
        self.verifiers = verifiers

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "BestSingleLabeled":
        super().fit(data, labels)
        if not data.verifiers:
            raise ValueError("best_single_labeled needs at least one verifier column")
        columns = verifier_columns(data, self.verifiers)
        labels = np.asarray(labels, dtype=np.float64)
        accuracy = _selection_accuracy_per_column(data.scores[:, columns], labels, data)
        self.accuracy_ = {data.verifiers[c]: a for c, a in zip(columns, accuracy.tolist())}
        self.verifier_ = data.verifiers[int(columns[np.argmax(accuracy)])]
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        return data.verifier_scores(self.verifier_).copy()


@SELECTORS.register("naive_ensemble")
class NaiveEnsemble(Selector):
    """Unweighted mean of the verifiers' dataset-normalised scores (missing scores are skipped).

    Args:
        verifiers: columns to average (default: all).
        normalize: per-verifier normalisation (see ``ScoreNormalizer``): ``quantile``, ``minmax``,
            ``weaver`` or ``none``.
    """

    def __init__(self, verifiers: list[str] | None = None, normalize: str = "quantile") -> None:
        self.verifiers = verifiers
        self.normalize = normalize

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "NaiveEnsemble":
        super().fit(data, labels)
        self.columns_ = verifier_columns(data, self.verifiers)
        self.normalizer_ = ScoreNormalizer(self.normalize).fit(data.scores[:, self.columns_])
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` mean normalised score of the candidate's verifiers (NaN when none scored it), summed column
        by column in a fixed order, so candidates with equal scores get bitwise-equal means (exact ties)."""
        total, count = np.zeros(data.n_candidates), np.zeros(data.n_candidates)
        for k, j in enumerate(self.columns_):
            column = data.scores[:, j]
            seen = np.flatnonzero(~np.isnan(column))
            total[seen] += self.normalizer_.transform_column(column[seen], k)
            count[seen] += 1.0
        return np.divide(total, count, out=np.full(data.n_candidates, np.nan), where=count > 0)


@SELECTORS.register("supervised")
class Supervised(Selector):
    """Logistic regression on verifier scores, cross-validated across problems (label-based upper bound).

    Features are the verifiers' scores (plus the majority-vote indicator), mean-imputed with
    missing-value indicators and standardised; the model is balanced logistic regression. Every
    problem is scored by a model trained on the other folds of a ``GroupKFold`` over problem ids,
    so no problem is scored by a model that saw its labels. On data it was not fitted on, the
    model trained on all labelled problems is used.

    Args:
        verifiers: score columns (default: all).
        majority_verifier: add the majority-vote indicator as a feature.
        n_splits: folds (at most the number of problems; fewer than 2 problems cannot be scored).
        C: inverse L2 strength.
        class_weight: passed to ``LogisticRegression``.

    Attributes:
        out_of_fold_: ``{candidate key: P(correct)}`` for the fitted candidates.
        model_: the pipeline trained on every fitted problem.
    """

    uses_labels = True

    def __init__(self, verifiers: list[str] | None = None, majority_verifier: bool = True, n_splits: int = 5,
                 C: float = 1.0, class_weight: str | None = "balanced") -> None:
        self.verifiers, self.majority_verifier, self.n_splits = verifiers, majority_verifier, n_splits
        self.C, self.class_weight = C, class_weight

    def _pipeline(self):
        from sklearn.impute import SimpleImputer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        return make_pipeline(SimpleImputer(add_indicator=True, keep_empty_features=True), StandardScaler(),
                             LogisticRegression(C=self.C, class_weight=self.class_weight, max_iter=1000))

    def _fit_predict(self, X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray) -> np.ndarray:
        if np.unique(y_train).size < 2:  # one class only: every candidate gets its rate (a tie)
            return np.full(X_test.shape[0], float(y_train.mean()) if y_train.size else 0.5)
        model = self._pipeline().fit(X_train, y_train)
        return per_distinct_row(lambda rows: model.predict_proba(rows)[:, 1], X_test)

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "Supervised":
        from sklearn.model_selection import GroupKFold

        super().fit(data, labels)
        if self.n_splits < 2:
            raise ValueError(f"n_splits must be >= 2, got {self.n_splits}")
        X, _ = feature_matrix(data, self.verifiers, self.majority_verifier)
        y = np.asarray(labels, dtype=np.int64)
        problem_ids = data.problem_id.astype(str)
        oof = np.full(data.n_candidates, np.nan)
        splits = min(self.n_splits, data.n_problems)
        if splits >= 2:
            # group labels are problem ids, so the folds do not depend on row order
            for train, test in GroupKFold(n_splits=splits).split(X, y, groups=problem_ids):
                oof[test] = self._fit_predict(X[train], y[train], X[test])
        self.out_of_fold_ = dict(zip(_keys(data), oof.tolist()))
        self.model_ = self._pipeline().fit(X, y) if np.unique(y).size == 2 else None
        self.base_rate_ = float(y.mean()) if y.size else 0.5
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        X, _ = feature_matrix(data, self.verifiers, self.majority_verifier)
        keys = _keys(data)
        seen = np.array([k in self.out_of_fold_ for k in keys], dtype=bool)
        scores = np.empty(data.n_candidates)
        scores[seen] = [self.out_of_fold_[k] for k, s in zip(keys, seen) if s]
        if (~seen).any():
            scores[~seen] = (per_distinct_row(lambda rows: self.model_.predict_proba(rows)[:, 1], X[~seen])
                             if self.model_ is not None else self.base_rate_)
        return scores


def _keys(data: SelectionData) -> Sequence[str]:
    return [f"{p}\x1f{g}\x1f{s}" for p, g, s in zip(data.problem_id, data.generator_id, data.sample_index)]
