"""The label model's fit: EM for a binary latent-class (Dawid–Skene) model on sufficient statistics.

A hidden label (1 correct, 0 incorrect) per item with prior ``prior``; given it, every verifier's bin is
drawn from its own categorical ``theta [S, 2, n_bins, m]`` (per stratum), independently of the other
verifiers, and the item's share cell from ``cells [2, n_cells]``. Each verifier's log-likelihood is
weighted by ``Model.weights`` (1 / its effective number of copies: a composite likelihood), and its
per-stratum rates are its rates over all strata plus a fixed share (``Model.shrink``, a positive-part
James–Stein factor) of its stratum's deviation from them.

EM is accelerated by SQUAREM (Varadhan & Roland, 2008, scheme S3) and stops when the objective per item
changes by less than ``tol`` or no parameter (rate, cell share, prior) moves by more than ``RATE_TOL`` in a
cycle: the float32 products leave ~1e-7 of noise in the objective, so a tight ``tol`` alone can keep a
converged fit running to ``max_iter`` (``Iteration`` records how it stopped). Products run in float32 on the sparse
``em_data`` layout (indicators are exact, soft counts carry ~1e-7 relative rounding); parameters, sums
and the objective are float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .em_data import CELL_NONE, EMData, Params


RATE_TOL = 1e-7
"""EM also stops when no parameter moves by more than this in a SQUAREM cycle."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass
class Model:
    """What EM fits besides the data: fixed settings and the parts decided between fits.

    Attributes:
        weights: ``[m]`` composite-likelihood weight of each verifier (1 / its effective copies).
        prior: fixed P(correct) or None (estimated).
        smoothing: Beta/Dirichlet pseudo-count of every rate.
        clamp: ``[I]`` known item labels (1, 0; NaN unknown), e.g. from dev labels.
        shrink: ``[2, m]`` share of each verifier's per-stratum deviation kept, per class
            (``shrink_factors``; None = one set of rates). Fixed while EM runs, so EM is a fixed map.
    """

    weights: np.ndarray
    prior: float | None = None
    smoothing: float = 0.5
    clamp: np.ndarray | None = None
    shrink: np.ndarray | None = None


@dataclass
class Iteration:
    """How an EM run ended: ``steps`` EM steps, ``converged`` (objective change < tol or parameter change <
    ``RATE_TOL``), the last change of the objective per item, the largest change of any parameter over the
    last cycle, and (when it ran out of
    steps) the parameters 90 % of the way (``checkpoint``) and how much the posteriors moved since."""

    steps: int
    converged: bool
    objective_change: float = 0.0
    rate_change: float = 0.0
    checkpoint: Params | None = field(default=None, repr=False)
    moved: float | None = None
    """share of the items whose posterior moved by more than 0.01 between the checkpoint and the end"""


