"""Which parts of a configuration determine stored results, and refusing changes to them."""

from __future__ import annotations

from typing import Any

from ...core.config import ExperimentConfig


class ConfigConflictError(RuntimeError):
    """The directory holds results of a configuration that differs in a result-changing key."""


RUNTIME_OPTIONS = frozenset({
    # how fast or where a plug-in runs, never what it produces
    "num_threads", "max_batch", "batch_size", "max_concurrency", "max_retries", "backoff_s", "max_backoff_s",
    "timeout_s", "chunk_requests", "num_workers", "address", "num_cpus_per_worker", "num_gpus_per_worker",
    "requests_per_task", "tasks_per_worker", "max_worker_restarts", "max_attempts", "start_timeout_s", "workers",
    "gpu_memory_utilization", "cpu_kvcache_gib", "enforce_eager", "api_key", "runtime_env", "init_options",
    "progress", "show_progress", "batch_window_s", "device", "engines_per_gpu", "kv_cache_memory_bytes",
})
"""``options`` keys that change speed or placement only: changing them never blocks a resume."""


def result_inputs(config: ExperimentConfig) -> dict[str, dict[str, Any]]:
    """The config sections each stored result depends on.

    ``task.num_problems`` and ``generators[*].num_samples`` are left out: raising them only adds
    problems or samples (problem i and sample j do not depend on how many there are).
    """
    inputs: dict[str, dict[str, Any]] = {
        "task": {**config.task.model_dump(mode="json", exclude={"num_problems"}), "seed": config.seed},
    }
    for generator in config.generators:
        data = generator.model_dump(mode="json", exclude={"num_samples"})
        data["seed"] = config.generator_seed(generator)
        inputs[f"generators[id={generator.id}]"] = data
    for verifier in config.verifiers:
        inputs[f"verifiers[name={verifier.name}]"] = verifier.model_dump(mode="json")
    return {section: _without_runtime(data) for section, data in inputs.items()}


def _without_runtime(section: dict[str, Any]) -> dict[str, Any]:
    """``section`` less its runtime-only ``options`` (also those nested as ``backend_options``)."""
    out = dict(section)
    if isinstance(out.get("options"), dict):
        options = {k: v for k, v in out["options"].items() if k not in RUNTIME_OPTIONS}
        if isinstance(options.get("backend_options"), dict):
            options["backend_options"] = {k: v for k, v in options["backend_options"].items()
                                          if k not in RUNTIME_OPTIONS}
        out["options"] = options
    return out


def stored_sections(has_problems: bool, generators_with_candidates: set[str],
                    verifiers_with_scores: set[str]) -> set[str]:
    """The ``result_inputs`` sections that produced something now in the store."""
    sections = {"task"} if has_problems else set()
    sections |= {f"generators[id={g}]" for g in generators_with_candidates}
    return sections | {f"verifiers[name={v}]" for v in verifiers_with_scores}


def changed_sections(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """``{section: ["section.key: old -> new", ...]}`` for the sections in both that differ (runtime keys ignored)."""
    changes = {}
    for section in sorted(set(old) & set(new)):
        lines = changed_keys({section: old[section]}, {section: new[section]})
        if lines:
            changes[section] = lines
    return changes


def changed_keys(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable ``section.key: old -> new`` for every differing key of sections in both."""
    changes = []
    for section in sorted(set(old) & set(new)):
        before, after = _flatten(_without_runtime(old[section])), _flatten(_without_runtime(new[section]))
        for key in sorted(set(before) | set(after)):
            if before.get(key, "<unset>") != after.get(key, "<unset>"):
                changes.append(f"{section}.{key}: {before.get(key, '<unset>')!r} -> {after.get(key, '<unset>')!r}")
    return changes


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: data}
