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

    Parquet is checked against ``required`` on its schema (the footer) before any row is read, then
    streamed in batches, so a wrong file is refused at once whatever its size.

    Args:
        path: the file.
        required: fields every record must have; a missing one raises TaskDataError.

    Raises:
        TaskDataError: file missing or a directory, a Parquet file without a required column or not
            Parquet, a line that is not a JSON object, or a missing field.
    """
    path = Path(path)
    if path.is_dir():
        raise TaskDataError(f"{path}: is a directory, expected a .jsonl or .parquet file")
    if not path.is_file():
        raise TaskDataError(f"{path}: file not found")
    rows = _parquet_rows(path, required) if path.suffix == ".parquet" else _jsonl_rows(path)
    for line_number, record in rows:
        missing = [name for name in required if record.get(name) is None]
        if missing:
            raise TaskDataError(
                f"{path}:{line_number}: missing field(s) {missing}; expected fields {list(required)}"
            )
        yield line_number, record


def _parquet_rows(path: Path, required: Sequence[str], batch_rows: int = 4096) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a Parquet file (row 1 = line 1), after checking the schema has every ``required`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise TaskDataError(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())})") from None
    names = handle.schema_arrow.names
    missing = [name for name in required if name not in names]
    if missing:
        raise TaskDataError(f"{path}: no column(s) {missing} in the Parquet schema ({handle.metadata.num_rows:,} rows "
                            f"not read); expected columns {list(required)}, found {names[:12]}"
                            + (" …" if len(names) > 12 else ""))
    row = 0
    for batch in handle.iter_batches(batch_size=batch_rows):
        for record in batch.to_pylist():
            row += 1
            yield row, record


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


def is_atomic_temporary(name: str) -> bool:
    """Whether file ``name`` is an :func:`atomic_write_bytes` temporary (``.NAME.PID.tmp``): a write on its way in."""
    return name.startswith(".") and name.endswith(".tmp")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, fsync and rename (never half a file).

    For files outside an experiment store (a sweep's manifest and report); a store writes through
    ``ExperimentStore.writing``, which also lists the file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # is_atomic_temporary
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
