"""Sampling in rounds under a budget: after each round an allocation policy grants the next samples.

Each round's decision is written to ``DIR/allocation.parquet`` (round, generator, problem, target
samples) before its samples are drawn, so a run killed mid-round resumes by drawing that round's
missing samples — nothing drawn is lost (chunks are atomic) and nothing is drawn twice (requests
cover only missing sample indices). The next round is decided from the store alone: samples drawn,
the checker verifier's scores (scored each round), and the extracted answers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...allocation import AllocationPolicy, AllocationState, build_policy
from ...allocation.state import top_two_votes
from ...core.config import ConfigError, ExperimentConfig
from ...core.groups import factorize
from ...core.records import ANSWER_SCHEMA, Problem
from ...samplers.base import Sampler
from ...samplers.engine_pool import active_pool
from ...tasks.base import Task
from ..store.experiment_store import ExperimentStore
from .label import run_label_stage
from .sample import run_sample_stage
from .verify import run_verify_stage

LEDGER_SCHEMA = pa.schema([("round", pa.int32()), ("generator_id", pa.string()), ("problem_id", pa.string()),
                           ("target", pa.int32())])


def configured_policy(config: ExperimentConfig) -> AllocationPolicy:
    """The configured policy, checked against what the config provides (errors name ``allocation`` keys)."""
    spec = config.allocation
    policy = build_policy(spec.policy, spec.options, "allocation")
    if policy.needs_checker and spec.checker is None:
        raise ConfigError(f"allocation.checker: policy {spec.policy!r} stops on a reliable checker; name the "
                          "verifier whose score >= allocation.checker_threshold means correct (e.g. unit_tests)")
    return policy


def run_allocated_sampling(store: ExperimentStore, config: ExperimentConfig, task: Task, problems: list[Problem],
                           show_progress: bool = True, max_rounds: int = 1000,
                           samplers: dict[str, Sampler] | None = None) -> dict[str, Any]:
    """Sample round by round until the policy grants nothing; returns per-generator costs summed over rounds.

    ``samplers`` (generator id -> sampler, e.g. started early by the runner) are used and left open;
    samplers built here are closed at the end."""
    policy = configured_policy(config)
    ledger = store.read_table("allocation", LEDGER_SCHEMA)
    costs: dict[str, Any] = {}
    given = dict(samplers or {})
    samplers = dict(given)  # loaded once, used by every round
    try:
        for _ in range(max_rounds):
            _add_costs(costs, run_sample_stage(store, config, problems, show_progress, targets=_targets(ledger),
                                               samplers=samplers))
            state = allocation_state(store, config, task, problems, policy)
            grants = policy.grant(state)
            if grants.sum() == 0:
                break
            ledger = _decide(store, ledger, config, problems, state, grants)
    finally:
        pool = active_pool()
        for gid, sampler in samplers.items():
            if gid not in given and (pool is None or not pool.owns(sampler)):  # a shared engine outlives this run
                sampler.close()
    return costs


def _decide(store: ExperimentStore, ledger: pa.Table, config: ExperimentConfig, problems: list[Problem],
            state: AllocationState, grants: np.ndarray) -> pa.Table:
    """Append the next round's targets to the ledger and store it (before any of its samples is drawn)."""
    round_index = int(pc.max(ledger.column("round")).as_py() or 0) + 1 if ledger.num_rows else 1
    g_idx, p_idx = np.nonzero(grants)
    rows = pa.table({"round": np.full(g_idx.size, round_index, np.int32),
                     "generator_id": [config.generators[g].id for g in g_idx],
                     "problem_id": [problems[p].problem_id for p in p_idx],
                     "target": (state.drawn + grants)[g_idx, p_idx].astype(np.int32)}, schema=LEDGER_SCHEMA)
    ledger = pa.concat_tables([ledger, rows])
    store.write_table("allocation", ledger)
    return ledger


def _targets(ledger: pa.Table) -> dict[str, dict[str, int]]:
    """generator id -> problem id -> latest target (the ledger's rows are in round order)."""
    targets: dict[str, dict[str, int]] = {}
    for gid, pid, target in zip(ledger.column("generator_id").to_pylist(), ledger.column("problem_id").to_pylist(),
                                ledger.column("target").to_pylist()):
        targets.setdefault(gid, {})[pid] = target
    return targets


