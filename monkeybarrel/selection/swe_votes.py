"""Test-vote selection for SWE-bench patches: most generated tests passed, then the shortest patch."""

from __future__ import annotations

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


def length_tiebreak(votes: np.ndarray, texts: np.ndarray | None) -> np.ndarray:
    """``votes`` (integers, NaN = never) minus a fraction < 1 growing with patch length.

    The order is (-votes, length): integer vote counts stay ahead of any length difference.
    """
    votes = np.asarray(votes, dtype=np.float64)
    if texts is None:
        return votes
    lengths = np.array([len(t) if isinstance(t, str) else 0 for t in texts], dtype=np.float64)
    return votes - 0.5 * lengths / (lengths.max(initial=0.0) + 1.0)


@SELECTORS.register("swe_votes")
class SWEVotes(Selector):
    """Picks the patch with the most generated-test votes; ties go to the shorter patch.

    Args:
        column: the verifier column holding the votes (e.g. a ``swe_test_votes`` verifier's name).
    """

    requires_fit = False

    def __init__(self, column: str = "test_votes") -> None:
        self.column = column

    def decision_function(self, data: SelectionData) -> np.ndarray:
        if self.column not in data.verifiers:
            raise ValueError(f"swe_votes: no verifier column {self.column!r}; have {list(data.verifiers)}")
        return length_tiebreak(data.verifier_scores(self.column), data.texts)
