"""Which of the two label-swapped solutions is "correct": the label model's orientation.

Without labels, a latent-class fit and its mirror (every verifier's classes swapped, the prior
complemented) fit the votes equally well. The orientation is decided by the first that applies:

1. **labels**: the dev labels fixed in EM; the fit is refitted from its mirror if the labelled items
   say it is the wrong way round;
2. **answers**: with final answers, at most one answer per problem can be right, which only one
   orientation fits: a log-likelihood advantage of at least ``ANSWER_MARGIN`` decides;
3. **verifiers**: most of the (dependence-weighted) verifier evidence is better than chance. When at
   least ``AMBIGUOUS_SHARE`` of it points the other way the orientation is *ambiguous* (the mirror fits
   as well and a sizeable camp of verifiers disagrees); then, with final answers, the orientation whose
   picks agree more often with the samples' own agreement on near-unanimous problems (>= ``UNANIMITY``
   of the samples give one answer) is taken. An ambiguous orientation is always reported (warning,
   notes, report).

Shapes: ``theta [2, B, m]``; ``evidence [I]`` log-likelihood ratio of each item (no prior);
``problem_of_item [I]`` the problem of each answer item, -1 for items that are not answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import em as lm

ANSWER_MARGIN = float(np.log(20.0))
"""With final answers, the two orientations are compared by how well each fits "at most one answer per
problem is right"; a log-likelihood difference below this leaves the verifiers' direction to decide."""
AMBIGUOUS_SHARE = 0.15
"""The verifiers' orientation is ambiguous when at least this weighted share of their evidence points the
other way (a mirror pick can then only be silent when more than 85 % of the evidence is worse than chance)."""
UNANIMITY = 0.75
"""A problem is near-unanimous when at least this share of its samples give one answer."""


@dataclass
class Orientation:
    """How the fit was oriented.

    Attributes:
        how: ``labels``, ``answers``, ``verifiers`` or ``ambiguous`` (see the module docstring).
        flipped: the fit's first solution was mirrored.
        against: weighted share of the verifier evidence that points the other way, in the chosen orientation.
        disagreeing: ``[m]`` bool, verifiers worse than chance in the chosen orientation.
        answer_margin: |log-likelihood advantage| of the better orientation under "at most one answer per
            problem is right" (0 without answers).
        consensus: ``{"chosen", "mirror"}`` share of the near-unanimous problems whose agreed answer each
            orientation picks (empty when not measured).
    """

    how: str = "verifiers"
    flipped: bool = False
    against: float = 0.0
    disagreeing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    answer_margin: float = 0.0
    consensus: dict[str, float] = field(default_factory=dict)


