"""The Selector protocol (scikit-learn style) and registry.

A selector scores every candidate (``decision_function``; higher is better, NaN = never pick) and
picks the best candidate per problem (``select``), breaking ties by the data's ``tiebreak`` rank
(smallest (generator_id, sample_index) wins). ``__init__`` only stores hyper-parameters; ``fit``
learns state in attributes ending in ``_``. Label-free selectors get only ``SelectionData``;
selectors with ``uses_labels = True`` also receive ``labels`` in ``fit`` and are reported as
label-based.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ..core.groups import group_argmax
from ..core.selection_data import SELECTORS, SelectionData

__all__ = ["SELECTORS", "Selector"]


class Selector(BaseEstimator, ABC):
    """Base class of every selection method: a scikit-learn estimator (``get_params(deep=True)``,
    nested ``set_params``, ``sklearn.clone``) over ``SelectionData``.

    ``decision_function`` and ``select`` raise sklearn's ``NotFittedError`` before ``fit``.
    """

    uses_labels: ClassVar[bool] = False
    """True for supervised or oracle methods: ``fit`` then receives ground-truth labels."""

    requires_fit: ClassVar[bool] = True
    """False for stateless selectors (scores from the data alone): they may select without ``fit``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("decision_function", "select"):  # both need a fitted selector
            if name in cls.__dict__:
                setattr(cls, name, _requires_fit(cls.__dict__[name]))

    def __sklearn_is_fitted__(self) -> bool:
        return getattr(self, "_fitted", False) or not self.requires_fit

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = self.requires_fit
        return tags

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "Selector":
        """Learn from the data (label-free unless ``uses_labels``); returns self."""
        if labels is not None and not self.uses_labels:
            raise TypeError(f"{type(self).__name__} is label-free and must not be given labels")
        if labels is None and self.uses_labels:
            raise TypeError(f"{type(self).__name__} needs labels: fit(data, labels)")
        if labels is not None and np.shape(labels) != (data.n_candidates,):
            raise ValueError(f"labels must be [{data.n_candidates}] (one per candidate), got shape {np.shape(labels)}")
        self._fitted = True
        return self

    def notes(self) -> list[str]:
        """Plain-word remarks on the fit for the report (drops, fallbacks, warnings); none by default."""
        return []

    @abstractmethod
    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` float score per candidate; higher is better, NaN is never selected."""

    def select(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` row index of the chosen candidate per problem (-1 when none can be chosen)."""
        return group_argmax(self.decision_function(data), data.groups, data.n_problems, data.tiebreak)

    def fit_select(self, data: SelectionData, labels: np.ndarray | None = None) -> np.ndarray:
        return self.fit(data, labels).select(data)


def _requires_fit(method: Callable) -> Callable:
    @functools.wraps(method)
    def checked(self: Selector, *args: Any, **kwargs: Any) -> Any:
        check_is_fitted(self)
        return method(self, *args, **kwargs)

    return checked
