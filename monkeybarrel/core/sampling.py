"""What every layer may know about sampling: the sampler registry, a request, and its seed.

The registry lives here (not in ``monkeybarrel.samplers``) so that kits and other stages can build a
sampler by name (e.g. a chat model for writing tests) without importing the samplers stage; the
samplers register themselves into it and are imported by name on the first lookup.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from .records import Problem
from .registry import Registry

SAMPLERS: Registry[Any] = Registry("sampler", package="monkeybarrel.samplers")


@dataclass(frozen=True)
class SampleRequest:
    """Draw ``sample_indices`` of ``problem`` with random seed ``seed``."""

    problem: Problem
    sample_indices: tuple[int, ...]
    seed: int


def request_seed(base_seed: int, generator_id: str, problem_id: str, first_index: int) -> int:
    """A 63-bit seed that depends only on what is sampled, not on batching or resume order."""
    digest = hashlib.sha256(f"{base_seed}/{generator_id}/{problem_id}/{first_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
