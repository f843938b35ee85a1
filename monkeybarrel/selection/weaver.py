"""Weaver (Saad-Falcon et al., 2025): weak-supervision ensembling of many weak verifiers, as a selector.

``WeaverSelector`` fits ``WeaverModel`` (``selection/weaver_model/``: discretise, screen, answers and
strata, label model, orientation, scoring; the order is in docs/weaver.md) on the score matrix of a
whole dataset without labels, and picks per problem the candidate whose answer has the highest posterior
P(correct). A few labels (``dev_fraction`` of the problems) fix those items' labels in EM, set the class
prior, orient the model and can choose a binary threshold.

Shapes: ``SelectionData`` of n candidates; ``X [n, m]`` the verifier columns given to the model.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.base import clone

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector
from .weaver_model.discretise import NORMALIZATIONS, ScoreNormalizer, bin_indicators  # noqa: F401 (public names)
from .weaver_model.em import sigmoid
from .weaver_model.estimator import SKLEARN_INAPPLICABLE_CHECKS, WeaverModel  # noqa: F401 (public names)
from .weaver_model.fitting import fit_latent_class  # noqa: F401 (public name)
from .weaver_model.notes import describe_fit


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
    """Weaver selection: argmax per problem of the label model's P(correct | verifier scores).

    Label-free unless ``dev_fraction > 0``: then the labels of a seeded random share of the
    problems are fixed in EM, set the class prior, orient the label model and (with
    ``model__threshold: search``) choose the threshold, and the method is reported as label-based.

    Args:
        verifiers: score columns to use (default: all).
        majority_verifier: use the majority evidence: with ``aggregate="answer"`` each answer's share
            of its problem's samples (a share cell, fitted with the verifiers); with
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
                                            answer_share=self.majority_verifier, verifier_names=self.feature_names_)
        return self

    def heldout_problems(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` bool: problems the model was not fitted on (none when ``train_fraction`` = 1)."""
        self._check_fitted()
        fitted = np.zeros(data.n_problems, dtype=bool)
        fitted[data.groups[self.train_rows_]] = True
        return ~fitted

    def notes(self) -> list[str]:
        """What the fit did that a reader of the report should know, in plain words."""
        self._check_fitted()
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
        return sigmoid(self.decision_function(data))

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
