"""What a selector sees: label-free, columnar data about every candidate of every problem.

``SelectionData`` deliberately has no field for ground truth: label-free selectors cannot read
labels through it. Supervised selectors receive labels as a separate ``fit`` argument, and the
report marks them as label-based.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from .groups import factorize
from .registry import Registry

SELECTORS: Registry[Any] = Registry("selector", package="monkeybarrel.selection")
"""The selector registry (here, as ``core.sampling.SAMPLERS``, so that a config is checked without importing
the selection stage and scikit-learn); selectors register into it from ``monkeybarrel.selection``."""


@dataclass(frozen=True)
class SelectionData:
    """Candidates of many problems, flattened.

    Attributes:
        problem_id: ``[n]`` str, the candidate's problem.
        generator_id: ``[n]`` str.
        sample_index: ``[n]`` int.
        groups: ``[n]`` int64 problem index into ``problems``.
        problems: ``[n_groups]`` str problem ids, in first-appearance order.
        scores: ``[n, m]`` float64 verifier scores, NaN = missing or failed.
        verifiers: ``m`` verifier names (columns of ``scores``).
        answers: ``[n]`` int64 answer code, equal codes = equivalent final answers within a
            problem (codes are global), -1 = no answer extracted (abstains from votes).
        tiebreak: ``[n]`` int64 rank by (generator_id, sample_index) within the data; the
            stated tie-break rule of every selector: the smaller rank wins.
        embeddings: optional ``[n, d]`` float32 embeddings of the candidates' texts.
        texts: optional ``[n]`` str completion texts (label-free; for embedding-based selectors).
        problem_texts: optional ``[n_groups]`` str input text of each problem, aligned with
            ``problems`` (label-free; e.g. Smoothie's nearest-neighbour inputs).
    """

    problem_id: np.ndarray
    generator_id: np.ndarray
    sample_index: np.ndarray
    groups: np.ndarray
    problems: np.ndarray
    scores: np.ndarray
    verifiers: tuple[str, ...]
    answers: np.ndarray
    tiebreak: np.ndarray
    embeddings: np.ndarray | None = field(default=None, repr=False)
    texts: np.ndarray | None = field(default=None, repr=False)
    problem_texts: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_candidates(self) -> int:
        return int(self.groups.shape[0])

    @property
    def n_problems(self) -> int:
        return int(self.problems.shape[0])

    @classmethod
    def build(cls, keys: pa.Table, scores: np.ndarray | None = None, verifiers: tuple[str, ...] = (),
              answers: list[str | None] | np.ndarray | None = None,
              embeddings: np.ndarray | None = None, texts: list[str | None] | None = None,
              problem_texts: dict[str, str] | None = None) -> "SelectionData":
        """Assemble from a key table (problem_id, generator_id, sample_index) and aligned columns.

        Args:
            keys: n rows of candidate keys.
            scores: ``[n, m]`` float scores (default: no verifier columns).
            verifiers: names of the m columns.
            answers: ``[n]`` canonical answer strings or None.
            embeddings: optional ``[n, d]``.
            texts: optional ``[n]`` completion texts.
            problem_texts: optional ``problem_id -> input text`` (ids absent from it get "").
        """
        problem_id = np.asarray(keys.column("problem_id").to_numpy(zero_copy_only=False), dtype=object)
        generator_id = np.asarray(keys.column("generator_id").to_numpy(zero_copy_only=False), dtype=object)
        sample_index = keys.column("sample_index").to_numpy().astype(np.int64)
        n = problem_id.shape[0]
        groups, problems = factorize(problem_id.astype(str)) if n else (np.zeros(0, np.int64), np.zeros(0, object))
        if scores is None:
            scores = np.zeros((n, 0))
        scores = np.asarray(scores, dtype=np.float64).reshape(n, len(verifiers))
        answer_codes = np.full(n, -1, dtype=np.int64)
        if answers is not None:
            answers = np.asarray(answers, dtype=object)
            present = np.array([a is not None for a in answers], dtype=bool)
            if present.any():
                pairs = np.char.add(np.char.add(problem_id[present].astype(str), "\x1f"), answers[present].astype(str))
                answer_codes[present], _ = factorize(pairs)
        tiebreak = np.lexsort((sample_index, generator_id.astype(str))).argsort().astype(np.int64) if n else np.zeros(0, np.int64)
        return cls(problem_id=problem_id, generator_id=generator_id, sample_index=sample_index, groups=groups,
                   problems=np.asarray(problems, dtype=object), scores=scores, verifiers=tuple(verifiers),
                   answers=answer_codes, tiebreak=tiebreak, embeddings=embeddings,
                   texts=None if texts is None else np.asarray(texts, dtype=object),
                   problem_texts=None if problem_texts is None else np.asarray(
                       [problem_texts.get(str(p), "") for p in problems], dtype=object))

    @classmethod
    def from_arrays(cls, scores: np.ndarray, problem_id: np.ndarray | list, verifiers: tuple[str, ...] | None = None,
                    answers: list[str | None] | np.ndarray | None = None) -> "SelectionData":
        """From a plain ``[n, m]`` score matrix (NaN = missing) and ``[n]`` problem ids.

        Rows of one problem are its candidates in row order (``sample_index`` = rank within the
        problem, one unnamed generator), so ties go to the earlier row; verifiers default to
        ``v0..v{m-1}``; ``answers`` are optional final answers (majority vote needs them).
        """
        scores = np.asarray(scores, dtype=np.float64)
        if scores.ndim != 2:
            raise ValueError(f"scores must be [n_candidates, n_verifiers], got shape {scores.shape}")
        problem_id = np.asarray(problem_id).astype(str)
        if problem_id.shape != (scores.shape[0],):
            raise ValueError(f"problem_id must have one entry per row ({scores.shape[0]}), got shape {problem_id.shape}")
        groups, _ = factorize(problem_id) if problem_id.size else (np.zeros(0, np.int64), None)
        order = np.argsort(groups, kind="stable")
        rank = np.empty(groups.size, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(np.bincount(groups))[:-1]]) if groups.size else np.zeros(0, np.int64)
        rank[order] = np.arange(groups.size) - starts[groups[order]]
        keys = pa.table({"problem_id": problem_id, "generator_id": [""] * problem_id.size, "sample_index": rank})
        names = tuple(verifiers) if verifiers is not None else tuple(f"v{j}" for j in range(scores.shape[1]))
        return cls.build(keys, scores, names, answers)

    def subset(self, rows: np.ndarray) -> "SelectionData":
        """The candidates at ``rows`` (groups re-indexed to the problems that remain, in first-appearance
        order; answer codes kept; tie-break ranks re-numbered in the same order). Integer work only."""
        rows = np.asarray(rows, dtype=np.int64)
        kept, first, inverse = np.unique(self.groups[rows], return_index=True, return_inverse=True)
        appearance = np.argsort(first, kind="stable")          # kept groups in first-appearance order
        position = np.empty_like(appearance)
        position[appearance] = np.arange(appearance.size)
        return SelectionData(
            problem_id=self.problem_id[rows], generator_id=self.generator_id[rows], sample_index=self.sample_index[rows],
            groups=position[inverse.reshape(-1)].astype(np.int64), problems=self.problems[kept[appearance]],
            scores=self.scores[rows], verifiers=self.verifiers, answers=self.answers[rows],
            tiebreak=np.argsort(np.argsort(self.tiebreak[rows], kind="stable"), kind="stable").astype(np.int64),
            embeddings=None if self.embeddings is None else self.embeddings[rows],
            texts=None if self.texts is None else self.texts[rows],
            problem_texts=None if self.problem_texts is None else self.problem_texts[kept[appearance]])

    def verifier_scores(self, name: str) -> np.ndarray:
        """``[n]`` scores of verifier ``name``."""
        return self.scores[:, self.verifiers.index(name)]


def _replace(data: SelectionData, **changes) -> SelectionData:
    from dataclasses import replace

    return replace(data, **changes)
