"""``check_verifier``: a conformance suite every verifier should pass.

* ``shape``: ``score_safely`` returns one float and one error slot per candidate, never raises,
  and every NaN carries a reason; odd candidates (empty, failed, truncated) do not crash it;
* ``one_candidate``: a problem with a single candidate is scored;
* ``reference``: a label-free verifier (``uses_reference = False``) scores the same whatever the
  reference answer is;
* ``deterministic``: scoring twice gives the same scores;
* ``permutation``: shuffling the candidates shuffles the scores the same way (up to ``atol``).

Usage::

    from monkeybarrel.verifiers.checks import check_verifier
    check_verifier(MyVerifier("mine"))           # raises AssertionError naming the failed check
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import numpy as np

from ..core.records import Candidate, Problem
from .base import Verifier

CHECKS = ("shape", "one_candidate", "reference", "deterministic", "permutation")

PROBLEM = Problem("check-0", "gsm8k", prompt="Tom has 3 apples and buys 4 more. How many apples does he have?\n\n"
                  "Solve the problem. End your reply with: The answer is <number>.", reference_answer="7")

TEXTS = (
    "He has 3 + 4 = 7 apples. The answer is 7.",
    "3 apples plus 4 apples is 12 apples. The answer is 12.",
    "Tom buys more apples. 3 + 4 = 7. So Tom has 7 apples now. The answer is 7.",
    "apples apples apples apples apples apples apples apples apples apples apples apples",
    "The answer is \\frac{14}{2}.",
)


def candidates(texts: Iterable[str | None] = TEXTS, problem: Problem = PROBLEM) -> list[Candidate]:
    """Candidates of ``problem`` with the given texts (sample indices 0, 1, ...)."""
    return [Candidate(problem.problem_id, "gen", i, text, completion_tokens=len((text or "").split()))
            for i, text in enumerate(texts)]


def odd_candidates() -> list[Candidate]:
    """An empty text, a failed sample (no text), a truncated one, and a normal one."""
    base = candidates(["", None, "3 + 4 = 7 and then", TEXTS[0]])
    return [base[0], replace(base[1], finish_reason="error", error="backend died"),
            replace(base[2], finish_reason="length"), base[3]]


def check_shape(verifier: Verifier) -> None:
    for batch in (candidates(), odd_candidates()):
        scores, errors = verifier.score_safely(PROBLEM, batch)
        assert isinstance(scores, np.ndarray) and scores.shape == (len(batch),), f"scores shape {np.shape(scores)}"
        assert len(errors) == len(batch), "one error slot per candidate"
        for score, error in zip(scores, errors):
            assert (error is None) == bool(np.isfinite(score)), "a NaN needs a reason and a score none"
    scores, _ = verifier.score_safely(PROBLEM, candidates())
    assert np.isfinite(scores).all(), "ordinary candidates must be scored"


def check_one_candidate(verifier: Verifier) -> None:
    scores, errors = verifier.score_safely(PROBLEM, candidates(TEXTS[:1]))
    assert scores.shape == (1,) and np.isfinite(scores[0]), f"a lone candidate was not scored: {errors[0]}"


def check_reference(verifier: Verifier) -> None:
    if verifier.uses_reference:
        return
    batch = candidates()
    first, _ = verifier.score_safely(PROBLEM, batch)
    other, _ = verifier.score_safely(replace(PROBLEM, reference_answer="12"), batch)
    assert np.allclose(first, other, equal_nan=True), "a label-free verifier's scores depend on the reference answer"


def check_deterministic(verifier: Verifier, atol: float = 1e-6) -> None:
    batch = candidates()
    first, _ = verifier.score_safely(PROBLEM, batch)
    second, _ = verifier.score_safely(PROBLEM, batch)
    assert np.allclose(first, second, atol=atol, equal_nan=True), "scoring twice gave different scores"


def check_permutation(verifier: Verifier, atol: float = 1e-4) -> None:
    batch = candidates()
    order = [3, 0, 4, 2, 1]
    straight, _ = verifier.score_safely(PROBLEM, batch)
    shuffled, _ = verifier.score_safely(PROBLEM, [batch[i] for i in order])
    assert np.allclose(shuffled, straight[order], atol=atol, equal_nan=True), \
        "shuffling the candidates changed their scores"


_FUNCTIONS = {"shape": check_shape, "one_candidate": check_one_candidate, "reference": check_reference,
              "deterministic": check_deterministic, "permutation": check_permutation}


def check_verifier(verifier: Verifier, skip: Iterable[str] = ()) -> None:
    """Run every check on ``verifier``; raise AssertionError naming the first failure.

    Args:
        verifier: a built verifier (checks call ``score_safely`` on a small math problem).
        skip: names from ``CHECKS`` to leave out.
    """
    skip = set(skip)
    unknown = skip - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; expected some of {CHECKS}")
    for name in CHECKS:
        if name not in skip:
            try:
                _FUNCTIONS[name](verifier)
            except AssertionError as exc:
                raise AssertionError(f"{type(verifier).__name__} fails check '{name}': {exc}") from None
