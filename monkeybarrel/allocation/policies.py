"""Allocation policies: from an ``AllocationState`` to the next round's grants.

Every policy maps the state to ``grants[G, P]``, the samples each (generator, problem) cell draws
in the next round; all zeros ends sampling. A policy never grants more than a cell's room or a
generator's budget left. ``stops_when_solved`` says the policy wants no more samples of a cell once
the checker passed one: the replay (``simulate``) then stops that cell's draws within a round, as a
streaming sampler would; the orchestrator draws a round's grants as one batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import betainc

from ..core.plugins import build_plugin
from ..core.registry import Registry
from .difficulty import DifficultyModel
from .state import AllocationState

POLICIES: Registry["AllocationPolicy"] = Registry("allocation policy")


class AllocationPolicy:
    """Base class: ``grant(state) -> [G, P]`` int samples for the next round.

    Attributes:
        needs_checker: the policy reads ``state.passed`` (a reliable checker's verdicts).
        needs_answers: the policy reads ``state.top_votes``.
        stops_when_solved: a cell needs nothing more once a sample passed the checker.
    """

    needs_checker = False
    needs_answers = False
    stops_when_solved = False

    def grant(self, state: AllocationState) -> np.ndarray:
        raise NotImplementedError

    def get_params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def equal_share(active: np.ndarray, room: np.ndarray, budget_left: np.ndarray, round_size: int | None) -> np.ndarray:
    """Active cells of each generator share its budget left equally (at most ``round_size`` each).

    When a generator has fewer samples left than active cells, its first ``budget_left`` active
    cells (in problem order) get one each.

    Args:
        active: ``[G, P]`` bool cells that want samples.
        room: ``[G, P]`` samples each cell may still get.
        budget_left: ``[G]`` samples left per generator.
        round_size: most samples per cell per round (None: no limit).

    Returns:
        ``[G, P]`` int64 grants.
    """
    active = active & (room > 0)
    grants = np.zeros(room.shape, dtype=np.int64)
    for g in range(room.shape[0]):
        cells = np.flatnonzero(active[g])
        left = int(budget_left[g])
        if cells.size == 0 or left <= 0:
            continue
        share = left // cells.size
        if round_size is not None:
            share = min(share, round_size)
        if share >= 1:
            grants[g, cells] = np.minimum(room[g, cells], share)
        else:
            grants[g, cells[:left]] = 1
    return grants


def _check_round_size(round_size: int | None) -> None:
    if round_size is not None and round_size < 1:
        raise ValueError(f"round_size must be >= 1 or null, got {round_size}")


@POLICIES.register("uniform")
class Uniform(AllocationPolicy):
    """Every problem gets the same number of samples (today's behaviour; with a budget, an equal share).

    Args:
        round_size: most samples per cell per round (None: everything in one round).
    """

    def __init__(self, round_size: int | None = None) -> None:
        _check_round_size(round_size)
        self.round_size = round_size

    def grant(self, state: AllocationState) -> np.ndarray:
        return equal_share(np.ones(state.drawn.shape, bool), state.room, state.budget_left, self.round_size)


@POLICIES.register("until_solved")
class UntilSolved(AllocationPolicy):
    """Stop a problem once a sample passes the checker; unsolved problems share what is left equally.

    Args:
        round_size: most samples per cell per round (None: an equal share of everything left).
    """

    needs_checker = True
    stops_when_solved = True

    def __init__(self, round_size: int | None = None) -> None:
        _check_round_size(round_size)
        self.round_size = round_size

    def grant(self, state: AllocationState) -> np.ndarray:
        return equal_share(~state.solved, state.room, state.budget_left, self.round_size)


def majority_confidence(top_votes: np.ndarray) -> np.ndarray:
    """P(the leading answer's share exceeds the runner-up's) under a uniform Dirichlet posterior.

    Adaptive-consistency's Beta stopping rule (Aggarwal et al., 2023): with v1, v2 votes for the two
    most frequent answers, ``P(X > 1/2)`` for ``X ~ Beta(v1 + 1, v2 + 1)``.

    Args:
        top_votes: ``[..., 2]`` int votes.

    Returns:
        ``[...]`` float in [0, 1]; 0.5 with no votes.
    """
    v1, v2 = top_votes[..., 0].astype(np.float64), top_votes[..., 1].astype(np.float64)
    return 1.0 - betainc(v1 + 1.0, v2 + 1.0, 0.5)


@POLICIES.register("confident_majority")
class ConfidentMajority(AllocationPolicy):
    """Stop a problem once its majority answer's lead is statistically safe.

    Args:
        threshold: stop when ``majority_confidence >= threshold``.
        round_size: samples per undecided cell per round.
        min_samples: never stop a cell with fewer samples.
    """

    needs_answers = True

    def __init__(self, threshold: float = 0.95, round_size: int = 4, min_samples: int = 1) -> None:
        if not 0.5 < threshold < 1.0:
            raise ValueError(f"threshold must lie in (0.5, 1), got {threshold}")
        _check_round_size(round_size)
        self.threshold, self.round_size, self.min_samples = threshold, round_size, min_samples

    def grant(self, state: AllocationState) -> np.ndarray:
        if state.top_votes is None:
            raise ValueError("confident_majority needs the answers of the drawn samples")
        decided = (majority_confidence(state.top_votes) >= self.threshold) & (state.drawn >= self.min_samples)
        return equal_share(~decided, state.room, state.budget_left, self.round_size)


@POLICIES.register("difficulty")
class Difficulty(AllocationPolicy):
    """Give each round to the cells with the largest expected coverage gain per sample.

    A ``DifficultyModel`` (empirical-Bayes Rasch model: P(pass) = sigmoid(ability[g] - difficulty[p]),
    a prior over difficulties with a "hopeless" atom, fitted to every cell's counts) gives each
    unsolved cell a posterior over its pass rate; the round's samples go greedily, in blocks, to the
    cells whose next block buys the most expected coverage per sample. Problems that no generator
    solves after many samples, while similar problems are solved quickly, lose their share; with
    several generators, how the others fare on a problem informs each one's estimate.

    Args:
        round_fraction: each round spends this share of the generator's whole budget (at least one
            sample per unsolved cell, and never more than is left); 1, 2 and 5 % measure alike on
            Pythia MATH (docs/allocation.md), smaller costs more refits.
        blocks: block levels per cell and round (finer = closer to the greedy optimum).
        em_iterations: prior/ability refits per round.
        cell_spread: how far (logits, s.d.) a cell's difficulty may stray from its problem's: 0 = a
            pure Rasch model; larger trusts the other generators less.
    """

    needs_checker = True
    stops_when_solved = True

    def __init__(self, round_fraction: float = 0.02, blocks: int = 48, em_iterations: int = 3,
                 cell_spread: float = 3.0) -> None:
        if not 0.0 < round_fraction <= 1.0:
            raise ValueError(f"round_fraction must lie in (0, 1], got {round_fraction}")
        if blocks < 1 or em_iterations < 1:
            raise ValueError("blocks and em_iterations must be >= 1")
        self.round_fraction, self.blocks, self.em_iterations = round_fraction, blocks, em_iterations
        self.cell_spread = cell_spread
        self._model: DifficultyModel | None = None

    def model(self, shape: tuple[int, int]) -> DifficultyModel:
        """The model of the ``[G, P]`` cells' pass rates, kept between rounds (EM is warm-started).

        Anything with ``fit(drawn, passed, iterations)`` and ``expected_gain(g, problems, more)`` will
        do: a subclass may supply another model (``allocation.ceiling`` does).
        """
        if self._model is None or self._model.shape != shape:
            self._model = DifficultyModel(*shape, cell_spread=self.cell_spread)
        return self._model

    def grant(self, state: AllocationState) -> np.ndarray:
        solved, room = state.solved, state.room
        active = ~solved & (room > 0)
        grants = np.zeros(room.shape, dtype=np.int64)
        if not active.any() or (state.budget_left <= 0).all():
            return grants
        model = self.model(room.shape)
        model.fit(state.drawn, state.passed, iterations=self.em_iterations)
        total_budget = state.budget_left + state.drawn.sum(axis=1)
        for g in range(room.shape[0]):
            cells = np.flatnonzero(active[g])
            left = int(state.budget_left[g])
            if cells.size == 0 or left <= 0:
                continue
            spend = min(left, max(int(np.ceil(self.round_fraction * total_budget[g])), cells.size))
            grants[g, cells] = self._greedy(model, g, cells, room[g, cells], spend)
        return grants

    def _greedy(self, model: DifficultyModel, g: int, cells: np.ndarray, room: np.ndarray, spend: int) -> np.ndarray:
        """``[C]`` samples for generator ``g``'s ``cells`` maximising ``model``'s summed expected coverage gain.

        ``room``: ``[C]`` samples each cell may still get; at most ``spend`` samples in all.

        Each cell's gain is concave in its samples, so taking blocks in order of gain per sample
        (a prefix of each cell's blocks) is the greedy optimum at block resolution.
        """
        top = np.minimum(room, spend)
        steps = np.linspace(0.0, 1.0, self.blocks + 1)[1:] ** 2  # finer blocks at few samples
        levels = np.maximum(np.round(steps[None, :] * top[:, None]), 1).astype(np.int64)  # [C, K]
        levels = np.maximum.accumulate(levels, axis=1)
        gain = model.expected_gain(g, cells, levels)  # [C, K] P(solved within m more)
        cost = np.diff(levels, axis=1, prepend=0)
        delta = np.diff(gain, axis=1, prepend=0.0)
        rate = np.where(cost > 0, delta / np.maximum(cost, 1), -np.inf)
        order = np.argsort(-rate, axis=None, kind="stable")
        taken_cost = np.cumsum(cost.reshape(-1)[order])
        take = order[taken_cost <= spend]
        chosen = np.zeros(cost.shape, dtype=bool)
        chosen.reshape(-1)[take] = True
        out = (cost * chosen).sum(axis=1)
        if out.sum() == 0:  # the round is smaller than every first block: one sample to the best cells
            best = np.argsort(-rate[:, 0], kind="stable")[:spend]
            out[best] = 1
        return out


def build_policy(name: str, options: dict[str, Any] | None = None, key_path: str = "allocation") -> AllocationPolicy:
    """The registered policy ``name`` built with ``options`` (errors name ``key_path``)."""
    return build_plugin(POLICIES, name, key_path, **(options or {}))
