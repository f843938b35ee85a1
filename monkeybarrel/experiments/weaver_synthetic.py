"""Synthetic selection data built to break verifier ensembles, with a naive-Bayes oracle told the true rates.

Every kind mixes easy and hard problems, because that is where selection matters most and where a
model fitted on all rows at once goes wrong: on easy problems most samples are right and the most
frequent answer is the right one; on hard problems few samples are right and the generator has a
favourite wrong answer (an *attractor*), so the majority answer is wrong, and a verifier that likes
popular answers ("consensus-biased") is right on easy problems and wrong on hard ones.

Kinds (``KINDS``), each drawn with its own random settings per ``seed``:

* ``mixed_difficulty``: 16 samples per problem, informative verifiers that weaken on hard problems,
  consensus-biased verifiers, answers for majority vote;
* ``sparse_ragged``: the same with 60 % of the scores missing and ragged problems (1 to 24 samples,
  some with a single one);
* ``near_duplicates``: a few informative verifiers, one weak verifier and 30 near-copies of it;
* ``degenerate``: many one-candidate problems and constant columns (all missing, one value, one value
  but a handful);
* ``weak_verifiers``: the guard the other way: verifiers barely better than chance and no favourite
  wrong answer, so the majority answer carries most of the evidence.

Verifier scores come in the scales real verifiers use: reward-model logits (unbounded), probabilities
in [0, 1] and binary judge verdicts. Labels are returned separately (``SelectionData`` has none).

``naive_bayes_oracle(data, labels)`` is the yardstick: naive Bayes on the votes Weaver sees (each
verifier split at its median, the majority indicator as one more vote) with every TPR/FPR measured
on the labels over all rows, i.e. told the true rates but not which problems are hard; the best of
with and without the majority vote is reported.

    from monkeybarrel.experiments.weaver_synthetic import make_kind, naive_bayes_oracle
    data, labels, info = make_kind("mixed_difficulty", seed=0)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..core.groups import group_argmax
from ..core.metrics import selection_accuracy
from ..core.selection_data import SelectionData
from ..selection.weaver import majority_column

N_WRONG_ANSWERS = 7
"""Distinct wrong answers a problem's samples can give (answer ``w1`` is the attractor)."""


@dataclass
class Problems:
    """Candidates of mixed-difficulty problems: ``[n]`` arrays over all candidates.

    Attributes:
        groups: problem index of each candidate; ``hard``: ``[n_problems]`` bool.
        y: correctness; ``answers``: answer strings (None = no answer extracted).
        modal: the candidate carries its problem's most frequent answer.
        rows_hard: the candidate's problem is hard.
    """

    groups: np.ndarray
    hard: np.ndarray
    y: np.ndarray
    answers: np.ndarray
    modal: np.ndarray
    rows_hard: np.ndarray


def draw_problems(rng: np.random.Generator, sizes: np.ndarray, hard_share: float, attractor: float,
                  no_answer: float = 0.05) -> Problems:
    """Candidates of ``len(sizes)`` problems of mixed difficulty.

    Args:
        sizes: ``[n_problems]`` candidates per problem.
        hard_share: share of hard problems (sample accuracy ~ Beta(1, 5)); easy ones ~ Beta(5, 1.5).
        attractor: on hard problems, the share of wrong samples giving the one favourite wrong answer
            (on easy problems wrong answers spread evenly over ``N_WRONG_ANSWERS``).
        no_answer: share of samples without an extracted answer (graded wrong).
    """
    n_problems = sizes.size
    groups = np.repeat(np.arange(n_problems), sizes)
    hard = rng.random(n_problems) < hard_share
    rate = np.where(hard, rng.beta(1.0, 5.0, n_problems), rng.beta(5.0, 1.5, n_problems))
    rows_hard = hard[groups]
    y = rng.random(groups.size) < rate[groups]
    spread = rng.integers(1, N_WRONG_ANSWERS + 1, groups.size)
    wrong = np.where(rows_hard & (rng.random(groups.size) < attractor), 1, spread)
    codes = np.where(y, 0, wrong)
    answers = np.array([f"a{c}" if c == 0 else f"w{c}" for c in codes], dtype=object)
    missing = rng.random(groups.size) < no_answer
    answers[missing] = None
    y = y & ~missing  # no extracted answer: graded wrong
    keys = _keys(groups, sizes)
    modal = majority_column(SelectionData.build(keys, answers=answers)) == 1
    return Problems(groups, hard, y, answers, modal, rows_hard)


def informative(rng: np.random.Generator, p: Problems, easy: float, hard: float) -> np.ndarray:
    """``[n]`` Gaussian score separated by ``easy`` (``hard``) standard deviations on easy (hard) problems."""
    return np.where(p.rows_hard, hard, easy) * p.y + rng.normal(size=p.y.size)


