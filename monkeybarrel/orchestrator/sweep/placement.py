"""The GPUs a sweep has, what each engine group needs, and which lane of engines starts where next.

Devices (``sweep --gpus``): ``auto`` (the default) is every visible GPU (``$CUDA_VISIBLE_DEVICES``,
else ``nvidia-smi -L``); ``0,2,3`` names CUDA devices; ``4`` takes the first four visible ones.
Where no GPU is visible, ``--gpus N`` gives N *slots* on the CPU: engines then run side by side,
each with its share of the cores (how CI tests concurrency and placement on the embedded model).

Needs: a vLLM engine holds ``tensor_parallel_size x pipeline_parallel_size`` GPUs; any other engine
one slot (the embedded model, an OpenAI client); a ``ray`` engine places its own actors, so its
group takes every device. A group (the points that share their engines) needs the sum over its
distinct engines.

A *lane* is one worker process with one group's engines on its own devices, serving that group's
points one after another (:class:`Placement`):

1. groups that have no lane yet start first, heaviest first (estimated samples x tokens), each on
   the lowest free devices it fits; a group that does not fit waits, the next that fits starts;
2. when every group has a lane, free devices take another engine of the group with the most
   points still waiting per lane, if at least ``spare_after`` (2) and more than its lanes are: an
   engine start (about a minute for vLLM) is worth it only for more than one point's work;
3. a lane that finishes frees its devices for the next.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from ...core.config import ConfigError, ExperimentConfig, GeneratorSpec


@dataclass(frozen=True)
class Devices:
    """The devices a sweep places engines on."""

    ids: tuple[str, ...]
    """CUDA device ids (``CUDA_VISIBLE_DEVICES`` entries), or slot numbers on the CPU."""
    gpu: bool
    """Real GPUs (else CPU slots)."""

    def describe(self, ids: Iterable[str] | None = None) -> str:
        chosen = list(self.ids if ids is None else ids)
        kind = "GPU" if self.gpu else "CPU slot"
        return f"{kind}{'s' if len(chosen) != 1 else ''} {','.join(chosen)}"

    def lane_env(self, ids: list[str]) -> dict[str, str]:
        """Environment of a lane on ``ids``: its GPUs only, or on the CPU its share of the cores."""
        env = {"MONKEYBARREL_DEVICES": ",".join(ids)}
        if self.gpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)
        else:
            threads = max(1, (os.cpu_count() or 1) * len(ids) // max(1, len(self.ids)))
            env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(threads))
        return env


def visible_gpus() -> list[str]:
    """CUDA device ids this process may use: ``$CUDA_VISIBLE_DEVICES`` if set, else ``nvidia-smi -L``, else none."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]


def find_devices(setting: str | None, visible: list[str] | None = None) -> Devices:
    """The devices of ``--gpus`` (``None`` or ``auto``, a count, or a comma list).

    Raises:
        ConfigError: a malformed setting, or more or other GPUs than are visible.
    """
    visible = visible_gpus() if visible is None else visible
    text = (setting or "auto").strip()
    if text == "auto":
        return Devices(tuple(visible), gpu=bool(visible))
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise ConfigError(f"--gpus {text}: expected at least 1")
        if not visible:
            return Devices(tuple(str(i) for i in range(count)), gpu=False)
        if count > len(visible):
            raise ConfigError(f"--gpus {text}: only {len(visible)} GPU(s) are visible ({','.join(visible)})")
        return Devices(tuple(visible[:count]), gpu=True)
    ids = [part.strip() for part in text.split(",")]
    if not all(i.isdigit() or i.startswith(("GPU-", "MIG-")) for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"--gpus {text}: expected auto, a count, or distinct device ids such as 0,1,2,3")
    unknown = [i for i in ids if visible and i not in visible]
    if unknown:
        raise ConfigError(f"--gpus {text}: device(s) {','.join(unknown)} are not visible "
                          f"(visible: {','.join(visible)})")
    return Devices(tuple(ids), gpu=bool(visible))


def engine_gpus(spec: GeneratorSpec) -> int | None:
    """GPUs (or CPU slots) one engine of ``spec`` holds; None for a ``ray`` engine (it places its own actors)."""
    if spec.backend == "ray":
        return None
    if spec.backend == "vllm":
        options = spec.options
        extra: dict[str, Any] = options.get("engine_kwargs") or {}
        tensor = int(options.get("tensor_parallel_size", extra.get("tensor_parallel_size", 1)))
        return tensor * int(options.get("pipeline_parallel_size", extra.get("pipeline_parallel_size", 1)))
    return 1


def group_need(needs: dict[str, int | None], devices: int) -> int:
    """Devices a group of engines (key -> GPUs, None for ``ray``) needs: the sum, or every device for ``ray``."""
    if any(n is None for n in needs.values()):
        return devices
    return max(1, sum(n for n in needs.values() if n is not None))


def work(config: ExperimentConfig) -> float:
    """A point's estimated work (problems x samples x max tokens), for heaviest-first ordering."""
    problems = config.task.num_problems or 100
    return float(sum(problems * g.num_samples * g.max_tokens for g in config.generators))


@dataclass
class Group:
    """One engine group's waiting points and its lanes."""

    name: str
    need: int
    waiting: deque[int]
    """Indices (into the sweep's list of points to run) not yet handed to a lane, in run order."""
    weight: float
    lanes: int = 0
    deaths: int = 0
    """Lanes of this group that died (their process ended without saying goodbye)."""


@dataclass
class Placement:
    """Which group starts a lane on which devices next (see the module docstring)."""

    groups: list[Group]
    devices: list[str]
    spare_after: int = 2
    free: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.free = list(self.devices)

    def next_lane(self) -> tuple[Group, list[str]] | None:
        """The group to start a lane for and its devices (taken), or None."""
        fresh = sorted((g for g in self.groups if g.waiting and g.lanes == 0), key=lambda g: (-g.weight, g.waiting[0]))
        for group in fresh:
            if group.need <= len(self.free):
                return group, self._take(group)
        if fresh:  # devices stay free for the groups that wait for them
            return None
        spare = [g for g in self.groups  # no more lanes than waiting points: a lane that gets none is a wasted start
                 if len(g.waiting) >= max(self.spare_after, g.lanes + 1) and g.need <= len(self.free)]
        if not spare:
            return None
        group = max(spare, key=lambda g: (len(g.waiting) / g.lanes, -g.waiting[0]))
        return group, self._take(group)

    def _take(self, group: Group) -> list[str]:
        ids = sorted(self.free, key=self.devices.index)[:group.need]
        self.free = [d for d in self.free if d not in ids]
        group.lanes += 1
        return ids

    def release(self, group: Group, ids: list[str]) -> None:
        """A lane of ``group`` on ``ids`` ended."""
        group.lanes -= 1
        self.free = sorted(set(self.free) | set(ids), key=self.devices.index)

    def busy(self) -> bool:
        """Are points still waiting or lanes running?"""
        return any(g.waiting or g.lanes for g in self.groups)
