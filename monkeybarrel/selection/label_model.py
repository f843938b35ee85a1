"""The label model behind Weaver: a binary latent-class (Dawid–Skene) model fitted by EM on sufficient statistics.

Data layout (``EMData``): every verifier's score is one of ``n_bins`` ordered bins or an abstain. EM reads
the votes as one float32 indicator matrix ``F [rows, n_bins * m]`` (column ``b * m + j``: verifier j in
bin b), so the E-step is one product ``F @ log θ`` and the M-step one product ``q @ F`` per stratum:
the per-verifier sufficient statistics (soft counts of each bin in each class). Rows are sorted by
(stratum, item) so both are contiguous slices.

* **Items** are what the hidden label belongs to. By default each row (candidate) is an item; with
  final answers, an item is an *answer* of a problem: all candidates giving it are right or wrong
  together, so their votes are repeated evidence about one label (summed in log space).
* **Cells** (optional) add one categorical observation per item: the answer's share of its problem's
  candidates (the majority evidence), with its own class-conditional table.
* **Strata** (optional) are groups of problems (e.g. by how much the samples agree); each verifier's
  rates per stratum are its rates over all strata plus a fixed share (``Model.shrink``, a positive-part
  James–Stein factor) of its stratum's deviation from them.
* **Cross-fitted cells**: a (stratum, cell) pair can take its cell evidence from the votes-only
  posterior of its stratum's items instead of the joint fit (``Model.crossfit``), so the cell cannot
  define the label it is evidence about.
* Without items, strata or cells, rows with equal votes are merged into one weighted pattern when that
  compresses (few verifiers), which is the classic Weaver setting.

EM is accelerated by SQUAREM (Varadhan & Roland, 2008, scheme S3) and stops when the objective per
item changes by less than ``tol``. Products run in float32 (indicators are exact, soft counts carry
~1e-7 relative rounding); parameters, sums and the objective are float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

CELL_NONE = -1
"""Cell of an item without the categorical observation."""


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass
class EMData:
    """Votes in the layout EM reads (see the module docstring).

    Attributes:
        F: ``[N, n_bins * m]`` float32 indicators, rows sorted by (stratum, item).
        row_of: ``[N]`` original row (or first row of a merged pattern) of each sorted row.
        inverse: ``[n]`` sorted row holding each original row.
        weight: ``[I]`` float64 multiplicity of each item (merged patterns; 1 otherwise).
        item_start, item_size: ``[I]`` first sorted row and row count of each item.
        item_cell: ``[I]`` int cell of each item (``CELL_NONE`` = none).
        item_stratum: ``[I]`` int stratum of each item.
        stratum_rows: ``[S + 1]`` sorted-row offsets of the strata.
        totals: ``[S, n_bins * m]`` float64 weighted count of every (bin, verifier) per stratum.
        n_bins, m, n_cells, n_strata: sizes.
        rows_are_items: every item is one row (no summing needed).
    """

    F: np.ndarray
    row_of: np.ndarray
    inverse: np.ndarray
    weight: np.ndarray
    item_start: np.ndarray
    item_size: np.ndarray
    item_cell: np.ndarray
    item_stratum: np.ndarray
    stratum_rows: np.ndarray
    totals: np.ndarray
    n_bins: int
    m: int
    n_cells: int
    n_strata: int
    rows_are_items: bool
    row_weight: np.ndarray = field(default=None)  # [N] float32 weight of each sorted row

    @property
    def n_items(self) -> int:
        return int(self.item_start.size)

    def item_of_row(self) -> np.ndarray:
        """``[N]`` item of each sorted row."""
        return np.repeat(np.arange(self.n_items), self.item_size)

    def per_item(self, values: np.ndarray) -> np.ndarray:
        """``[N, k]`` (or ``[N]``) row values summed per item."""
        if self.rows_are_items:
            return values
        return np.add.reduceat(values, self.item_start, axis=0)

    def to_rows(self, values: np.ndarray) -> np.ndarray:
        """``[I]`` item values repeated onto their sorted rows."""
        return values if self.rows_are_items else np.repeat(values, self.item_size)


def pattern_keys(codes: np.ndarray, n_levels: int) -> np.ndarray:
    """``[n]`` int64 key identifying each row of small-integer ``codes`` (exact while n_levels^m < 2^63,
    else a 64-bit hash whose collisions are checked by the caller)."""
    m = codes.shape[1]
    if m * np.log2(max(n_levels, 2)) < 62:
        powers = n_levels ** np.arange(m, dtype=np.int64)
        return codes.astype(np.int64) @ powers
    multipliers = np.random.default_rng(0).integers(1, 2 ** 62, m, dtype=np.int64) | 1
    with np.errstate(over="ignore"):
        return (codes.astype(np.int64) * multipliers).sum(axis=1)


def build_em_data(codes: np.ndarray, n_bins: int, strata: np.ndarray | None = None, items: np.ndarray | None = None,
                  cells: np.ndarray | None = None, n_cells: int = 0, compress: bool = True,
                  n_strata: int | None = None) -> EMData:
    """Lay out ``codes [n, m]`` (int8 bin per verifier, ``n_bins`` = abstain) for EM.

    Args:
        strata: ``[n]`` int stratum of each row (default: one).
        items: ``[n]`` int item of each row (default: each row its own item); rows of an item must
            share a stratum.
        cells: ``[n]`` int cell of each row's item (``CELL_NONE`` = none); equal within an item.
        compress: merge rows with equal votes into weighted patterns when rows are items, there is
            one stratum and no cells, and that at least halves the rows.
        n_strata: number of strata (default: the largest stratum + 1; a sample may miss some).
    """
    n, m = codes.shape
    strata = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata, dtype=np.int64)
    if n_strata is None:
        n_strata = max(int(strata.max(initial=-1)) + 1 if n else 1, 1)
    weight_rows = np.ones(n)
    rows_are_items = items is None
    if rows_are_items and n_strata == 1 and cells is None and compress and n:
        keys = pattern_keys(codes, n_bins + 1)
        _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        if first.size * 2 <= n and np.array_equal(codes[first][inverse], codes):
            F = _indicators(codes[first], n_bins)
            weight = counts.astype(np.float64)
            totals = (weight.astype(np.float32) @ F).astype(np.float64)[None, :]
            p = first.size
            return EMData(F=F, row_of=first, inverse=inverse, weight=weight, item_start=np.arange(p),
                          item_size=np.ones(p, dtype=np.int64), item_cell=np.full(p, CELL_NONE),
                          item_stratum=np.zeros(p, dtype=np.int64), stratum_rows=np.array([0, p]), totals=totals,
                          n_bins=n_bins, m=m, n_cells=n_cells, n_strata=1, rows_are_items=True,
                          row_weight=weight.astype(np.float32))
    item_key = np.arange(n) if items is None else np.asarray(items, dtype=np.int64)
    order = np.lexsort((item_key, strata))
    sorted_items = item_key[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_items[1:] != sorted_items[:-1]])) if n else np.zeros(0, int)
    sizes = np.diff(np.append(starts, n))
    item_stratum = strata[order][starts]
    if n and not np.array_equal(np.repeat(item_stratum, sizes), strata[order]):
        raise ValueError("every row of an item must be in the same stratum")
    item_cell = (np.full(starts.size, CELL_NONE, dtype=np.int64) if cells is None
                 else np.asarray(cells, dtype=np.int64)[order][starts])
    F = _indicators(codes[order], n_bins)
    bounds = np.searchsorted(strata[order], np.arange(n_strata + 1))
    totals = np.stack([F[bounds[s]:bounds[s + 1]].sum(axis=0, dtype=np.float64) for s in range(n_strata)])
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    return EMData(F=F, row_of=order, inverse=inverse, weight=np.ones(starts.size), item_start=starts,
                  item_size=sizes, item_cell=item_cell, item_stratum=item_stratum, stratum_rows=bounds,
                  totals=totals, n_bins=n_bins, m=m, n_cells=n_cells, n_strata=n_strata,
                  rows_are_items=bool(np.all(sizes == 1)), row_weight=weight_rows[order].astype(np.float32))


def _indicators(codes: np.ndarray, n_bins: int) -> np.ndarray:
    """``[n, n_bins * m]`` float32 one-hot of each bin (an abstain is in none)."""
    n, m = codes.shape
    return np.concatenate([codes == b for b in range(n_bins)], axis=1).astype(np.float32)


@dataclass
class Params:
    """Parameters of the label model.

    Attributes:
        prior: P(item correct).
        theta: ``[S, 2, n_bins, m]`` P(bin | class) per stratum (class 1 = correct).
        cells: ``[2, n_cells]`` P(cell | class) (rows sum to 1 over the cells).
    """

    prior: float
    theta: np.ndarray
    cells: np.ndarray

    def pack(self) -> np.ndarray:
        return np.concatenate([[self.prior], self.theta.ravel(), self.cells.ravel()])

    @classmethod
    def unpack(cls, vector: np.ndarray, like: "Params") -> "Params":
        k = like.theta.size
        return cls(float(vector[0]), vector[1:1 + k].reshape(like.theta.shape), vector[1 + k:].reshape(like.cells.shape))


@dataclass
class Model:
    """What the EM fits besides the data: fixed settings and the parts decided by tests.

    Attributes:
        weights: ``[m]`` composite-likelihood weight of each verifier (1 / its effective copies).
        per_stratum: ``[m]`` bool, verifiers allowed their own rates in each stratum (``shrink`` > 0).
        crossfit: ``[S, n_cells]`` bool, (stratum, cell) pairs whose cell evidence is estimated from
            the verifiers alone (the cell's joint estimate was contradicted by the votes there).
        prior: fixed P(correct) or None.
        smoothing: Beta/Dirichlet pseudo-count of every rate.
        clamp: ``[I]`` known item labels (1, 0; NaN unknown), e.g. from dev labels.
        cell_weight: weight of the cell evidence in the posterior (0 = the votes alone decide).
        shrink: ``[2, m]`` fixed share of each verifier's per-stratum deviation kept, per class
            (``shrink_factors``; None = one set of rates). Fixed while EM runs, so EM is a fixed map.
    """

    weights: np.ndarray
    per_stratum: np.ndarray
    crossfit: np.ndarray
    prior: float | None = None
    smoothing: float = 0.5
    clamp: np.ndarray | None = None
    cell_weight: float = 1.0
    shrink: np.ndarray | None = None


class LatentClassEM:
    """EM for the latent-class model on ``EMData`` with a ``Model``'s settings."""

    def __init__(self, data: EMData, model: Model) -> None:
        self.data, self.model = data, model

    # ---- the two steps ----------------------------------------------------------------------------
    def log_terms(self, params: Params) -> tuple[np.ndarray, np.ndarray]:
        """``[I, 2]`` weighted log P(votes of the item | class) and ``[I]`` log-likelihood ratio of its cell."""
        d, w = self.data, self.model.weights
        theta = np.clip(params.theta, 1e-6, 1.0)
        log_theta = np.log(theta) * w  # [S, 2, B, m]
        rows = np.empty((d.F.shape[0], 2), dtype=np.float64)
        for s in range(d.n_strata):
            lo, hi = d.stratum_rows[s], d.stratum_rows[s + 1]
            if hi > lo:
                table = log_theta[s].reshape(2, -1).T.astype(np.float32)  # [B*m, 2]
                rows[lo:hi] = d.F[lo:hi] @ table
        votes = d.per_item(rows)
        return votes, self._cell_llr(params, votes)

    def _cell_llr(self, params: Params, votes: np.ndarray) -> np.ndarray:
        d = self.data
        out = np.zeros(d.n_items)
        if d.n_cells == 0:
            return out
        has = d.item_cell != CELL_NONE
        out[has] = self.cell_tables(params, votes)[d.item_stratum[has], d.item_cell[has]]
        return out * self.model.cell_weight

    def cell_tables(self, params: Params, votes: np.ndarray) -> np.ndarray:
        """``[S, n_cells]`` log-likelihood ratio of every (stratum, cell): the joint table, except the
        cross-fitted pairs, whose tables come from the votes-only posterior of their stratum's items."""
        d, sm = self.data, self.model.smoothing
        cells = np.clip(params.cells, 1e-9, 1.0)
        tables = np.tile(np.log(cells[1]) - np.log(cells[0]), (d.n_strata, 1))
        if not self.model.crossfit.any():
            return tables
        prior = min(max(params.prior, 1e-6), 1 - 1e-6)
        reference = _sigmoid(np.log(prior / (1 - prior)) + votes[:, 1] - votes[:, 0])
        has = d.item_cell != CELL_NONE
        for s in np.flatnonzero(self.model.crossfit.any(axis=1)):
            here = has & (d.item_stratum == s)
            ones = np.bincount(d.item_cell[here], d.weight[here] * reference[here], d.n_cells) + sm
            zeros = np.bincount(d.item_cell[here], d.weight[here] * (1 - reference[here]), d.n_cells) + sm
            own = np.log(ones / ones.sum()) - np.log(zeros / zeros.sum())
            tables[s] = np.where(self.model.crossfit[s], own, tables[s])
        return tables

    def e_step(self, params: Params) -> tuple[np.ndarray, float, np.ndarray]:
        """Posterior P(correct) per item, the objective per item, and the ``[I, 2]`` log joint."""
        votes, cell = self.log_terms(params)
        prior = min(max(params.prior, 1e-9), 1 - 1e-9)
        joint = votes + np.column_stack([np.log1p(-prior) * np.ones_like(cell), np.log(prior) + cell])
        q = _sigmoid(joint[:, 1] - joint[:, 0])
        if self.model.clamp is not None:
            known = ~np.isnan(self.model.clamp)
            q[known] = self.model.clamp[known]
        marginal = np.logaddexp(joint[:, 0], joint[:, 1])
        sm = self.model.smoothing
        penalty = sm * float((np.log(np.clip(params.theta, 1e-12, 1)).sum(axis=(1, 2)) * self.model.weights).sum())
        objective = (float(self.data.weight @ marginal) + penalty) / max(float(self.data.weight.sum()), 1.0)
        return q, objective, joint

    def soft_counts(self, q: np.ndarray) -> np.ndarray:
        """``[S, B * m]`` soft count of each (bin, verifier) in the correct class, per stratum."""
        d = self.data
        rows = (d.to_rows(q).astype(np.float32) * d.row_weight)
        out = np.zeros((d.n_strata, d.F.shape[1]))
        for s in range(d.n_strata):
            lo, hi = d.stratum_rows[s], d.stratum_rows[s + 1]
            if hi > lo:
                out[s] = rows[lo:hi] @ d.F[lo:hi]
        return out

    def m_step(self, q: np.ndarray) -> Params:
        d, model, sm = self.data, self.model, self.model.smoothing
        B, m = d.n_bins, d.m
        ones = self.soft_counts(q).reshape(d.n_strata, B, m)
        zeros = d.totals.reshape(d.n_strata, B, m) - ones
        theta = np.empty((d.n_strata, 2, B, m))
        for c, counts in enumerate((zeros, ones)):
            theta[:, c] = shrunk_rates(counts, sm, model.shrink[c] if model.shrink is not None else np.zeros(m))
        weighted = d.weight * q
        prior = float(weighted.sum() / max(d.weight.sum(), 1e-12)) if model.prior is None else model.prior
        cells = np.full((2, max(d.n_cells, 0)), 1.0 / max(d.n_cells, 1))
        if d.n_cells:
            has = d.item_cell != CELL_NONE
            for c, share in enumerate((d.weight - weighted, weighted)):
                counts = np.bincount(d.item_cell[has], share[has], d.n_cells) + sm
                cells[c] = counts / counts.sum()
        return Params(prior, theta, cells)

    # ---- SQUAREM ----------------------------------------------------------------------------------
    def _project(self, vector: np.ndarray, like: Params) -> Params:
        params = Params.unpack(vector, like)
        theta = np.clip(params.theta, 1e-9, None)
        theta = theta / theta.sum(axis=2, keepdims=True)
        cells = np.clip(params.cells, 1e-12, None)
        cells = cells / cells.sum(axis=1, keepdims=True) if cells.size else cells
        prior = min(max(params.prior, 1e-6), 1 - 1e-6) if self.model.prior is None else self.model.prior
        return Params(prior, theta, cells)

    def iterate(self, params: Params, max_steps: int, tol: float) -> tuple[Params, int, bool]:
        """SQUAREM cycles from ``params`` until the objective changes by < ``tol`` or ``max_steps`` EM steps."""
        steps, previous = 0, -np.inf
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
                params, objective = self.m_step(q_jump), objective_jump
                steps += 1
            else:
                params, objective = second, objective1
            if abs(objective - previous) < tol:
                return params, steps, True
            previous = objective
        return params, steps, False


def shrink_factors(counts: np.ndarray, smoothing: float) -> np.ndarray:
    """``[m]`` positive-part James–Stein factor ``max(0, 1 - df / X2)`` of each verifier's per-stratum rates of
    one class, from soft ``counts [S, B, m]``: ``X2`` is the Pearson statistic of the strata against their
    pooled rates, df = (S - 1)(B - 1). 0 = one set of rates, 1 = each stratum its own."""
    S, B, _ = counts.shape
    pooled = counts.sum(axis=0)
    pooled = (pooled + smoothing) / (pooled.sum(axis=0) + B * smoothing)
    size = counts.sum(axis=1, keepdims=True)
    own = (counts + smoothing) / (size + B * smoothing)
    statistic = (size * (own - pooled) ** 2 / np.maximum(pooled, 1e-12)).sum(axis=(0, 1))
    return np.clip(1.0 - (S - 1) * (B - 1) / np.maximum(statistic, 1e-12), 0.0, 1.0)


def shrunk_rates(counts: np.ndarray, smoothing: float, factor: np.ndarray) -> np.ndarray:
    """``[S, B, m]`` per-stratum bin rates of one class from soft ``counts [S, B, m]``: the pooled rates plus
    ``factor [m]`` times each stratum's deviation from them (``shrink_factors``)."""
    S, B, m = counts.shape
    pooled = counts.sum(axis=0)
    pooled = (pooled + smoothing) / (pooled.sum(axis=0) + B * smoothing)
    if S == 1 or not np.any(factor):
        return np.broadcast_to(pooled, counts.shape).copy()
    own = (counts + smoothing) / (counts.sum(axis=1, keepdims=True) + B * smoothing)
    return pooled + factor * (own - pooled)


def start_from(em: LatentClassEM, share: np.ndarray) -> Params:
    """Parameters after one M-step from item scores ``share`` in [0, 1] (a soft start)."""
    return em.m_step(np.clip(share, 1e-3, 1 - 1e-3))


def soft_vote(data: EMData, weights: np.ndarray) -> np.ndarray:
    """``[I]`` weighted share of the item's votes in the upper half of the bins (0.5 without votes)."""
    B, m = data.n_bins, data.m
    level = np.repeat(np.arange(B) / max(B - 1, 1), m).astype(np.float32) * np.tile(weights, B).astype(np.float32)
    observed = np.tile(weights, B).astype(np.float32)
    support = data.per_item((data.F @ level).astype(np.float64))
    voters = data.per_item((data.F @ observed).astype(np.float64))
    return np.divide(support, voters, out=np.full(data.n_items, 0.5), where=voters > 0)


def fit(em: LatentClassEM, start: np.ndarray | Params, max_iter: int, tol: float) -> dict[str, Any]:
    """Run EM from item scores ``start`` (or parameters) to convergence; returns the fit."""
    params = start if isinstance(start, Params) else start_from(em, start)
    params, steps, converged = em.iterate(params, max(max_iter - 1, 3), tol)
    q, objective, joint = em.e_step(params)
    return {"params": params, "posterior": q, "joint": joint, "objective": objective, "n_iter": steps + 1,
            "converged": converged}


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
        params, _, _ = em.iterate(start_from(em, candidate), steps, 0.0)
        trials.append((em.e_step(params)[1], params))
    return max(trials, key=lambda trial: trial[0])[1]


# ---- tests on a fitted model --------------------------------------------------------------------
def heterogeneity(em: LatentClassEM, q: np.ndarray) -> np.ndarray:
    """``[m]`` G statistic (likelihood ratio, chi-squared with ``(S - 1) * 2 * (n_bins - 1)`` degrees of
    freedom) of each verifier's per-stratum rates against one set of rates, from the soft counts at ``q``."""
    d = em.data
    B, m = d.n_bins, d.m
    ones = em.soft_counts(q).reshape(d.n_strata, B, m)
    zeros = d.totals.reshape(d.n_strata, B, m) - ones
    total = np.zeros(m)
    for counts in (zeros, ones):
        counts = np.maximum(counts, 0.0)
        pooled = counts.sum(axis=0)
        share = pooled / np.maximum(pooled.sum(axis=0), 1e-12)
        expected = counts.sum(axis=1, keepdims=True) * share[None]
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(counts > 0, counts * np.log(counts / np.maximum(expected, 1e-300)), 0.0)
        total += 2 * terms.sum(axis=(0, 1))
    return total
