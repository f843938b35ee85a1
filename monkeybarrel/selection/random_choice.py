"""Random choice: the pass@1 baseline every report shows."""

from __future__ import annotations

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


@SELECTORS.register("random")
class RandomChoice(Selector):
    """Picks one candidate per problem uniformly at random (seeded).

    Args:
        seed: random seed.
    """

    requires_fit = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def decision_function(self, data: SelectionData) -> np.ndarray:
        return np.random.default_rng(self.seed).random(data.n_candidates)
