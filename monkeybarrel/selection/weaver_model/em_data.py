"""The layout the label model's EM reads: votes as indicators of (bin, verifier), rows sorted by (stratum, item).

Every verifier's score is one of its own bins (``B_j <= n_bins`` of them, ``mask [n_bins, m]``) or an
abstain. EM reads the votes as a sparse float32 indicator matrix ``F [rows, C]`` (CSR, one block per
stratum) over the C existing (bin, verifier) pairs (``columns``: their flat index ``b * m + j`` in the
``[n_bins, m]`` grid), so the E-step is one product ``F @ log θ`` and the M-step one product ``F.T @ q`` per
stratum: the per-verifier sufficient statistics (soft counts of each bin in each class). A row holds one
entry per verifier that scored it, so the products cost O(rows x verifiers) whatever the bins.

* **Items** are what the hidden label belongs to: each row (candidate) by default; with final
  answers, an *answer* of a problem (all candidates giving it are right or wrong together, so their
  votes are repeated evidence about one label, summed in log space).
* **Cells** (optional) add one categorical observation per item: the answer's share of its problem's
  samples (the majority evidence).
* **Strata** (optional) are groups of problems (by how much their samples agree).
* Without items, strata or cells, rows with equal votes are merged into one weighted pattern when that
  at least halves them (few verifiers), the classic Weaver setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

CELL_NONE = -1
"""Cell of an item without the categorical observation."""


@dataclass
class EMData:
    """Votes in the layout EM reads (see the module docstring).

    Attributes:
        blocks: per stratum, the ``[N_s, C]`` float32 CSR indicators of its rows (sorted by item);
            ``blocks_t``: their transposes (CSR too, for the M-step).
        columns: ``[C]`` flat ``[n_bins, m]`` index of each indicator column; ``mask``: ``[n_bins, m]``
            bool, the bins each verifier has.
        row_of: ``[N]`` original row (or first row of a merged pattern) of each sorted row.
        inverse: ``[n]`` sorted row holding each original row.
        weight: ``[I]`` float64 multiplicity of each item (merged patterns; 1 otherwise);
            ``row_weight``: ``[N]`` float32 the same per sorted row.
        item_start, item_size: ``[I]`` first sorted row and row count of each item.
        item_cell: ``[I]`` int cell of each item (``CELL_NONE`` = none).
        item_stratum: ``[I]`` int stratum of each item.
        stratum_rows: ``[S + 1]`` sorted-row offsets of the strata.
        totals: ``[S, n_bins * m]`` float64 weighted count of every (bin, verifier) per stratum.
        n_bins, m, n_cells, n_strata: sizes.
        rows_are_items: every item is one row (no summing needed).
    """

    blocks: list
    blocks_t: list
    columns: np.ndarray
    mask: np.ndarray
    row_of: np.ndarray
    inverse: np.ndarray
    weight: np.ndarray
    row_weight: np.ndarray
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

    @property
    def n_items(self) -> int:
        return int(self.item_start.size)

    @property
    def n_rows(self) -> int:
        return int(self.stratum_rows[-1])

    def products(self, tables: np.ndarray) -> np.ndarray:
        """``[N, k]`` float64: each sorted row's indicators times its stratum's ``tables [S, C, k]``."""
        out = np.empty((self.n_rows, tables.shape[2]))
        for s, block in enumerate(self.blocks):
            lo, hi = self.stratum_rows[s], self.stratum_rows[s + 1]
            if hi > lo:
                out[lo:hi] = block @ tables[s].astype(np.float32)
        return out

    def column_sums(self, values: np.ndarray) -> np.ndarray:
        """``[S, C]`` float64: per stratum, the indicators' columns weighted by the sorted rows' ``values [N]``."""
        out = np.zeros((self.n_strata, self.columns.size))
        for s, block in enumerate(self.blocks_t):
            lo, hi = self.stratum_rows[s], self.stratum_rows[s + 1]
            if hi > lo:
                out[s] = block @ values[lo:hi].astype(np.float32)
        return out

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

    def grid(self, values: np.ndarray) -> np.ndarray:
        """``[..., C]`` per-column values scattered onto the ``[..., n_bins * m]`` grid (zeros elsewhere)."""
        out = np.zeros((*values.shape[:-1], self.n_bins * self.m))
        out[..., self.columns] = values
        return out


@dataclass
class Params:
    """Parameters of the label model.

    Attributes:
        prior: P(item correct).
        theta: ``[S, 2, n_bins, m]`` P(bin | class) per stratum (class 1 = correct; 0 outside ``mask``).
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

    def mirrored(self, fixed_prior: float | None) -> "Params":
        """The label-swapped solution (the same likelihood without answers): classes exchanged."""
        prior = 1.0 - self.prior if fixed_prior is None else self.prior
        return Params(prior, self.theta[:, ::-1].copy(), self.cells[::-1].copy())


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


