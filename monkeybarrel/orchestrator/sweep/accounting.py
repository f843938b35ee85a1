"""GPU-seconds per point that do not depend on run order: engine starts counted apart, then shared.

A point's sample stage records the GPU-seconds its engines were held while it sampled (``gpu_s``:
GPUs x wall seconds) and, in the stage in which an engine started, the start's wall seconds
(``engine_start_s``; Ray's ``workers_ready_s``). So the first point an engine serves carries the
whole start (on one H100: 31.6 GPU-s against 6.6 and 6.3 for identical points), and a GPU-second
frontier would depend on the order the points ran in. Here, from the stores and ``sweep.json``:

* a stage's **start** GPU-seconds = the GPUs it held (``gpu_s / wall_s``) x the start's seconds,
  at most the stage's wall; its **generation** GPU-seconds = the rest. (Ray's ``workers_ready_s``
  counts from before the data load, which the stage's ``gpu_s`` leaves out, so for Ray the stage's
  first seconds of generation, as many as the data load took, count as start: seconds against a
  start of a minute or more.)
* an engine's start GPU-seconds (every start of it in the sweep: lanes, shards, retries and later
  runs included) are **shared equally** by the points it served;
* a point's GPU-seconds = its generation GPU-seconds + its shares of its engines' starts.

Identical points then cost the same whichever ran first, and the sum over points is still every
GPU-second the sweep's engines held while sampling. Backends that record no GPU time (the CPU) give
None throughout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

START_FIELDS = ("engine_start_s", "workers_ready_s")
"""Stage-record fields that say an engine started in that stage, and how long it took (wall s)."""


def split_stage(record: dict[str, Any]) -> tuple[float, float, float] | None:
    """``(generation GPU-s, start GPU-s, start wall s)`` of one generator's sample-stage record (None: no GPU time)."""
    gpu = record.get("gpu_s")
    if gpu is None:
        return None
    gpu, wall = float(gpu), float(record.get("wall_s") or 0.0)
    start_s = next((float(record[f]) for f in START_FIELDS if record.get(f) is not None), 0.0)
    inside = min(start_s, wall)
    start = gpu * inside / wall if wall > 0 else 0.0
    return gpu - start, start, start_s


def store_split(store: Path) -> dict[str, tuple[float, float, float]]:
    """Per generator id, :func:`split_stage` summed over the store's runs (generators with GPU time only)."""
    try:
        manifest = json.loads((store / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    out: dict[str, tuple[float, float, float]] = {}
    for run in manifest.get("runs", []):
        for gid, info in (run.get("sampled") or {}).items():
            parts = split_stage(info)
            if parts is not None:
                have = out.get(gid, (0.0, 0.0, 0.0))
                out[gid] = (have[0] + parts[0], have[1] + parts[1], have[2] + parts[2])
    return out


def gpu_seconds(directory: str | Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each point's shared GPU-seconds and each engine's starts, from the stores of ``records`` (sweep.json's).

    Returns:
        ``{"points": {name: {"generation_gpu_s", "start_share_gpu_s", "gpu_s"}}, "engines": {label:
        {"start_s", "start_gpu_s", "points"}}}``; a point without GPU time is absent.
    """
    directory = Path(directory)
    splits = {r["name"]: store_split(directory / r["name"]) for r in records if "name" in r}
    engines: dict[str, dict[str, Any]] = {}
    labels: dict[str, dict[str, str]] = {}
    for record in records:
        name = record.get("name")
        if not splits.get(name):
            continue
        labels[name] = {gid: _label(record, gid) for gid in splits[name]}
        for gid, (_, start, start_s) in splits[name].items():
            engine = engines.setdefault(labels[name][gid], {"start_s": 0.0, "start_gpu_s": 0.0, "points": []})
            engine["start_s"] += start_s
            engine["start_gpu_s"] += start
            if name not in engine["points"]:
                engine["points"].append(name)
    points = {}
    for name, parts in splits.items():
        if not parts:
            continue
        generation = sum(p[0] for p in parts.values())
        share = sum(engines[labels[name][gid]]["start_gpu_s"] / len(engines[labels[name][gid]]["points"])
                    for gid in parts)
        points[name] = {"generation_gpu_s": round(generation, 3), "start_share_gpu_s": round(share, 3),
                        "gpu_s": round(generation + share, 3)}
    for engine in engines.values():
        engine["start_s"], engine["start_gpu_s"] = round(engine["start_s"], 3), round(engine["start_gpu_s"], 3)
    return {"points": points, "engines": engines}


def _label(record: dict[str, Any], gid: str) -> str:
    """The engine label of generator ``gid`` of a point (older manifests: the point's only engine, if one)."""
    mapped = record.get("generator_engines") or {}
    if gid in mapped:
        return mapped[gid]
    engines = record.get("engines") or []
    return engines[0] if len(engines) == 1 else f"{record['name']}: {gid}"


def with_starts(engines: dict[str, dict[str, Any]], shared: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``sweep.json``'s engines (label -> starts, points) with their start figures from :func:`gpu_seconds`:
    ``start_s``, ``start_gpu_s`` and ``shared_by`` (the points that share them)."""
    out = {}
    for label, info in engines.items():
        figures = shared["engines"].get(label)
        extra = {} if figures is None else {"start_s": figures["start_s"], "start_gpu_s": figures["start_gpu_s"],
                                            "shared_by": len(figures["points"])}
        out[label] = {**info, **extra}
    return out
