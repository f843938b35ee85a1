"""Verify stage: score every stored candidate with every configured verifier (resumable).

Verifiers run in config order. One that ``reads`` earlier verifiers gets their stored scores (aligned
with the candidates it scores) and per-problem records first, and scores again the candidates they
scored in this run; what a verifier records per problem goes to ``artifacts/<verifier>/<problem_id>.json``.

A score the verifier failed to give (an exception, a request or a server that failed:
``VerifierFailure``) is stored as NaN with its reason and ``failed_attempts``, and is tried again by
each later run until ``store.score_attempts`` tries failed; the last reason is kept. An abstention
(NaN with a reason the verifier gives for good) is final at once.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.config import ConfigError, ExperimentConfig, VerifierSpec
from ...core.plugins import build_plugin
from ...core.records import CANDIDATE_KEY, SCORE_SCHEMA, Candidate, Problem, candidates_from_table
from ...verifiers.base import VERIFIERS, Verifier, VerifierFailure
from ..store.experiment_store import ExperimentStore
from .progress import progress_bar

log = logging.getLogger("monkeybarrel")
Key = tuple[str, str, int]


def run_verify_stage(store: ExperimentStore, config: ExperimentConfig, problems: list[Problem],
                     show_progress: bool = True) -> dict[str, Any]:
    """Score the candidates each verifier has not scored yet, and again those it failed on fewer than
    ``store.score_attempts`` times; returns per verifier ``{scored, retried, failures, wall_s}``."""
    if not config.verifiers:
        return {}
    by_problem = defaultdict(list)
    for candidate in candidates_from_table(store.candidates()):
        by_problem[candidate.problem_id].append(candidate)
    costs: dict[str, Any] = {}
    scored_now: dict[str, set[Key]] = {}  # verifier -> candidates scored in this run (readers score them again)
    for index, spec in enumerate(config.verifiers):
        stored = store.scores(spec.name)
        failed = _failed_attempts(stored)
        retry = {key for key, tries in failed.items() if tries < config.store.score_attempts}
        done = _keys(stored) - retry
        todo = _todo(problems, by_problem, done)
        if not todo and not any(scored_now.values()):
            continue
        verifier = build_plugin(VERIFIERS, spec.type, f"verifiers[{index}]", name=spec.name, **spec.options)
        earlier = [v.name for v in config.verifiers[:index]]
        unknown = [name for name in verifier.reads if name not in earlier]
        if unknown:
            verifier.close()
            raise ConfigError(f"verifiers[{index}] ({spec.name}) reads {unknown}, which must be verifiers listed "
                              f"before it; earlier: {earlier}")
        stale = set().union(*(scored_now.get(name, set()) for name in verifier.reads))
        todo = _todo(problems, by_problem, done - stale) if stale & done else todo
        if not todo:
            verifier.close()
            continue
        if verifier.scores_whole_problem:  # new candidates change the old ones' scores: re-score the problem
            todo = [(p, by_problem[p.problem_id]) for p, _ in todo]
        costs[spec.name] = _score(store, config, spec, verifier, todo, failed, show_progress)
        costs[spec.name]["retried"] = sum(_key(c) in retry for _, cs in todo for c in cs)
        scored_now[spec.name] = {_key(c) for _, cs in todo for c in cs}
    return costs


def _score(store: ExperimentStore, config: ExperimentConfig, spec: VerifierSpec, verifier: Verifier,
           todo: list[tuple[Problem, list[Candidate]]], failed: dict[Key, int], show_progress: bool) -> dict[str, Any]:
    """Score ``todo`` with ``verifier`` (closed at the end), appending chunks as they fill (also on Ctrl-C)."""
    inputs = {name: _aligned_scores(store.scores(name), [c for _, cs in todo for c in cs]) for name in verifier.reads}
    offsets = np.cumsum([0] + [len(cs) for _, cs in todo])
    started, rows, last_flush = time.perf_counter(), [], time.perf_counter()
    failures: dict[str, int] = defaultdict(int)  # reason -> candidates (failures, not abstentions)
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
                for candidate, score, error in zip(candidates, scores, errors):
                    tries = failed.get(_key(candidate), 0) + 1 if isinstance(error, VerifierFailure) else None
                    if tries is not None:
                        failures[str(error)] += 1
                    rows.append({"problem_id": candidate.problem_id, "generator_id": candidate.generator_id,
                                 "sample_index": candidate.sample_index, "verifier": spec.name, "score": float(score),
                                 "error": error, "failed_attempts": tries})
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
    if failures:
        reason, count = max(failures.items(), key=lambda item: item[1])
        log.warning("verifier %r failed on %d candidate(s) (%s%s); a failure is tried again by the next run, "
                    "%d tries in all (store.score_attempts)", spec.name, sum(failures.values()), reason[:200],
                    f", and {len(failures) - 1} other reason(s)" if len(failures) > 1 else "", policy.score_attempts)
    return {"scored": sum(len(cs) for _, cs in todo), "failures": sum(failures.values()),
            "wall_s": round(time.perf_counter() - started, 3)}


def _key(candidate: Candidate) -> Key:
    return candidate.problem_id, candidate.generator_id, candidate.sample_index


def _keys(table: pa.Table) -> set[Key]:
    return set(_keys_list(table))


def _failed_attempts(stored: pa.Table) -> dict[Key, int]:
    """``{key: failed tries so far}`` of the stored scores that are failures (newest row per key)."""
    failed = stored.filter(pc.is_valid(stored.column("failed_attempts")))
    return dict(zip(_keys_list(failed), failed.column("failed_attempts").to_pylist()))


def _keys_list(table: pa.Table) -> list[Key]:
    return list(zip(*(table.column(k).to_pylist() for k in CANDIDATE_KEY))) if table.num_rows else []


def _todo(problems: list[Problem], by_problem: dict[str, list[Candidate]],
          done: set[Key]) -> list[tuple[Problem, list[Candidate]]]:
    """Per problem (those with any), its candidates not in ``done``."""
    todo = [(p, [c for c in by_problem[p.problem_id] if _key(c) not in done]) for p in problems]
    return [(p, cs) for p, cs in todo if cs]


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