def consensus_biased(rng: np.random.Generator, p: Problems, skill: float, bias: float) -> np.ndarray:
    """``[n]`` score that also rewards the problem's most frequent answer: right on easy problems
    (where it is the correct one), wrong on hard ones (the attractor)."""
    return skill * p.y + bias * p.modal + rng.normal(size=p.y.size)


def flipped(rng: np.random.Generator, p: Problems, easy: float, hard: float) -> np.ndarray:
    """``[n]`` score right on easy problems (separation ``easy``) and wrong on hard ones (separation
    ``-hard``), independent of the other verifiers given correctness and difficulty."""
    return np.where(p.rows_hard, -hard, easy) * p.y + rng.normal(size=p.y.size)


def as_logit(score: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A reward-model-like unbounded scale."""
    return rng.uniform(2.0, 6.0) * score + rng.normal(0.0, 2.0)


def as_probability(score: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-score))


def as_verdict(score: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A binary judge verdict: 1 above a random cut of the score."""
    return (score > rng.uniform(0.0, 1.0)).astype(np.float64)


def _verifier_block(rng: np.random.Generator, p: Problems, n_informative: int, n_treacherous: int
                    ) -> tuple[list[np.ndarray], list[str]]:
    """Informative verifiers in mixed scales (weaker on hard problems) and treacherous ones, right on easy
    problems and wrong on hard ones: each at random consensus-biased (``judge``) or flipped (``flip``)."""
    columns, names = [], []
    scales = [lambda s: as_logit(s, rng), as_probability, lambda s: as_verdict(s, rng), lambda s: s]
    for j in range(n_informative):
        easy = rng.uniform(0.6, 1.4)
        columns.append(scales[j % len(scales)](informative(rng, p, easy, easy * rng.uniform(0.3, 0.7))))
        names.append(f"rm{j}")
    for j in range(n_treacherous):
        if rng.random() < 0.5:
            columns.append(scales[j % 2](consensus_biased(rng, p, rng.uniform(0.4, 0.9), rng.uniform(0.5, 1.2))))
            names.append(f"judge{j}")
        else:
            columns.append(scales[(j + 1) % 2](flipped(rng, p, rng.uniform(0.8, 1.4), rng.uniform(0.3, 0.8))))
            names.append(f"flip{j}")
    return columns, names


def _keys(groups: np.ndarray, sizes: np.ndarray) -> pa.Table:
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return pa.table({"problem_id": np.char.add("p", groups.astype(str).astype(object).astype(str)).astype(object),
                     "generator_id": ["g"] * groups.size,
                     "sample_index": np.arange(groups.size) - starts[groups]})


def _build(p: Problems, sizes: np.ndarray, columns: list[np.ndarray], names: list[str]) -> SelectionData:
    return SelectionData.build(_keys(p.groups, sizes), np.column_stack(columns), tuple(names), p.answers)


def _settings(rng: np.random.Generator) -> dict[str, float]:
    return {"hard_share": float(rng.uniform(0.3, 0.6)), "attractor": float(rng.uniform(0.4, 0.8))}


def _instance(rng: np.random.Generator, sizes: Callable[[np.random.Generator], np.ndarray], n_informative: int,
              treacherous: int) -> tuple[dict, np.ndarray, Problems, list[np.ndarray], list[str]]:
    """Settings, problem sizes, candidates and the verifier block of one instance (in this draw order)."""
    settings = _settings(rng)
    sizes = sizes(rng)
    p = draw_problems(rng, sizes, **settings)
    columns, names = _verifier_block(rng, p, n_informative, treacherous)
    return settings, sizes, p, columns, names


def _ragged(low: int, high: int, single: float, problems: int) -> Callable[[np.random.Generator], np.ndarray]:
    """Problem sizes uniform in [low, high), a ``single`` share of them with one candidate."""
    def sizes(rng: np.random.Generator) -> np.ndarray:
        out = rng.integers(low, high, problems)
        out[rng.random(problems) < single] = 1
        return out
    return sizes


def mixed_difficulty(rng: np.random.Generator, problems: int = 400, treacherous: int = 1
                     ) -> tuple[SelectionData, np.ndarray, dict]:
    settings, sizes, p, columns, names = _instance(rng, lambda _: np.full(problems, 16), 4, treacherous)
    return _build(p, sizes, columns, names), p.y, {**settings, "hard": p.hard}


def sparse_ragged(rng: np.random.Generator, problems: int = 500, treacherous: int = 1
                  ) -> tuple[SelectionData, np.ndarray, dict]:
    settings, sizes, p, columns, names = _instance(rng, _ragged(1, 25, 0.15, problems), 5, treacherous)
    X = np.column_stack(columns)
    X[rng.random(X.shape) < 0.6] = np.nan
    data = SelectionData.build(_keys(p.groups, sizes), X, tuple(names), p.answers)
    return data, p.y, {**settings, "hard": p.hard, "missing": 0.6}


def near_duplicates(rng: np.random.Generator, problems: int = 400, copies: int = 30, treacherous: int = 0
                    ) -> tuple[SelectionData, np.ndarray, dict]:
    settings, sizes, p, columns, names = _instance(rng, lambda _: np.full(problems, 16), 3, treacherous)
    weak = consensus_biased(rng, p, rng.uniform(0.1, 0.3), rng.uniform(0.3, 1.0))
    noise = rng.uniform(0.1, 0.5)
    columns += [weak] + [weak + noise * rng.normal(size=weak.size) for _ in range(copies)]
    names += ["weak"] + [f"weak_copy{k}" for k in range(copies)]
    return _build(p, sizes, columns, names), p.y, {**settings, "hard": p.hard, "copy_noise": noise}


def degenerate(rng: np.random.Generator, problems: int = 500, treacherous: int = 1
               ) -> tuple[SelectionData, np.ndarray, dict]:
    settings, sizes, p, columns, names = _instance(rng, _ragged(2, 17, 0.3, problems), 4, treacherous)
    n = p.y.size
    almost = np.full(n, 0.5)
    almost[rng.choice(n, 3, replace=False)] = 0.9
    columns += [np.full(n, np.nan), np.ones(n), almost]
    names += ["all_missing", "constant", "constant_but_three"]
    return _build(p, sizes, columns, names), p.y, {**settings, "hard": p.hard}


def weak_verifiers(rng: np.random.Generator, problems: int = 300) -> tuple[SelectionData, np.ndarray, dict]:
    """A guard in the other direction: verifiers barely better than chance, no favourite wrong answer,
    so the majority answer carries most of the evidence."""
    settings = {"hard_share": float(rng.uniform(0.2, 0.4)), "attractor": 0.0}
    sizes = np.full(problems, 16)
    p = draw_problems(rng, sizes, **settings)
    columns = [as_probability(informative(rng, p, rng.uniform(0.1, 0.3), rng.uniform(0.05, 0.15))) for _ in range(5)]
    return _build(p, sizes, columns, [f"weak{j}" for j in range(5)]), p.y, {**settings, "hard": p.hard}


KINDS: dict[str, Callable[..., tuple[SelectionData, np.ndarray, dict]]] = {
    "mixed_difficulty": mixed_difficulty,
    "sparse_ragged": sparse_ragged,
    "near_duplicates": near_duplicates,
    "degenerate": degenerate,
    "weak_verifiers": weak_verifiers,
}


def make_kind(kind: str, seed: int = 0, **options: Any) -> tuple[SelectionData, np.ndarray, dict]:
    """One random instance of ``kind``: ``(data, labels [n] bool, settings)``."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(KINDS)}")
    return KINDS[kind](np.random.default_rng([seed, sorted(KINDS).index(kind)]), **options)


def median_votes(scores: np.ndarray) -> np.ndarray:
    """``[n, m]`` 1/0 vote of each score against its column's median (>=), NaN stays NaN."""
    from ..selection.weaver import ScoreNormalizer

    cut = ScoreNormalizer("quantile").fit(scores).cutoffs(0.5)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(scores), np.nan, (scores >= cut).astype(np.float64))