def orientation_shift(theta: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``[m]`` E[bin position | correct] - E[bin position | incorrect] per verifier, positions scaled to
    [0, 1] over each verifier's own bins (> 0: better than chance), from ``theta [2, B, m]``."""
    top = np.maximum(mask.sum(axis=0) - 1, 1)
    levels = np.arange(theta.shape[1])[:, None] / top[None, :]
    return ((theta[1] - theta[0]) * levels * mask).sum(axis=0)


def answer_orientation(evidence: np.ndarray, problem_of_item: np.ndarray) -> float:
    """Log-likelihood advantage of the fitted orientation over its mirror under "at most one answer per
    problem is right", over problems with several answers.

    Per problem of k answers, the constrained likelihood ratio against "all wrong" is
    ``rho + (1 - rho) / k * sum_a exp(evidence_a)`` (none right with probability rho, else one answer
    uniformly); the mirror negates every ratio and pays ``sum_a evidence_a`` for relabelling. ``rho`` is
    fitted for each orientation (a grid), so neither wins by the prior alone.
    """
    answered = problem_of_item >= 0
    if not answered.any():
        return 0.0
    _, problem = np.unique(problem_of_item[answered], return_inverse=True)
    several = np.bincount(problem)[problem] >= 2
    if not several.any():
        return 0.0
    _, problem = np.unique(problem[several], return_inverse=True)
    llr = evidence[answered][several]
    n = int(problem.max()) + 1
    count = np.bincount(problem, minlength=n)
    rho = np.linspace(0.01, 0.99, 50)[:, None]

    def best(gain: np.ndarray) -> float:
        top = np.full(n, -np.inf)
        np.maximum.at(top, problem, gain)
        top = np.maximum(top, 0.0)
        mean = np.bincount(problem, np.exp(gain - top[problem]), n) / count  # scaled by exp(-top)
        values = top + np.log(rho * np.exp(-top) + (1 - rho) * mean)  # [grid, n]
        return float(values.sum(axis=1).max())

    return best(llr) - (best(-llr) + float(llr.sum()))


def item_picks(score: np.ndarray, problem: np.ndarray) -> np.ndarray:
    """Index of the best item of each problem (items ``[I]`` with their problem ``[I]``), ties to the first."""
    order = np.lexsort((-score, problem))
    first = np.concatenate([[True], problem[order][1:] != problem[order][:-1]])
    return order[first]


def consensus_share(evidence: np.ndarray, problem_of_item: np.ndarray, agreed: np.ndarray) -> float:
    """Share of the problems with an agreed item (``agreed [I]`` bool: the answer near-unanimous samples give)
    whose highest-evidence item is that one (NaN when there are none)."""
    answered = problem_of_item >= 0
    problems = np.unique(problem_of_item[agreed & answered])
    if problems.size == 0:
        return float("nan")
    rows = np.flatnonzero(answered & np.isin(problem_of_item, problems))
    picks = rows[item_picks(evidence[rows], problem_of_item[rows])]
    return float(agreed[picks].mean())


def evidence_of(fit: dict[str, Any]) -> np.ndarray:
    """``[I]`` log-likelihood ratio of each item under a fit (its log-odds without the prior)."""
    prior = min(max(fit["params"].prior, 1e-9), 1 - 1e-9)
    return fit["joint"][:, 1] - fit["joint"][:, 0] - np.log(prior / (1 - prior))


def mirror_fit(fit: dict[str, Any], fixed_prior: float | None) -> dict[str, Any]:
    """The fit's mirror solution (classes swapped)."""
    return dict(fit, params=fit["params"].mirrored(fixed_prior), posterior=1.0 - fit["posterior"],
                joint=fit["joint"][:, ::-1].copy(), flipped=not fit.get("flipped", False))


def orient(em: lm.LatentClassEM, fit: dict[str, Any], problem_of_item: np.ndarray | None, agreed: np.ndarray | None,
           fixed_prior: float | None, max_iter: int, tol: float) -> tuple[dict[str, Any], Orientation]:
    """The fit in its chosen orientation and how it was chosen (see the module docstring)."""
    clamp = em.model.clamp
    if clamp is not None and np.unique(clamp[~np.isnan(clamp)]).size == 2:
        fit = _on_labels(em, fit, fixed_prior, max_iter, tol)
        return fit, _record(em, fit, Orientation("labels", bool(fit.get("flipped", False))))
    shift = orientation_shift(fit["params"].theta.mean(axis=0), em.data.mask) * em.model.weights
    result = Orientation(flipped=False)
    flip = shift.sum() < 0
    if problem_of_item is not None:
        margin = answer_orientation(evidence_of(fit), problem_of_item)
        result.answer_margin = abs(margin)
        if abs(margin) >= ANSWER_MARGIN:
            flip, result.how = margin < 0, "answers"
    against = np.abs(shift[shift * (-1 if flip else 1) < 0]).sum() / max(np.abs(shift).sum(), 1e-12)
    if result.how == "verifiers" and against >= AMBIGUOUS_SHARE:
        result.how = "ambiguous"
        if agreed is not None and agreed.any():
            evidence = evidence_of(fit) * (-1 if flip else 1)
            result.consensus = {"chosen": consensus_share(evidence, problem_of_item, agreed),
                                "mirror": consensus_share(-evidence, problem_of_item, agreed)}
            if result.consensus["mirror"] > result.consensus["chosen"]:
                flip = not flip
                result.consensus = {"chosen": result.consensus["mirror"], "mirror": result.consensus["chosen"]}
    if flip:
        fit = mirror_fit(fit, fixed_prior)
    result.flipped = bool(fit.get("flipped", False))
    return fit, _record(em, fit, result)


def _record(em: lm.LatentClassEM, fit: dict[str, Any], result: Orientation) -> Orientation:
    shift = orientation_shift(fit["params"].theta.mean(axis=0), em.data.mask) * em.model.weights
    result.against = float(np.abs(shift[shift < 0]).sum() / max(np.abs(shift).sum(), 1e-12))
    result.disagreeing = shift < 0
    return result


def _on_labels(em: lm.LatentClassEM, fit: dict[str, Any], fixed_prior: float | None, max_iter: int, tol: float
               ) -> dict[str, Any]:
    """Check the orientation on the labelled items; refit from the mirrored solution if it is wrong."""
    clamp = em.model.clamp
    known = ~np.isnan(clamp)
    truth = clamp[known] == 1
    em.model.clamp = None  # the labelled items' own posterior must separate like their labels
    q, _, _ = em.e_step(fit["params"])
    em.model.clamp = clamp
    if q[known][truth].mean() >= q[known][~truth].mean():
        return fit
    mirror = lm.fit(em, fit["params"].mirrored(fixed_prior), max_iter, tol)
    return dict(mirror, n_iter=mirror["n_iter"] + fit["n_iter"], flipped=True)
