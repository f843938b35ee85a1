"""The stage runner: sample -> verify -> select -> evaluate, resumable on one store directory."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from ..core.config import ExperimentConfig
from ..core.plugins import build_plugin
from ..core.records import Problem, problems_from_table, problems_to_table
from ..tasks.base import TASKS, Task
from .accuracy_vs_k import accuracy_vs_k
from .allocation_report import equal_compute_metrics, plot_equal_compute, render_section
from .allocation_rounds import configured_policy, run_allocated_sampling, uses_rounds
from .config_guard import ConfigConflictError, changed_keys, result_inputs
from .evaluate_stage import evaluate
from .experiment import Experiment
from .label_stage import run_label_stage
from .manifest import new_manifest, now, package_versions
from .report import plot_curves, render_markdown
from .sample_stage import gpu_summary, run_sample_stage, token_summary
from .select_stage import run_select_stage
from .store import ExperimentStore, StoreError, atomic_write_bytes
from .verify_stage import run_verify_stage


def build_task(config: ExperimentConfig) -> Task:
    """The configured task (errors name ``task`` keys)."""
    spec = config.task
    return build_plugin(TASKS, spec.name, "task", path=spec.path, split=spec.split,
                        num_problems=spec.num_problems, seed=config.seed, **spec.options)


def open_store(config: ExperimentConfig, out_dir: str | Path, force: bool = False) -> tuple[ExperimentStore, dict[str, Any]]:
    """Open (or create) the store, refusing a config that would change stored results unless ``force``."""
    out_dir = Path(out_dir)
    if force and out_dir.exists():
        for child in out_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    store = ExperimentStore(out_dir)
    manifest = store.read_manifest()
    if manifest:
        changes = changed_keys(manifest.get("result_inputs", {}), result_inputs(config))
        if changes:
            raise ConfigConflictError(
                f"{out_dir}: holds results of a different configuration; these keys would change stored results:\n  "
                + "\n  ".join(changes)
                + "\nStart a new directory (--out) or pass --force to discard what is stored there."
            )
        manifest["result_inputs"] = {**manifest.get("result_inputs", {}), **result_inputs(config)}
    else:
        manifest = new_manifest(config)
    return store, manifest


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
    task = build_task(config)  # task and data are checked before the directory is touched
    if uses_rounds(config):
        configured_policy(config)
    problems = task.load()
    store, manifest = open_store(config, out_dir, force)
    store.write_text("config.yaml", config.to_yaml())
    run_record: dict[str, Any] = {"started": now(), "config_hash": manifest.get("config_hash")}
    manifest.setdefault("runs", []).append(run_record)
    manifest["package_versions"] = package_versions()
    store.write_manifest(manifest)

    stage_times: dict[str, float] = {}
    store_problems(store, problems)
    stage_times["load"] = time.perf_counter() - began

    began = time.perf_counter()
    run_record["sampled"] = (run_allocated_sampling(store, config, task, problems, show_progress) if uses_rounds(config)
                             else run_sample_stage(store, config, problems, show_progress))
    stage_times["sample"] = time.perf_counter() - began

    began = time.perf_counter()
    run_record["verified"] = run_verify_stage(store, config, problems, show_progress)
    stage_times["verify"] = time.perf_counter() - began

    began = time.perf_counter()
    run_label_stage(store, task, problems)
    stage_times["label"] = time.perf_counter() - began

    experiment = Experiment(store.root)
    began = time.perf_counter()
    evaluate_and_report(experiment, stage_times=stage_times, manifest=manifest, began=began)
    run_record["finished"] = now()
    store.write_manifest(manifest)
    return experiment


def evaluate_and_report(experiment: Experiment, *, stage_times: dict[str, float] | None = None,
                        manifest: dict[str, Any] | None = None, began: float | None = None) -> dict[str, Any]:
    """Select, evaluate and write ``selections.parquet``, ``metrics.json``, ``report.md``, ``coverage.png``."""
    store, config = experiment.store, experiment.config
    began = time.perf_counter() if began is None else began
    data, labels = experiment.selection_data(), experiment.labels_array()
    selections, info = run_select_stage(config, data, labels)
    store.write_table("selections", selections)
    metrics = evaluate(config, data, labels, info)
    metrics["accuracy_vs_k"] = accuracy_vs_k(config, data, labels, metrics["ks"])
    metrics["equal_compute"] = equal_compute_metrics(data, labels, seed=config.seed)
    manifest = store.read_manifest() if manifest is None else manifest
    costs = manifest.setdefault("costs", {})
    costs["generators"] = token_summary(experiment.candidates())
    for gid, seconds in gpu_summary(manifest.get("runs", [])).items():
        costs["generators"].setdefault(gid, {})["gpu_s"] = seconds
    if stage_times is not None:
        stage_times["select+evaluate"] = time.perf_counter() - began
        costs["stage_wall_s"] = {k: round(v, 3) for k, v in stage_times.items()}
        last_run = manifest.get("runs", [{}])[-1] if manifest.get("runs") else {}
        costs["stage_gpu_s"] = {"sample": round(sum(gpu_summary([last_run]).values()), 3)}
    store.write_manifest(manifest)
    atomic_write_bytes(store.root / "metrics.json", json.dumps(metrics, indent=2).encode())
    write_report(experiment, metrics, manifest)
    return metrics


def write_report(experiment: Experiment, metrics: dict[str, Any] | None = None,
                 manifest: dict[str, Any] | None = None) -> Path:
    """(Re)build ``report.md`` and ``coverage.png`` from the stored metrics."""
    metrics = experiment.metrics() if metrics is None else metrics
    manifest = experiment.manifest() if manifest is None else manifest
    plot = plot_curves(metrics, experiment.directory / "coverage.png") if metrics else None
    text = render_markdown(experiment.config.name, metrics, manifest, plot.name if plot else None)
    equal_compute = metrics.get("equal_compute", {}) if metrics else {}
    allocation_plot = plot_equal_compute(equal_compute, experiment.directory / "allocation.png", experiment.config.name)
    text += render_section(equal_compute, allocation_plot.name if allocation_plot else None)
    return experiment.store.write_text("report.md", text)
