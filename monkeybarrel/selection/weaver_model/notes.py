"""What a Weaver fit did, in plain words: the selector's notes (``notes()``, ``describe()``, report.md) and
the estimator's warnings (an ambiguous orientation, picks against near-unanimous samples, EM stopped
before converging). ``names`` are the verifier columns' names (``[m]``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .answers import CELL_ALONE, cell_name, is_most_frequent
from .orientation import UNANIMITY
from .screening import NEAR_RANDOM_GAP

HETEROGENEITY_P = 1e-6
"""The notes name a verifier whose rates differ between agreement strata at this significance (G test)."""
CONTRADICTION = 0.5
"""Warn when, on at least ``MIN_NEAR_UNANIMOUS`` near-unanimous problems, the picks take the agreed answer
less often than this (the signature of a mirror solution)."""
MIN_NEAR_UNANIMOUS = 10


def _listed(names: Sequence[str], mask: np.ndarray, limit: int = 6) -> str:
    chosen = [names[j] for j in np.flatnonzero(mask)]
    return ", ".join(chosen[:limit]) + (f" and {len(chosen) - limit} more" if len(chosen) > limit else "")


def _disagreeing(model: Any) -> np.ndarray:
    """``[m]`` bool: kept verifiers worse than chance in the chosen orientation."""
    half = (np.arange(model.theta_.shape[1])[:, None] >= (model.bins_ + 1)[None, :] // 2)
    shift = np.nansum((model.theta_[1] - model.theta_[0]) * half, axis=0)
    return model.keep_ & (shift < 0)


def orientation_messages(model: Any, names: Sequence[str]) -> list[str]:
    """The orientation warnings of a fitted ``WeaverModel`` (none when the orientation is clear)."""
    out = []
    against = _listed(names, _disagreeing(model))
    if model.orientation_ == "ambiguous":
        text = (f"label orientation is ambiguous: {100 * model.orientation_against_:.0f}% of the verifier evidence "
                f"({against}) says the opposite, and the mirror solution (those verifiers right, the others wrong) "
                "fits the scores as well")
        consensus = model.consensus_
        if consensus and np.isfinite(consensus.get("chosen", np.nan)):
            text += (f"; chose the orientation whose picks take the agreed answer of near-unanimous problems more "
                     f"often ({100 * consensus['chosen']:.0f}% against {100 * consensus['mirror']:.0f}% for the mirror)")
        elif not model.answers_:
            text += "; without final answers nothing else can decide"
        out.append(text + ": give dev labels (dev_fraction) to settle it")
    check = model.agreement_check_
    if (model.orientation_ != "labels" and check.get("near_unanimous", 0) >= MIN_NEAR_UNANIMOUS
            and check["agreed_picked"] < CONTRADICTION):
        out.append(f"the picks go against the samples' agreement: on {check['near_unanimous']} problems where >= "
                   f"{100 * UNANIMITY:.0f}% of the samples give one answer, Weaver picks it only "
                   f"{100 * check['agreed_picked']:.0f}% of the time; if the verifiers it reads as worse than chance "
                   f"({against or 'none'}) are the reliable ones, this is the mirror solution: give dev labels")
    return out


def convergence_message(model: Any) -> str:
    """Why EM stopped early, with figures a user can act on."""
    stop = model.stop_
    moved = "" if stop.moved is None else (f"; over its last 10% of steps {100 * stop.moved:.1f}% of the items' "
                                          "posteriors moved by more than 0.01")
    return (f"EM stopped at max_iter={model.max_iter} steps before converging (tol {model.tol:g}): the objective "
            f"still changed by {stop.objective_change:.1e} per item per step and the rates by up to "
            f"{stop.rate_change:.1e}{moved}; raise model__max_iter, or model__tol to {10 * stop.objective_change:.0e}")


def describe_fit(model: Any, names: Sequence[str]) -> list[str]:
    """Plain-word notes on a fitted ``WeaverModel``: drops, bins, down-weighted copies, near-random verifiers,
    answers, strata and the majority evidence, the fallback, the orientation, non-convergence."""
    notes = [f"dropped {names[j]}: {reason}" for j, reason in sorted(model.dropped_.items())]
    if model.threshold_ is None and model.keep_.any() and model.bins_[model.keep_].max() > 2:
        bins = model.bins_[model.keep_]
        notes.append(f"scores in {bins.min()}-{bins.max()} equal-count bins per verifier (as many as its scores "
                     "carry, up to 8)" if bins.min() != bins.max() else f"scores in {bins.min()} equal-count bins per verifier")
    if 0 < model.fit_rows_ < getattr(model, "n_rows_", 0):
        notes.append(f"label model fitted on a seeded sample of whole problems ({model.fit_rows_:,} of "
                     f"{model.n_rows_:,} candidates); every candidate scored with it")
    notes += _copies(model, names)
    notes += [f"{names[j]} is near random (its mean bin differs by < {NEAR_RANDOM_GAP:g} between the classes): weight ~0"
              for j in np.flatnonzero(model.near_random_)]
    if model.fallback_ == "vote_count":
        notes.append(f"fallback: only {int(model.keep_.sum())} usable verifier(s), the label model needs 3; votes counted")
    notes += _strata(model, names)
    notes += orientation_messages(model, names)
    if model.flipped_ and model.orientation_ == "labels":
        notes.append("orientation corrected on the dev labels: the label-free fit had taken the mirror solution")
    elif model.flipped_ and model.orientation_ == "answers":
        notes.append("orientation set by the answers (at most one answer per problem is right fits it "
                     f"{model.answer_orientation_:.0f} log-units better than the mirror), against the verifiers' majority")
    elif model.orientation_ == "verifiers" and model.orientation_against_ > 0.02:
        notes.append(f"orientation set by the verifiers: {100 * model.orientation_against_:.0f}% of their evidence "
                     f"({_listed(names, _disagreeing(model))}) reads as worse than chance")
    if not model.converged_ and model.stop_ is not None:
        notes.append(convergence_message(model))
    return notes


def _copies(model: Any, names: Sequence[str]) -> list[str]:
    copies = sorted(model.dependence_.items())
    if len(copies) > 4:  # many copies: one note
        weights = model.dependence_weights_[[j for j, _ in copies]]
        listed = ", ".join(names[j] for j, _ in copies[:4])
        phis = [phi for _, (_, phi) in copies]
        return [f"down-weighted {len(copies)} verifiers that vote like each other ({listed}, ...; phi {min(phis):.2f}-"
                f"{max(phis):.2f} within each class) to weights {weights.min():.2f}-{weights.max():.2f}: together they "
                f"count about {weights.sum():.1f} votes"]
    return [f"down-weighted {names[j]} to {model.dependence_weights_[j]:.2f}: votes like {names[k]} (phi {phi:.2f} "
            "within each class)" for j, (k, phi) in copies]


def _strata(model: Any, names: Sequence[str]) -> list[str]:
    """Answer pooling, agreement strata, verifiers whose reliability depends on the problem, the majority evidence."""
    if not model.answers_ or model.fallback_:
        return []
    from scipy.stats import chi2

    edges = model.strata_edges_
    labels = stratum_labels(edges)
    notes = ["candidates pooled by final answer: an answer's candidates are repeated evidence about it"
             + (f"; problems in {len(labels)} strata by agreement (largest answer share: {', '.join(labels)}), "
                "each verifier's rates per stratum shrunk towards its rates over all" if edges.size else "")]
    if edges.size:
        for j in np.flatnonzero(model.keep_):
            B = int(model.bins_[j])
            if model.heterogeneity_[j] <= chi2.isf(HETEROGENEITY_P, edges.size * 2 * (B - 1)):
                continue
            upper = slice((B + 1) // 2, B)
            rates = "; ".join(f"{label}: TPR {theta[1, upper].sum():.2f} FPR {theta[0, upper].sum():.2f}"
                              for label, theta in zip(labels, model.strata_theta_[:, :, :, j]))
            notes.append(f"{names[j]}'s reliability depends on the problem (G = {model.heterogeneity_[j]:.0f}): {rates}")
    if model.majority_ == "joint":
        notes.append("majority evidence: each answer's share of its problem's samples (and whether it is the most "
                     f"frequent) is one more observation of its label, fitted with the verifiers; {_modal_llr(model)}")
    return notes


def _modal_llr(model: Any) -> str:
    """The share evidence of the commonest kinds of most frequent answer, in words."""
    cells = np.arange(model.cell_llr_.size)
    modal = is_most_frequent(cells) & (cells != CELL_ALONE)
    counts = model.cell_counts_.sum(axis=0)
    ranked = [c for c in np.argsort(-counts, kind="stable") if modal[c] and counts[c]][:3]
    if not ranked:
        return "no most frequent answers"
    return "log-odds " + "; ".join(f"{model.cell_llr_[c]:+.1f} for a {cell_name(int(c))}" for c in ranked)


def stratum_labels(edges: np.ndarray) -> list[str]:
    """``["< 56 %", "56 %-69 %", ">= 69 %"]`` for agreement cut points ``edges``."""
    if edges.size == 0:
        return ["all"]
    bounds = [f"{100 * e:.0f} %" for e in edges]
    return [f"< {bounds[0]}", *[f"{a}-{b}" for a, b in zip(bounds[:-1], bounds[1:])], f">= {bounds[-1]}"]
