"""Per-problem and per-candidate views of a stored experiment (for ``show`` and ``report.html``).

Everything here reads the store; nothing is recomputed: answers, labels, scores and each
selector's pick come from ``answers.parquet``, ``labels.parquet``, ``scores/`` and
``selections.parquet`` (written by ``run`` and ``report``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.keys import align_rows, key_codes
from ..experiment import Experiment


@dataclass
class Drilldown:
    """Aligned columns over every candidate (sorted by key) plus per-problem facts.

    Attributes:
        candidates: the candidate table (keys, text, finish_reason, error, ...).
        answers: ``[n]`` object canonical answers (None = no answer).
        correct: ``[n]`` object True / False / None (None = unlabelled).
        scores: ``[n, m]`` float scores (NaN = missing or failed), columns ``verifiers``.
        picks: ``{method: {problem_id: row}}`` the row each selector picked (-1 = abstained).
        uses_labels: ``{method: bool}``.
        problems: ``{problem_id: Problem}``.
        rows_of: ``{problem_id: [rows]}`` candidate rows of each problem.
    """

    candidates: pa.Table
    answers: np.ndarray
    correct: np.ndarray
    scores: np.ndarray
    verifiers: tuple[str, ...]
    picks: dict[str, dict[str, int]]
    uses_labels: dict[str, bool]
    problems: dict[str, Any]
    rows_of: dict[str, np.ndarray]

    @classmethod
    def load(cls, experiment: Experiment) -> "Drilldown":
        """Columnar: the picks are aligned with the candidates by key codes, no Python loop over candidates."""
        candidates = experiment.candidates()  # sorted by key: each problem's rows are contiguous
        scores, verifiers, _ = experiment.scores()
        answers = experiment.answers_array()
        correct, labelled = experiment.labels_and_mask()
        correct = np.where(labelled, correct, None).astype(object)
        problem_ids = np.asarray(candidates.column("problem_id").to_numpy(zero_copy_only=False), dtype=object)
        starts = np.flatnonzero(np.r_[True, problem_ids[1:] != problem_ids[:-1]]) if problem_ids.size else np.zeros(0, int)
        bounds = np.r_[starts, problem_ids.size]
        rows_of = {problem_ids[first]: np.arange(first, last) for first, last in zip(bounds[:-1], bounds[1:])}
        picks: dict[str, dict[str, int]] = {}
        selections = experiment.selections()
        if selections is not None and selections.num_rows:
            picked, stored = key_codes(selections, candidates)
            rows = align_rows(picked, stored)  # -1: no pick
            for method, pid, row in zip(selections.column("method").to_pylist(),
                                        selections.column("problem_id").to_pylist(), rows.tolist()):
                picks.setdefault(method, {})[pid] = row
            order = list(dict.fromkeys(selections.column("method").to_pylist()))
            picks = {m: picks[m] for m in order if m in picks}
        metrics = experiment.metrics().get("selection", {})
        uses_labels = {m: bool(metrics.get(m, {}).get("uses_labels", m.startswith("oracle"))) for m in picks}
        problems = {p.problem_id: p for p in experiment.problems()}
        return cls(candidates, answers, correct, scores, verifiers, picks, uses_labels, problems, rows_of)

    # ---- per problem ---------------------------------------------------------------------
    def problem_ids(self) -> list[str]:
        return sorted(self.rows_of)

    def summary(self, problem_id: str) -> dict[str, Any]:
        """One problem: sample counts, correct count, each selector's pick (answer, correct), disagreement."""
        rows = self.rows_of.get(problem_id, np.zeros(0, int))
        labelled = [c for c in self.correct[rows] if c is not None]
        picks = {}
        for method, by_problem in self.picks.items():
            row = by_problem.get(problem_id, -1)
            picks[method] = {"row": int(row), "answer": None if row < 0 else self.answers[row],
                             "correct": None if row < 0 else self.correct[row]}
        label_free = {p["answer"] for m, p in picks.items() if not self.uses_labels.get(m) and m != "random (pass@1)"}
        problem = self.problems.get(problem_id)
        return {
            "problem_id": problem_id,
            "prompt": (problem.prompt or (problem.messages[-1]["content"] if problem.messages else "")) if problem else "",
            "reference": problem.reference_answer if problem else None,
            "n": int(rows.size),
            "n_correct": int(sum(labelled)) if labelled else None,
            "picks": picks,
            "disagreement": len(label_free) > 1,
        }

    def candidate_rows(self, problem_id: str, max_text: int | None = None) -> list[dict[str, Any]]:
        """The problem's candidates: key, answer, label, scores, finish reason, text, which selectors picked it."""
        rows = self.rows_of.get(problem_id, np.zeros(0, int))
        table = self.candidates.take(pa.array(rows, type=pa.int64()))
        columns = {name: table.column(name).to_pylist() for name in
                   ("generator_id", "sample_index", "finish_reason", "error", "text")}
        picked_by: dict[int, list[str]] = {}
        for method, by_problem in self.picks.items():
            picked_by.setdefault(by_problem.get(problem_id, -1), []).append(method)
        scores = self.scores[rows]
        score_lists = [[None if np.isnan(v) else float(v) for v in column] for column in scores.T]
        out = []
        for position, row in enumerate(rows.tolist()):
            text = columns["text"][position]
            out.append({
                "generator_id": columns["generator_id"][position],
                "sample_index": columns["sample_index"][position],
                "answer": self.answers[row],
                "correct": self.correct[row],
                "scores": {v: score_lists[j][position] for j, v in enumerate(self.verifiers)},
                "finish_reason": columns["finish_reason"][position],
                "error": columns["error"][position],
                "text": text if max_text is None or text is None or len(text) <= max_text else text[:max_text] + " …",
                "picked_by": picked_by.get(row, []),
            })
        return out
