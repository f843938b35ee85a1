"""The label model's fit, in the order it runs (docs/weaver.md, "Weaver"):

1. the EM layout of the kept verifiers' bins: answers as items, their share cells, agreement strata;
   on more than ``FIT_ROWS`` candidates, of a seeded sample of whole problems (the rates of 60,000
   candidates are known to ~0.005; every candidate is scored afterwards, in one pass);
2. dependence weights from the plain vote correlations (``dependence``);
3. EM from the best of four label-free starts (``START_SHARES``) on at most ``START_ROWS`` rows;
4. dependence weights again from the correlations within each class, and EM again;
5. per-stratum rates, each shrunk towards the verifier's rates over all strata, and EM again;
6. the orientation (``orientation``);
7. the share cells' and strata's counts and each verifier's heterogeneity, for the notes.

``fit_label_model`` returns a ``LabelModelFit``; ``WeaverModel`` turns it into its attributes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import em as lm
from .answers import N_CELLS, AnswerStructure
from .dependence import (CORRELATION_ROWS, closest_copies, conditional_correlations, dependence_weights,
                         median_split, vote_correlations)
from .em_data import CELL_NONE, EMData, build_em_data
from .orientation import UNANIMITY, Orientation, orient, orientation_shift

FIT_ROWS = 60_000
"""On more candidates than this, the label model is fitted on a seeded sample of whole problems."""
START_ROWS = 20_000
START_SHARES = (0.2, 0.05, 0.01)
START_STEPS = 12
"""EM's label-free starts: the soft vote plus hard starts at these top shares of it, each run ``START_STEPS``
EM steps on at most ``START_ROWS`` rows; the best objective goes on."""


@dataclass
class Settings:
    """The estimator's parameters the fit reads (``WeaverModel``'s of the same names)."""

    dependence: tuple[float, float] | None = (0.3, 0.9)
    prior: float | None = None
    smoothing: float = 0.5
    max_iter: int = 1000
    tol: float = 1e-8


@dataclass
class LabelModelFit:
    """A fitted label model over the ``k`` kept verifiers.

    Attributes:
        params: ``Params`` (``theta [S, 2, B, k]``, ``cells [2, n_cells]``, ``prior``).
        weights: ``[k]`` dependence weights; ``copies``: ``{kept index: (kept index, phi)}`` of the
            down-weighted ones.
        shrink: ``[2, k]`` per-stratum shrink factors (None: one stratum).
        orientation: how it was oriented (``orientation.Orientation``).
        n_iter: EM steps in all; ``iteration``: how the last EM run ended.
        heterogeneity: ``[k]`` G statistic of each verifier's per-stratum rates (NaN: one stratum).
        cell_counts: ``[S, n_cells]`` answers of the fitted rows in each (stratum, cell).
        n_patterns: rows EM ran on (distinct vote patterns when merged); ``sampled``: rows it was fitted on.
        pooled_theta: ``[2, B, k]`` rates over all strata.
    """

    params: lm.Params
    weights: np.ndarray
    copies: dict[int, tuple[int, float]]
    shrink: np.ndarray | None
    orientation: Orientation
    n_iter: int
    iteration: lm.Iteration
    heterogeneity: np.ndarray
    cell_counts: np.ndarray
    n_patterns: int
    sampled: int
    pooled_theta: np.ndarray
    problems: dict[str, Any] = field(default_factory=dict)


def row_sample(n: int, limit: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of a seeded random sample of at most ``limit`` of ``n`` rows (all when n <= limit)."""
    if n <= limit:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))


def em_problem(codes: np.ndarray, bins: np.ndarray, structure: AnswerStructure | None, strata: np.ndarray | None,
               n_strata: int, cells: bool, labelled: np.ndarray | None, settings: Settings) -> lm.LatentClassEM:
    """The EM problem of these rows: answers as items (with their share cells), agreement strata."""
    items = structure.items if structure is not None else None
    data = build_em_data(codes, bins, strata, items, structure.cells if cells and structure is not None else None,
                         N_CELLS if cells and structure is not None else 0, n_strata=n_strata)
    return lm.LatentClassEM(data, lm.Model(np.ones(codes.shape[1]), settings.prior, settings.smoothing,
                                           item_labels(labelled, data)))


