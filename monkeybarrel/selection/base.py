"""The Selector protocol (scikit-learn style) and registry.

A selector scores every candidate (``decision_function``; higher is better, NaN = never pick) and
picks the best candidate per problem (``select``), breaking ties by the data's ``tiebreak`` rank
(smallest (generator_id, sample_index) wins). ``__init__`` only stores hyper-parameters; ``fit``
learns state in attributes ending in ``_``. Label-free selectors get only ``SelectionData``;
selectors with ``uses_labels = True`` also receive ``labels`` in ``fit`` and are reported as
label-based.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from ..core.groups import group_argmax
from ..core.registry import Registry
from ..core.selection_data import SelectionData

SELECTORS: Registry["Selector"] = Registry("selector", package="monkeybarrel.selection")


class Selector(ABC):
    """Base class of every selection method."""

    uses_labels: ClassVar[bool] = False
    """True for supervised or oracle methods: ``fit`` then receives ground-truth labels."""

    def get_params(self) -> dict[str, Any]:
        """Hyper-parameters, read from the ``__init__`` signature (scikit-learn convention)."""
        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {name: getattr(self, name) for name in names}

    def set_params(self, **params: Any) -> "Selector":
        for name, value in params.items():
            if name not in self.get_params():
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}")
            setattr(self, name, value)
        return self

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "Selector":
        """Learn from the data (label-free unless ``uses_labels``); returns self."""
        if labels is not None and not self.uses_labels:
            raise TypeError(f"{type(self).__name__} is label-free and must not be given labels")
        if labels is None and self.uses_labels:
            raise TypeError(f"{type(self).__name__} needs labels: fit(data, labels)")
        if labels is not None and np.shape(labels) != (data.n_candidates,):
            raise ValueError(f"labels must be [{data.n_candidates}] (one per candidate), got shape {np.shape(labels)}")
        return self

    @abstractmethod
    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` float score per candidate; higher is better, NaN is never selected."""

    def select(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` row index of the chosen candidate per problem (-1 when none can be chosen)."""
        return group_argmax(self.decision_function(data), data.groups, data.n_problems, data.tiebreak)

    def fit_select(self, data: SelectionData, labels: np.ndarray | None = None) -> np.ndarray:
        return self.fit(data, labels).select(data)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"
