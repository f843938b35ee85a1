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
from rich.table import Table

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
    """The status as a rich table that reads at 80 columns (and piped), then the engine starts.

    Point names fold where the terminal is too narrow (keeping at least 16 columns for the last
    error); the last error gets the columns left over, on one line cut with an ellipsis.
    """
    cells = []
    for row in status["points"]:
        expected = row["expected_candidates"]
        candidates = f"{row['candidates']}/{expected}" if expected and row["state"] != "done" else str(row["candidates"])
        state = row["state"] + (f" ({row['tries']})" if row["state"] == "failed" and row["tries"] else "")
        cells.append([row["name"], state, candidates, str(row["errors"]) if row["errors"] else "",
                      "–" if row["gpu_s"] is None else f"{row['gpu_s']:g}", row["error"] or ""])
    header = ["point", "state", "cands", "err", "GPU-s", "last error"]
    widths = [max([len(header[i]), *(len(c[i]) for c in cells)]) for i in range(5)]
    free = console.width - sum(widths[1:]) - 3 * len(header) - 1  # for the point name and the last error
    error = max([len(header[5]), *(len(c[5]) for c in cells)])
    widths[0] = max(10, min(widths[0], free - min(error, 16)))
    left = max(10, min(error, free - widths[0]))
    table = Table(title=f"sweep {status['name']}: " + ", ".join(f"{n} {s}" for s, n in sorted(status["states"].items())),
                  title_justify="left")
    for i, name in enumerate(header):
        table.add_column(name, justify="right" if 1 < i < 5 else "left", overflow="fold" if i == 0 else "ellipsis",
                         no_wrap=i > 0, width=widths[i] if i < 5 else left)
    for row, cell in zip(status["points"], cells):
        cell[1] = f"[{STATE_STYLE.get(row['state'], '')}]{cell[1]}[/]"
        table.add_row(*cell)
    console.print(table)
    engines = status.get("engines", {})
    for label, info in engines.items():
        points = len(info.get("points", []))
        start = f" (starts {info['start_s']:g} s, {info['start_gpu_s']:g} GPU-s shared by its points)" \
            if info.get("start_gpu_s") else ""
        console.print(f"engine {label}: {info['starts']} start{'s' if info['starts'] != 1 else ''} "
                      f"for {points} point{'s' if points != 1 else ''}{start}", highlight=False, markup=False)
