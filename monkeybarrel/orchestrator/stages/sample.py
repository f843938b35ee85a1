"""Sample stage: draw the missing (problem, sample) pairs of every generator into the store."""

from __future__ import annotations

import time
import weakref
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.config import ExperimentConfig, GeneratorSpec
from ...core.plugins import build_plugin
from ...core.records import Candidate, Problem, candidates_to_table
from ...samplers.base import SAMPLERS, Sampler, SampleRequest, request_seed
from ...samplers.engine_pool import active_pool
from ..store.experiment_store import ExperimentStore
from .progress import progress_bar


def missing_requests(config: ExperimentConfig, generator_index: int, problems: list[Problem],
                     done: dict[str, set[int]], targets: dict[str, int] | None = None) -> list[SampleRequest]:
    """One request per problem with the sample indices not yet stored, seeded by what is sampled.

    ``targets`` maps problem ids to how many samples they should have (default ``num_samples``).
    """
    spec = config.generators[generator_index]
    requests = []
    for problem in problems:
        have = done.get(problem.problem_id, set())
        wanted = spec.num_samples if targets is None else min(targets.get(problem.problem_id, 0), spec.num_samples)
        missing = tuple(i for i in range(wanted) if i not in have)
        if missing:
            seed = request_seed(config.generator_seed(spec), spec.id, problem.problem_id, missing[0])
            requests.append(SampleRequest(problem, missing, seed))
    return requests


def run_sample_stage(store: ExperimentStore, config: ExperimentConfig, problems: list[Problem],
                     show_progress: bool = True,
                     targets: dict[str, dict[str, int]] | None = None,
                     samplers: dict[str, Sampler] | None = None) -> dict[str, Any]:
    """Generate and store every missing candidate; returns per-generator cost figures.

    ``targets`` (generator id -> problem id -> samples wanted) limits what is missing, e.g. to one
    allocation round; by default every problem gets ``num_samples``. ``samplers`` (generator id ->
    sampler) keeps samplers across calls: missing ones are built into it and the caller closes them.
    """
    stored = store.candidates()
    done: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for pid, gid, idx in zip(stored.column("problem_id").to_pylist(), stored.column("generator_id").to_pylist(),
                             stored.column("sample_index").to_pylist()):
        done[gid][pid].add(idx)
    costs: dict[str, Any] = {}
    pool = active_pool()
    for index, spec in enumerate(config.generators):
        requests = missing_requests(config, index, problems, done[spec.id],
                                    None if targets is None else targets.get(spec.id, {}))
        if not requests:
            continue
        total = sum(len(r.sample_indices) for r in requests)
        sampler = None if samplers is None else samplers.get(spec.id)
        if sampler is None:
            sampler = _sampler(spec, index)
            if samplers is not None:
                samplers[spec.id] = sampler
        pooled = pool is not None and pool.owns(sampler)
        gpu_before = getattr(sampler, "gpu_seconds", None)
        started, tokens, errors, buffer, buffered_problems = time.perf_counter(), 0, 0, [], 0
        last_flush, policy = started, config.store
        try:
            with progress_bar(f"sample {spec.id}", total, show_progress) as bar:
                for candidates in sampler.sample(requests):
                    buffer.extend(candidates)
                    buffered_problems += 1
                    tokens += sum(c.completion_tokens for c in candidates)
                    errors += sum(c.finish_reason == "error" for c in candidates)
                    elapsed = time.perf_counter() - started
                    bar.advance(len(candidates), info=f"{tokens / max(elapsed, 1e-9):.0f} tok/s")
                    if (buffered_problems >= policy.chunk_problems if policy.chunk_problems is not None else
                            len(buffer) >= policy.chunk_rows or time.perf_counter() - last_flush >= policy.flush_seconds):
                        pending, buffer, buffered_problems = buffer, [], 0  # a chunk is written once, never twice
                        _flush(store, pending)
                        last_flush = time.perf_counter()
        finally:  # also on Ctrl-C or a sampler crash: every finished candidate is kept
            try:
                _flush(store, buffer)
            finally:
                if samplers is None and not pooled:
                    sampler.close()
        costs[spec.id] = {"samples": total, "completion_tokens": tokens, "errors": errors,
                          "wall_s": round(time.perf_counter() - started, 3)}
        gpu_seconds = getattr(sampler, "gpu_seconds", None)  # GPUs held x wall s, for backends that know it
        if gpu_seconds is not None:  # this stage's share: a pooled sampler counts every experiment's
            costs[spec.id]["gpu_s"] = round(float(gpu_seconds) - float(gpu_before or 0.0), 3)
        costs[spec.id].update(_new_start_figures(sampler))
    return costs


