"""An empirical-Bayes model of pass rates over (generator, problem) cells.

A cell's pass rate is ``sigmoid(ability[g] - e)`` with the cell's own difficulty
``e ~ Normal(difficulty[p], cell_spread^2)``: a Rasch model whose cells may deviate from their
problem (small models solve some problems by luck that larger ones find hard). Problem
difficulties are not fitted one by one: a prior over a grid of difficulties plus a "hopeless" atom
(nobody ever passes) is fitted by EM to all cells' counts (a non-parametric maximum-likelihood
prior), abilities by Newton steps. A cell's posterior thus combines its own failures, how the
other generators fare on the same problem, and how difficulties are spread over all problems.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit, logsumexp

GRID = np.linspace(-6.0, 16.0, 89)
"""Difficulty grid (logits; with ability 0, pass rates from 1 - 2.5e-3 down to 1.1e-7)."""


class DifficultyModel:
    """Posterior pass rates of ``[G, P]`` cells from their counts.

    Args:
        n_generators: G.
        n_problems: P.
        cell_spread: standard deviation (logits) of a cell's difficulty around its problem's.
    """

    def __init__(self, n_generators: int, n_problems: int, cell_spread: float = 3.0) -> None:
        self.shape = (n_generators, n_problems)
        self.cell_spread = cell_spread
        self.ability = np.zeros(n_generators)
        self.prior = np.full(GRID.size + 1, 1.0 / (GRID.size + 1))  # last entry: the hopeless atom
        gaps = GRID[:, None] - GRID[None, :]
        kernel = np.exp(-0.5 * (gaps / cell_spread) ** 2) if cell_spread > 0 else np.eye(GRID.size)
        self._kernel = kernel / kernel.sum(axis=1, keepdims=True)  # [d, e]: P(cell e | problem d)
        self._log_kernel = np.log(np.maximum(self._kernel, 1e-300))
        self.cell_posterior = np.zeros((n_generators, n_problems, GRID.size + 1))

    def _log_rates(self) -> tuple[np.ndarray, np.ndarray]:
        """``log p`` and ``log(1 - p)`` on the grid of cell difficulties, ``[G, E]``."""
        logit = self.ability[:, None] - GRID[None, :]
        return log_expit(logit), log_expit(-logit)

    def fit(self, drawn: np.ndarray, passed: np.ndarray, iterations: int = 10) -> "DifficultyModel":
        """EM on the counts (warm-started from the previous fit); sets ``cell_posterior``.

        Args:
            drawn: ``[G, P]`` samples per cell.
            passed: ``[G, P]`` passing samples per cell.
        """
        n, c = drawn.astype(np.float64), passed.astype(np.float64)
        never = c.sum(axis=0) == 0  # the atom explains only problems nobody solved
        for _ in range(iterations):
            log_p, log_q = self._log_rates()
            cell_loglik = c[..., None] * log_p[:, None, :] + (n - c)[..., None] * log_q[:, None, :]  # [G, P, E]
            # marginal over the cell's deviation: log sum_e K[d, e] lik(e)  -> [G, P, D]
            shift = cell_loglik.max(axis=2, keepdims=True)
            cell_marginal = np.log(np.maximum(np.exp(cell_loglik - shift) @ self._kernel.T, 1e-300)) + shift
            problem = cell_marginal.sum(axis=0)  # [P, D]
            atom = np.where(never, 0.0, -np.inf)[:, None]
            log_prior = np.log(np.maximum(self.prior, 1e-300))
            joint = np.concatenate([problem, atom], axis=1) + log_prior[None, :]
            log_norm = logsumexp(joint, axis=1, keepdims=True)
            posterior = np.exp(joint - log_norm)  # [P, D + 1]
            self.prior = 0.999 * posterior.mean(axis=0) + 0.001 / self.prior.size
            # each cell: its problem's posterior without its own evidence, spread by the kernel, times its own
            leave_out = joint[None, :, :-1] - np.concatenate([cell_marginal], axis=2)  # [G, P, D]
            leave_out_atom = np.broadcast_to(joint[None, :, -1:], (*drawn.shape, 1))
            top = np.maximum(leave_out.max(axis=2, keepdims=True), leave_out_atom)
            spread = np.exp(leave_out - top) @ self._kernel  # [G, P, E]
            cell = np.concatenate([np.log(np.maximum(spread, 1e-300)) + cell_loglik,
                                   leave_out_atom - top], axis=2)
            self.cell_posterior = np.exp(cell - logsumexp(cell, axis=2, keepdims=True))
            weights = self.cell_posterior[..., :-1]  # [G, P, E]
            rate = expit(self.ability[:, None] - GRID[None, :])[:, None, :]  # [G, 1, E]
            grad = (weights * (c[..., None] - n[..., None] * rate)).sum(axis=(1, 2))
            hess = (weights * n[..., None] * rate * (1.0 - rate)).sum(axis=(1, 2))
            self.ability = self.ability + np.clip(grad / np.maximum(hess, 1e-9), -1.0, 1.0)
        return self

    def expected_gain(self, g: int, problems: np.ndarray, more: np.ndarray) -> np.ndarray:
        """P(at least one pass in ``more`` further samples) for cells of generator ``g``.

        The cells' posteriors already include their failures so far.

        Args:
            g: the generator.
            problems: ``[C]`` problem indices.
            more: ``[C, K]`` further samples.

        Returns:
            ``[C, K]`` expected coverage gain.
        """
        _, log_q = self._log_rates()
        weights = self.cell_posterior[g, problems, :-1]  # [C, E]; the atom never passes
        miss = np.exp(more[:, :, None] * log_q[g][None, None, :])  # [C, K, E]
        return np.einsum("ce,cke->ck", weights, 1.0 - miss)

    def pass_rate(self) -> np.ndarray:
        """``[G, P]`` posterior mean pass rate."""
        rate = expit(self.ability[:, None] - GRID[None, :])  # [G, E]
        return (self.cell_posterior[..., :-1] * rate[:, None, :]).sum(axis=2)
