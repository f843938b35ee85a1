"""The manifest: what produced the stored results (config hash, versions, seeds, times, costs)."""

from __future__ import annotations

import platform
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ...core.config import ExperimentConfig, fingerprint
from .config_guard import result_inputs

_PACKAGES = ("monkeybarrel", "numpy", "pyarrow", "torch", "transformers", "math-verify", "scikit-learn",
             "pydantic", "vllm", "ray", "docker")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in _PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            continue
    return versions


def new_manifest(config: ExperimentConfig) -> dict[str, Any]:
    return {
        "name": config.name,
        "created": now(),
        "config_hash": fingerprint(config.to_dict()),
        "result_inputs": result_inputs(config),
        "seeds": {"experiment": config.seed,
                  **{f"generator:{g.id}": config.generator_seed(g) for g in config.generators}},
        "package_versions": package_versions(),
        "runs": [],
        "costs": {},
    }
