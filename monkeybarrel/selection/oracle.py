"""Oracle selection: a correct candidate whenever one exists (selection accuracy = coverage)."""

from __future__ import annotations

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


@SELECTORS.register("oracle")
class Oracle(Selector):
    """Chooses a correct candidate when the problem has one: the upper bound of any selector."""

    uses_labels = True

    def __init__(self) -> None:
        pass

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "Oracle":
        super().fit(data, labels)
        self.labels_ = np.asarray(labels, dtype=np.float64)
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        if self.labels_.shape[0] != data.n_candidates:
            raise ValueError(f"{type(self).__name__} must be fitted on the data it selects from")
        return self.labels_