def _add_costs(total: dict[str, Any], round_costs: dict[str, Any]) -> None:
    for gid, info in round_costs.items():
        into = total.setdefault(gid, {})
        for key, value in info.items():
            into[key] = round(into.get(key, 0) + value, 3) if isinstance(value, float) else into.get(key, 0) + value


def allocation_state(store: ExperimentStore, config: ExperimentConfig, task: Task, problems: list[Problem],
                     policy: AllocationPolicy) -> AllocationState:
    """What the store knows per (generator, problem) cell, scoring and extracting answers first if needed."""
    spec = config.allocation
    if policy.needs_checker:
        checker = next(v for v in config.verifiers if v.name == spec.checker)
        run_verify_stage(store, config.model_copy(update={"verifiers": [checker]}), problems, show_progress=False)
    answers = run_label_stage(store, task, problems)[0] if policy.needs_answers else ANSWER_SCHEMA.empty_table()
    generators = [g.id for g in config.generators]
    problem_ids = [p.problem_id for p in problems]
    G, P = len(generators), len(problem_ids)
    candidates = store.candidates()
    cell = _cells(candidates, generators, problem_ids)
    known = cell >= 0
    drawn = np.bincount(cell[known], minlength=G * P).reshape(G, P)
    tokens = np.bincount(cell[known], weights=np.nan_to_num(
        np.asarray(candidates.column("completion_tokens").to_numpy(zero_copy_only=False), dtype=float))[known],
        minlength=G * P).reshape(G, P)
    cap = np.array([[g.num_samples] * P for g in config.generators], dtype=np.int64).reshape(G, P)
    state = dict(drawn=drawn, cap=cap, budget_left=_budget_left(config, drawn, tokens, cap))
    if policy.needs_checker:
        scores = store.scores(spec.checker)
        passing = np.asarray(pc.fill_null(scores.column("score"), np.nan).to_numpy(zero_copy_only=False)) \
            >= spec.checker_threshold
        score_cell = _cells(scores, generators, problem_ids)
        keep = (score_cell >= 0) & passing
        state["passed"] = np.bincount(score_cell[keep], minlength=G * P).reshape(G, P)
    if policy.needs_answers:
        answer_cell = _cells(answers, generators, problem_ids)
        text = np.asarray(answers.column("answer").to_pylist(), dtype=object)
        voting = (answer_cell >= 0) & np.array([a is not None for a in text], dtype=bool)
        codes = np.full(text.shape, -1, dtype=np.int64)
        if voting.any():
            codes[voting] = factorize(np.char.add(answer_cell[voting].astype(str), "\x1f" + text[voting].astype(str)))[0]
        state["top_votes"] = top_two_votes(codes, np.maximum(answer_cell, 0), G * P).reshape(G, P, 2)
    return AllocationState(**state)


def _cells(table: pa.Table, generators: list[str], problems: list[str]) -> np.ndarray:
    """``[n]`` cell index ``g * P + p`` of each row (-1 for generators or problems not configured)."""
    g = _index(table.column("generator_id"), generators)
    p = _index(table.column("problem_id"), problems)
    return np.where((g >= 0) & (p >= 0), g * len(problems) + p, -1)


def _index(column: pa.ChunkedArray, names: list[str]) -> np.ndarray:
    """``[n]`` position of each value of ``column`` in ``names`` (-1 where absent), vectorised by Arrow."""
    found = pc.index_in(column, value_set=pa.array(names, type=column.type))
    return np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)


def _budget_left(config: ExperimentConfig, drawn: np.ndarray, tokens: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """``[G]`` samples each generator may still draw (a token budget is converted by the mean length so far)."""
    room = np.maximum(cap - drawn, 0).sum(axis=1)
    budget = config.budget
    if budget is None:
        return room
    if budget.samples is not None:
        return np.minimum(np.maximum(budget.samples - drawn.sum(axis=1), 0), room)
    spent = tokens.sum(axis=1)
    per_sample = np.array([tokens[g].sum() / drawn[g].sum() if drawn[g].sum() else spec.max_tokens
                           for g, spec in enumerate(config.generators)])
    left = np.floor(np.maximum(budget.tokens - spent, 0) / np.maximum(per_sample, 1.0)).astype(np.int64)
    return np.minimum(left, room)
