"""Answers (label-free) and labels (ground truth) per candidate, computed once and stored.

A candidate's answer is its canonical final answer when it finished normally; truncated
(``length``) and failed candidates have no answer and never vote. Labels use the task's
correctness check (truncated and failed candidates are incorrect).
"""

from __future__ import annotations

import pyarrow as pa

from ...core.records import ANSWER_SCHEMA, CANDIDATE_KEY, LABEL_SCHEMA, Problem
from ...tasks.base import Task
from ..store.experiment_store import ExperimentStore


def run_label_stage(store: ExperimentStore, task: Task, problems: list[Problem]) -> tuple[pa.Table, pa.Table]:
    """Extend ``answers.parquet`` and ``labels.parquet`` to every stored candidate; returns both."""
    candidates = store.candidates()
    answers = store.read_table("answers", ANSWER_SCHEMA)
    labels = store.read_table("labels", LABEL_SCHEMA)
    # done = answered *and* labelled: a run killed between the two writes redoes those candidates
    done = set(zip(*(answers.column(k).to_pylist() for k in CANDIDATE_KEY))) & set(
        zip(*(labels.column(k).to_pylist() for k in CANDIDATE_KEY)))
    if len(done) < max(answers.num_rows, labels.num_rows):  # drop the half-written rows before redoing them
        answers, labels = _keep(answers, done), _keep(labels, done)
    by_id = {p.problem_id: p for p in problems}
    new_rows = [row for row in candidates.to_pylist()
                if (row["problem_id"], row["generator_id"], row["sample_index"]) not in done and row["problem_id"] in by_id]
    if new_rows:
        finished = [row["finish_reason"] == "stop" for row in new_rows]
        texts = [row["text"] if ok else None for row, ok in zip(new_rows, finished)]
        extracted = task.extract_answers(texts)
        correct = task.check(texts, [by_id[row["problem_id"]] for row in new_rows])
        keys = {k: [row[k] for row in new_rows] for k in CANDIDATE_KEY}
        answers = pa.concat_tables([answers, pa.table({**keys, "answer": extracted}, schema=ANSWER_SCHEMA)])
        labels = pa.concat_tables([labels, pa.table({**keys, "correct": [bool(c) for c in correct]}, schema=LABEL_SCHEMA)])
        store.write_table("answers", answers)
        store.write_table("labels", labels)
    return answers, labels


def _keep(table: pa.Table, keys: set[tuple]) -> pa.Table:
    """Rows of ``table`` whose candidate key is in ``keys``."""
    rows = list(zip(*(table.column(k).to_pylist() for k in CANDIDATE_KEY)))
    return table.filter(pa.array([row in keys for row in rows], type=pa.bool_()))