def naive_bayes_scores(votes: np.ndarray, labels: np.ndarray, smoothing: float = 0.5) -> np.ndarray:
    """``[n]`` naive-Bayes log-odds from ``votes [n, m]`` (NaN abstains) with every rate measured on ``labels``."""
    y = np.asarray(labels, dtype=bool)
    out = np.zeros(votes.shape[0])
    for j in range(votes.shape[1]):
        seen = ~np.isnan(votes[:, j])
        v = votes[:, j] == 1
        tpr = (np.sum(v & y & seen) + smoothing) / (np.sum(y & seen) + 2 * smoothing)
        fpr = (np.sum(v & ~y & seen) + smoothing) / (np.sum(~y & seen) + 2 * smoothing)
        out += np.where(~seen, 0.0, np.where(v, np.log(tpr / fpr), np.log((1 - tpr) / (1 - fpr))))
    return out


def naive_bayes_oracle(data: SelectionData, labels: np.ndarray) -> dict[str, float]:
    """Selection accuracy of naive Bayes told the true (all-rows) rates, with and without the majority vote.

    Returns ``{"with_majority", "without_majority", "best"}``.
    """
    votes = median_votes(data.scores)
    result = {}
    for name, columns in (("without_majority", votes), ("with_majority", np.column_stack([votes, majority_column(data)]))):
        chosen = group_argmax(naive_bayes_scores(columns, labels), data.groups, data.n_problems, data.tiebreak)
        result[name] = selection_accuracy(chosen, labels)
    result["best"] = max(result.values())
    return result
