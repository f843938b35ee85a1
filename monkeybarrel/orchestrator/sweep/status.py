"""``monkeybarrel sweep status DIR``: each point's state, candidates, errors, GPU-seconds and last error.

Read-only and cheap at any size: candidate counts come from the Parquet footers of the point's
chunks, errors from the ``finish_reason`` column alone, GPU-seconds from the point's manifest (its
runs' sample stages, with engine starts shared by the points each engine served: ``accounting``).
A point recorded ``running`` whose driver (pid on this host) is gone is shown ``pending``: it was
killed and resumes on the next run. Shards' manifests are read together with ``sweep.json``.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.markup import escape

from ..report.terminal import table
from ..stages.sample import gpu_summary
from ..store.experiment_store import ExperimentStore, StoreError
from .accounting import gpu_seconds, with_starts
from .manifest import MANIFEST, read_manifest


def sweep_status(directory: str | Path) -> dict[str, Any]:
    """``{"directory", "name", "points": [row], "states": {state: n}, "engines": {label: {starts, points}}}``.

    A row: ``name, id, state, candidates, expected_candidates, errors, gpu_s, tries, attempts, error,
    overrides``; ``gpu_s`` is None when no backend recorded GPU time.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    if not manifest:
        raise StoreError(f"{directory}: not a sweep directory (no {MANIFEST})")
    rows = []
    for record in sorted(manifest["points"], key=lambda r: r.get("index", 0)):
        state = record.get("state", "pending")
        if state == "running" and not _alive(record):
            state = "pending"
        candidates, errors, gpu_s = _store_figures(directory / record["name"])
        rows.append({"name": record["name"], "id": record["id"], "state": state, "candidates": candidates,
                     "expected_candidates": record.get("expected_candidates"), "errors": errors, "gpu_s": gpu_s,
                     "tries": record.get("tries", 0), "attempts": record.get("attempts", 0),
                     "error": record.get("error"), "overrides": record.get("overrides", {}),
                     "engines": record.get("engines", [])})
    shared = gpu_seconds(directory, manifest["points"])
    for row in rows:  # engine starts shared, not carried by the first point an engine served
        row.update(shared["points"].get(row["name"], {}))
    states: dict[str, int] = {}
    for row in rows:
        states[row["state"]] = states.get(row["state"], 0) + 1
    engines = with_starts(manifest.get("engines", {}), shared)
    return {"directory": str(directory), "name": manifest.get("name"), "points": rows, "states": states,
            "engines": engines, "runs": len(manifest.get("runs", []))}


def _alive(record: dict[str, Any]) -> bool:
    """Is the driver that marked this point ``running`` still there (True when it is on another host)?"""
    if record.get("host") not in (None, socket.gethostname()):
        return True
    try:
        os.kill(int(record.get("pid", -1)), 0)
    except (OSError, ValueError):
        return False
    return True


def _store_figures(path: Path) -> tuple[int, int, float | None]:
    """(candidates, error candidates, GPU-seconds) of one point's store; zeros when it has not started."""
    if not (path / "candidates").is_dir():
        return 0, 0, None
    store = ExperimentStore(path)
    parts = store.chunk_paths("candidates")
    candidates, errors = 0, 0
    for part in parts:
        try:
            candidates += pq.read_metadata(part).num_rows
            reason = pq.read_table(part, columns=["finish_reason"]).column("finish_reason")
            errors += int(pc.sum(pc.cast(pc.equal(reason, "error"), pa.int64())).as_py() or 0)
        except (pa.ArrowInvalid, OSError):
            continue  # a damaged chunk: `monkeybarrel store check` names it
    gpu = gpu_summary(store.read_manifest().get("runs", [])) if store.manifest_path.is_file() else {}
    return candidates, errors, (round(sum(gpu.values()), 1) if gpu else None)


STATE_STYLE = {"done": "green", "running": "cyan", "pending": "yellow", "failed": "bold red"}


def print_status(status: dict[str, Any], console: Console) -> None:
    """The status as a table that reads at 80 columns and piped, each last error in full, the engine starts.

    The table (``report.terminal.table``: the point column is never cut) holds the figures; a point's
    last error is a line of its own below it, never cut (the whole message, its cause included).
    """
    rows = []
    for row in status["points"]:
        expected = row["expected_candidates"]
        candidates = f"{row['candidates']}/{expected}" if expected and row["state"] != "done" else str(row["candidates"])
        state = row["state"] + (f" ({row['tries']})" if row["state"] == "failed" and row["tries"] else "")
        rows.append([escape(row["name"]), f"[{STATE_STYLE.get(row['state'], '')}]{state}[/]", candidates,
                     str(row["errors"]) if row["errors"] else "", "–" if row["gpu_s"] is None else f"{row['gpu_s']:g}"])
    states = ", ".join(f"{n} {s}" for s, n in sorted(status["states"].items()))
    console.print(f"sweep {status['name']}: {states}", style="bold", markup=False, highlight=False, soft_wrap=True)
    console.print(table(["point", "state", "cands", "err", "GPU-s"], rows, right=["cands", "err", "GPU-s"]))
    errors = [(row["name"], row["error"]) for row in status["points"] if row["error"]]
    if errors:
        console.print("last errors:", markup=False, highlight=False)
        for name, error in errors:
            console.print(f"  {name}: {error}", markup=False, highlight=False)
    engines = status.get("engines", {})
    for label, info in engines.items():
        points = len(info.get("points", []))
        start = f" (starts {info['start_s']:g} s, {info['start_gpu_s']:g} GPU-s shared by its points)" \
            if info.get("start_gpu_s") else ""
        console.print(f"engine {label}: {info['starts']} start{'s' if info['starts'] != 1 else ''} "
                      f"for {points} point{'s' if points != 1 else ''}{start}", highlight=False, markup=False)
