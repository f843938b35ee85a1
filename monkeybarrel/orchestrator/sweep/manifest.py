"""``DIR/sweep.json``: which points a sweep directory holds, their state, and the engines started.

The directory belongs to one sweep: every point it has started (a store under ``DIR/<point>/``)
must be a point of the sweep being run, with the same ``id`` (a hash of its axis values and of the
config sections its stored results depend on). Another sweep's directory is refused, as
inspect_ai's ``eval_set`` refuses a log directory from another set. Points recorded but never
started are dropped when the sweep changes; a point keeps its directory name across runs.

Layout::

    {"format": 1, "name": ..., "source": SWEEP.yaml, "created": ..., "updated": ...,
     "points": [{"id", "name", "index", "overrides", "state", "attempts", "tries", "error", "traceback",
                 "config_hash", "engines", "expected_candidates", "started", "finished", "host", "pid"}],
     "engines": {label: {"starts": n, "points": [names]}},
     "runs": [{"started", "finished", "outcome", "pid", "host", "ray_address", "engine_starts": {label: n}}]}

States: ``pending`` (not run, interrupted, or its config changed since it was done), ``running``,
``done``, ``failed`` (every try of the last run failed; ``error`` is the last one).

Shards (``sweep --shard I/N``, e.g. Slurm array tasks on shared storage) each write their own file,
``DIR/shards/I-of-N.json``, in the same layout, and never ``sweep.json``: no driver overwrites
another's file. :func:`read_manifest` reads them all as one: each point's most recently updated
record (``updated``, microseconds), engine starts summed, runs together.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from ...core.config import fingerprint
from ...core.files import atomic_write_bytes, is_atomic_temporary
from ..store.config_guard import RUNTIME_OPTIONS, changed_keys, result_inputs
from ..store.experiment_store import StoreError
from ..store.lock import LOCK_NAME
from ..store.manifest import now
from .spec import Point, Sweep

MANIFEST = "sweep.json"
SHARDS = "shards"
"""``DIR/shards/``: the manifests (``I-of-N.json``) and locks of ``--shard`` drivers."""
SWEEP_FILES = (MANIFEST, SHARDS, "sweep.yaml", LOCK_NAME, "report.md", "report.html", "report.png", "report.json")
"""Top-level files a sweep directory holds besides its points' stores."""
STATES = ("pending", "running", "done", "failed")


class ForeignSweepError(StoreError):
    """The directory holds another sweep's points (or is not a sweep directory)."""


def manifest_file(shard: tuple[int, int] | None = None) -> str:
    """The file a driver writes, relative to the sweep directory: ``sweep.json``, or ``shards/I-of-N.json``."""
    return MANIFEST if shard is None else f"{SHARDS}/{shard[0]}-of-{shard[1]}.json"


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The sweep's manifest ({} when there is none): ``DIR/sweep.json`` merged with every shard's file."""
    directory = Path(directory)
    shards = sorted((directory / SHARDS).glob("*.json")) if (directory / SHARDS).is_dir() else []
    parts = [m for m in (read_file(directory, MANIFEST), *(read_file(directory, f"{SHARDS}/{p.name}") for p in shards))
             if m]
    return parts[0] if len(parts) == 1 else merge(parts) if parts else {}


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several drivers' manifests as one: the points of the most recently claimed, each point's most recently
    updated record (points only another file holds, when they ever ran), engine starts summed, runs by start."""
    latest = max(parts, key=lambda m: str(m.get("claimed", "")))
    wanted = {r["id"] for r in latest["points"]}
    records: dict[str, dict[str, Any]] = {}
    for part in parts:
        for record in part["points"]:
            if not isinstance(record, dict) or "id" not in record:
                continue
            if record["id"] not in wanted and record.get("state", "pending") == "pending":
                continue  # a point dropped from the sweep before it ever ran
            held = records.get(record["id"])
            if held is None or _rank(record) > _rank(held):
                records[record["id"]] = record
    engines: dict[str, dict[str, Any]] = {}
    for part in parts:
        for label, info in part.get("engines", {}).items():
            total = engines.setdefault(label, {"starts": 0, "points": []})
            total["starts"] += info.get("starts", 0)
            total["points"] = sorted(set(total["points"]) | set(info.get("points", [])))
    runs = sorted((run for part in parts for run in part.get("runs", [])), key=lambda r: str(r.get("started", "")))
    return {"format": 1, "name": latest.get("name"), "source": latest.get("source"),
            "created": min(str(p.get("created", "")) for p in parts), "claimed": latest.get("claimed"),
            "updated": max(str(p.get("updated", "")) for p in parts),
            "points": sorted(records.values(), key=lambda r: r.get("index", 0)), "engines": engines, "runs": runs}


def _rank(record: dict[str, Any]) -> tuple[str, int]:
    return str(record.get("updated") or ""), STATES.index(record.get("state", "pending")) \
        if record.get("state") in STATES else -1


def stamp() -> str:
    """Now, in microseconds: orders the updates of one point's record made by several drivers."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def read_file(directory: str | Path, file: str = MANIFEST) -> dict[str, Any]:
    """One driver's manifest file (``sweep.json`` or a shard's) as a dict ({} when there is none)."""
    path = Path(directory) / file
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path}: damaged sweep manifest ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise StoreError(f"{path}: not a sweep manifest (no 'points' list)")
    return data


def write_manifest(directory: str | Path, manifest: dict[str, Any], file: str = MANIFEST) -> None:
    """Write this driver's manifest file (atomically: a reader never sees half of it)."""
    manifest["updated"] = now()
    atomic_write_bytes(Path(directory) / file, json.dumps(manifest, indent=2, default=str).encode())