class LatentClassEM:
    """EM for the latent-class model on ``EMData`` with a ``Model``'s settings."""

    def __init__(self, data: EMData, model: Model) -> None:
        self.data, self.model = data, model

    def log_terms(self, params: Params) -> tuple[np.ndarray, np.ndarray]:
        """``[I, 2]`` weighted log P(votes of the item | class) and ``[I]`` log-likelihood ratio of its cell."""
        d = self.data
        log_theta = np.log(np.clip(params.theta, 1e-6, 1.0)) * self.model.weights  # [S, 2, B, m]
        tables = log_theta.reshape(d.n_strata, 2, -1)[:, :, d.columns].transpose(0, 2, 1)  # [S, C, 2]
        return d.per_item(d.products(tables)), self.cell_llr(params)

    def cell_llr(self, params: Params) -> np.ndarray:
        """``[I]`` log-likelihood ratio of each item's share cell (0 without one)."""
        d = self.data
        out = np.zeros(d.n_items)
        if d.n_cells:
            has = d.item_cell != CELL_NONE
            out[has] = cell_table(params)[d.item_cell[has]]
        return out

    def e_step(self, params: Params) -> tuple[np.ndarray, float, np.ndarray]:
        """Posterior P(correct) per item ``[I]``, the objective per item, and the ``[I, 2]`` log joint."""
        votes, cell = self.log_terms(params)
        prior = min(max(params.prior, 1e-9), 1 - 1e-9)
        joint = votes + np.column_stack([np.full_like(cell, np.log1p(-prior)), np.log(prior) + cell])
        q = sigmoid(joint[:, 1] - joint[:, 0])
        if self.model.clamp is not None:
            known = ~np.isnan(self.model.clamp)
            q[known] = self.model.clamp[known]
        marginal = np.logaddexp(joint[:, 0], joint[:, 1])
        log_theta = np.log(np.clip(params.theta, 1e-12, 1)) * self.data.mask
        penalty = self.model.smoothing * float((log_theta.sum(axis=(1, 2)) * self.model.weights).sum())
        objective = (float(self.data.weight @ marginal) + penalty) / max(float(self.data.weight.sum()), 1.0)
        return q, objective, joint

    def soft_counts(self, q: np.ndarray) -> np.ndarray:
        """``[S, n_bins * m]`` soft count of each (bin, verifier) in the correct class, per stratum."""
        d = self.data
        return d.grid(d.column_sums(d.to_rows(q).astype(np.float32) * d.row_weight))

    def m_step(self, q: np.ndarray) -> Params:
        d, model = self.data, self.model
        ones = self.soft_counts(q).reshape(d.n_strata, d.n_bins, d.m)
        zeros = d.totals.reshape(d.n_strata, d.n_bins, d.m) - ones
        theta = np.empty((d.n_strata, 2, d.n_bins, d.m))
        for c, counts in enumerate((zeros, ones)):
            factor = model.shrink[c] if model.shrink is not None else np.zeros(d.m)
            theta[:, c] = shrunk_rates(counts, d.mask, model.smoothing, factor)
        weighted = d.weight * q
        prior = float(weighted.sum() / max(d.weight.sum(), 1e-12)) if model.prior is None else model.prior
        cells = np.full((2, d.n_cells), 1.0 / max(d.n_cells, 1))
        if d.n_cells:
            has = d.item_cell != CELL_NONE
            for c, share in enumerate((d.weight - weighted, weighted)):
                counts = np.bincount(d.item_cell[has], share[has], d.n_cells) + model.smoothing
                cells[c] = counts / counts.sum()
        return Params(prior, theta, cells)

    def _project(self, vector: np.ndarray, like: Params) -> Params:
        params = Params.unpack(vector, like)
        theta = np.clip(params.theta, 1e-9, None) * self.data.mask
        theta = theta / theta.sum(axis=2, keepdims=True)
        cells = np.clip(params.cells, 1e-12, None)
        cells = cells / cells.sum(axis=1, keepdims=True) if cells.size else cells
        prior = min(max(params.prior, 1e-6), 1 - 1e-6) if self.model.prior is None else self.model.prior
        return Params(prior, theta, cells)

    def iterate(self, params: Params, max_steps: int, tol: float) -> tuple[Params, Iteration]:
        """SQUAREM cycles from ``params`` until the objective changes by < ``tol`` or ``max_steps`` EM steps;
        the parameters 90 % of the way to ``max_steps`` are kept as a checkpoint (for the stop report)."""
        steps, previous, change, checkpoint = 0, -np.inf, np.inf, None
        while steps + 3 <= max_steps:
            q0, _, _ = self.e_step(params)
            first = self.m_step(q0)
            q1, objective1, _ = self.e_step(first)
            second = self.m_step(q1)
            steps += 2
            x0, x1, x2 = params.pack(), first.pack(), second.pack()
            r, v = x1 - x0, x2 - 2 * x1 + x0
            step = np.sqrt((r @ r) / (v @ v)) if v @ v > 0 else 1.0
            jump = self._project(x0 + 2 * step * r + step ** 2 * v, params)
            q_jump, objective_jump, _ = self.e_step(jump)
            if step > 1 and objective_jump >= objective1:
                new, objective = self.m_step(q_jump), objective_jump
                steps += 1
            else:
                new, objective = second, objective1
            rate_change = float(np.abs(new.pack() - params.pack()).max())
            params, change = new, abs(objective - previous)
            if change < tol or rate_change < RATE_TOL:
                return params, Iteration(steps, True, change, rate_change)
            previous = objective
            if checkpoint is None and steps >= 0.9 * max_steps:
                checkpoint = params
        return params, Iteration(steps, False, change, rate_change if steps else 0.0, checkpoint)


def cell_table(params: Params) -> np.ndarray:
    """``[n_cells]`` log-likelihood ratio of every share cell."""
    cells = np.clip(params.cells, 1e-9, 1.0)
    return np.log(cells[1]) - np.log(cells[0])


def shrink_factors(counts: np.ndarray, mask: np.ndarray, smoothing: float) -> np.ndarray:
    """``[m]`` positive-part James–Stein factor ``max(0, 1 - df / X2)`` of each verifier's per-stratum rates of
    one class, from soft ``counts [S, B, m]``: ``X2`` is the Pearson statistic of the strata against their
    pooled rates, df = (S - 1)(B_j - 1). 0 = one set of rates, 1 = each stratum its own."""
    S = counts.shape[0]
    pooled = _rates(counts.sum(axis=0), mask, smoothing)
    size = counts.sum(axis=1, keepdims=True)
    own = _rates(counts, mask, smoothing)
    statistic = (size * (own - pooled) ** 2 / np.maximum(pooled, 1e-12) * mask).sum(axis=(0, 1))
    df = (S - 1) * (mask.sum(axis=0) - 1)
    return np.clip(1.0 - df / np.maximum(statistic, 1e-12), 0.0, 1.0)


