"""Accuracy at equal compute: every policy replayed on the same recorded samples under the same budgets."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.selection_data import SelectionData
from .policies import AllocationPolicy, ConfidentMajority, Difficulty, Uniform, UntilSolved
from .simulate import RecordedOutcomes, replay


def outcomes_from_selection(data: SelectionData, labels: np.ndarray) -> RecordedOutcomes:
    """An experiment's samples as ``RecordedOutcomes`` (one cell per generator and problem).

    Args:
        data: the experiment's selection data (answers give the votes).
        labels: ``[n]`` bool correctness (the replay's checker).
    """
    generators, g_index = np.unique(data.generator_id.astype(str), return_inverse=True)
    G, P = generators.size, data.n_problems
    cell = g_index * P + data.groups
    order = np.lexsort((data.sample_index, cell))
    sizes = np.bincount(cell, minlength=G * P)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    position = np.empty(cell.size, dtype=np.int64)
    position[order] = np.arange(cell.size) - np.repeat(starts, sizes)
    N = int(sizes.max(initial=0))
    correct = np.zeros((G * P, N), dtype=bool)
    answers = np.full((G * P, N), -1, dtype=np.int64)
    correct[cell, position] = labels
    local = np.full(data.answers.shape, -1, dtype=np.int64)  # answer codes within each cell: 0..U-1
    voting = data.answers >= 0
    if voting.any():
        _, inverse = np.unique(np.stack([cell[voting], data.answers[voting]]), axis=1, return_inverse=True)
        pairs_cell = cell[voting]
        codes = inverse.reshape(-1)
        first_code = np.full(G * P, np.iinfo(np.int64).max)
        np.minimum.at(first_code, pairs_cell, codes)
        local[voting] = codes - first_code[pairs_cell]
    answers[cell, position] = local
    return RecordedOutcomes(correct.reshape(G, P, N), sizes.reshape(G, P), answers.reshape(G, P, N),
                            tuple(generators))


def budgeted_policies() -> dict[str, AllocationPolicy]:
    """The policies compared at each budget (``confident_majority`` stops by itself: one row per threshold)."""
    return {"uniform": Uniform(), "until_solved": UntilSolved(), "difficulty": Difficulty()}


def equal_compute_table(outcomes: RecordedOutcomes, samples_per_problem: list[float], orders: int = 8,
                        seed: int = 0, thresholds: tuple[float, ...] = (0.8, 0.9, 0.95, 0.99),
                        round_size: int = 1) -> list[dict[str, Any]]:
    """Coverage and majority accuracy of each policy at each budget, averaged over random sample orders.

    Args:
        outcomes: the recorded samples.
        samples_per_problem: budgets, as mean samples per problem per generator.
        orders: random orders per replay.
        thresholds: ``confident_majority`` stopping thresholds (one row each; it needs no budget).
        round_size: samples per cell and round of ``confident_majority``.

    Returns:
        Rows ``{policy, budget, samples_per_problem, coverage, majority, coverage_kept}`` (means over
        generators; ``coverage_kept`` = coverage / coverage of everything recorded).
    """
    G, P, _ = outcomes.shape
    full = outcomes.covered()
    rows = []

    def row(name: str, budget: float | None, result) -> dict[str, Any]:
        kept = np.divide(result.coverage, full, out=np.full(G, np.nan), where=full > 0)
        return {"policy": name, "budget": budget, "samples_per_problem": float(result.samples.mean() / P),
                "coverage": float(result.coverage.mean()), "majority": float(np.nanmean(result.majority))
                if not np.isnan(result.majority).all() else float("nan"),
                "coverage_kept": float(np.nanmean(kept)) if (full > 0).any() else float("nan")}

    for per_problem in samples_per_problem:
        budget = int(round(per_problem * P))
        for name, policy in budgeted_policies().items():
            rows.append(row(name, per_problem, replay(policy, outcomes, budget, orders=orders, seed=seed)))
    if outcomes.answers is not None:
        for threshold in thresholds:
            policy = ConfidentMajority(threshold=threshold, round_size=round_size)
            rows.append(row(f"confident_majority@{threshold:g}", None, replay(policy, outcomes, None, orders, seed)))
    return rows
