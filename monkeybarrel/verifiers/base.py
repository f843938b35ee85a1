"""The Verifier protocol and registry.

A verifier scores all candidates of one problem at once and returns one float per candidate
(higher = more likely correct). Failures never propagate: ``score_safely`` turns an exception
into NaN scores with the reason recorded. A NaN is either an abstention (the verifier cannot judge the
candidate, for good: no text, no Yes/No among a judge's top tokens) or a failure (an exception, a
request or server that failed, marked ``VerifierFailure``), which the verify stage tries again on
the next run (``store.score_attempts`` times in all). Verifiers see the problem without its reference
answer unless they declare ``uses_reference = True``; such verifiers produce ground-truth labels
(e.g. hidden unit tests), which are kept out of label-free selection.

A verifier may read what verifiers configured before it produced (``reads``: their scores and
per-problem records, handed over by the verify stage through ``provide``), and may keep a
JSON-serialisable record per problem (``keep_record``: generated tests, vote matrices,
transcripts), which the verify stage stores under ``artifacts/<verifier>/<problem_id>.json``.
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


class VerifierFailure(str):
    """A reason for a NaN that says the verifier failed on the candidate (an exception, a request or a
    server that failed), not that it cannot judge it: the verify stage tries the candidate again on the
    next run. Return it from ``score_detailed`` for per-candidate failures; ``score_safely`` marks an
    exception's message with it for the whole batch."""


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

    @property
    def reads(self) -> tuple[str, ...]:
        """Names of earlier verifiers whose scores and records this one reads (none by default)."""
        return ()

    def provide(self, problem_id: str, verifier: str, scores: np.ndarray, record: dict | None) -> None:
        """Hand over an earlier verifier's ``[len(candidates)]`` scores and its record for ``problem_id``."""
        self.__dict__.setdefault("_inputs", {}).setdefault(problem_id, {})[verifier] = (np.asarray(scores, dtype=np.float64), record)

    def provided(self, problem_id: str, verifier: str) -> tuple[np.ndarray, dict | None]:
        """What ``provide`` handed over; KeyError naming the verifier when nothing was."""
        try:
            return self.__dict__["_inputs"][problem_id][verifier]
        except KeyError:
            raise KeyError(f"{self.name}: no scores of verifier {verifier!r} were provided for {problem_id!r}") from None

    def keep_record(self, problem_id: str, record: dict) -> None:
        """Keep a JSON-serialisable record of how ``problem_id`` was scored (stored by the verify stage)."""
        self.__dict__.setdefault("_records", {})[problem_id] = record

    def pop_record(self, problem_id: str) -> dict | None:
        """The record kept for ``problem_id`` (and the inputs provided for it are dropped), or None."""
        self.__dict__.get("_inputs", {}).pop(problem_id, None)
        return self.__dict__.get("_records", {}).pop(problem_id, None)

    @abstractmethod
    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        """``[len(candidates)]`` float scores (NaN allowed for a candidate it cannot judge)."""

    def score_detailed(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        """Scores plus a per-candidate reason for each NaN (None when scored or no reason is known).

        Override it instead of ``score`` to record why single candidates could not be scored; a reason
        that is a ``VerifierFailure`` (a failed request) has the candidate scored again on the next run.
        """
        return self.score(problem, candidates), [None] * len(candidates)

    def visible_problem(self, problem: Problem) -> Problem:
        """The problem as this verifier may see it (reference removed unless ``uses_reference``)."""
        return problem if self.uses_reference else replace(problem, reference_answer=None)

    def score_safely(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        """Scores plus a per-candidate error (None when scored; a ``VerifierFailure`` when it failed); never raises."""
        try:
            scores, reasons = self.score_detailed(self.visible_problem(problem), candidates)
            scores = np.asarray(scores, dtype=np.float64)
            if scores.shape != (len(candidates),) or len(reasons) != len(candidates):
                raise ValueError(f"returned shape {scores.shape}, expected ({len(candidates)},)")
        except Exception as exc:
            message = VerifierFailure("".join(traceback.format_exception_only(type(exc), exc)).strip())
            return np.full(len(candidates), np.nan), [message] * len(candidates)
        errors = [None if np.isfinite(s) else (reason or "no score") for s, reason in zip(scores, reasons)]
        return scores, errors

    def close(self) -> None:
        """Release resources (models, servers)."""