def item_labels(labelled: np.ndarray | None, data: EMData) -> np.ndarray | None:
    """``[I]`` known labels of the items (an answer is known when one of its candidates is labelled)."""
    if labelled is None or not (~np.isnan(labelled)).any():
        return None
    rows = labelled[data.row_of]
    known = ~np.isnan(rows)
    hits = data.per_item(np.where(known, rows, 0.0))
    seen = data.per_item(known.astype(np.float64))
    return np.where(seen > 0, np.round(hits / np.maximum(seen, 1)), np.nan)


def fit_label_model(codes: np.ndarray, bins: np.ndarray, structure: AnswerStructure | None, edges: np.ndarray,
                    cells: bool, labelled: np.ndarray | None, settings: Settings) -> LabelModelFit:
    """Fit the label model on ``codes [n, k]`` (kept verifiers' bins, ``bins [k]`` each); see the module
    docstring for the order. ``labelled``: ``[n]`` 1 / 0 / NaN dev labels; ``edges``: agreement strata."""
    n = codes.shape[0]
    rows = structure.sample(FIT_ROWS) if structure is not None else (row_sample(n, FIT_ROWS) if n > FIT_ROWS else None)
    rows = np.arange(n) if rows is None else rows
    part = None if structure is None else structure.subset(rows)
    S = edges.size + 1 if structure is not None else 1
    strata = None if part is None else part.strata(edges)
    sub_labels = None if labelled is None else labelled[rows]
    em = em_problem(codes[rows], bins, part, strata, S, cells, sub_labels, settings)
    data, model = em.data, em.model
    sample = row_sample(rows.size, CORRELATION_ROWS)
    positive, negative = median_split(codes[rows][sample], bins)
    if settings.dependence is not None:
        model.weights = dependence_weights(vote_correlations(positive, negative), settings.dependence)
    fit = lm.fit(em, _start(em, codes[rows], bins, part, strata, S, cells, settings), settings.max_iter, settings.tol)
    copies: dict[int, tuple[int, float]] = {}
    if settings.dependence is not None:
        posterior = data.to_rows(fit["posterior"])[data.inverse[sample]]
        phi = conditional_correlations(positive, negative, posterior)
        model.weights = dependence_weights(phi, settings.dependence)
        copies = closest_copies(np.arange(bins.size), model.weights, phi)
        fit = _refit(em, fit, settings)
    if S > 1:  # rates per agreement stratum, each shrunk towards the rates over all strata
        ones = em.soft_counts(fit["posterior"]).reshape(S, data.n_bins, data.m)
        zeros = data.totals.reshape(S, data.n_bins, data.m) - ones
        model.shrink = np.stack([lm.shrink_factors(c, data.mask, settings.smoothing) for c in (zeros, ones)])
        fit = _refit(em, fit, settings)
    problem_of_item, agreed = _answer_items(data, part)
    fit, orientation = orient(em, fit, problem_of_item, agreed, settings.prior, settings.max_iter, settings.tol)
    has = data.item_cell != CELL_NONE
    cell_counts = np.bincount(data.item_stratum[has] * max(data.n_cells, 1) + data.item_cell[has],
                              minlength=S * data.n_cells).reshape(S, data.n_cells)
    return LabelModelFit(
        params=fit["params"], weights=model.weights, copies=copies, shrink=model.shrink, orientation=orientation,
        n_iter=fit["n_iter"], iteration=fit["iteration"],
        heterogeneity=lm.heterogeneity(em, fit["posterior"]) if S > 1 else np.full(bins.size, np.nan),
        cell_counts=cell_counts, n_patterns=data.n_rows, sampled=int(rows.size),
        pooled_theta=_pooled_theta(em, fit), problems=_problem_picks(fit, problem_of_item, agreed))


