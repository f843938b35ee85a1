"""Routing baselines: choose one generator per problem and return its first sample.

A router's pick for a problem is the first sample (smallest ``sample_index``) of the generator it
routes to: every candidate of a (problem, generator) cell gets the cell's score and the shared
tie-break rule (smallest (generator_id, sample_index)) picks that sample. So every router here,
``smoothie`` with ``voters: generator`` included, chooses among the same m candidates per problem
and their accuracies in the selection table compare directly.

* ``random_routing``: a uniformly random generator per problem (label-free).
* ``best_generator``: the generator with the highest mean accuracy over all problems (label-based:
  the paper's "best single model", fitted in-sample, i.e. an optimistic reference).
* ``oracle_routing``: per problem, a generator whose first sample is correct when one is (label-based:
  the upper bound of routing).

``routed_accuracy`` gives a lower-variance figure for any router: the mean accuracy of all samples
of the routed generator on each problem (its pass@1 there), averaged over problems.
"""

from __future__ import annotations

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector
from .oracle import Oracle
from .random_choice import RandomChoice


def generator_cells(data: SelectionData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-candidate (problem, generator) cell index ``[n]``, generator ids ``[m]``, generator index ``[n]``."""
    generators, voter = np.unique(data.generator_id.astype(str), return_inverse=True)
    return data.groups * len(generators) + voter, generators, voter


def _first_in_cell(data: SelectionData, cell: np.ndarray, n_cells: int) -> np.ndarray:
    """``[n_cells]`` row of each cell's smallest tie-break rank (its first sample), -1 for empty cells."""
    order = np.lexsort((data.tiebreak, cell))
    first = np.full(n_cells, -1, dtype=np.int64)
    starts = np.ones(order.size, dtype=bool)
    starts[1:] = cell[order][1:] != cell[order][:-1]
    first[cell[order[starts]]] = order[starts]
    return first


@SELECTORS.register("random_routing")
class RandomRouting(RandomChoice):
    """Routes each problem to a uniformly random generator (seeded) and takes its first sample.

    Args:
        seed: random seed.
    """

    def decision_function(self, data: SelectionData) -> np.ndarray:
        cell, generators, _ = generator_cells(data)
        draws = np.random.default_rng(self.seed).random(data.n_problems * len(generators))
        return draws[cell]


@SELECTORS.register("best_generator")
class BestGenerator(Selector):
    """Routes every problem to the generator with the best mean accuracy (label-based, in-sample).

    Attributes (after ``fit``):
        generators_: ``[m]`` generator ids.
        accuracy_: ``[m]`` mean over problems of each generator's per-problem sample accuracy.
    """

    uses_labels = True

    def __init__(self) -> None:
        pass

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "BestGenerator":
        super().fit(data, labels)
        labels = np.asarray(labels, dtype=np.float64)
        cell, self.generators_, _ = generator_cells(data)
        m = len(self.generators_)
        count = np.bincount(cell, minlength=data.n_problems * m).reshape(data.n_problems, m)
        hits = np.bincount(cell, weights=labels, minlength=data.n_problems * m).reshape(data.n_problems, m)
        with np.errstate(invalid="ignore"):
            per_problem = hits / count
        self.accuracy_ = np.nanmean(np.where(count > 0, per_problem, np.nan), axis=0)
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        index = {g: i for i, g in enumerate(self.generators_)}
        rows = np.array([index.get(str(g), -1) for g in data.generator_id], dtype=np.int64)
        return np.where(rows >= 0, self.accuracy_[np.maximum(rows, 0)], np.nan)


@SELECTORS.register("oracle_routing")
class OracleRouting(Oracle):
    """Per problem, routes to a generator whose first sample is correct (label-based upper bound).

    Attributes (after ``fit``):
        labels_: ``[n]`` the fitted labels (the router only applies to the data it was fitted on).
    """

    def decision_function(self, data: SelectionData) -> np.ndarray:
        labels = super().decision_function(data)
        cell, generators, _ = generator_cells(data)
        first = _first_in_cell(data, cell, data.n_problems * len(generators))
        return labels[first[cell]]


def routed_accuracy(data: SelectionData, labels: np.ndarray, chosen: np.ndarray) -> float:
    """Mean over problems of the routed generator's sample accuracy on that problem.

    Args:
        data: the candidates.
        labels: ``[n]`` bool correctness.
        chosen: ``[n_problems]`` row picked per problem (-1 = abstained, counts as 0).

    Returns:
        Expected accuracy of querying the routed generator once per problem.
    """
    labels = np.asarray(labels, dtype=np.float64)
    cell, generators, _ = generator_cells(data)
    n_cells = data.n_problems * len(generators)
    accuracy = np.bincount(cell, weights=labels, minlength=n_cells) / np.maximum(np.bincount(cell, minlength=n_cells), 1)
    chosen = np.asarray(chosen, dtype=np.int64)
    per_problem = np.where(chosen >= 0, accuracy[cell[np.maximum(chosen, 0)]], 0.0)
    return float(per_problem.mean()) if per_problem.size else float("nan")
