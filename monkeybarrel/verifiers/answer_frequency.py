"""Answer frequency: the share of a problem's candidates whose final answer is equivalent.

This is the soft form of majority voting, as a verifier column that other selectors can weigh.
It needs all candidates of a problem in one call (the verify stage passes them together); when
a problem later gets more samples, the verify stage re-scores all of its candidates.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..kits.math_answers import answer_key
from .base import VERIFIERS, Verifier


@VERIFIERS.register("answer_frequency")
class AnswerFrequency(Verifier):
    """Scores each candidate with count(equivalent answers) / number of candidates of the problem.

    Candidates without an extractable final answer (or truncated / failed ones, when
    ``finished_only``) score 0 and count in the denominator; so do empty candidates.

    Args:
        name: score column name.
        finished_only: only candidates that ended normally (``finish_reason == "stop"``) have an
            answer, as in the label stage.
        answer_fn: ``text -> canonical answer or None``; default
            ``monkeybarrel.kits.math_answers.answer_key`` (math-verify equivalence).
    """

    scores_whole_problem = True

    def __init__(self, name: str, finished_only: bool = True,
                 answer_fn: Callable[[str | None], str | None] | None = None) -> None:
        super().__init__(name)
        self.finished_only = finished_only
        self.answer_fn = answer_fn or answer_key

    def answers(self, candidates: Sequence[Candidate]) -> list[str | None]:
        """Canonical answer per candidate (None when it has none)."""
        return [self.answer_fn(c.text) if c.text and (c.finish_reason == "stop" or not self.finished_only)
                and c.finish_reason != "error" else None for c in candidates]

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        answers = self.answers(candidates)
        counts = Counter(a for a in answers if a is not None)
        return np.array([counts[a] / len(candidates) if a is not None else 0.0 for a in answers], dtype=np.float64)