def _refit(em: lm.LatentClassEM, fit: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """EM again from the previous solution (after a change of weights or strata)."""
    refit = lm.fit(em, fit["params"], settings.max_iter, settings.tol)
    return dict(refit, n_iter=refit["n_iter"] + fit["n_iter"])


def _start(em: lm.LatentClassEM, codes: np.ndarray, bins: np.ndarray, structure: AnswerStructure | None,
           strata: np.ndarray | None, S: int, cells: bool, settings: Settings) -> lm.Params:
    """The best label-free start, chosen on at most ``START_ROWS`` of ``em``'s rows (``codes``; whole problems
    when answered)."""
    data = em.data
    n = codes.shape[0]
    rows = (structure.sample(START_ROWS, seed=1) if structure is not None else
            (row_sample(n, START_ROWS) if n > START_ROWS else None))
    if rows is None:
        return lm.best_start(em, lm.soft_vote(data, em.model.weights), START_SHARES, START_STEPS)
    clamp = None
    if em.model.clamp is not None:
        clamp = em.model.clamp[data.item_of_row()[data.inverse]][rows]
    small = em_problem(codes[rows], bins, None if structure is None else structure.subset(rows),
                       None if strata is None else strata[rows], S, cells, clamp, settings)
    small.model.weights = em.model.weights
    return lm.best_start(small, lm.soft_vote(small.data, small.model.weights), START_SHARES, START_STEPS)


def _answer_items(data: EMData, structure: AnswerStructure | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``[I]`` problem of each answer item (-1 for candidates without one) and whether it is the answer of a
    near-unanimous problem (>= ``UNANIMITY`` of its samples); None without answers."""
    if structure is None:
        return None, None
    first = data.row_of[data.item_start]
    problem = np.where(structure.cells[first] != 0, structure.problems[first], -1)
    share = data.item_size / np.maximum(structure.sizes[structure.problems[first]], 1)
    agreed = (problem >= 0) & (share >= UNANIMITY) & (structure.sizes[structure.problems[first]] > 1)
    return problem, agreed


def _problem_picks(fit: dict[str, Any], problem_of_item: np.ndarray | None, agreed: np.ndarray | None
                   ) -> dict[str, Any]:
    """Share of the near-unanimous problems (and how many) whose agreed answer the fit picks."""
    if problem_of_item is None or agreed is None or not agreed.any():
        return {}
    from .orientation import consensus_share, evidence_of

    return {"near_unanimous": int(np.unique(problem_of_item[agreed]).size),
            "agreed_picked": consensus_share(evidence_of(fit), problem_of_item, agreed)}


def _pooled_theta(em: lm.LatentClassEM, fit: dict[str, Any]) -> np.ndarray:
    """``[2, B, k]`` rates over all strata (per-stratum verifiers: their soft counts summed over the strata)."""
    params, d = fit["params"], em.data
    if params.theta.shape[0] == 1 or em.model.shrink is None or not em.model.shrink.any():
        return params.theta[0]
    ones = em.soft_counts(fit["posterior"]).sum(axis=0).reshape(d.n_bins, d.m)
    zeros = d.totals.sum(axis=0).reshape(d.n_bins, d.m) - ones
    return np.stack([lm._rates(c, d.mask, em.model.smoothing) for c in (zeros, ones)])


def fit_latent_class(votes: np.ndarray, prior: float | None = None, smoothing: float = 0.5, max_iter: int = 1000,
                     tol: float = 1e-8) -> dict[str, Any]:
    """EM for the binary latent-class model on 0/1 ``votes [n, m]`` (NaN = abstain), every row its own item,
    oriented so the verifiers are better than chance on the whole.

    Returns ``{"prior", "tpr" [m], "fpr" [m], "posterior" [n], "n_iter", "converged", "flipped"}``.
    """
    votes = np.asarray(votes, dtype=np.float64)
    codes = np.where(np.isnan(votes), 2, votes).astype(np.int8)
    m = votes.shape[1]
    data = build_em_data(codes, np.full(m, 2))
    em = lm.LatentClassEM(data, lm.Model(np.ones(m), prior, smoothing))
    fit = lm.fit(em, lm.best_start(em, lm.soft_vote(data, np.ones(m)), START_SHARES, START_STEPS), max_iter, tol)
    params, q = fit["params"], fit["posterior"]
    flipped = bool(orientation_shift(params.theta[0], data.mask).sum() < 0)
    if flipped:
        params, q = params.mirrored(prior), 1.0 - q
    return {"prior": params.prior, "tpr": params.theta[0, 1, 1], "fpr": params.theta[0, 0, 1],
            "posterior": q[data.inverse], "n_iter": fit["n_iter"], "converged": fit["iteration"].converged,
            "flipped": flipped}
