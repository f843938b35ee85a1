"""Selection by test votes (CodeMonkeys): arithmetic on a stored votes column.

Votes are a verifier column that counts, or gives the share of, the generated tests a candidate
passes (``generated_tests`` for code, ``swe_test_votes`` for SWE-bench patches). Per problem the
candidates are ranked by ``core.groups.rank_by_votes`` (most votes, shortest text, then the usual tie
rule). The model-choice ablation (a model picks among the top few) runs a model, so it is the verifier
``model_choice``; ``best_single`` reads its column.
"""

from __future__ import annotations

import numpy as np

from ..core.groups import rank_by_votes
from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


@SELECTORS.register("test_voting")
class TestVoting(Selector):
    """Most test votes wins; ties go to the shortest text, then the usual tie rule.

    Candidates without votes rank last, yet stay selectable: a problem where none has votes goes to
    its shortest candidate, as in CodeMonkeys where every candidate then ties at zero votes.

    Args:
        verifier: the score column holding each candidate's test votes (required).
    """

    __test__ = False  # not a pytest test class despite the name
    requires_fit = False

    def __init__(self, verifier: str | None = None) -> None:
        self.verifier = verifier

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "TestVoting":
        super().fit(data, labels)
        self._check(data)
        return self

    def _check(self, data: SelectionData) -> None:
        if self.verifier is None:
            raise ValueError("test_voting needs the option `verifier`: the score column with the test votes")
        if self.verifier not in data.verifiers:
            raise ValueError(f"test_voting: verifier {self.verifier!r} is not among the scores {list(data.verifiers)}")

    def ranking(self, data: SelectionData) -> list[np.ndarray]:
        """Per problem, its candidate rows best first (``core.groups.rank_by_votes``); NaN votes last."""
        self._check(data)
        return rank_by_votes(data.verifier_scores(self.verifier), text_lengths(data), data.groups, data.n_problems,
                             data.tiebreak)

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` minus the candidate's place in its problem's ranking (0 = best; NaN votes rank last)."""
        return -rank_places(self.ranking(data), data.n_candidates)


@SELECTORS.register("swe_votes")
class SWEVotes(Selector):
    """Test voting for SWE-bench patches: most generated-test votes, then the shorter patch.

    Unlike ``test_voting``, a patch without votes (malformed, trivial or unappliable: NaN) is never
    picked; a problem where no patch has votes abstains.

    Args:
        column: the verifier column holding the votes (e.g. a ``swe_test_votes`` verifier's name).
    """

    requires_fit = False

    def __init__(self, column: str = "test_votes") -> None:
        self.column = column

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` minus the candidate's place in its problem's vote ranking (0 = best); NaN without votes."""
        if self.column not in data.verifiers:
            raise ValueError(f"swe_votes: no verifier column {self.column!r}; have {list(data.verifiers)}")
        votes = data.verifier_scores(self.column).astype(np.float64)
        ranking = rank_by_votes(votes, text_lengths(data), data.groups, data.n_problems, data.tiebreak)
        return np.where(np.isnan(votes), np.nan, -rank_places(ranking, data.n_candidates))


def text_lengths(data: SelectionData) -> np.ndarray:
    """``[n]`` characters of each candidate's text (missing texts: longest possible; no texts: zeros)."""
    if data.texts is None:
        return np.zeros(data.n_candidates, np.int64)
    return np.array([len(t) if isinstance(t, str) else np.iinfo(np.int64).max for t in data.texts], dtype=np.int64)


def rank_places(ranking: list[np.ndarray], n: int) -> np.ndarray:
    """``[n]`` float place of each row in its group's ranking (0 = best)."""
    place = np.zeros(n, dtype=np.float64)
    for rows in ranking:
        place[rows] = np.arange(rows.size)
    return place
