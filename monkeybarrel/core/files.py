"""Reading task records from local JSONL or Parquet files, with errors that name file and line."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Iterator, Sequence


class TaskDataError(ValueError):
    """Bad task data: names the file, the line (1-based) and what was expected."""


def read_records(path: str | Path, required: Sequence[str] = ()) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, record)`` from a ``.jsonl``/``.json`` (one object per line, optionally ``.gz``) or ``.parquet`` file.

    Args:
        path: the file.
        required: fields every record must have; a missing one raises TaskDataError.

    Raises:
        TaskDataError: file missing, a line that is not a JSON object, or a missing field.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskDataError(f"{path}: file not found")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = enumerate(pq.read_table(path).to_pylist(), start=1)
    else:
        rows = _jsonl_rows(path)
    for line_number, record in rows:
        missing = [name for name in required if record.get(name) is None]
        if missing:
            raise TaskDataError(
                f"{path}:{line_number}: missing field(s) {missing}; expected fields {list(required)}"
            )
        yield line_number, record


def _decoded_lines(path: Path, handle) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of a binary handle; undecodable bytes raise TaskDataError naming the line."""
    for line_number, raw in enumerate(handle, start=1):
        try:
            yield line_number, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TaskDataError(f"{path}:{line_number}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for line_number, line in _decoded_lines(path, handle):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskDataError(f"{path}:{line_number}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(record, dict):
                raise TaskDataError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
            yield line_number, record


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, fsync and rename (never half a file).

    For files outside an experiment store (a sweep's manifest and report); a store writes through
    ``ExperimentStore.writing``, which also lists the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
