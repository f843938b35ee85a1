"""Majority vote over equivalent final answers."""

from __future__ import annotations

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


@SELECTORS.register("majority")
class MajorityVote(Selector):
    """Pick a candidate carrying the most frequent final answer of its problem.

    A candidate's score is the number of candidates of the same problem with an equivalent
    answer; candidates without an answer abstain (NaN). Ties between answers go to the candidate
    with the smallest (generator_id, sample_index), as for every selector.
    """

    requires_fit = False

    def __init__(self) -> None:
        pass

    def decision_function(self, data: SelectionData) -> np.ndarray:
        answers = data.answers
        counts = np.bincount(answers[answers >= 0], minlength=int(answers.max(initial=-1)) + 1)
        scores = np.full(data.n_candidates, np.nan)
        has_answer = answers >= 0
        scores[has_answer] = counts[answers[has_answer]]
        return scores
