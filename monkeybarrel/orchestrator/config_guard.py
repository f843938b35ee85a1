"""Which parts of a configuration determine stored results, and refusing changes to them."""

from __future__ import annotations

from typing import Any

from ..core.config import ExperimentConfig


class ConfigConflictError(RuntimeError):
    """The directory holds results of a configuration that differs in a result-changing key."""


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
    return inputs


def changed_keys(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[str]:
    """Human-readable ``section.key: old -> new`` for every differing key of sections in both."""
    changes = []
    for section in sorted(set(old) & set(new)):
        before, after = _flatten(old[section]), _flatten(new[section])
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
