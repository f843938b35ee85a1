"""Candidate keys as sorted integer codes (``core/keys.py``) against a plain-Python reference, and the store's
reads and duplicate checks built on them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monkeybarrel.core.keys import align_rows, key_codes, newest_rows, repeated_rows
from monkeybarrel.core.records import CANDIDATE_SCHEMA, SCORE_SCHEMA
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore, StoreError


def _keys(rng: np.random.Generator, n: int, problems: int, nulls: float) -> pa.Table:
    problem = [None if rng.random() < nulls else f"p{rng.integers(problems)}" for _ in range(n)]
    generator = [["g", "h", "é/ü"][rng.integers(3)] for _ in range(n)]
    sample = [None if rng.random() < nulls else int(rng.integers(-3, 6)) for _ in range(n)]
    return pa.table({"problem_id": pa.array(problem, pa.string()), "generator_id": pa.array(generator, pa.string()),
                     "sample_index": pa.array(sample, pa.int32())})


def _tuples(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(name).to_pylist() for name in ("problem_id", "generator_id", "sample_index"))))


@pytest.mark.parametrize("n, problems, nulls", [(0, 1, 0.0), (1, 1, 0.0), (30, 2, 0.0), (200, 5, 0.1),
                                                (500, 300, 0.0), (50, 1, 0.5)])
def test_codes_answer_like_the_python_reference(n, problems, nulls):
    rng = np.random.default_rng(n + problems)
    for _ in range(5):
        left, right = _keys(rng, n, problems, nulls), _keys(rng, int(rng.integers(0, n + 2)), problems, nulls)
        codes, other = key_codes(left, right)
        keys = _tuples(left)
        seen, repeated, last = set(), [], {}
        for row, key in enumerate(keys):
            usable = None not in key
            if usable and key in seen:
                repeated.append(row)
            seen.add(key)
            last[key if usable else ("null", row)] = row
        assert repeated_rows(codes).tolist() == repeated
        assert newest_rows(codes).tolist() == sorted(last.values())
        unique = newest_rows(other)
        right_keys = [_tuples(right)[r] for r in unique]
        expected = [right_keys.index(k) if None not in k and k in right_keys else -1 for k in keys]
        assert align_rows(codes, other[unique]).tolist() == expected


def test_duplicate_candidates_are_refused_naming_a_key_and_superseded_scores_keep_the_newest(tmp_path: Path):
    store = ExperimentStore(tmp_path)
    row = {"problem_id": "p 1", "generator_id": "g", "sample_index": 3, "text": "x", "prompt_tokens": 1,
           "completion_tokens": 1, "finish_reason": "stop", "wall_time_s": 0.1, "seed": 0, "error": None}
    for index in (3, 4, 3, 3):
        store.append_chunk("candidates", pa.Table.from_pylist([{**row, "sample_index": index}], schema=CANDIDATE_SCHEMA))
    with pytest.raises(StoreError, match=r"2 duplicate key\(s\).*problem_id='p 1', generator_id='g', sample_index=3"):
        store.candidates()
    key = {"problem_id": "p 1", "generator_id": "g", "verifier": "v", "error": None}
    for scores in ([(3, 0.1), (4, 0.2)], [(3, 0.3)], [(5, 0.4), (3, 0.5)]):  # scored again: the newest row wins
        store.append_chunk("scores/v", pa.Table.from_pylist([{**key, "sample_index": i, "score": s} for i, s in scores],
                                                            schema=SCORE_SCHEMA))
    newest = store.scores("v")
    assert list(zip(newest.column("sample_index").to_pylist(), newest.column("score").to_pylist())) == [
        (4, 0.2), (5, 0.4), (3, 0.5)]


def test_a_chunk_written_without_a_later_column_reads_it_as_nulls(tmp_path: Path):
    """An older writer's chunk (no ``error`` column) and a current one read together in the current schema."""
    store = ExperimentStore(tmp_path)
    row = {"problem_id": "p", "generator_id": "g", "sample_index": 0, "text": "x", "prompt_tokens": 1,
           "completion_tokens": 1, "finish_reason": "stop", "wall_time_s": 0.1, "seed": 0}
    older = pa.Table.from_pylist([row], schema=pa.schema([f for f in CANDIDATE_SCHEMA if f.name != "error"]))
    (tmp_path / "candidates").mkdir(exist_ok=True)
    pq.write_table(older, tmp_path / "candidates" / "part-00000000000000000001-old.parquet")
    store.append_chunk("candidates", pa.Table.from_pylist([{**row, "sample_index": 1, "error": "boom"}],
                                                          schema=CANDIDATE_SCHEMA))
    table = store.read_chunks("candidates", CANDIDATE_SCHEMA)
    assert table.schema == CANDIDATE_SCHEMA and table.column("error").to_pylist() == [None, "boom"]
    assert table.column("sample_index").to_pylist() == [0, 1]
