"""Smoothie (Guha et al., NeurIPS 2024): label-free quality estimates of generators from embeddings.

The model: for input x, voter i's output embeds to λ_i(x) = y(x) + e_i with e_i ~ N(0, I_d / (2θ_i))
independent across voters, y(x) the (unknown) ideal output. Hence E||λ_i − λ_j||² = δ_i + δ_j with
δ_i = d / (2θ_i), and the closed-form triplet estimator averages ½(D_ij + D_ik − D_jk) over all pairs
{j, k} of the other voters. With A_i = Σ_{j≠i} D_ij and S = Σ_{a<b} D_ab it is

    δ̂_i = ((m − 1) A_i − S) / ((m − 1)(m − 2)),     θ̂_i = d / (2 δ̂_i)   (m ≥ 3 voters).

Routing picks argmin δ̂ (= argmax θ̂ whenever every δ̂ > 0; with few samples δ̂ can be ≤ 0, where
θ̂'s order flips, so everything here ranks by δ̂ and ``theta_`` is clipped for display).

* ``Smoothie-Global``: D is averaged over all inputs: one quality vector, one voter for every input.
* ``Smoothie-Local``: D is averaged over the K nearest inputs (input-text embeddings, the input
  itself included); K = 1 (the paper's headline setting) uses the input's own outputs only.

Two layers:

* ``Smoothie``: the estimator on arrays (scikit-learn style): ``fit(X [n, m, d], input_embeddings)``
  or ``fit_distances(P [n, m, m], ...)``; ``delta_``, ``theta_``; ``predict`` routes inputs,
  ``predict(new_inputs)`` routes unseen inputs by their nearest fitted inputs (train-time regime).
* ``SmoothieSelector`` (registered ``smoothie``): embeds the candidates of ``SelectionData`` and
  either routes each problem to a generator (``voters="generator"``; with several samples per
  generator, D uses every cross-generator sample pair and the routed generator's first sample is
  the pick) or selects among one problem's candidates (``voters="candidate"``: every sample is a
  voter, which is the embedding medoid under squared L2; works with a single generator).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector
from .embedders import make_embedder

VARIANTS = ("global", "local")
VOTERS = ("generator", "candidate")
PARALLEL_FLOPS = 2e9
"""Below this many floating-point operations a fit runs its BLAS on one thread: thread start-up and
synchronisation cost more than they save on small products (2-3x slower on a busy 2-core machine)."""


def _threads_for(flops: float):
    """One BLAS/OpenMP thread for small work, the library default for large work."""
    if flops >= PARALLEL_FLOPS:
        return nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1)


def nearest(queries: np.ndarray, points: np.ndarray, k: int, block: int = 2048) -> np.ndarray:
    """``[q, k]`` indices of the ``k`` nearest ``points [p, e]`` (squared L2) of every query ``[q, e]``,
    nearest first, ties to the smaller index; exact, in blocks of queries (one matrix product each).

    (scikit-learn's brute-force ``NearestNeighbors`` gives the same neighbours but starts an OpenMP
    pool per call, which dominated Smoothie-Local on small inputs.)
    """
    queries = np.asarray(queries, dtype=np.float32)
    points = np.asarray(points, dtype=np.float32)
    k = min(k, points.shape[0])
    squared = np.einsum("pe,pe->p", points, points, dtype=np.float64)
    out = np.empty((queries.shape[0], k), dtype=np.int64)
    columns = np.arange(points.shape[0])
    for start in range(0, queries.shape[0], block):
        part = queries[start:start + block]
        distance = squared[None, :] - 2.0 * (part @ points.T).astype(np.float64)  # + |query|^2: same per row
        if k < points.shape[0]:
            candidates = np.argpartition(distance, k - 1, axis=1)[:, :k]
        else:
            candidates = np.broadcast_to(columns, distance.shape)
        chosen = np.take_along_axis(distance, candidates, axis=1)
        order = np.lexsort((candidates, chosen), axis=1)
        rows = np.take_along_axis(candidates, order, axis=1)
        edge = chosen.max(axis=1, keepdims=True)  # a tie across the k-th place: take the smaller indices
        for r in np.flatnonzero((distance == edge).sum(axis=1) > (chosen == edge).sum(axis=1)):
            rows[r] = np.lexsort((columns, distance[r]))[:k]
        out[start:start + part.shape[0]] = rows
    return out


# ---- array kernels ----------------------------------------------------------------------------

def pairwise_sq_distances(X: np.ndarray) -> np.ndarray:
    """``[n, m, m]`` float64 squared L2 distances between the m voters' embeddings of each input.

    Args:
        X: ``[n, m, d]`` embeddings (one output per input and voter).
    """
    X = np.asarray(X, dtype=np.float32)
    sq = np.einsum("nmd,nmd->nm", X, X)
    P = (sq[:, :, None] + sq[:, None, :]).astype(np.float64)
    P -= 2.0 * np.matmul(X, X.transpose(0, 2, 1))
    np.maximum(P, 0.0, out=P)
    P[:, np.arange(X.shape[1]), np.arange(X.shape[1])] = 0.0
    return P


def cell_sq_distances(embeddings: np.ndarray, problem: np.ndarray, voter: np.ndarray, n_problems: int,
                      n_voters: int) -> np.ndarray:
    """Mean squared distance between voters' outputs per input, over every cross-voter sample pair.

    With several samples per (input, voter) cell, E||a − b||² over a from cell i and b from cell j
    is q_i + q_j − 2 μ_i·μ_j (μ the cell's mean embedding, q its mean squared norm), so each cell
    is reduced to (μ, q) in one sparse product.

    Args:
        embeddings: ``[N, d]`` one row per sample.
        problem: ``[N]`` input index in ``0..n_problems-1``.
        voter: ``[N]`` voter index in ``0..n_voters-1``.

    Returns:
        ``[n_problems, n_voters, n_voters]`` float64, NaN where either cell is empty, 0 on the diagonal.
    """
    from scipy import sparse

    E = np.asarray(embeddings, dtype=np.float64)
    cell = np.asarray(problem, dtype=np.int64) * n_voters + np.asarray(voter, dtype=np.int64)
    n_cells = n_problems * n_voters
    counts = np.bincount(cell, minlength=n_cells).astype(np.float64)
    member = sparse.csr_matrix((np.ones(cell.size), (cell, np.arange(cell.size))), shape=(n_cells, cell.size))
    present = counts > 0
    safe = np.where(present, counts, 1.0)
    mu = np.asarray(member @ E) / safe[:, None]
    q = np.bincount(cell, weights=np.einsum("nd,nd->n", E, E), minlength=n_cells) / safe
    mu = mu.reshape(n_problems, n_voters, -1)
    q = q.reshape(n_problems, n_voters)
    P = q[:, :, None] + q[:, None, :] - 2.0 * np.matmul(mu, mu.transpose(0, 2, 1))
    np.maximum(P, 0.0, out=P)
    present = present.reshape(n_problems, n_voters)
    P[~(present[:, :, None] & present[:, None, :])] = np.nan
    P[:, np.arange(n_voters), np.arange(n_voters)] = 0.0
    return P


def triplet_deltas(D: np.ndarray) -> np.ndarray:
    """Closed-form triplet estimate δ̂ ``[..., m]`` from mean squared distances D ``[..., m, m]``.

    NaN off-diagonal entries mean "pair never observed"; a voter counts only where it was observed
    with every other observed voter. Voters that do not count, and windows with fewer than 3 that
    do, get NaN.
    """
    D = np.asarray(D, dtype=np.float64)
    m = D.shape[-1]
    off = ~np.eye(m, dtype=bool)
    seen = np.isfinite(D) & off
    active = seen.any(axis=-1)
    usable = active & np.all(seen | ~off | ~active[..., None, :], axis=-1)
    pair = seen & usable[..., :, None] & usable[..., None, :]
    A = np.where(pair, D, 0.0).sum(axis=-1)
    S = A.sum(axis=-1, keepdims=True) / 2.0
    k = usable.sum(axis=-1, keepdims=True).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = ((k - 1.0) * A - S) / ((k - 1.0) * (k - 2.0))
    return np.where(usable & (k >= 3), delta, np.nan)


def theta_from_deltas(delta: np.ndarray, dim: int, eps: float = 1e-12) -> np.ndarray:
    """Normalised canonical parameters θ̂ = d / (2 max(δ̂, eps)), summing to 1 over the finite ones."""
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = dim / (2.0 * np.maximum(delta, eps))
        return theta / np.nansum(theta, axis=-1, keepdims=True)


def _window_mean(P: np.ndarray, neighbors: np.ndarray) -> np.ndarray:
    """``[q, m, m]`` NaN-aware mean of ``P [n, m, m]`` over each row of ``neighbors [q, K]``."""
    from scipy import sparse

    n, m, _ = P.shape
    if neighbors.shape[1] == 1:
        return P[neighbors[:, 0]]
    q, K = neighbors.shape
    window = sparse.csr_matrix((np.ones(q * K), (np.repeat(np.arange(q), K), neighbors.ravel())), shape=(q, n))
    finite = np.isfinite(P).reshape(n, m * m)
    total = np.asarray(window @ np.where(finite, P.reshape(n, m * m), 0.0))
    count = np.asarray(window @ finite.astype(np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / count, np.nan).reshape(q, m, m)


class Smoothie(BaseEstimator):
    """Smoothie quality estimator on arrays (test-time regime by default); a scikit-learn estimator.

    Args:
        variant: ``global`` (one θ̂ for all inputs) or ``local`` (θ̂ per input from its K nearest
            inputs, itself included unless ``exclude_self``).
        n_neighbors: K of the local variant (1 = the input's own outputs only).
        exclude_self: the local window of a fitted input is its K nearest *other* inputs (the
            paper's AlpacaEval setting: the 20 nearest other instructions); needs input embeddings.

    Attributes (after ``fit``):
        delta_: ``[m]`` (global) or ``[n, m]`` (local) estimated error δ̂ (smaller is better).
        theta_: same shape, normalised θ̂ (δ̂ clipped at 1e-12 first).
        distances_: ``[m, m]`` (global) or ``[n, m, m]`` (local) mean squared distances D used.
        neighbors_: ``[n, K]`` fitted inputs' neighbour indices (local) or None.
        inputs_: ``[n, e]`` float32 fitted input embeddings (local with input embeddings) or None; new
            inputs are routed by their nearest ones (``nearest``, exact brute force).

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> y = rng.normal(size=(200, 1, 16))
        >>> X = y + rng.normal(size=(200, 4, 16)) * np.array([0.2, 1.0, 0.5, 2.0])[None, :, None]
        >>> Smoothie("global").fit(X).delta_.argsort().tolist()
        [0, 2, 1, 3]
    """

    def __init__(self, variant: str = "global", n_neighbors: int = 1, exclude_self: bool = False) -> None:
        self.variant = variant
        self.n_neighbors = n_neighbors
        self.exclude_self = exclude_self

    def _check_params(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if not isinstance(self.n_neighbors, (int, np.integer)) or self.n_neighbors < 1:
            raise ValueError(f"n_neighbors must be an integer >= 1, got {self.n_neighbors!r}")
        if self.exclude_self and self.variant != "local":
            raise ValueError("exclude_self applies to the local variant only")

    def fit(self, X: np.ndarray, input_embeddings: np.ndarray | None = None) -> "Smoothie":
        """Estimate qualities from ``X [n, m, d]``: n inputs, m voters, one d-dim output each.

        Args:
            X: finite embeddings (unit-normalised in the paper).
            input_embeddings: ``[n, e]`` embeddings of the inputs; required for ``local`` with K > 1.
        """
        self._check_params()
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 3:
            raise ValueError(f"X must be [n_inputs, n_voters, dim], got shape {X.shape}")
        if not np.isfinite(X).all():
            raise ValueError("X has non-finite entries; mark missing outputs through fit_distances instead")
        n, m, d = X.shape
        with _threads_for(2.0 * n * m * m * d):
            return self._fit(X, input_embeddings)

    def _fit(self, X: np.ndarray, input_embeddings: np.ndarray | None) -> "Smoothie":
        if self.variant == "global":
            n, m, d = X.shape
            self._check_voters(m)
            flat = np.ascontiguousarray(X.transpose(1, 0, 2)).reshape(m, n * d)
            gram = (flat @ flat.T).astype(np.float64) / n
            sq = np.diag(gram).copy()
            D = np.maximum(sq[:, None] + sq[None, :] - 2.0 * gram, 0.0)
            np.fill_diagonal(D, 0.0)
            return self._finish_global(D, X.shape[2])
        return self.fit_distances(pairwise_sq_distances(X), input_embeddings, dim=X.shape[2])

    def fit_distances(self, distances: np.ndarray, input_embeddings: np.ndarray | None = None,
                      dim: int = 1) -> "Smoothie":
        """Estimate qualities from per-input squared distances ``[n, m, m]`` (NaN = not observed).

        Args:
            distances: mean squared L2 distance between voters' outputs, per input.
            input_embeddings: ``[n, e]``; required for ``local`` with K > 1, and for routing
                unseen inputs later.
            dim: embedding dimension d (scales θ̂ only).
        """
        self._check_params()
        P = np.asarray(distances, dtype=np.float64)
        if P.ndim != 3 or P.shape[1] != P.shape[2]:
            raise ValueError(f"distances must be [n_inputs, n_voters, n_voters], got shape {P.shape}")
        n = P.shape[0]
        width = 0 if input_embeddings is None else np.shape(input_embeddings)[-1]
        with _threads_for(2.0 * n * n * width):
            return self._fit_distances(P, input_embeddings, dim)

    def _fit_distances(self, P: np.ndarray, input_embeddings: np.ndarray | None, dim: int) -> "Smoothie":
        n, m, _ = P.shape
        self._check_voters(m)
        if self.variant == "global":
            finite = np.isfinite(P)
            count = finite.sum(axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                D = np.where(count > 0, np.where(finite, P, 0.0).sum(axis=0) / count, np.nan)
            return self._finish_global(D, dim)
        self.inputs_ = None
        if input_embeddings is not None:
            inputs = np.asarray(input_embeddings, dtype=np.float32)
            if inputs.ndim != 2 or inputs.shape[0] != n:
                raise ValueError(f"input_embeddings must be [{n}, e], got shape {inputs.shape}")
            self.inputs_ = inputs
        if self.exclude_self:
            if self.inputs_ is None:
                raise ValueError("exclude_self needs input_embeddings (the window is the nearest other inputs)")
            if n < 2:
                raise ValueError("exclude_self needs at least 2 inputs")
            self.neighbors_ = _other_inputs(inputs, min(self.n_neighbors, n - 1))
        elif self.n_neighbors == 1:
            self.neighbors_ = np.arange(n)[:, None]
        elif self.inputs_ is None:
            raise ValueError(f"the local variant with n_neighbors={self.n_neighbors} needs input_embeddings")
        else:
            self.neighbors_ = _self_inclusive(nearest(inputs, inputs, self.n_neighbors))
        self.train_distances_ = P
        self.distances_ = _window_mean(P, self.neighbors_)
        self.delta_ = triplet_deltas(self.distances_)
        self.dim_ = dim
        self.theta_ = theta_from_deltas(self.delta_, dim)
        return self

    def _check_voters(self, m: int) -> None:
        if m < 3:
            raise ValueError(f"Smoothie's triplet estimator needs at least 3 voters, got {m}")

    def _finish_global(self, D: np.ndarray, dim: int) -> "Smoothie":
        self.distances_, self.neighbors_, self.inputs_ = D, None, None
        self.delta_ = triplet_deltas(D)
        self.dim_ = dim
        self.theta_ = theta_from_deltas(self.delta_, dim)
        return self

    def deltas(self, input_embeddings: np.ndarray | None = None) -> np.ndarray:
        """``[q, m]`` δ̂ for the fitted inputs (None) or for new inputs ``[q, e]``.

        New inputs are scored from their K nearest *fitted* inputs (train-time regime); the global
        variant gives every input the same row.
        """
        check_is_fitted(self, "delta_")
        if self.variant == "global":
            q = 1 if input_embeddings is None else len(input_embeddings)
            return np.broadcast_to(self.delta_, (q, self.delta_.shape[0])).copy()
        if input_embeddings is None:
            return self.delta_.copy()
        if self.inputs_ is None:
            raise ValueError("routing new inputs needs the model fitted with input_embeddings")
        queries = np.asarray(input_embeddings, dtype=np.float32)
        with _threads_for(2.0 * queries.shape[0] * self.inputs_.shape[0] * self.inputs_.shape[1]):
            neighbors = nearest(queries, self.inputs_, self.n_neighbors)
            return triplet_deltas(_window_mean(self.train_distances_, neighbors))

    def thetas(self, input_embeddings: np.ndarray | None = None) -> np.ndarray:
        """``[q, m]`` normalised θ̂ for the fitted inputs (None) or for new inputs ``[q, e]`` (train-time
        regime: from their K nearest fitted inputs; the global variant gives every input the same row)."""
        return theta_from_deltas(self.deltas(input_embeddings), self.dim_)

    def predict(self, input_embeddings: np.ndarray | None = None) -> np.ndarray:
        """``[q]`` int64 voter index with the smallest δ̂ per input (-1 when none is estimable)."""
        delta = self.deltas(input_embeddings)
        finite = np.isfinite(delta)
        choice = np.where(finite, delta, np.inf).argmin(axis=-1)
        return np.where(finite.any(axis=-1), choice, -1).astype(np.int64)


def _other_inputs(inputs: np.ndarray, k: int) -> np.ndarray:
    """``[n, k]`` each fitted input's k nearest fitted inputs other than itself (twins count as others)."""
    neighbors = nearest(inputs, inputs, k + 1)
    rows = np.arange(neighbors.shape[0])[:, None]
    is_self = neighbors == rows
    # drop the point itself where found, else the farthest of the k + 1
    drop = np.where(is_self.any(axis=1), is_self.argmax(axis=1), k)
    keep = np.ones_like(neighbors, dtype=bool)
    keep[np.arange(neighbors.shape[0]), drop] = False
    return neighbors[keep].reshape(neighbors.shape[0], k)


def _self_inclusive(neighbors: np.ndarray) -> np.ndarray:
    """Neighbour lists of fitted points queried against themselves, forced to contain the point.

    (With duplicated inputs the index may otherwise return a twin instead of the point itself.)
    """
    rows = np.arange(neighbors.shape[0])
    missing = ~(neighbors == rows[:, None]).any(axis=1)
    if missing.any():
        neighbors = neighbors.copy()
        neighbors[missing] = np.concatenate([rows[missing, None], neighbors[missing, :-1]], axis=1)
    return neighbors


def candidate_deltas(embeddings: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """``[n]`` δ̂ of every candidate with its problem's candidates as the voters (one sample each).

    Vectorised over all problems: A_i = Σ_j ||e_i − e_j||² = k|e_i|² + Σ_j|e_j|² − 2 e_i·Σ_j e_j within
    the candidate's problem of k candidates. Problems with fewer than 3 candidates get −A_i (equal
    within the problem, so the tie-break decides).
    """
    from scipy import sparse

    E = np.asarray(embeddings, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    k = np.bincount(groups, minlength=n_groups).astype(np.float64)
    sq = np.einsum("nd,nd->n", E, E)
    member = sparse.csr_matrix((np.ones(groups.size), (groups, np.arange(groups.size))), shape=(n_groups, groups.size))
    sums = np.asarray(member @ E)
    sq_sums = np.bincount(groups, weights=sq, minlength=n_groups)
    A = k[groups] * sq + sq_sums[groups] - 2.0 * np.einsum("nd,nd->n", E, sums[groups])
    A = np.maximum(A, 0.0)
    S = np.bincount(groups, weights=A, minlength=n_groups) / 2.0
    kk = k[groups]
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = ((kk - 1.0) * A - S[groups]) / ((kk - 1.0) * (kk - 2.0))
    return np.where(kk >= 3, delta, A)


# ---- the selector ------------------------------------------------------------------------------

@SELECTORS.register("smoothie")
class SmoothieSelector(Selector):
    """Smoothie over ``SelectionData``: route problems to generators, or select among samples.

    Args:
        variant: ``global`` or ``local`` (``voters="generator"`` only).
        n_neighbors: K of the local variant; K > 1 needs ``data.problem_texts``.
        exclude_self: the local window is the K nearest *other* problems (needs ``data.problem_texts``).
        voters: ``generator`` (route each problem to one generator, pick its first sample) or
            ``candidate`` (every candidate of a problem is a voter; pick the best one).
        embedder: registered embedder name (``tfidf`` default, ``sentence-transformers``).
        embedder_options: options of the embedder, e.g. ``{model: all-MiniLM-L6-v2}``.

    Attributes (after ``fit``):
        generators_: ``[m]`` generator ids (``voters="generator"``), the columns of ``theta_``.
        estimator_: the fitted ``Smoothie``.
        theta_: ``[m]`` or ``[n_problems, m]`` normalised quality estimates.
        candidate_scores_: ``[n]`` −δ̂ of the fitted data's candidates (higher is better).

    ``decision_function`` on the fitted data returns ``candidate_scores_``; on other data the
    global variant applies the learned qualities, and the local one routes each problem by its
    nearest fitted problems (train-time regime, needs problem texts).
    """

    def __init__(self, variant: str = "local", n_neighbors: int = 1, voters: str = "generator",
                 embedder: str = "tfidf", embedder_options: dict[str, Any] | None = None,
                 exclude_self: bool = False) -> None:
        self.variant, self.n_neighbors, self.exclude_self, self.voters = variant, n_neighbors, exclude_self, voters
        self.embedder, self.embedder_options = embedder, embedder_options

    def _check_params(self) -> None:
        Smoothie(self.variant, self.n_neighbors, self.exclude_self)._check_params()
        if self.voters not in VOTERS:
            raise ValueError(f"smoothie: voters must be one of {VOTERS}, got {self.voters!r}")
        if self.voters == "candidate" and (self.variant != "local" or self.n_neighbors != 1):
            raise ValueError("smoothie: voters='candidate' selects within each problem; "
                             "use variant='local' with n_neighbors=1")

    def _embed(self, data: SelectionData) -> np.ndarray:
        if data.embeddings is not None:
            E = np.asarray(data.embeddings, dtype=np.float32)
            if E.shape[0] != data.n_candidates:
                raise ValueError(f"SelectionData.embeddings has {E.shape[0]} rows for {data.n_candidates} candidates")
            return E
        if data.texts is None:
            raise ValueError("smoothie needs SelectionData.texts or SelectionData.embeddings")
        return make_embedder(self.embedder, self.embedder_options).fit_transform(list(data.texts))

    def _inputs(self, data: SelectionData, fit: bool) -> np.ndarray | None:
        if data.problem_texts is None or (not fit and self.input_embedder_ is None):
            return None
        if fit:
            self.input_embedder_ = make_embedder(self.embedder, self.embedder_options).fit(list(data.problem_texts))
        return self.input_embedder_.transform(list(data.problem_texts))

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "SmoothieSelector":
        super().fit(data, labels)
        self._check_params()
        self.fitted_keys_ = (data.problem_id, data.generator_id, data.sample_index)
        self.estimator_, self.generators_, self.theta_, self.input_embedder_ = None, None, None, None
        if data.n_candidates == 0:
            self.candidate_scores_ = np.zeros(0)
            return self
        E = self._embed(data)
        if self.voters == "candidate":
            self.candidate_scores_ = -candidate_deltas(E, data.groups, data.n_problems)
            return self
        self.generators_, voter = np.unique(data.generator_id.astype(str), return_inverse=True)
        if len(self.generators_) < 3:
            raise ValueError(f"smoothie: routing (voters='generator') needs at least 3 generators, the data has "
                             f"{list(self.generators_)}; use voters='candidate' to select among samples")
        if self.variant == "local" and (self.n_neighbors > 1 or self.exclude_self) and data.problem_texts is None:
            raise ValueError(f"smoothie: variant='local' with n_neighbors={self.n_neighbors} needs "
                             "SelectionData.problem_texts (Experiment.selection_data() fills it)")
        P = cell_sq_distances(E, data.groups, voter, data.n_problems, len(self.generators_))
        inputs = self._inputs(data, fit=True) if self.variant == "local" else None
        self.estimator_ = Smoothie(self.variant, self.n_neighbors, self.exclude_self).fit_distances(
            P, inputs, dim=E.shape[1])
        self.theta_ = self.estimator_.theta_
        self.candidate_scores_ = self._scores(self.estimator_.deltas(), data.groups, voter)
        return self

    def _scores(self, delta: np.ndarray, groups: np.ndarray, voter: np.ndarray) -> np.ndarray:
        rows = np.zeros_like(groups) if delta.shape[0] == 1 else groups
        known = voter >= 0
        scores = np.full(groups.shape[0], np.nan)
        scores[known] = -delta[rows[known], voter[known]]
        return scores

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` −δ̂ of the candidate's generator on its problem (or of the candidate itself)."""
        if all(a.shape == b.shape and np.array_equal(a, b) for a, b in
               zip(self.fitted_keys_, (data.problem_id, data.generator_id, data.sample_index))):
            return self.candidate_scores_.copy()
        if data.n_candidates == 0:
            return np.zeros(0)
        if self.voters == "candidate":
            return -candidate_deltas(self._embed(data), data.groups, data.n_problems)
        if self.estimator_ is None:
            raise NotFittedError("SmoothieSelector was fitted on empty data: fit it on data with candidates")
        index = {g: i for i, g in enumerate(self.generators_)}
        voter = np.array([index.get(str(g), -1) for g in data.generator_id], dtype=np.int64)
        if self.variant == "global":
            return self._scores(self.estimator_.deltas(), data.groups, voter)
        inputs = self._inputs(data, fit=False)
        if inputs is None or self.input_embedder_ is None:
            raise ValueError("smoothie: routing new problems with the local variant needs problem_texts "
                             "at fit and at decision time")
        return self._scores(self.estimator_.deltas(inputs), data.groups, voter)
