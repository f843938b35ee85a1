"""The experiment store: one directory per experiment, Parquet tables written atomically in chunks.

Layout::

    DIR/config.yaml            the resolved configuration
    DIR/manifest.json          fingerprints, package versions, seeds, stage times and costs
    DIR/written.jsonl          every file the store wrote (size, SHA-256) or deleted (``written.py``)
    DIR/problems.parquet
    DIR/candidates/part-*.parquet      appended in chunks (one or more problems' samples)
    DIR/scores/<verifier>/part-*.parquet
    DIR/artifacts/<verifier>/<problem_id>.json   what a verifier recorded per problem (tests, vote matrix, transcript)
    DIR/answers.parquet, DIR/labels.parquet, DIR/selections.parquet, DIR/metrics.json
    DIR/report.md, DIR/report.html, DIR/coverage.png
    DIR/damaged/…              files ``store repair`` set aside

Every file is written to a hidden temporary name in the same directory, fsynced, listed in
``written.jsonl`` and renamed into place, so a process killed at any moment leaves either the whole
file or nothing. A temporary name carries its writer's pid: only temporaries of processes that are
gone are ever removed (``remove_stale_temporaries``, called by the holder of the writer lock), never
another live writer's. A file the store deletes (``delete``) is noted in ``written.jsonl`` first, so a
listed file that is gone was lost, not removed (``presence.py``). ``discard`` (``run --force``) removes
exactly the files ``written.jsonl`` lists. A damaged file is named when it is read (``StoreError``).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from ...core.keys import describe_key, key_codes, newest_rows, repeated_rows
from ...core.records import CANDIDATE_SCHEMA, SCORE_SCHEMA
from .integrity import READ_ERRORS, WRITE_OPTIONS, one_line, scan_parquet
from .written import LIST_KEY, LIST_NAME, WrittenFiles, digest_if_readable, file_digest, is_legacy_store, list_lost

LOCK_NAME = ".lock"
STORE_FOLDERS = ("candidates", "scores", "artifacts", "damaged")
_TEMPORARY = re.compile(r"^\.tmp-(\d+)-[0-9a-f]+-")


class StoreError(RuntimeError):
    """The store directory cannot be used as asked (config conflict, damaged files)."""


def _temporary(path: Path) -> Path:
    """A hidden name next to ``path`` owned by this process (its pid is part of the name)."""
    return path.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}-{path.name}"


def _writer_alive(tmp: Path) -> bool:
    """Is the process that named temporary ``tmp`` still running (False for this process's own)?"""
    pid = int(_TEMPORARY.match(tmp.name).group(1))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ExperimentStore:
    """Reads and writes one experiment directory.

    Args:
        root: the experiment directory (created if missing).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.written = WrittenFiles(self.root)

    # ---- paths ---------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    def table_path(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def is_store(self) -> bool:
        """Does the directory hold a store (its ``written.jsonl``, or a manifest: an older store's, or one
        whose list is gone)?"""
        return self.written.exists() or is_legacy_store(self.root) or list_lost(self.root)

    def temporaries(self) -> list[Path]:
        """Temporaries in the directory and the store's folders (never in a user's folders)."""
        found = list(self.root.glob(".tmp-*"))
        for folder in STORE_FOLDERS:
            found += (self.root / folder).rglob(".tmp-*") if (self.root / folder).is_dir() else []
        return sorted(p for p in found if _TEMPORARY.match(p.name) and p.is_file())

    def remove_stale_temporaries(self) -> list[Path]:
        """Remove temporaries whose writer process is gone (a killed write); returns them.

        A live writer's temporaries are left alone, so a reader or a second process never
        destroys a chunk being written."""
        stale = [tmp for tmp in self.temporaries() if not _writer_alive(tmp)]
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        return stale

    @staticmethod
    def check_target(root: str | Path) -> None:
        """Refuse (``StoreError``) a ``root`` that is neither missing, empty nor a store: a run writes nowhere else.

        A writer lock or temporaries alone (a run killed before its first file) count as empty."""
        root = Path(root)
        if root.exists() and not root.is_dir():
            raise StoreError(f"{root}: not a directory")
        others = sorted(c.name for c in root.iterdir() if c.name != LOCK_NAME and not _TEMPORARY.match(c.name)) \
            if root.is_dir() else []
        if others and not ExperimentStore(root).is_store():
            shown = ", ".join(others[:4]) + (f" and {len(others) - 4} more" if len(others) > 4 else "")
            raise StoreError(f"{root}: not an experiment store and not empty (holds {shown}); a run writes only "
                             "into a new or empty directory or its own store, and deletes nothing here. "
                             "Choose another --out.")

    def discard_scores(self, verifier: str) -> int:
        """Delete one verifier's stored scores (its config changed); returns the number of chunks removed."""
        parts = self.chunk_paths(f"scores/{verifier}")
        self.delete(parts)
        return len(parts)

    def delete(self, paths: list[Path]) -> None:
        """Delete store files, noted in ``written.jsonl`` first (so ``store check`` does not call them lost)."""
        self.written.forget(paths)
        for path in paths:
            path.unlink(missing_ok=True)

    def stored_generators(self) -> set[str]:
        """Generator ids with at least one stored candidate (reads only that column)."""
        parts = self.chunk_paths("candidates")
        if not parts:
            return set()
        column = self._read(parts, None, columns=["generator_id"])
        return set(pa.compute.unique(column.column("generator_id")).to_pylist())

    def discard(self) -> list[Path]:
        """Delete every file the store wrote (``run --force``) and nothing else; returns the files kept.

        The files are those ``written.jsonl`` lists (for an older store: its fixed names and chunk
        names), dead writers' temporaries and the list itself; folders left empty by that go too.

        Raises:
            StoreError: the directory is not empty and holds no store, so nothing is deleted.
        """
        self.check_target(self.root)
        listed = [self.root / rel for rel in self.written.paths()]
        for path in listed:
            if path.is_file() or path.is_symlink():
                path.unlink()
        self.remove_stale_temporaries()
        self.written.path.unlink(missing_ok=True)
        for folder in sorted({p.parent for p in listed}, key=lambda p: len(p.parts), reverse=True):
            while folder != self.root and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent
        return sorted(p for p in self.root.rglob("*") if p.is_file() and p.name != LOCK_NAME)

    # ---- writing -------------------------------------------------------------------------
    @contextmanager
    def writing(self, name: str | Path) -> Iterator[Path]:
        """A temporary path to write the store file ``name`` (relative to DIR) to.

        When the block ends the file is fsynced, listed in ``written.jsonl`` with its SHA-256 and
        renamed to ``name`` (atomic). If the block raises or writes nothing, nothing changes.
        """
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temporary(path)
        try:
            yield tmp
            if not tmp.exists():
                return
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
            self.written.record(path, *file_digest(tmp))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def write_bytes(self, name: str | Path, data: bytes) -> Path:
        with self.writing(name) as tmp:
            tmp.write_bytes(data)
        return self.root / name

    def write_text(self, name: str | Path, text: str) -> Path:
        return self.write_bytes(name, text.encode())

    def write_parquet(self, name: str | Path, table: pa.Table) -> Path:
        """Write ``table`` to the store file ``name`` (zstd, page checksums, row groups of ``ROW_GROUP_ROWS``)."""
        with self.writing(name) as tmp:
            pq.write_table(table, tmp, **WRITE_OPTIONS)
        return self.root / name

    def move_aside(self, path: Path) -> Path:
        """Move a store file to ``DIR/damaged/<its path>`` (listed, so ``--force`` removes it too); returns where."""
        target = self.root / "damaged" / path.relative_to(self.root)
        if target.exists():
            target = target.with_name(f"{target.stem}-{time.time_ns()}{target.suffix}")
        target.parent.mkdir(parents=True, exist_ok=True)
        path.replace(target)
        self.written.forget([path])
        self.written.record(target, *digest_if_readable(target))
        return target

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _read(self, paths: list[Path], schema: pa.Schema | None, columns: list[str] | None = None) -> pa.Table:
        """Read Parquet files (page checksums verified); a file that cannot be read is named in a ``StoreError``."""
        try:
            tables = [_read_file(path, schema, columns) for path in paths]
            return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        except Exception as exc:  # which file? (a damaged footer can make pyarrow raise nearly anything)
            for path in paths:
                problem = scan_parquet(path)[1]
                if problem is not None:
                    raise StoreError(f"{path}: {problem}; `monkeybarrel store repair {self.root}` sets the file "
                                     "aside (what it held is redone by the next run)") from None
            if not isinstance(exc, READ_ERRORS):
                raise
            raise StoreError(f"{paths[0].parent}: cannot read its Parquet files together ({one_line(exc)})") from None

    # ---- whole tables --------------------------------------------------------------------
    def write_table(self, name: str, table: pa.Table) -> None:
        self.write_parquet(f"{name}.parquet", table)

    def read_table(self, name: str, schema: pa.Schema | None = None) -> pa.Table | None:
        """The table ``name`` or None when absent (or an empty table of ``schema``)."""
        path = self.table_path(name)
        if not path.is_file():
            return schema.empty_table() if schema is not None else None
        return self._read([path], None)

    # ---- chunked tables ------------------------------------------------------------------
    def append_chunk(self, kind: str, table: pa.Table) -> Path:
        """Add one chunk under ``DIR/<kind>/`` (e.g. ``candidates`` or ``scores/judge``)."""
        return self.write_parquet(f"{kind}/part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet", table)

    def chunk_paths(self, kind: str) -> list[Path]:
        """The chunk files of ``kind``, oldest first (names start with the write time)."""
        folder = self.root / kind
        return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []

    def chunk_kinds(self) -> list[str]:
        """``candidates`` and ``scores/<verifier>`` for every verifier with a folder."""
        return ["candidates", *(f"scores/{name}" for name in self.scored_verifiers())]

    def read_chunks(self, kind: str, schema: pa.Schema) -> pa.Table:
        """All chunks of ``kind`` concatenated, oldest first (an empty table of ``schema`` when none).

        Raises:
            StoreError: a chunk cannot be read (named; ``monkeybarrel store repair DIR`` sets it aside).
        """
        parts = self.chunk_paths(kind)
        return self._read(parts, schema) if parts else schema.empty_table()

    def candidates(self) -> pa.Table:
        """Every stored candidate (CANDIDATE_SCHEMA), checked for duplicate keys."""
        table = self.read_chunks("candidates", CANDIDATE_SCHEMA)
        _check_unique(table, "candidates")
        return table

    def scores(self, verifier: str) -> pa.Table:
        """Stored scores of one verifier (SCORE_SCHEMA), one row per candidate: where a candidate was
        scored again (``Verifier.scores_whole_problem``), the newest chunk's row wins."""
        return newest_per_key(self.read_chunks(f"scores/{verifier}", SCORE_SCHEMA))

    def scored_verifiers(self) -> list[str]:
        folder = self.root / "scores"
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("part-*.parquet"))) \
            if folder.is_dir() else []

    # ---- per-problem records of verifiers (vote matrices, transcripts) -----------------------
    def artifact_path(self, verifier: str, problem_id: str) -> Path:
        """``DIR/artifacts/<verifier>/<problem_id>.json`` (the id percent-encoded to a safe file name)."""
        return self.root / "artifacts" / verifier / f"{quote(problem_id, safe='')}.json"

    def write_artifact(self, verifier: str, problem_id: str, record: dict[str, Any]) -> Path:
        """Store (atomically, replacing an older one) what ``verifier`` recorded while scoring ``problem_id``."""
        return self.write_bytes(self.artifact_path(verifier, problem_id).relative_to(self.root),
                                json.dumps(record, indent=1, default=str).encode())

    def read_artifact(self, verifier: str, problem_id: str) -> dict[str, Any] | None:
        """The record ``verifier`` stored for ``problem_id``, or None."""
        path = self.artifact_path(verifier, problem_id)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path}: damaged artifact ({exc})") from None

    # ---- manifest ------------------------------------------------------------------------
    def read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.is_file():
            return {}
        try:
            return json.loads(self.manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise StoreError(f"{self.manifest_path}: damaged manifest ({exc})") from None

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        """Write ``manifest.json``; it names ``written.jsonl``, so a deleted list is found (``LIST_KEY``)."""
        manifest[LIST_KEY] = LIST_NAME
        self.write_bytes("manifest.json", json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())


def _read_file(path: Path, schema: pa.Schema | None, columns: list[str] | None) -> pa.Table:
    """One Parquet file (page checksums verified), conformed to ``schema`` when given: its fields in its
    order and types, null where the file lacks one (an older writer's)."""
    with pq.ParquetFile(path, page_checksum_verification=True) as parquet:
        if schema is None:
            return parquet.read(columns=columns)
        wanted = schema if columns is None else pa.schema([schema.field(name) for name in columns])
        present = set(parquet.schema_arrow.names)
        table = parquet.read(columns=[name for name in wanted.names if name in present])
    return pa.table([table.column(f.name).cast(f.type) if f.name in present else pa.nulls(table.num_rows, f.type)
                     for f in wanted], schema=wanted)


def newest_per_key(table: pa.Table) -> pa.Table:
    """One row per candidate key: its last (newest) occurrence, rows kept in their original order."""
    keep = newest_rows(key_codes(table)[0])
    return table if keep.size == table.num_rows else table.take(keep)


def _check_unique(table: pa.Table, what: str) -> None:
    """Raise ``StoreError`` naming how many rows repeat a candidate key, and the first such key."""
    repeated = repeated_rows(key_codes(table)[0])
    if repeated.size:
        raise StoreError(f"{what}: {repeated.size} duplicate key(s) in the store, the first "
                         f"{describe_key(table, int(repeated[0]))} (two writers at once?); "
                         "`monkeybarrel store repair DIR` keeps the newest of each")
