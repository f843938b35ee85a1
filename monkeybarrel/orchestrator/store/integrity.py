"""Is a store file sound, to its last byte? And what can be saved from one that is not?

Every Parquet file the store writes carries a CRC-32 per page (``write_page_checksum``) and rows
in groups of ``ROW_GROUP_ROWS``; readers verify the checksums, so damaged data fails to read instead
of reading wrong. ``written.jsonl`` holds each file's SHA-256, which also finds damage outside the
data pages (e.g. in the footer's strings). A damaged Parquet file loses only its damaged row groups:
``salvage`` reads the others.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from .written import file_digest

ROW_GROUP_ROWS = 10_000
"""Rows per Parquet row group: damage costs at most this many rows of a file (``store repair`` keeps the rest)."""
WRITE_OPTIONS = {"compression": "zstd", "write_page_checksum": True, "row_group_size": ROW_GROUP_ROWS}
READ_ERRORS = (pa.ArrowException, OSError, ValueError)
"""What pyarrow raises for a file it cannot read (truncated, corrupt pages, bad footer; ``UnicodeDecodeError``
for a damaged column name). The functions below count any exception while reading as damage."""


def one_line(exc: BaseException) -> str:
    """An exception's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def scan_parquet(path: Path, columns: list[str] | None = None,
                 optional: tuple[str, ...] = ()) -> tuple[pa.Table | None, str | None]:
    """Read every page of a Parquet file (checksums verified); ``(its columns, None)`` or ``(None, what failed)``.

    ``columns`` (all when None) must be there; the ``optional`` ones are kept where the file has them.
    Memory: one row group at a time plus the kept columns."""
    try:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
        schema = parquet.schema_arrow
        if columns is not None:
            columns = [*columns, *(name for name in optional if name in schema.names)]
        kept = []
        for group in range(parquet.num_row_groups):
            table = parquet.read_row_group(group)
            kept.append(table.select(columns) if columns is not None else table)
        empty = schema.empty_table()
        return pa.concat_tables(kept) if kept else (empty.select(columns) if columns is not None else empty), None
    except Exception as exc:  # whatever a damaged file makes the reader raise
        return None, one_line(exc)


def salvage_parquet(path: Path) -> tuple[pa.Table | None, int]:
    """``(the rows of every row group that still reads, rows lost)``; ``(None, 0)`` when the footer is gone."""
    try:
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception:
        return None, 0
    good, lost = [], 0
    for group in range(parquet.num_row_groups):
        try:
            good.append(parquet.read_row_group(group))
        except Exception:
            lost += parquet.metadata.row_group(group).num_rows
    return (pa.concat_tables(good) if good else None), lost


def parse_problem(path: Path) -> str | None:
    """Why a JSON or YAML file of the store does not parse (None when it does, or is of another kind)."""
    try:
        if path.suffix == ".json":
            json.loads(path.read_bytes())
        elif path.suffix == ".yaml":
            yaml.safe_load(path.read_bytes())
    except (ValueError, yaml.YAMLError) as exc:
        return one_line(exc)
    return None


def digest_problem(path: Path, written: set[str]) -> str | None:
    """Why the file's bytes are not what the store wrote (None when they are, or nothing was recorded)."""
    if not written:
        return None
    digest, _ = file_digest(path)
    if digest in written:
        return None
    return f"bytes differ from what the store wrote (sha256 {digest[:12]}, written {', '.join(sorted(d[:12] for d in written))})"
