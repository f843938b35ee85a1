"""The Verifier protocol and registry.

A verifier scores all candidates of one problem at once and returns one float per candidate
(higher = more likely correct). Failures never propagate: ``score_safely`` turns an exception
into NaN scores with the reason recorded. Verifiers see the problem without its reference
answer unless they declare ``uses_reference = True``; such verifiers produce ground-truth labels
(e.g. hidden unit tests), which are kept out of label-free selection.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import ClassVar, Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..core.registry import Registry

VERIFIERS: Registry["Verifier"] = Registry("verifier", package="monkeybarrel.verifiers")


class Verifier(ABC):
    """Scores candidates of a problem.

    Args:
        name: the score column's name (from the config).
    """

    uses_reference: ClassVar[bool] = False
    """True when the verifier needs the reference answer or hidden tests (its output is a label)."""

    scores_whole_problem: ClassVar[bool] = False
    """True when a candidate's score depends on the problem's other candidates (e.g. answer frequency):
    when a problem gets new candidates, the verify stage re-scores all of them, and the new scores
    supersede the old ones in the store."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        """``[len(candidates)]`` float scores (NaN allowed for a candidate it cannot judge)."""

    def score_detailed(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        """Scores plus a per-candidate reason for each NaN (None when scored or no reason is known).

        Override it instead of ``score`` to record why single candidates could not be scored.
        """
        return self.score(problem, candidates), [None] * len(candidates)

    def visible_problem(self, problem: Problem) -> Problem:
        """The problem as this verifier may see it (reference removed unless ``uses_reference``)."""
        return problem if self.uses_reference else replace(problem, reference_answer=None)

    def score_safely(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        """Scores plus a per-candidate error (None when scored); never raises."""
        try:
            scores, reasons = self.score_detailed(self.visible_problem(problem), candidates)
            scores = np.asarray(scores, dtype=np.float64)
            if scores.shape != (len(candidates),) or len(reasons) != len(candidates):
                raise ValueError(f"returned shape {scores.shape}, expected ({len(candidates)},)")
        except Exception as exc:
            message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            return np.full(len(candidates), np.nan), [message] * len(candidates)
        errors = [None if np.isfinite(s) else (reason or "no score") for s, reason in zip(scores, reasons)]
        return scores, errors

    def close(self) -> None:
        """Release resources (models, servers)."""
