"""A reference ceiling for replays, not a policy: ``difficulty``'s allocation with a prior that peeks.

``difficulty`` has to learn how pass rates are spread over problems and generators from what it
has drawn. ``PeekingCeiling`` is handed that spread instead: its prior over a problem's vector of G
pass rates is the empirical distribution of the *other* problems' recorded rates (one atom per
other problem: its correct / recorded samples for each generator), and each cell's posterior
weighs those atoms by how well they explain what has been drawn from the problem so far (all G
generators' draws when ``pooled``, only the cell's own otherwise). It allocates with the same
greedy rounds as ``difficulty``. A policy cannot know this prior — it reads every recorded sample
of the other problems — so its coverage is a yardstick for how much any prior learned across
problems could buy, not a result. It is deliberately not in the policy registry.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .policies import Difficulty
from .simulate import RecordedOutcomes


class EmpiricalRatesModel:
    """Posterior over ``J`` atoms of pass-rate vectors for every ``[G, P]`` cell.

    Args:
        rates: ``[G, J]`` pass rate of each generator in each atom (probability per sample).
        pooled: a cell's posterior uses every generator's draws on its problem (else only its own).
        leave_out: atom ``p`` is problem ``p`` itself and is excluded from problem ``p``'s prior.
    """

    def __init__(self, rates: np.ndarray, pooled: bool = True, leave_out: bool = True) -> None:
        self.rates = np.asarray(rates, dtype=np.float64)
        self.pooled, self.leave_out = pooled, leave_out
        self.weights: np.ndarray | None = None  # [G, P, J]

    def fit(self, drawn: np.ndarray, passed: np.ndarray, iterations: int | None = None) -> "EmpiricalRatesModel":
        """Atom posteriors from the counts (``iterations`` is ignored: nothing is fitted).

        Args:
            drawn: ``[G, P]`` samples per cell.
            passed: ``[G, P]`` passing samples per cell.
        """
        log_p = np.log(np.maximum(self.rates, 1e-300))  # [G, J]; a rate-0 atom cannot explain a pass
        log_q = np.log1p(-np.minimum(self.rates, 1.0 - 1e-12))
        c, n = passed.astype(np.float64)[..., None], drawn.astype(np.float64)[..., None]
        loglik = np.where((c > 0) & (self.rates[:, None, :] == 0), -np.inf,
                          c * log_p[:, None, :] + (n - c) * log_q[:, None, :])  # [G, P, J]
        if self.pooled:
            loglik = np.broadcast_to(loglik.sum(axis=0, keepdims=True), loglik.shape).copy()
        if self.leave_out:
            problems = np.arange(loglik.shape[1])
            loglik[:, problems, problems] = -np.inf
        self.weights = np.exp(loglik - logsumexp(loglik, axis=2, keepdims=True))
        return self

    def expected_gain(self, g: int, problems: np.ndarray, more: np.ndarray) -> np.ndarray:
        """``[C, K]`` P(at least one pass in ``more[c, k]`` further samples) of generator ``g``'s cells."""
        miss = np.exp(more[:, :, None] * np.log1p(-np.minimum(self.rates[g], 1.0 - 1e-12))[None, None, :])
        return np.einsum("cj,ckj->ck", self.weights[g, problems], 1.0 - miss)


class PeekingCeiling(Difficulty):
    """``difficulty``'s greedy rounds on ``EmpiricalRatesModel`` posteriors (a yardstick, not a policy).

    Args:
        rates: ``[G, P]`` recorded pass rate per cell (e.g. ``from_outcomes``).
        pooled, leave_out: see ``EmpiricalRatesModel``.
        round_fraction, blocks: see ``Difficulty``.
    """

    def __init__(self, rates: np.ndarray, pooled: bool = True, leave_out: bool = True,
                 round_fraction: float = 0.02, blocks: int = 48) -> None:
        super().__init__(round_fraction=round_fraction, blocks=blocks)
        self._rates = np.asarray(rates, dtype=np.float64)
        self.pooled, self.leave_out = pooled, leave_out

    @classmethod
    def from_outcomes(cls, outcomes: RecordedOutcomes, **options) -> "PeekingCeiling":
        """The ceiling whose atoms are ``outcomes``' recorded rates (correct / recorded samples)."""
        return cls(outcomes.correct.sum(axis=2) / np.maximum(outcomes.available, 1), **options)

    def model(self, shape: tuple[int, int]) -> EmpiricalRatesModel:
        if shape[0] != self._rates.shape[0]:
            raise ValueError(f"{shape[0]} generators replayed, rates for {self._rates.shape[0]}; "
                             "replay each generator with its own ceiling")
        return EmpiricalRatesModel(self._rates, self.pooled, self.leave_out)
