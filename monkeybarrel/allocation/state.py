"""What a policy sees after a round: per (generator, problem) cell counts, no labels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AllocationState:
    """The store's knowledge about every cell, as ``[G, P]`` arrays (G generators, P problems).

    Attributes:
        drawn: ``[G, P]`` int samples drawn so far.
        cap: ``[G, P]`` int most samples the cell may ever have (``num_samples``; in a replay, the
            recorded samples).
        budget_left: ``[G]`` int samples each generator may still draw (its budget minus what it drew).
        passed: ``[G, P]`` int samples a reliable checker (unit tests) passed, or None without one.
        top_votes: ``[G, P, 2]`` int votes of the most and second most frequent final answer, or
            None when answers are not known.
    """

    drawn: np.ndarray
    cap: np.ndarray
    budget_left: np.ndarray
    passed: np.ndarray | None = None
    top_votes: np.ndarray | None = None

    @property
    def room(self) -> np.ndarray:
        """``[G, P]`` samples each cell may still get."""
        return np.maximum(self.cap - self.drawn, 0)

    @property
    def solved(self) -> np.ndarray:
        """``[G, P]`` bool: some drawn sample passed the checker."""
        if self.passed is None:
            raise ValueError("this policy needs a checker: set allocation.checker to a verifier whose "
                             "score >= allocation.checker_threshold means the sample is correct (e.g. unit_tests)")
        return self.passed > 0


def top_two_votes(answers: np.ndarray, cells: np.ndarray, n_cells: int) -> np.ndarray:
    """``[n_cells, 2]`` votes of each cell's two most frequent answers.

    Args:
        answers: ``[n]`` int answer codes, equal codes = equivalent answers, -1 = no answer (no vote).
        cells: ``[n]`` int cell index of each sample in ``0..n_cells-1``.
    """
    votes = np.zeros((n_cells, 2), dtype=np.int64)
    voting = answers >= 0
    if not voting.any():
        return votes
    pairs, counts = np.unique(np.stack([cells[voting], answers[voting]]), axis=1, return_counts=True)
    order = np.lexsort((-counts, pairs[0]))
    cell_sorted, counts_sorted = pairs[0][order], counts[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = cell_sorted[1:] != cell_sorted[:-1]
    starts = np.flatnonzero(first)
    votes[cell_sorted[starts], 0] = counts_sorted[starts]
    second = starts + 1
    has_second = (second < order.size)
    has_second[has_second] &= ~first[second[has_second]]
    votes[cell_sorted[starts[has_second]], 1] = counts_sorted[second[has_second]]
    return votes
