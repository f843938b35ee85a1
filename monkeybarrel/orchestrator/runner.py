"""The stage runner: sample -> verify -> select -> evaluate, resumable on one store directory."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

from ..core.config import ExperimentConfig
from ..core.records import Problem, problems_from_table, problems_to_table
from ..samplers.base import Sampler
from ..sandbox.base import LayerInfo, layers_mark, layers_used
from ..tasks.base import Task
from .experiment import Experiment
from .report.accuracy_vs_k import accuracy_vs_k_with_intervals
from .report.allocation import MAX_CELLS_X_SAMPLES, plot_equal_compute, render_section, stored_equal_compute
from .report.html_page import write_html
from .report.markdown import plot_curves, render_markdown
from .stages.evaluate import evaluate, to_json
from .stages.label import run_label_stage
from .stages.preflight import build_task, preflight  # noqa: F401  (build_task: public here too)
from .stages.sample import (close_samplers, gpu_summary, run_sample_stage, start_samplers, sum_over_runs,
                            token_summary)
from .stages.select import run_select_stage
from .stages.verify import run_verify_stage
from .store.config_guard import ConfigConflictError, changed_sections, result_inputs, stored_sections
from .store.experiment_store import ExperimentStore, StoreError
from .store.lock import RunLock
from .store.maintenance import compact_if_fragmented
from .store.manifest import new_manifest, now, package_versions

log = logging.getLogger("monkeybarrel")


def open_store(config: ExperimentConfig, out_dir: str | Path, force: bool = False) -> tuple[ExperimentStore, dict[str, Any]]:
    """Open (or create) the store; the caller holds its ``RunLock``.

    ``force`` first deletes the files the store wrote (those ``written.jsonl`` lists, never others).
    Without it, a config is refused only where it differs in a key that produced stored results:
    the task's keys once problems are stored, a generator's once it has candidates. Runtime-only
    options (threads, batch sizes, concurrency) never count. A verifier whose keys changed loses its
    stored scores and re-scores; the other verifiers and the candidates are kept.
    """
    store = ExperimentStore(out_dir)
    if force:
        store.discard()
    store.remove_stale_temporaries()
    manifest = store.read_manifest()
    if not manifest:
        return store, new_manifest(config)
    new_inputs = result_inputs(config)
    changed, blocking = _changes(config, store, manifest)
    if blocking:
        raise ConfigConflictError(
            f"{out_dir}: holds results of a different configuration; these keys would change stored results:\n  "
            + "\n  ".join(blocking)
            + "\nStart a new directory (--out) or pass --force to discard what is stored there.")
    for section in changed:
        name = section[len("verifiers[name="):-1] if section.startswith("verifiers[") else None
        if name is not None and name in store.scored_verifiers():
            removed = store.discard_scores(name)
            log.warning("verifier %r changed (%s): its %d stored score chunk(s) are discarded and it re-scores",
                        name, "; ".join(changed[section]), removed)
    manifest["result_inputs"] = {**manifest.get("result_inputs", {}), **new_inputs}
    return store, manifest


def stored_conflicts(config: ExperimentConfig, out_dir: str | Path) -> list[str]:
    """``section.key: old -> new`` for each key of ``config`` that would change results stored in ``out_dir``
    (what ``open_store`` refuses; [] for a new directory). Reads only."""
    if not (Path(out_dir) / "manifest.json").is_file():
        return []
    store = ExperimentStore(out_dir)
    return _changes(config, store, store.read_manifest())[1]


def _changes(config: ExperimentConfig, store: ExperimentStore,
             manifest: dict[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """Changed result inputs by section, and the changes that touch stored candidates or problems."""
    changed = changed_sections(manifest.get("result_inputs", {}), result_inputs(config))
    stored = stored_sections(store.table_path("problems").is_file(), store.stored_generators(),
                             set(store.scored_verifiers()))
    return changed, [line for section, lines in changed.items() if section in stored
                     and not section.startswith("verifiers[") for line in lines]


def store_problems(store: ExperimentStore, problems: list[Problem]) -> None:
    """Save the problems, refusing ones whose content changed under the same id."""
    seen = set()
    for problem in problems:
        if problem.problem_id in seen:
            raise StoreError(f"task produced duplicate problem_id {problem.problem_id!r}")
        seen.add(problem.problem_id)
    old = store.read_table("problems")
    if old is not None:
        previous = {p.problem_id: p for p in problems_from_table(old)}
        for problem in problems:
            before = previous.get(problem.problem_id)
            if before is not None and (before.prompt, before.messages, before.reference_answer) != (
                    problem.prompt, problem.messages, problem.reference_answer):
                raise ConfigConflictError(
                    f"{store.root}: problem {problem.problem_id!r} differs from the stored one; "
                    "the task's data changed. Start a new directory or pass --force.")
        merged = {**previous, **{p.problem_id: p for p in problems}}
        problems = list(merged.values())
    store.write_table("problems", problems_to_table(problems))


def run_experiment(config: ExperimentConfig, out_dir: str | Path, *, force: bool = False,
                   show_progress: bool = True) -> Experiment:
    """Run (or resume) an experiment into ``out_dir`` and write its report.

    Only missing (problem, sample) pairs are sampled and only unscored candidates are verified,
    so re-running the same config after an interruption completes it without duplicates.

    Returns:
        An ``Experiment`` handle on the directory.
    """
    began = time.perf_counter()
    mark = layers_mark()
    samplers = start_samplers(config)  # Ray actors load their models while the task's data loads
    try:
        task, problems = preflight(config)  # data, plug-ins, models and servers are checked before the directory is touched
        announce_sandboxes(layers_used(mark))
        ExperimentStore.check_target(out_dir)  # a run writes into a new or empty directory or its own store only
        with RunLock(out_dir, "run"):
            return _run_locked(config, out_dir, force, show_progress, task, problems, began, samplers, mark)
    finally:
        close_samplers(samplers)


def announce_sandboxes(layers: list[LayerInfo]) -> None:
    """One start line per sandbox layer the run uses, with or without progress bars: a warning when it
    lacks protections."""
    for layer in layers:
        if layer.lacks:
            log.warning("%s", layer.line())
        else:
            print(layer.line(), file=sys.stderr)


def _run_locked(config: ExperimentConfig, out_dir: str | Path, force: bool, show_progress: bool, task: Task,
                problems: list[Problem], began: float, samplers: dict[str, Sampler], mark: int = 0) -> Experiment:
    store, manifest = open_store(config, out_dir, force)
    store.write_text("config.yaml", config.to_yaml())
    run_record: dict[str, Any] = {"started": now(), "config_hash": manifest.get("config_hash"),
                                  "sandbox": [layer.as_dict() for layer in layers_used(mark)]}
    manifest.setdefault("runs", []).append(run_record)
    manifest["package_versions"] = package_versions()
    store.write_manifest(manifest)

    stage_times: dict[str, float] = {}
    store_problems(store, problems)
    stage_times["load"] = time.perf_counter() - began

    began = time.perf_counter()
    if config.uses_rounds:  # the allocation policies (scipy) load only for an experiment that allocates its samples
        from .stages.allocation_rounds import run_allocated_sampling

        run_record["sampled"] = run_allocated_sampling(store, config, task, problems, show_progress, samplers=samplers)
    else:
        run_record["sampled"] = run_sample_stage(store, config, problems, show_progress, samplers=samplers)
    stage_times["sample"] = time.perf_counter() - began

    began = time.perf_counter()
    run_record["verified"] = run_verify_stage(store, config, problems, show_progress)
    stage_times["verify"] = time.perf_counter() - began

    began = time.perf_counter()
    run_label_stage(store, task, problems)
    stage_times["label"] = time.perf_counter() - began
    compact_if_fragmented(store)

    run_record["sandbox"] = [layer.as_dict() for layer in layers_used(mark)]
    experiment = Experiment(store.root)
    began = time.perf_counter()
    evaluate_and_report(experiment, stage_times=stage_times, manifest=manifest, began=began)
    run_record["finished"] = now()
    store.write_manifest(manifest)
    return experiment


def evaluate_and_report(experiment: Experiment, *, stage_times: dict[str, float] | None = None,
                        manifest: dict[str, Any] | None = None, began: float | None = None,
                        equal_compute: bool | None = None) -> dict[str, Any]:
    """Select, evaluate and write ``selections.parquet``, ``metrics.json``, ``report.md``, ``coverage.png``,
    ``report.html``.

    ``equal_compute``: replay the allocation policies on the stored samples (True), or only reuse a stored
    replay (False); None: replay when the experiment allocated its samples (``report.allocation``)."""
    store, config = experiment.store, experiment.config
    began = time.perf_counter() if began is None else began
    data = experiment.selection_data()
    if data.n_candidates == 0:
        raise StoreError(f"{store.root}: no candidates stored for the configured generators; nothing to report")
    labels, labelled = experiment.labels_and_mask()
    selections, info = run_select_stage(config, data, labels)
    store.write_table("selections", selections)
    metrics = evaluate(config, data, labels, info, labelled)
    metrics["accuracy_vs_k"], metrics["accuracy_vs_k_ci95"] = (
        accuracy_vs_k_with_intervals(config, data, labels, metrics["ks"], known={"majority": metrics["majority"]},
                                     known_ci95={"majority": metrics.get("majority_ci95", {})})
        if metrics["labelled_candidates"] else ({}, {}))
    asked = config.uses_rounds if equal_compute is None else equal_compute
    metrics["equal_compute"] = (stored_equal_compute(store, data, labels, config.seed, compute=asked,
                                                     max_cells=MAX_CELLS_X_SAMPLES if equal_compute is None else None)
                                if labelled.all() else {"skipped": "not every candidate is labelled"})
    manifest = store.read_manifest() if manifest is None else manifest
    costs = manifest.setdefault("costs", {})
    costs["generators"] = token_summary(experiment.candidates())
    for gid, info in costs["generators"].items():  # the sample stage's wall time, not a sum of per-candidate shares
        info["sample_wall_s"] = sum_over_runs(manifest.get("runs", []), "wall_s").get(gid)
    for gid, seconds in gpu_summary(manifest.get("runs", [])).items():
        costs["generators"].setdefault(gid, {})["gpu_s"] = seconds
    if stage_times is not None:
        stage_times["select+evaluate"] = time.perf_counter() - began
        costs["stage_wall_s"] = {k: round(v, 3) for k, v in stage_times.items()}
        last_run = manifest.get("runs", [{}])[-1] if manifest.get("runs") else {}
        costs["stage_gpu_s"] = {"sample": round(sum(gpu_summary([last_run]).values()), 3)}
    store.write_manifest(manifest)
    store.write_text("metrics.json", to_json(metrics))
    write_report(experiment, metrics, manifest)
    return metrics


def write_report(experiment: Experiment, metrics: dict[str, Any] | None = None,
                 manifest: dict[str, Any] | None = None) -> Path:
    """(Re)build ``report.md``, ``coverage.png`` and ``report.html`` from the stored metrics."""
    metrics = experiment.metrics() if metrics is None else metrics
    manifest = experiment.manifest() if manifest is None else manifest
    store = experiment.store
    with store.writing("coverage.png") as path:  # plots too are files the store lists (run --force removes them)
        plot = plot_curves(metrics, path) if metrics else None
    text = render_markdown(experiment.config.name, metrics, manifest, "coverage.png" if plot else None)
    equal_compute = metrics.get("equal_compute", {}) if metrics else {}
    with store.writing("allocation.png") as path:
        allocation_plot = plot_equal_compute(equal_compute, path, experiment.config.name)
    text += render_section(equal_compute, "allocation.png" if allocation_plot else None)
    write_html(experiment, metrics, text)
    return experiment.store.write_text("report.md", text)
