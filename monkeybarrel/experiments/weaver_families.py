"""Families of selection data with an exact answer-aware Bayes posterior: the yardstick of issue #34.

Every instance is drawn from a generative model simple enough to invert exactly, so the best possible
label-free pick is known. Per problem:

* difficulty: hard with probability ``hard_share``; the sample accuracy p ~ Beta(``easy``) or
  Beta(``hard``);
* every sample is correct with probability p; a wrong sample gives one of ``wrong_answers`` wrong
  answers, on hard problems the favourite (the *attractor*) with probability ``attractor``, otherwise
  uniformly (so the majority answer of a hard problem is often wrong); ``no_answer`` of the samples
  have no extracted answer (graded wrong, independent of the rest);
* answer strings are random per problem, so nothing but equality within a problem is visible;
* each verifier is independent of the others given correctness and difficulty: a Gaussian score with
  mean ``separation`` (easy or hard value; negative = worse than chance) when the sample is correct
  and 0 otherwise, shown on a reward-model logit scale, as a probability or raw; or ``tests``: the
  share of ``n_tests`` unit tests passed, each with probability ``q1`` (correct) or ``q0`` (wrong);
* a verifier may run on part of the problems only (``coverage``): ``disagree`` where the largest
  answer share is below ``level`` (an LLM judge run only where the samples disagree), ``share`` on a
  random share of the problems (unit tests present for 30 % of them); elsewhere its score is NaN.

``exact_posterior(instance)`` computes, for every candidate, the exact log posterior that its answer is
the right one given every score and every answer of its problem (the hypotheses "answer g is right"
and "none is right", summed over the two difficulties; the labelling of the wrong answers is
marginalised, so only the partition of the samples into answers is used). Its argmax per problem is the
Bayes-optimal selection: no selector that sees the same data can beat it in expectation.

Families (``FAMILIES``), each a random draw of settings per seed:

* ``judge_where_disagree``: four or five weak verifiers and a strong LLM judge run only on the
  problems where fewer than ``level`` of the samples agree;
* ``unit_tests_partial``: weak verifiers and unit tests (5-10 tests, strong) on 25-35 % of the problems;
* ``worse_than_chance``: ten verifiers, six of them worse than chance (``n_bad`` to vary it);
  ``answers=False`` removes the final answers, for the orientation cases.

    from monkeybarrel.experiments.weaver_families import make_family, exact_posterior
    instance = make_family("judge_where_disagree", seed=0)
    instance.data, instance.labels, exact_posterior(instance)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from scipy.special import betaln, gammaln, logsumexp

from ..core.groups import group_argmax
from ..core.metrics import selection_accuracy
from ..core.selection_data import SelectionData


@dataclass(frozen=True)
class Verifier:
    """The class-conditional model of one verifier (see the module docstring).

    Attributes:
        name: score column.
        easy, hard: separation (latent mean of a correct sample's score, in noise units) on easy and
            hard problems; ignored for ``tests``.
        scale: ``logit`` (a * z + b), ``probability`` (sigmoid(z)), ``raw`` (z) or ``tests``.
        coverage: ``all``, ``disagree`` (problems whose largest answer share < ``level``) or ``share``
            (a random ``level`` share of the problems).
        level: the coverage parameter.
        n_tests, q1, q0: unit tests per candidate and the per-test pass probability when correct / wrong.
    """

    name: str
    easy: float = 0.0
    hard: float = 0.0
    scale: str = "raw"
    coverage: str = "all"
    level: float = 1.0
    n_tests: int = 0
    q1: float = 0.0
    q0: float = 0.0


@dataclass(frozen=True)
class Generator:
    """Problem-level settings of an instance (see the module docstring)."""

    problems: int = 400
    samples: int = 16
    hard_share: float = 0.4
    easy: tuple[float, float] = (5.0, 1.5)
    hard: tuple[float, float] = (1.0, 5.0)
    attractor: float = 0.6
    wrong_answers: int = 7
    no_answer: float = 0.03


@dataclass
class Instance:
    """One drawn instance: the data a selector sees, the labels, and what the exact posterior needs.

    Attributes:
        data: ``SelectionData`` (scores, answers; no labels).
        labels: ``[n]`` bool correctness.
        generator, verifiers: the settings it was drawn with.
        hard: ``[n_problems]`` bool difficulty of each problem.
        latent: ``[n, m]`` the verifiers' latent values (Gaussian z, or tests passed), NaN where missing.
        settings: the drawn settings in words (for reports).
    """

    data: SelectionData
    labels: np.ndarray
    generator: Generator
    verifiers: tuple[Verifier, ...]
    hard: np.ndarray
    latent: np.ndarray
    settings: dict[str, Any] = field(default_factory=dict)


def draw(generator: Generator, verifiers: list[Verifier], rng: np.random.Generator, answers: bool = True,
         settings: dict[str, Any] | None = None) -> Instance:
    """One instance of ``generator`` and ``verifiers`` (``answers=False``: no final answers at all)."""
    g = generator if answers else replace(generator, no_answer=0.0)  # nothing says a sample has no answer
    n = g.problems * g.samples
    groups = np.repeat(np.arange(g.problems), g.samples)
    hard = rng.random(g.problems) < g.hard_share
    rate = np.where(hard, rng.beta(*g.hard, g.problems), rng.beta(*g.easy, g.problems))
    y = rng.random(n) < rate[groups]
    attracted = hard[groups] & (rng.random(n) < g.attractor)
    wrong = np.where(attracted, 1, rng.integers(1, g.wrong_answers + 1, n))
    code = np.where(y, 0, wrong)
    answered = rng.random(n) >= g.no_answer
    y &= answered
    shuffle = rng.permuted(np.tile(np.arange(g.wrong_answers + 1), (g.problems, 1)), axis=1)  # random strings
    strings = np.array([f"p{p}:{shuffle[p, c]}" for p, c in zip(groups, code)], dtype=object)
    strings[~answered] = None
    keys = pa.table({"problem_id": np.char.add("p", groups.astype(str)).astype(object), "generator_id": ["g"] * n,
                     "sample_index": np.tile(np.arange(g.samples), g.problems)})
    agreement = _agreement(groups, code, answered, g.problems)
    scores, latent = np.full((n, len(verifiers)), np.nan), np.full((n, len(verifiers)), np.nan)
    for j, v in enumerate(verifiers):
        covered = _coverage(v, agreement, rng)[groups]
        z = _latent(v, y, hard[groups], rng)
        latent[covered, j] = z[covered]
        scores[covered, j] = _shown(v, z[covered], rng)
    data = SelectionData.build(keys, scores, tuple(v.name for v in verifiers),
                               list(strings) if answers else None)
    return Instance(data, y, g, tuple(verifiers), hard, latent, dict(settings or {}))


def _agreement(groups: np.ndarray, code: np.ndarray, answered: np.ndarray, problems: int) -> np.ndarray:
    """``[problems]`` largest answer share (of all samples) of each problem."""
    counts = np.zeros((problems, int(code.max()) + 1))
    np.add.at(counts, (groups[answered], code[answered]), 1.0)
    return counts.max(axis=1) / np.bincount(groups, minlength=problems)


def _coverage(v: Verifier, agreement: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if v.coverage == "all":
        return np.ones(agreement.size, dtype=bool)
    if v.coverage == "disagree":
        return agreement < v.level
    if v.coverage == "share":
        return rng.random(agreement.size) < v.level
    raise ValueError(f"unknown coverage {v.coverage!r}")


def _latent(v: Verifier, y: np.ndarray, hard: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if v.scale == "tests":
        return rng.binomial(v.n_tests, np.where(y, v.q1, v.q0)).astype(np.float64)
    return np.where(hard, v.hard, v.easy) * y + rng.standard_normal(y.size)


def _shown(v: Verifier, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The score a user sees: a monotone transform of the latent value (the likelihood ratio is unchanged)."""
    if v.scale == "tests":
        return z / v.n_tests
    if v.scale == "logit":
        return rng.uniform(2.0, 6.0) * z + rng.normal(0.0, 2.0)
    if v.scale == "probability":
        return 1.0 / (1.0 + np.exp(-z))
    return z


# ---- the exact posterior ------------------------------------------------------------------------
def _log_likelihood_ratio(instance: Instance, hard: bool) -> np.ndarray:
    """``[n]`` log P(scores | correct, difficulty) - log P(scores | wrong) of every candidate (missing: 0)."""
    out = np.zeros(instance.latent.shape[0])
    for j, v in enumerate(instance.verifiers):
        z = instance.latent[:, j]
        seen = ~np.isnan(z)
        if v.scale == "tests":
            k = z[seen]
            term = k * np.log(v.q1 / v.q0) + (v.n_tests - k) * np.log((1 - v.q1) / (1 - v.q0))
        else:
            d = v.hard if hard else v.easy
            term = d * z[seen] - 0.5 * d * d
        out[seen] += term
    return out


def _log_falling(n: int, k: np.ndarray) -> np.ndarray:
    """log n! / (n - k)! (-inf where k > n)."""
    k = np.asarray(k, dtype=np.float64)
    return np.where(k <= n, gammaln(n + 1) - gammaln(np.maximum(n - k, 0) + 1), -np.inf)


def _log_wrong_partition(sizes: np.ndarray, wrong: int, attractor: float) -> float:
    """log P(the wrong samples fall into groups of ``sizes``), wrong answers anonymous (summed over labellings)."""
    k, total = sizes.size, float(sizes.sum())
    if k == 0:
        return 0.0
    if attractor == 0:
        return float(_log_falling(wrong, k) - total * np.log(wrong))
    u = (1 - attractor) / wrong
    a = attractor + u
    none = _log_falling(wrong - 1, k)
    one = _log_falling(wrong - 1, k - 1) + logsumexp(sizes * np.log(a / u))
    return float(total * np.log(u) + np.logaddexp(none, one))


def exact_posterior(instance: Instance) -> np.ndarray:
    """``[n]`` exact log posterior that each candidate's answer is the right one (-inf without an answer).

    Hypotheses per problem: "answer g is right" for each distinct answer, and "no answer is right";
    each is summed over the two difficulties with the generator's prior, its Beta-binomial count term,
    the probability of the wrong answers' partition, and the verifiers' likelihood ratios. Without any
    final answer in the data, the log posterior that each candidate is correct (``_exact_candidates``).
    """
    data, g = instance.data, instance.generator
    answers = data.answers
    llr = {False: _log_likelihood_ratio(instance, False), True: _log_likelihood_ratio(instance, True)}
    out = np.full(data.n_candidates, -np.inf)
    order = np.argsort(data.groups, kind="stable")
    bounds = np.searchsorted(data.groups[order], np.arange(data.n_problems + 1))
    for p in range(data.n_problems):
        rows = order[bounds[p]:bounds[p + 1]]
        if not (answers >= 0).any():
            out[rows] = _exact_candidates(llr[False][rows], llr[True][rows], g)
            continue
        rows = rows[answers[rows] >= 0]
        if rows.size == 0:
            continue
        codes, local = np.unique(answers[rows], return_inverse=True)
        sizes = np.bincount(local).astype(np.float64)
        n = sizes.sum()
        per_hypothesis = []
        for is_hard, share, (a, b), attractor in ((False, 1 - g.hard_share, g.easy, 0.0),
                                                  (True, g.hard_share, g.hard, g.attractor)):
            evidence = np.bincount(local, llr[is_hard][rows], codes.size)
            terms = [np.log(share) + betaln(a + s, b + n - s) - betaln(a, b)
                     + _log_wrong_partition(np.delete(sizes, i), g.wrong_answers, attractor) + evidence[i]
                     for i, s in enumerate(sizes)]
            none = (np.log(share) + betaln(a, b + n) - betaln(a, b)
                    + _log_wrong_partition(sizes, g.wrong_answers, attractor))
            per_hypothesis.append(np.array([*terms, none]))
        joint = np.logaddexp(*per_hypothesis)
        out[rows] = (joint - logsumexp(joint))[local]
    return out


def _exact_candidates(easy: np.ndarray, hard: np.ndarray, g: Generator) -> np.ndarray:
    """``[k]`` log P(candidate correct | every score of its problem) without answers: the candidates'
    correctness is exchangeable given the problem's rate p ~ Beta, so the marginal of each sums over how
    many of the others are correct (elementary symmetric sums of their likelihood ratios, in log space)."""
    k = easy.size
    counts = np.arange(k + 1)
    per_difficulty = []
    for llr, share, (a, b) in ((easy, 1 - g.hard_share, g.easy), (hard, g.hard_share, g.hard)):
        weight = betaln(a + counts, b + k - counts) - betaln(a, b)  # [k + 1] P(a given set of this size | d)
        every = np.full(k + 1, -np.inf)
        every[0] = 0.0
        others = np.full((k, k + 1), -np.inf)  # e_j of the others' ratios, per left-out candidate
        others[:, 0] = 0.0
        for i in range(k):
            every[1:] = np.logaddexp(every[1:], llr[i] + every[:-1])
            step = np.logaddexp(others[:, 1:], llr[i] + others[:, :-1])
            step[i] = others[i, 1:]
            others[:, 1:] = step
        total = np.log(share) + logsumexp(every + weight)
        mine = np.log(share) + llr + logsumexp(others[:, :-1] + weight[1:], axis=1)
        per_difficulty.append((total, mine))
    (t0, m0), (t1, m1) = per_difficulty
    return np.logaddexp(m0, m1) - np.logaddexp(t0, t1)


def exact_accuracy(instance: Instance) -> float:
    """Selection accuracy of the exact posterior's argmax (ties: the data's tie-break rank)."""
    scores = exact_posterior(instance)
    scores = np.where(np.isfinite(scores), scores, np.nan)
    chosen = group_argmax(scores, instance.data.groups, instance.data.n_problems, instance.data.tiebreak)
    return selection_accuracy(chosen, instance.labels)


# ---- the families -------------------------------------------------------------------------------
SCALES = ("logit", "probability", "raw")


def _weak(rng: np.random.Generator, count: int, low: float = 0.4, high: float = 1.0) -> list[Verifier]:
    """Weak verifiers in mixed scales, weaker on hard problems."""
    out = []
    for j in range(count):
        easy = float(rng.uniform(low, high))
        out.append(Verifier(f"rm{j}", easy, easy * float(rng.uniform(0.3, 0.7)), SCALES[j % 3]))
    return out


def _generator(rng: np.random.Generator, **changes: Any) -> Generator:
    return Generator(hard_share=float(rng.uniform(0.3, 0.6)), attractor=float(rng.uniform(0.3, 0.7)), **changes)


def judge_where_disagree(rng: np.random.Generator, samples: int = 16, problems: int = 400, answers: bool = True
                         ) -> Instance:
    """Weak verifiers plus a strong judge (separation 2.5-3.5) run only where < ``level`` of the samples agree."""
    generator = _generator(rng, samples=samples, problems=problems)
    level = float(rng.uniform(0.6, 0.8))
    strength = float(rng.uniform(2.5, 3.5))
    judge = Verifier("judge", strength, strength * float(rng.uniform(0.8, 1.0)), "probability", "disagree", level)
    verifiers = [*_weak(rng, int(rng.integers(4, 6))), judge]
    return draw(generator, verifiers, rng, answers, {"judge_level": level, "judge_separation": strength})


def unit_tests_partial(rng: np.random.Generator, samples: int = 16, problems: int = 400, answers: bool = True
                       ) -> Instance:
    """Weak verifiers plus unit tests (5-10 tests; pass 85-97 % when correct, 5-30 % when wrong) on 25-35 %
    of the problems."""
    generator = _generator(rng, samples=samples, problems=problems)
    share = float(rng.uniform(0.25, 0.35))
    tests = Verifier("unit_tests", scale="tests", coverage="share", level=share, n_tests=int(rng.integers(5, 11)),
                     q1=float(rng.uniform(0.85, 0.97)), q0=float(rng.uniform(0.05, 0.3)))
    verifiers = [*_weak(rng, int(rng.integers(4, 6))), tests]
    return draw(generator, verifiers, rng, answers, {"tests_share": share, "n_tests": tests.n_tests})


def worse_than_chance(rng: np.random.Generator, n_bad: int = 6, n_verifiers: int = 10, samples: int = 16,
                      problems: int = 400, answers: bool = True) -> Instance:
    """``n_verifiers`` verifiers of separation 0.3-1.2, ``n_bad`` of them with the sign flipped (worse than
    chance: they prefer wrong samples), on easy and hard problems alike."""
    generator = _generator(rng, samples=samples, problems=problems)
    verifiers = []
    for j in range(n_verifiers):
        strength = float(rng.uniform(0.3, 1.2)) * (-1 if j < n_bad else 1)
        verifiers.append(Verifier(f"{'bad' if j < n_bad else 'good'}{j}", strength, strength, SCALES[j % 3]))
    return draw(generator, verifiers, rng, answers, {"n_bad": n_bad})


FAMILIES: dict[str, Callable[..., Instance]] = {
    "judge_where_disagree": judge_where_disagree,
    "unit_tests_partial": unit_tests_partial,
    "worse_than_chance": worse_than_chance,
}


def make_family(family: str, seed: int = 0, **options: Any) -> Instance:
    """One random instance of ``family`` (its own settings per ``seed``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; expected one of {sorted(FAMILIES)}")
    return FAMILIES[family](np.random.default_rng([seed, 34, sorted(FAMILIES).index(family)]), **options)
