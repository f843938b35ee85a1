"""Cheap label-free heuristics: final answer present, length, repetition.

Each is a weak verifier of its own column; selectors such as Weaver decide how much they are worth.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..kits.math_answers import answer_key
from .base import VERIFIERS, Verifier

_WORD = re.compile(r"\S+")


@VERIFIERS.register("has_answer")
class HasAnswer(Verifier):
    """1.0 when the candidate finished normally and has a parseable final answer, else 0.0.

    Args:
        name: score column name.
        finished_only: a truncated (``length``) candidate counts as having no answer.
    """

    def __init__(self, name: str, finished_only: bool = True) -> None:
        super().__init__(name)
        self.finished_only = finished_only

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([float(bool(c.text) and c.finish_reason != "error"
                               and (c.finish_reason == "stop" or not self.finished_only)
                               and answer_key(c.text) is not None) for c in candidates])


@VERIFIERS.register("length")
class Length(Verifier):
    """The completion's length, signed so that the preferred direction scores higher.

    Args:
        name: score column name.
        prefer: ``shorter`` (score = -length) or ``longer`` (score = +length).
        unit: ``tokens`` (the sampler's ``completion_tokens``, falling back to words when 0) or ``words``.
    """

    def __init__(self, name: str, prefer: str = "shorter", unit: str = "tokens") -> None:
        super().__init__(name)
        if prefer not in ("shorter", "longer"):
            raise ValueError(f"prefer must be 'shorter' or 'longer', got {prefer!r}")
        if unit not in ("tokens", "words"):
            raise ValueError(f"unit must be 'tokens' or 'words', got {unit!r}")
        self.prefer, self.unit = prefer, unit

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        sign = -1.0 if self.prefer == "shorter" else 1.0
        return np.array([sign * self._length(c) if c.text is not None and c.finish_reason != "error" else np.nan
                         for c in candidates])

    def _length(self, candidate: Candidate) -> float:
        if self.unit == "tokens" and candidate.completion_tokens > 0:
            return float(candidate.completion_tokens)
        return float(len(_WORD.findall(candidate.text or "")))


@VERIFIERS.register("repetition")
class Repetition(Verifier):
    """Share of distinct word n-grams among all n-grams: 1.0 = no repeated n-gram, near 0 = a loop.

    Texts shorter than ``n`` words score 1.0 (nothing repeats).

    Args:
        name: score column name.
        n: n-gram length in words.
    """

    def __init__(self, name: str, n: int = 4) -> None:
        super().__init__(name)
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        self.n = n

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        return np.array([self._distinct_share(c.text) if c.text is not None and c.finish_reason != "error" else np.nan
                         for c in candidates])

    def _distinct_share(self, text: str) -> float:
        words = _WORD.findall(text.lower())
        grams = [tuple(words[i:i + self.n]) for i in range(len(words) - self.n + 1)]
        return len(set(grams)) / len(grams) if grams else 1.0
