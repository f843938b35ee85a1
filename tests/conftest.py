"""Shared fixtures: paths to the shared data and small real experiment configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MONKEYBARREL_SHARED", REPO.parent / "shared"))
GSM8K_TEST = SHARED / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="session")
def gsm8k_path() -> Path:
    if not GSM8K_TEST.is_file():
        pytest.skip(f"shared GSM8K file not found at {GSM8K_TEST} (set MONKEYBARREL_SHARED)")
    return GSM8K_TEST


def tiny_config(name: str = "tiny", problems: int = 3, samples: int = 4, max_tokens: int = 24, **extra) -> dict:
    """A real but small experiment on the embedded model (seconds on 2 cores)."""
    config = {
        "name": name,
        "seed": 0,
        "task": {"name": "arithmetic", "num_problems": problems, "options": {"difficulty": 1}},
        "generators": [{"id": "smol", "num_samples": samples, "max_tokens": max_tokens, "temperature": 0.8,
                        "options": {"num_threads": 1}}],
    }
    config.update(extra)
    return config


@pytest.fixture(scope="module")
def instances():
    """The local SWE task set's instances by id; skips with the reason when docker or its images are missing."""
    from monkeybarrel.experiments.swe_taskset.build_repos import HERE as TASKSET
    from monkeybarrel.kits.swebench.schema import load_instances

    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception as exc:  # depends on the machine
        pytest.skip(f"no docker daemon: {exc}")
    items = load_instances(TASKSET / "tasks.jsonl")
    try:
        client.images.get(items[0].image_name)
    except Exception:
        pytest.skip(f"image {items[0].image_name} missing: run .ci/swe_setup.sh")
    finally:
        client.close()
    return {i.instance_id: i for i in items}
