"""``sweep --shard I/N``: one of N drivers of one sweep (a Slurm array task), sharded by engine.

Every shard computes the same split from the sweep alone (no coordination): the points are grouped
by the engines they need (as the driver groups them), a group is halved while there are fewer
groups than shards or while it is heavier than a shard's fair share (estimated problems x samples x
tokens), and the pieces go heaviest first to the least loaded shard. A shard therefore starts each
of its engines once; a model whose points outweigh one shard's share runs on several shards, once
each. Shards write into one sweep directory (on shared storage): each its own manifest
``DIR/shards/I-of-N.json`` under its own lock ``DIR/shards/.lock-I-of-N``; ``sweep status`` and
``sweep report`` read all of them as one (``manifest.read_manifest``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ...core.config import ConfigError
from ..store.lock import RunLock
from .manifest import SHARDS
from .placement import work
from .points import Planned

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> tuple[int, int]:
    """``I/N`` (1 <= I <= N) as ``(I, N)``.

    Raises:
        ConfigError: naming the flag and what is expected (Slurm: ``$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``
            with ``--array=1-N``).
    """
    match = _SHARD.fullmatch(text or "")
    if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise ConfigError(f"--shard {text}: expected I/N with 1 <= I <= N, e.g. --shard 2/4 "
                          "(Slurm: --array=1-4 and --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)")
    return int(match.group(1)), int(match.group(2))


def split(planned: list[Planned], shards: int) -> list[list[Planned]]:
    """The points of each of ``shards`` shards (each in run order); see the module docstring."""
    groups: dict[tuple[str, ...], list[Planned]] = {}
    for item in planned:
        groups.setdefault(item.group, []).append(item)
    pieces = list(groups.values())
    total = sum(work(item.config) for item in planned)

    def weight(piece: list[Planned]) -> float:
        return sum(work(item.config) for item in piece)

    while True:
        splittable = [p for p in pieces if len(p) > 1]
        if not splittable:
            break
        heaviest = max(splittable, key=lambda p: (weight(p), -p[0].point.index))
        if len(pieces) >= shards and weight(heaviest) <= total / shards:
            break
        pieces.remove(heaviest)
        half = len(heaviest) // 2
        pieces += [heaviest[:half], heaviest[half:]]
    loads, out = [0.0] * shards, [[] for _ in range(shards)]
    for piece in sorted(pieces, key=lambda p: (-weight(p), p[0].point.index)):
        target = min(range(shards), key=lambda s: (loads[s], s))
        loads[target] += weight(piece)
        out[target] += piece
    order = {id(item): i for i, item in enumerate(planned)}
    return [sorted(items, key=lambda item: order[id(item)]) for items in out]


class ShardLock(RunLock):
    """The writer lock of one shard (``DIR/shards/.lock-I-of-N``): shards run side by side, a shard once."""

    def __init__(self, root: str | Path, shard: tuple[int, int]) -> None:
        super().__init__(root, f"sweep shard {shard[0]}/{shard[1]}")
        self.shard = shard

    @property
    def path(self) -> Path:
        return self.root / SHARDS / f".lock-{self.shard[0]}-of-{self.shard[1]}"

    def acquire(self) -> "ShardLock":
        (self.root / SHARDS).mkdir(parents=True, exist_ok=True)
        super().acquire()
        return self