def write_sweep_file(directory: str | Path, sweep: Sweep) -> None:
    """``DIR/sweep.yaml``: the resolved sweep (base inlined), for the record and the report's ``model_params``."""
    atomic_write_bytes(Path(directory) / "sweep.yaml", yaml.safe_dump(sweep.to_dict(), sort_keys=False).encode())


def config_hash(point: Point) -> str:
    """What a done point was run with: a changed config (more samples, another selector) runs it again;
    runtime-only settings (``RUNTIME_OPTIONS`` such as ``max_batch``, the ``store`` section) do not."""
    data = point.config.to_dict()
    data.pop("store", None)
    for section in ("generators", "verifiers"):
        for item in data[section]:
            options = {k: v for k, v in item["options"].items() if k not in RUNTIME_OPTIONS}
            if isinstance(options.get("backend_options"), dict):
                options["backend_options"] = {k: v for k, v in options["backend_options"].items()
                                              if k not in RUNTIME_OPTIONS}
            item["options"] = options
    return fingerprint(data)


def claim(directory: str | Path, sweep: Sweep, file: str = MANIFEST) -> dict[str, Any]:
    """The manifest for running ``sweep`` in ``directory`` as ``file`` (``sweep.json`` or a shard's): the stored
    points (of every driver) merged with the sweep's; the engine starts and runs of ``file`` alone.

    Raises:
        ForeignSweepError: the directory is not empty and not a sweep directory, or it holds started
            points that are not points of ``sweep`` (the message names them and what changed).
    """
    directory = Path(directory)
    old = read_manifest(directory)
    own = read_file(directory, file)
    if not old and directory.is_dir():
        strays = sorted(p.name for p in directory.iterdir()  # another shard's writes may be on their way in
                        if p.name not in SWEEP_FILES and not is_atomic_temporary(p.name))
        if strays:
            raise ForeignSweepError(f"{directory}: not a sweep directory (no {MANIFEST}; holds {strays[:5]}); "
                                    "give an empty or new directory with --out")
    ids = {p.id for p in sweep.points}
    recorded = {r["id"]: r for r in old.get("points", []) if isinstance(r, dict) and "id" in r}
    foreign = [r for r in recorded.values() if r["id"] not in ids and _started(directory / r["name"])]
    known = {r["name"] for r in recorded.values()}
    if old:  # stores put there by hand or by another sweep
        foreign += [{"name": p.name, "id": None} for p in sorted(directory.iterdir())
                    if p.is_dir() and p.name not in known and _started(p)]
    if foreign:
        raise ForeignSweepError(_foreign_message(directory, sweep, foreign))
    points, taken = [], set()
    for point in sweep.points:
        record = recorded.get(point.id)
        if record is None:
            name = point.name if point.name not in {r["name"] for r in recorded.values()} | taken \
                else f"{point.name}-{point.id[:8]}"
            record = {"id": point.id, "name": name, "state": "pending", "attempts": 0, "error": None}
        record.update(index=point.index, overrides=point.overrides)
        taken.add(record["name"])
        points.append(record)
    return {"format": 1, "name": sweep.name, "source": str(sweep.source) if sweep.source else None,
            "created": old.get("created", now()), "claimed": stamp(), "points": points,
            "engines": own.get("engines", {}), "runs": own.get("runs", [])}


def _started(path: Path) -> bool:
    return (path / "config.yaml").is_file() or (path / "manifest.json").is_file()


def _foreign_message(directory: Path, sweep: Sweep, foreign: list[dict[str, Any]]) -> str:
    names = [r["name"] for r in foreign]
    lines = [f"{directory}: holds another sweep's results: point(s) {names[:5]}{' ...' if len(names) > 5 else ''} "
             f"are not points of {sweep.source or sweep.name}."]
    same = next(((r, p) for r in foreign for p in sweep.points if p.name == r["name"]), None)
    if same is not None:
        stored = _stored_inputs(directory / same[0]["name"])
        changes = changed_keys(stored, result_inputs(same[1].config)) if stored else []
        if changes:
            lines.append(f"{same[0]['name']} was run with a different config: " + "; ".join(changes[:6]))
    lines.append("Use another directory (--out), or change the sweep back.")
    return "\n".join(lines)


def _stored_inputs(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "manifest.json").read_text()).get("result_inputs", {})
    except (OSError, json.JSONDecodeError):
        return {}


def point_record(manifest: dict[str, Any], point_id: str) -> dict[str, Any]:
    return next(r for r in manifest["points"] if r["id"] == point_id)


def is_done(record: dict[str, Any], point: Point) -> bool:
    """Done, and with the config it is asked for now (a hash of the whole config: how points were recorded
    before runtime-only settings were left out)."""
    return record.get("state") == "done" and record.get("config_hash") in (config_hash(point),
                                                                             fingerprint(point.config.to_dict()))


def count_starts(manifest: dict[str, Any], run: dict[str, Any], starts: dict[str, int], points: dict[str, list[str]]) -> None:
    """Add a block's engine starts (label -> count) to the run and the totals, with the points they served."""
    for label, count in starts.items():
        run.setdefault("engine_starts", {})[label] = run.get("engine_starts", {}).get(label, 0) + count
        total = manifest["engines"].setdefault(label, {"starts": 0, "points": []})
        total["starts"] += count
        total["points"] = sorted(set(total["points"]) | set(points.get(label, [])))
