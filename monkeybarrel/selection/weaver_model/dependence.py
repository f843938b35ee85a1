"""Verifiers that copy each other share one vote: weights from pairwise vote correlations.

Each verifier's log-likelihood is weighted by 1 / (its effective number of copies), a pair counting as
``clip((|phi| - low) / (high - low), 0, 1)`` copies, where phi is the correlation of their votes at each
verifier's median (its upper bins against its lower ones). The weights come first from the plain
correlations, then, after a first fit, from the correlations *within each class* (rows weighted by the
posterior), so verifiers correlated only through the label keep weight 1 and copies share one vote.
Shapes: ``positive``/``negative`` ``[n, k]`` 0/1 indicators of a verifier's upper / lower half (both 0 =
abstain); ``phi`` ``[k, k]``.
"""

from __future__ import annotations

import numpy as np

CORRELATION_ROWS = 60_000
"""Correlations are estimated on at most this many rows (a seeded sample)."""


def median_split(codes: np.ndarray, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[n, k]`` float indicators of each score's upper and lower half of its verifier's bins (the vote
    itself with two bins; both 0 for an abstain)."""
    half = bins // 2
    positive = ((codes >= half) & (codes < bins)).astype(np.float64)
    negative = (codes < half).astype(np.float64)
    return positive, negative


def vote_correlations(positive: np.ndarray, negative: np.ndarray, counts: np.ndarray | None = None) -> np.ndarray:
    """``[k, k]`` phi coefficient of every verifier pair over the rows where both vote (NaN if undefined).

    ``counts``: ``[n]`` weight of each row (pattern multiplicities, or posterior class weights).
    """
    observed = positive + negative
    weighted_positive, weighted_observed = ((positive, observed) if counts is None
                                            else (positive * counts[:, None], observed * counts[:, None]))
    n11, n1o, noo = positive.T @ weighted_positive, weighted_positive.T @ observed, observed.T @ weighted_observed
    n10, n01 = n1o - n11, n1o.T - n11
    n00 = noo - n11 - n10 - n01
    with np.errstate(invalid="ignore", divide="ignore"):
        return (n11 * n00 - n10 * n01) / np.sqrt((n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00))


def conditional_correlations(positive: np.ndarray, negative: np.ndarray, posterior: np.ndarray) -> np.ndarray:
    """``[k, k]`` phi within each class (rows weighted by the posterior ``[n]``), averaged over the classes.

    Verifiers that are independent given the label have ~0 here however strong they are; copies of each
    other keep their correlation.
    """
    mass = np.array([(1 - posterior).sum(), posterior.sum()])
    within = [vote_correlations(positive, negative, 1 - posterior), vote_correlations(positive, negative, posterior)]
    return (mass[0] * np.nan_to_num(within[0]) + mass[1] * np.nan_to_num(within[1])) / max(mass.sum(), 1e-12)


def dependence_weights(phi: np.ndarray, ramp: tuple[float, float]) -> np.ndarray:
    """``[k]`` weight 1 / (effective number of copies) of each verifier from pairwise ``|phi|``.

    A pair counts as ``clip((|phi| - low) / (high - low), 0, 1)`` of a copy, so an exact duplicate
    halves both weights and weakly related verifiers keep weight 1; smooth in phi, no cliff.
    """
    low, high = ramp
    share = np.clip((np.nan_to_num(np.abs(phi)) - low) / max(high - low, 1e-12), 0.0, 1.0)
    np.fill_diagonal(share, 1.0)
    return 1.0 / share.sum(axis=1)


def closest_copies(columns: np.ndarray, weights: np.ndarray, phi: np.ndarray, below: float = 0.95
                   ) -> dict[int, tuple[int, float]]:
    """``{column: (its most correlated column, |phi|)}`` for the verifiers weighted below ``below``."""
    phi = np.nan_to_num(np.abs(phi))
    np.fill_diagonal(phi, 0.0)
    out = {}
    for i in np.flatnonzero(weights < below):
        k = int(np.argmax(phi[i]))
        out[int(columns[i])] = (int(columns[k]), float(phi[i, k]))
    return out