def build_em_data(codes: np.ndarray, bins: np.ndarray, strata: np.ndarray | None = None, items: np.ndarray | None = None,
                  cells: np.ndarray | None = None, n_cells: int = 0, n_strata: int | None = None,
                  compress: bool = True) -> EMData:
    """Lay out ``codes [n, m]`` (int8 bin per verifier, ``max(bins)`` or more = abstain) for EM.

    Args:
        bins: ``[m]`` number of bins of each verifier.
        strata: ``[n]`` int stratum of each row (default: one).
        items: ``[n]`` int item of each row (default: each row its own item); rows of an item must
            share a stratum.
        cells: ``[n]`` int cell of each row's item (``CELL_NONE`` = none); equal within an item.
        n_strata: number of strata (default: the largest stratum + 1; a sample may miss some).
        compress: merge rows with equal votes into weighted patterns when rows are items, there is
            one stratum and no cells, and that at least halves the rows.
    """
    n, m = codes.shape
    n_bins = int(max(bins.max(initial=2), 2))
    mask = np.arange(n_bins)[:, None] < bins[None, :]
    columns = np.flatnonzero(mask.ravel())
    strata = np.zeros(n, dtype=np.int64) if strata is None else np.asarray(strata, dtype=np.int64)
    if n_strata is None:
        n_strata = max(int(strata.max(initial=-1)) + 1 if n else 1, 1)
    shape = dict(columns=columns, mask=mask, n_bins=n_bins, m=m, n_cells=n_cells)
    if items is None and n_strata == 1 and cells is None and compress and n:
        keys = pattern_keys(codes, n_bins + 1)
        _, first, inverse, counts = np.unique(keys, return_index=True, return_inverse=True, return_counts=True)
        inverse = inverse.reshape(-1)
        if first.size * 2 <= n and np.array_equal(codes[first][inverse], codes):
            weight = counts.astype(np.float64)
            p = first.size
            bounds = np.array([0, p])
            blocks = _blocks(codes[first], columns, mask, bounds)
            return EMData(blocks=blocks, blocks_t=[b.T.tocsr() for b in blocks], row_of=first, inverse=inverse,
                          weight=weight, row_weight=weight.astype(np.float32), item_start=np.arange(p),
                          item_size=np.ones(p, dtype=np.int64), item_cell=np.full(p, CELL_NONE),
                          item_stratum=np.zeros(p, dtype=np.int64), stratum_rows=bounds,
                          totals=_totals(blocks, weight, bounds, columns, mask), n_strata=1, rows_are_items=True,
                          **shape)
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
    bounds = np.searchsorted(strata[order], np.arange(n_strata + 1))
    blocks = _blocks(codes[order], columns, mask, bounds)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    return EMData(blocks=blocks, blocks_t=[b.T.tocsr() for b in blocks], row_of=order, inverse=inverse,
                  weight=np.ones(starts.size), row_weight=np.ones(n, np.float32), item_start=starts, item_size=sizes,
                  item_cell=item_cell, item_stratum=item_stratum, stratum_rows=bounds,
                  totals=_totals(blocks, None, bounds, columns, mask), n_strata=n_strata,
                  rows_are_items=bool(np.all(sizes == 1)), **shape)


def _blocks(codes: np.ndarray, columns: np.ndarray, mask: np.ndarray, bounds: np.ndarray) -> list:
    """Per stratum (row ranges ``bounds``), the ``[N_s, C]`` float32 CSR indicator of each row's bin per verifier
    (an abstain, a code outside the verifier's bins, has no entry)."""
    n, m = codes.shape
    position = np.full(mask.shape, -1, dtype=np.int64)  # [n_bins, m] -> indicator column
    position.ravel()[columns] = np.arange(columns.size)
    inside = codes < mask.sum(axis=0)[None, :]  # a real bin of that verifier
    out = []
    for s in range(bounds.size - 1):
        part, seen = codes[bounds[s]:bounds[s + 1]], inside[bounds[s]:bounds[s + 1]]
        rows, verifiers = np.nonzero(seen)
        indices = position[part[rows, verifiers], verifiers]
        indptr = np.concatenate([[0], np.cumsum(seen.sum(axis=1))])
        out.append(sparse.csr_matrix((np.ones(indices.size, np.float32), indices, indptr),
                                     shape=(part.shape[0], columns.size)))
    return out


def _totals(blocks: list, weight: np.ndarray | None, bounds: np.ndarray, columns: np.ndarray, mask: np.ndarray
            ) -> np.ndarray:
    """``[S, n_bins * m]`` weighted count of every (bin, verifier) per stratum."""
    out = np.zeros((bounds.size - 1, mask.size))
    for s, block in enumerate(blocks):
        w = (np.ones(block.shape[0]) if weight is None else weight[bounds[s]:bounds[s + 1]])
        out[s, columns] = block.T @ w
    return out
