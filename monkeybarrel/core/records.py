"""The core data model: Problem, Candidate, Selection records and their Arrow schemas.

Every stage reads and writes Arrow tables with these schemas; the dataclasses are the row-level
view for plug-in authors. A candidate is identified by the key (problem_id, generator_id,
sample_index), unique within an experiment.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import pyarrow as pa

CANDIDATE_KEY = ("problem_id", "generator_id", "sample_index")
"""Columns that identify one candidate."""

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])

PROBLEM_SCHEMA = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("prompt", pa.string()),
        pa.field("messages", pa.list_(MESSAGE_TYPE)),
        pa.field("reference_answer", pa.string()),
        pa.field("metadata_json", pa.string()),
    ]
)

KEY_FIELDS = (
    pa.field("problem_id", pa.string(), nullable=False),
    pa.field("generator_id", pa.string(), nullable=False),
    pa.field("sample_index", pa.int32(), nullable=False),
)
"""The ``CANDIDATE_KEY`` columns, first in every per-candidate schema."""


def keyed_schema(*fields: pa.Field) -> pa.Schema:
    """A per-candidate schema: the ``KEY_FIELDS`` followed by ``fields``."""
    return pa.schema([*KEY_FIELDS, *fields])


CANDIDATE_SCHEMA = keyed_schema(
    pa.field("text", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("finish_reason", pa.string()),
    pa.field("wall_time_s", pa.float64()),
    pa.field("seed", pa.int64()),
    pa.field("error", pa.string()),
)

SCORE_SCHEMA = keyed_schema(
    pa.field("verifier", pa.string(), nullable=False),
    pa.field("score", pa.float64()),
    pa.field("error", pa.string()),
    pa.field("failed_attempts", pa.int32()),
)
"""Long form of the score matrix as stored: one row per (candidate, verifier); NaN + error where the verifier
gives no score. ``failed_attempts``: how many times in a row the verifier *failed* on the candidate (an
exception, a request or server that failed; ``verifiers.base.VerifierFailure``): the verify stage tries it
again on the next run until ``store.score_attempts``; null for a score or an abstention (NaN + reason the
verifier gives for good, e.g. no text to judge), never tried again. Stores written before the column read null."""

ANSWER_SCHEMA = keyed_schema(pa.field("answer", pa.string()))
"""Label-free: the canonical final answer extracted from each candidate (null when none)."""

LABEL_SCHEMA = keyed_schema(pa.field("correct", pa.bool_(), nullable=False))
"""Ground truth per candidate: for evaluation and supervised baselines only."""

SELECTION_SCHEMA = pa.schema(
    [
        pa.field("method", pa.string(), nullable=False),
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("generator_id", pa.string()),
        pa.field("sample_index", pa.int32()),
        pa.field("score", pa.float64()),
    ]
)
"""One chosen candidate per (method, problem); null generator/sample when a method abstains."""


@dataclass(frozen=True)
class Problem:
    """One task instance.

    Attributes:
        problem_id: unique within the experiment.
        task: name of the task that produced it (e.g. ``gsm8k``).
        prompt: the user-facing question as plain text (used when ``messages`` is empty).
        messages: chat messages ``[{"role": ..., "content": ...}]`` to send instead of ``prompt``.
        reference_answer: the gold answer as text (``None`` for unlabelled problems).
        metadata: task-specific extras (difficulty, tests, source line, ...), JSON-serialisable.
    """

    problem_id: str
    task: str
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] = ()
    reference_answer: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def chat(self, system_prompt: str | None = None) -> list[dict[str, str]]:
        """The conversation to send to a chat model, with an optional system prompt first."""
        messages = list(self.messages) or [{"role": "user", "content": self.prompt or ""}]
        if system_prompt and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": system_prompt}, *messages]
        return messages


@dataclass(frozen=True)
class Candidate:
    """One sampled solution of one problem by one generator.

    Attributes:
        problem_id, generator_id, sample_index: the candidate's key.
        text: the completion text.
        prompt_tokens: tokens in the prompt as sent (counted once per sample).
        completion_tokens: tokens generated.
        finish_reason: ``stop`` (end of sequence), ``length`` (max_tokens hit) or ``error``.
        wall_time_s: this sample's share of the sampler's wall time (``samplers.base.wall_time_shares``): the
            seconds up to its yield split over the candidates yielded together; sums to the sampling time.
        seed: the random seed the sample was drawn with (``None`` if unknown).
        error: failure message when ``finish_reason == "error"``.
    """

    problem_id: str
    generator_id: str
    sample_index: int
    text: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    wall_time_s: float = 0.0
    seed: int | None = None
    error: str | None = None


def problems_to_table(problems: Sequence[Problem]) -> pa.Table:
    """Problems -> Arrow table with PROBLEM_SCHEMA."""
    return pa.Table.from_pylist(
        [
            {
                "problem_id": p.problem_id,
                "task": p.task,
                "prompt": p.prompt,
                "messages": list(p.messages) or None,
                "reference_answer": p.reference_answer,
                "metadata_json": json.dumps(p.metadata, sort_keys=True) if p.metadata else None,
            }
            for p in problems
        ],
        schema=PROBLEM_SCHEMA,
    )


def problems_from_table(table: pa.Table) -> list[Problem]:
    """Arrow table with PROBLEM_SCHEMA -> Problems (inverse of problems_to_table)."""
    return [
        Problem(
            problem_id=row["problem_id"],
            task=row["task"],
            prompt=row["prompt"],
            messages=tuple(row["messages"] or ()),
            reference_answer=row["reference_answer"],
            metadata=json.loads(row["metadata_json"]) if row["metadata_json"] else {},
        )
        for row in table.to_pylist()
    ]


def candidates_to_table(candidates: Iterable[Candidate]) -> pa.Table:
    """Candidates -> Arrow table with CANDIDATE_SCHEMA."""
    return pa.Table.from_pylist([asdict(c) for c in candidates], schema=CANDIDATE_SCHEMA)


def candidates_from_table(table: pa.Table) -> list[Candidate]:
    """Arrow table with CANDIDATE_SCHEMA -> Candidates."""
    return [Candidate(**row) for row in table.select(CANDIDATE_SCHEMA.names).to_pylist()]
