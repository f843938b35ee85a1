"""Verify stage: score every stored candidate with every configured verifier (resumable).

Verifiers run in config order. One that ``reads`` earlier verifiers gets their stored scores (aligned
with the candidates it scores) and per-problem records first; what a verifier records per problem
goes to ``artifacts/<verifier>/<problem_id>.json`` in the store.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from ...core.config import ConfigError, ExperimentConfig
from ...core.plugins import build_plugin
from ...core.records import CANDIDATE_KEY, SCORE_SCHEMA, Candidate, Problem, candidates_from_table
from ...verifiers.base import VERIFIERS
from ..store.experiment_store import ExperimentStore
from .progress import progress_bar


def run_verify_stage(store: ExperimentStore, config: ExperimentConfig, problems: list[Problem],
                     show_progress: bool = True) -> dict[str, Any]:
    """Score the candidates each verifier has not scored yet; failures are stored as NaN + error."""
    if not config.verifiers:
        return {}
    by_problem = defaultdict(list)
    for candidate in candidates_from_table(store.candidates()):
        by_problem[candidate.problem_id].append(candidate)
    costs: dict[str, Any] = {}
    for index, spec in enumerate(config.verifiers):
        stored = store.scores(spec.name)
        done = set(zip(stored.column("problem_id").to_pylist(), stored.column("generator_id").to_pylist(),
                       stored.column("sample_index").to_pylist()))
        todo = [(p, [c for c in by_problem[p.problem_id] if (c.problem_id, c.generator_id, c.sample_index) not in done])
                for p in problems]
        todo = [(p, cs) for p, cs in todo if cs]
        if not todo:
            continue
        verifier = build_plugin(VERIFIERS, spec.type, f"verifiers[{index}]", name=spec.name, **spec.options)
        earlier = [v.name for v in config.verifiers[:index]]
        unknown = [name for name in verifier.reads if name not in earlier]
        if unknown:
            verifier.close()
            raise ConfigError(f"verifiers[{index}] ({spec.name}) reads {unknown}, which must be verifiers listed "
                              f"before it; earlier: {earlier}")
        if verifier.scores_whole_problem:  # new candidates change the old ones' scores: re-score the problem
            todo = [(p, by_problem[p.problem_id]) for p, _ in todo]
        inputs = {name: _aligned_scores(store.scores(name), [c for _, cs in todo for c in cs]) for name in verifier.reads}
        offsets = np.cumsum([0] + [len(cs) for _, cs in todo])
        started, rows, failures, last_flush = time.perf_counter(), [], 0, time.perf_counter()
        kind, policy = f"scores/{spec.name}", config.store
        try:
            with progress_bar(f"verify {spec.name}", sum(len(cs) for _, cs in todo), show_progress) as bar:
                for position, (problem, candidates) in enumerate(todo):
                    for name, aligned in inputs.items():
                        verifier.provide(problem.problem_id, name, aligned[offsets[position]:offsets[position + 1]],
                                         store.read_artifact(name, problem.problem_id))
                    scores, errors = verifier.score_safely(problem, candidates)
                    record = verifier.pop_record(problem.problem_id)
                    if record is not None:
                        store.write_artifact(spec.name, problem.problem_id, record)
                    failures += sum(e is not None for e in errors)
                    rows.extend({"problem_id": c.problem_id, "generator_id": c.generator_id, "sample_index": c.sample_index,
                                 "verifier": spec.name, "score": float(s), "error": e}
                                for c, s, e in zip(candidates, scores, errors))
                    bar.advance(len(candidates))
                    if len(rows) >= policy.chunk_rows or time.perf_counter() - last_flush > policy.flush_seconds:
                        pending, rows = rows, []  # a chunk is written once, never twice
                        store.append_chunk(kind, pa.Table.from_pylist(pending, schema=SCORE_SCHEMA))
                        last_flush = time.perf_counter()
        finally:  # also on Ctrl-C: every finished score is kept
            try:
                if rows:
                    store.append_chunk(kind, pa.Table.from_pylist(rows, schema=SCORE_SCHEMA))
            finally:
                verifier.close()
        costs[spec.name] = {"scored": sum(len(cs) for _, cs in todo), "failures": failures,
                            "wall_s": round(time.perf_counter() - started, 3)}
    return costs


def _aligned_scores(table: pa.Table, candidates: list[Candidate]) -> np.ndarray:
    """``[len(candidates)]`` the stored ``score`` of each candidate (NaN where it has none), by one join."""
    keys = pa.table({"problem_id": pa.array([c.problem_id for c in candidates], pa.string()),
                     "generator_id": pa.array([c.generator_id for c in candidates], pa.string()),
                     "sample_index": pa.array([c.sample_index for c in candidates], SCORE_SCHEMA.field("sample_index").type),
                     "__position": np.arange(len(candidates))})
    joined = keys.join(table.select(list(CANDIDATE_KEY) + ["score"]), keys=list(CANDIDATE_KEY), join_type="inner")
    aligned = np.full(len(candidates), np.nan)
    aligned[joined.column("__position").to_numpy()] = joined.column("score").to_numpy(zero_copy_only=False)
    return aligned
