"""Replay allocation policies on recorded per-sample outcomes.

Each (generator, problem) cell holds its recorded samples; a replay shuffles them (one random
order per repetition) and lets a policy draw them without replacement, round by round, under a
budget. What the policy sees is what a live run would see after each round: samples drawn,
checker passes, answer votes. The result is the coverage (and, with answers, majority-vote
accuracy) each policy reaches at equal compute.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from .policies import AllocationPolicy
from .state import AllocationState


@dataclass(frozen=True)
class RecordedOutcomes:
    """Recorded samples of G generators on P problems, padded to N per cell.

    Attributes:
        correct: ``[G, P, N]`` bool ground truth per sample (the checker of checker policies).
        available: ``[G, P]`` int samples recorded per cell (entries past it are padding).
        answers: optional ``[G, P, N]`` int answer codes within the cell, -1 = no answer.
        generators: G names.
    """

    correct: np.ndarray
    available: np.ndarray
    answers: np.ndarray | None = None
    generators: tuple[str, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.correct.shape  # type: ignore[return-value]

    def covered(self) -> np.ndarray:
        """``[G]`` share of problems with a correct sample among everything recorded."""
        return self.correct.any(axis=2).mean(axis=1)


@dataclass(frozen=True)
class ReplayResult:
    """Averages over the replay's random orders.

    Attributes:
        samples: ``[G]`` mean samples drawn per generator.
        coverage: ``[G]`` mean share of problems with a correct drawn sample.
        majority: ``[G]`` mean majority-vote accuracy of the drawn samples (NaN without answers).
        drawn: ``[R, G, P]`` samples drawn per cell in each order.
        coverage_per_order: ``[R, G]`` share of problems covered in each order (its spread over orders
            gives the Monte Carlo error of ``coverage``).
    """

    samples: np.ndarray
    coverage: np.ndarray
    majority: np.ndarray
    drawn: np.ndarray
    coverage_per_order: np.ndarray


def replay(policy: AllocationPolicy, outcomes: RecordedOutcomes, budget: int | np.ndarray | None = None,
           orders: int = 8, seed: int = 0, max_rounds: int = 10_000, pooled: bool = True) -> ReplayResult:
    """Run ``policy`` on ``orders`` random orders of the recorded samples.

    Each order starts from a fresh copy of ``policy``: a warm start carried over from the previous
    order (``difficulty``'s fitted prior) would leak what that order drew from the same samples.

    Args:
        policy: the policy (copied, never changed).
        outcomes: the recorded samples.
        budget: samples per generator (int or ``[G]``); None = everything recorded.
        orders: random sample orders to average over.
        seed: seed of the orders.
        pooled: False replays each generator on its own (a fresh policy that sees only that
            generator's draws, in the same random orders): G separate experiments instead of one
            experiment with G generators.

    Returns:
        The averaged ``ReplayResult``.
    """
    G, P, N = outcomes.shape
    budget_g = np.broadcast_to(np.asarray(outcomes.available.sum(axis=1) if budget is None else budget,
                                          dtype=np.int64), (G,))
    rng = np.random.default_rng(seed)
    samples, coverage, majority, drawn_all = [], [], [], []
    for _ in range(orders):
        correct, answers = _shuffle(outcomes, rng)
        if pooled:
            drawn = draw(copy.deepcopy(policy), correct, answers, outcomes.available, budget_g, max_rounds)
        else:
            drawn = np.concatenate([
                draw(copy.deepcopy(policy), correct[g:g + 1], None if answers is None else answers[g:g + 1],
                     outcomes.available[g:g + 1], budget_g[g:g + 1], max_rounds) for g in range(G)])
        passed = _prefix_count(np.cumsum(correct, axis=2, dtype=np.int32), drawn)
        samples.append(drawn.sum(axis=1))
        coverage.append((passed > 0).mean(axis=1))
        majority.append(majority_correct(correct, answers, drawn).mean(axis=1) if answers is not None
                        else np.full(G, np.nan))
        drawn_all.append(drawn)
    return ReplayResult(np.mean(samples, axis=0), np.mean(coverage, axis=0), np.mean(majority, axis=0),
                        np.stack(drawn_all), np.stack(coverage))


def _shuffle(outcomes: RecordedOutcomes, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
    """One random order of each cell's recorded samples (padding stays at the end)."""
    G, P, N = outcomes.shape
    keys = rng.random((G, P, N))
    keys[np.arange(N)[None, None, :] >= outcomes.available[:, :, None]] = 2.0
    order = keys.argsort(axis=2)
    correct = np.take_along_axis(outcomes.correct, order, axis=2)
    answers = None if outcomes.answers is None else np.take_along_axis(outcomes.answers, order, axis=2)
    return correct, answers


def _prefix_count(cumulative: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``[G, P]`` value of ``cumulative[..., drawn - 1]`` (0 where nothing is drawn)."""
    at = np.take_along_axis(cumulative, np.maximum(drawn - 1, 0)[..., None], axis=2)[..., 0]
    return np.where(drawn > 0, at, 0)


def draw(policy: AllocationPolicy, correct: np.ndarray, answers: np.ndarray | None, available: np.ndarray,
         budget: np.ndarray, max_rounds: int = 10_000) -> np.ndarray:
    """``[G, P]`` samples drawn per cell when ``policy`` runs to the end on samples in the given order.

    Args:
        correct: ``[G, P, N]`` bool, in drawing order.
        answers: ``[G, P, N]`` int answer codes in drawing order, or None.
        available: ``[G, P]`` samples per cell.
        budget: ``[G]`` samples per generator.
    """
    G, P, N = correct.shape
    cumulative = np.cumsum(correct, axis=2, dtype=np.int32)
    first_pass = np.where(correct.any(axis=2), correct.argmax(axis=2) + 1, N + 1)
    onehot = None
    if policy.needs_answers:
        if answers is None:
            raise ValueError(f"{type(policy).__name__} needs recorded answers; these outcomes have none")
        width = int(answers.max(initial=-1)) + 1
        onehot = np.cumsum(answers[..., None] == np.arange(width), axis=2, dtype=np.int32)  # [G, P, N, U]
    drawn = np.zeros((G, P), dtype=np.int64)
    for _ in range(max_rounds):
        state = AllocationState(
            drawn=drawn, cap=available, budget_left=budget - drawn.sum(axis=1),
            passed=_prefix_count(cumulative, drawn),
            top_votes=None if onehot is None else _top_votes(onehot, drawn))
        grants = np.minimum(policy.grant(state), state.room)
        if grants.sum() == 0:
            break
        new = drawn + grants
        if policy.stops_when_solved:  # a streaming sampler stops a cell at its first pass
            new = np.where(first_pass > drawn, np.minimum(new, first_pass), drawn)
        drawn = new
    return drawn


def _top_votes(onehot: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``[G, P, 2]`` two largest answer counts among the drawn samples."""
    if onehot.shape[-1] == 0:
        return np.zeros((*drawn.shape, 2), dtype=np.int64)
    counts = np.take_along_axis(onehot, np.maximum(drawn - 1, 0)[..., None, None], axis=2)[:, :, 0, :]
    counts = np.where(drawn[..., None] > 0, counts, 0)
    if counts.shape[-1] == 1:
        return np.concatenate([counts, np.zeros_like(counts)], axis=-1)
    return -np.sort(-counts, axis=-1)[..., :2]


def majority_correct(correct: np.ndarray, answers: np.ndarray, drawn: np.ndarray) -> np.ndarray:
    """``[G, P]`` bool: the most frequent of each cell's first ``drawn`` answers is correct (ties: seen first)."""
    G, P, N = correct.shape
    width = int(answers.max(initial=-1)) + 1
    if width == 0:
        return np.zeros((G, P), dtype=bool)
    inside = np.arange(N)[None, None, :] < drawn[..., None]
    hit = (answers[..., None] == np.arange(width)) & inside[..., None]  # [G, P, N, U]
    votes = hit.sum(axis=2)
    first_seen = np.where(hit.any(axis=2), hit.argmax(axis=2), N)
    score = np.where(votes > 0, votes * (N + 1) - first_seen, -1)
    winner = score.argmax(axis=2)
    right = ((answers == winner[..., None]) & correct & inside).any(axis=2)
    return right & (score.max(axis=2) >= 0)