def _rates(counts: np.ndarray, mask: np.ndarray, smoothing: float) -> np.ndarray:
    """Smoothed bin rates over each verifier's own bins (``[..., B, m]``; 0 outside ``mask``)."""
    smoothed = (counts + smoothing) * mask
    return smoothed / np.maximum(smoothed.sum(axis=-2, keepdims=True), 1e-300)


def shrunk_rates(counts: np.ndarray, mask: np.ndarray, smoothing: float, factor: np.ndarray) -> np.ndarray:
    """``[S, B, m]`` per-stratum bin rates of one class from soft ``counts [S, B, m]``: the pooled rates plus
    ``factor [m]`` times each stratum's deviation from them (``shrink_factors``)."""
    pooled = _rates(counts.sum(axis=0), mask, smoothing)
    if counts.shape[0] == 1 or not np.any(factor):
        return np.broadcast_to(pooled, counts.shape).copy()
    return pooled + factor * (_rates(counts, mask, smoothing) - pooled)


def start_from(em: LatentClassEM, share: np.ndarray) -> Params:
    """Parameters after one M-step from item scores ``share`` in [0, 1] (a soft start)."""
    return em.m_step(np.clip(share, 1e-3, 1 - 1e-3))


def soft_vote(data: EMData, weights: np.ndarray) -> np.ndarray:
    """``[I]`` weighted mean bin position (0 = lowest bin, 1 = highest) of the item's scores (0.5 without any)."""
    top = np.maximum(data.mask.sum(axis=0) - 1, 1)
    level = (np.arange(data.n_bins)[:, None] / top[None, :] * weights[None, :]).ravel()[data.columns]
    observed = np.broadcast_to(weights, (data.n_bins, data.m)).ravel()[data.columns]
    both = data.products(np.broadcast_to(np.column_stack([level, observed]), (data.n_strata, level.size, 2)))
    support, voters = data.per_item(both[:, 0]), data.per_item(both[:, 1])
    return np.divide(support, voters, out=np.full(data.n_items, 0.5), where=voters > 0)


def fit(em: LatentClassEM, start: np.ndarray | Params, max_iter: int, tol: float) -> dict[str, Any]:
    """Run EM from item scores ``start`` (or parameters) to convergence; returns the fit
    (``params``, ``posterior`` [I], ``joint`` [I, 2], ``objective``, ``n_iter``, ``iteration``)."""
    params = start if isinstance(start, Params) else start_from(em, start)
    params, iteration = em.iterate(params, max(max_iter - 1, 3), tol)
    q, objective, joint = em.e_step(params)
    if iteration.checkpoint is not None:
        iteration.moved = float(np.mean(np.abs(em.e_step(iteration.checkpoint)[0] - q) > 0.01))
    return {"params": params, "posterior": q, "joint": joint, "objective": objective, "n_iter": iteration.steps + 1,
            "iteration": iteration}


def best_start(em: LatentClassEM, share: np.ndarray, top_shares: tuple[float, ...], steps: int) -> Params:
    """The best of the soft start ``share`` and hard starts at its top shares of items, each run ``steps``
    EM steps (at a low prior the soft start sits near 0.5 and EM crawls)."""
    d = em.data
    order = np.argsort(-share, kind="stable")
    above = np.cumsum(d.weight[order]) / max(d.weight.sum(), 1e-12)
    starts = [share]
    for top in top_shares:
        hard = np.zeros(d.n_items)
        hard[order[: np.searchsorted(above, top) + 1]] = 1.0
        starts.append(hard)
    trials = []
    for candidate in starts:
        params, _ = em.iterate(start_from(em, candidate), steps, 0.0)
        trials.append((em.e_step(params)[1], params))
    return max(trials, key=lambda trial: trial[0])[1]


def heterogeneity(em: LatentClassEM, q: np.ndarray) -> np.ndarray:
    """``[m]`` G statistic (likelihood ratio, chi-squared with ``(S - 1) * 2 * (B_j - 1)`` degrees of
    freedom) of each verifier's per-stratum rates against one set of rates, from the soft counts at ``q``."""
    d = em.data
    ones = em.soft_counts(q).reshape(d.n_strata, d.n_bins, d.m)
    zeros = d.totals.reshape(d.n_strata, d.n_bins, d.m) - ones
    total = np.zeros(d.m)
    for counts in (zeros, ones):
        counts = np.maximum(counts, 0.0)
        pooled = counts.sum(axis=0)
        share = pooled / np.maximum(pooled.sum(axis=0), 1e-12)
        expected = counts.sum(axis=1, keepdims=True) * share[None]
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(counts > 0, counts * np.log(counts / np.maximum(expected, 1e-300)), 0.0)
        total += 2 * terms.sum(axis=(0, 1))
    return total