def _sampler(spec: GeneratorSpec, index: int) -> Sampler:
    """A new sampler for ``generators[index]``, or the shared one of an open ``shared_engines()`` block."""
    def build() -> Sampler:
        return build_plugin(SAMPLERS, spec.backend, f"generators[{index}]", spec=spec, **spec.options)

    pool = active_pool()
    return build() if pool is None else pool.sampler(spec, build)


_REPORTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # sampler -> start figures a stage recorded


def _new_start_figures(sampler: Sampler) -> dict[str, float]:
    """The sampler's start figures (:func:`_start_figures`) that no stage has recorded yet: the first stage a sampler
    serves records its whole start, also what happened before the stage began (Ray started and its workers loaded
    while the task's data loaded), and an engine shared by several experiments counts once."""
    reported = _REPORTED.setdefault(sampler, set())
    new = {k: v for k, v in _start_figures(sampler).items() if k not in reported}
    reported.update(new)
    return new


def _start_figures(sampler: Sampler) -> dict[str, float]:
    """Start-up seconds a sampler reports (``engine_start_s`` with vLLM's ``import_s`` and ``engine_<phase>``; Ray's
    ``ray_init_s``, ``workers_ready_s`` and the last worker's ``worker_*`` split)."""
    figures = dict(getattr(sampler, "timings", None) or {})
    if getattr(sampler, "engine_start_s", None) is not None:
        figures["engine_start_s"] = sampler.engine_start_s
        if getattr(sampler, "import_s", None) is not None:  # the vllm backend: its import, then the engine's phases
            figures["import_s"] = sampler.import_s
        figures.update({f"engine_{k}": v for k, v in (getattr(sampler, "start_phases", None) or {}).items()})
    return figures


def start_samplers(config: ExperimentConfig) -> dict[str, Sampler]:
    """Each generator's sampler, built now and told to start (Ray starts its actors, which load their models
    while the task's data loads); :func:`close_samplers` closes them. Inside ``shared_engines()`` these are
    the shared samplers."""
    samplers: dict[str, Sampler] = {}
    try:
        for index, spec in enumerate(config.generators):
            samplers[spec.id] = sampler = _sampler(spec, index)
            prestart = getattr(sampler, "prestart", None)
            if prestart is not None:
                prestart()
    except BaseException:
        close_samplers(samplers)
        raise
    return samplers


def close_samplers(samplers: dict[str, Sampler]) -> None:
    """Close samplers from :func:`start_samplers`, except shared ones (their ``shared_engines()`` block does)."""
    pool = active_pool()
    for sampler in samplers.values():
        if pool is None or not pool.owns(sampler):
            sampler.close()


def gpu_summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """GPU-seconds per generator summed over the manifest's runs (generators whose sampler reported them)."""
    return sum_over_runs(runs, "gpu_s")


def sum_over_runs(runs: list[dict[str, Any]], field: str) -> dict[str, float]:
    """``field`` of each generator's sample-stage record (``wall_s``, ``gpu_s``) summed over the manifest's runs."""
    out: dict[str, float] = {}
    for run in runs:
        for gid, info in (run.get("sampled") or {}).items():
            if info.get(field) is not None:
                out[gid] = round(out.get(gid, 0.0) + info[field], 3)
    return out


def _flush(store: ExperimentStore, candidates: list[Candidate]) -> None:
    if candidates:
        store.append_chunk("candidates", candidates_to_table(candidates))


def token_summary(candidates: pa.Table) -> dict[str, Any]:
    """Token, error and truncation totals per generator from a candidate table (columnar: one ``bincount``
    per total over the generators' codes)."""
    if candidates.num_rows == 0:
        return {}
    generators = pc.unique(candidates.column("generator_id"))
    code = pc.index_in(candidates.column("generator_id"), value_set=generators).to_numpy(zero_copy_only=False)
    reason = candidates.column("finish_reason")

    def total(values: pa.ChunkedArray) -> list[int]:
        counts = np.bincount(code, weights=pc.fill_null(values, 0).to_numpy().astype(np.float64),
                             minlength=len(generators))
        return [int(round(c)) for c in counts]

    totals = {"candidates": np.bincount(code, minlength=len(generators)).tolist(),
              "prompt_tokens": total(candidates.column("prompt_tokens")),
              "completion_tokens": total(candidates.column("completion_tokens")),
              "errors": total(pc.cast(pc.equal(reason, "error"), pa.int64())),
              "truncated": total(pc.cast(pc.equal(reason, "length"), pa.int64()))}
    order = sorted(range(len(generators)), key=lambda g: generators[g].as_py())
    return {generators[g].as_py(): {name: int(values[g]) for name, values in totals.items()} for g in order}
