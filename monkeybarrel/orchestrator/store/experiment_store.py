"""The experiment store: one directory per experiment, Parquet tables written atomically in chunks.

Layout::

    DIR/config.yaml            the resolved configuration
    DIR/manifest.json          fingerprints, package versions, seeds, stage times and costs
    DIR/problems.parquet
    DIR/candidates/part-*.parquet      appended in chunks (one or more problems' samples)
    DIR/scores/<verifier>/part-*.parquet
    DIR/artifacts/<verifier>/<problem_id>.json   what a verifier recorded per problem (tests, vote matrix, transcript)
    DIR/answers.parquet, DIR/labels.parquet, DIR/selections.parquet, DIR/metrics.json
    DIR/report.md, DIR/coverage.png

Every file is written to a hidden temporary name in the same directory and renamed into place,
so a process killed at any moment leaves either the whole chunk or nothing. A temporary name
carries its writer's pid: only temporaries of processes that are gone are ever removed
(``remove_stale_temporaries``, called by the holder of the writer lock), never another live
writer's. ``discard`` (``run --force``) removes only what a store writes.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq

from ...core.records import CANDIDATE_KEY, CANDIDATE_SCHEMA, SCORE_SCHEMA

_TMP_PREFIX = ".tmp-"

STORE_FILES = ("config.yaml", "manifest.json", "metrics.json", "report.md", "report.html", "export.csv",
               "export.jsonl", ".lock")
"""Top-level files a store writes (besides ``*.parquet`` tables and ``*.png`` plots)."""
STORE_FOLDERS = {"candidates": (".parquet",), "scores": (".parquet",), "damaged": (".parquet",),
                 "artifacts": (".json",)}
"""Folders a store writes, with the suffixes of the files it writes there."""


class StoreError(RuntimeError):
    """The store directory cannot be used as asked (config conflict, damaged files)."""


def _temporary(path: Path) -> Path:
    """A hidden name next to ``path`` owned by this process (its pid is part of the name)."""
    return path.parent / f"{_TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}-{path.name}"


def _writer_alive(tmp: Path) -> bool:
    """Is the process that named temporary ``tmp`` still running (False for names without a pid)?"""
    pid = tmp.name[len(_TMP_PREFIX):].split("-", 1)[0]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` as Parquet to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    pq.write_table(table, tmp, compression="zstd")
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class ExperimentStore:
    """Reads and writes one experiment directory.

    Args:
        root: the experiment directory (created if missing).
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

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
        """Does the directory hold a store (its config or manifest)?"""
        return self.config_path.is_file() or self.manifest_path.is_file()

    def temporaries(self) -> list[Path]:
        return sorted(self.root.rglob(f"{_TMP_PREFIX}*"))

    def remove_stale_temporaries(self) -> list[Path]:
        """Remove temporaries whose writer process is gone (a killed write); returns them.

        A live writer's temporaries are left alone, so a reader or a second process never
        destroys a chunk being written."""
        stale = [tmp for tmp in self.temporaries() if not _writer_alive(tmp)]
        for tmp in stale:
            tmp.unlink(missing_ok=True)
        return stale

    @staticmethod
    def check_discardable(root: str | Path) -> None:
        """Raise ``StoreError`` if ``root`` is a non-empty directory that holds no store (see ``discard``)."""
        root = Path(root)
        children = [c for c in root.iterdir() if c.name != ".lock"] if root.is_dir() else []
        if children and not ExperimentStore(root).is_store():
            raise StoreError(f"{root}: not an experiment store (no config.yaml or manifest.json) but not "
                             "empty; refusing to delete anything in it. Choose an empty or new --out directory.")

    def discard_scores(self, verifier: str) -> int:
        """Delete one verifier's stored scores (its config changed); returns the number of chunks removed."""
        parts = self.chunk_paths(f"scores/{verifier}")
        for part in parts:
            part.unlink()
        return len(parts)

    def stored_generators(self) -> set[str]:
        """Generator ids with at least one stored candidate (reads only that column)."""
        parts = self.chunk_paths("candidates")
        if not parts:
            return set()
        import pyarrow.dataset as ds  # loads pandas (0.3 s): only where a folder of chunks is read

        column = ds.dataset([str(p) for p in parts], format="parquet").to_table(columns=["generator_id"])
        return set(pa.compute.unique(column.column("generator_id")).to_pylist())

    def discard(self) -> list[Path]:
        """Delete every file the store wrote (``run --force``), keeping anything else; returns what was kept.

        Raises:
            StoreError: the directory is not empty and holds no store (no config.yaml/manifest.json),
                so nothing is deleted.
        """
        self.check_discardable(self.root)
        children = [c for c in self.root.iterdir() if c.name != ".lock"]
        kept = []
        for child in children:
            if child.is_file() and (child.name in STORE_FILES or child.suffix in (".parquet", ".png")
                                    or child.name.startswith(_TMP_PREFIX)):
                child.unlink()
            elif child.is_dir() and child.name in STORE_FOLDERS:
                kept += _discard_folder(child, STORE_FOLDERS[child.name])
            else:
                kept.append(child)
        return kept

    # ---- whole tables --------------------------------------------------------------------
    def write_table(self, name: str, table: pa.Table) -> None:
        atomic_write_table(table, self.table_path(name))

    def read_table(self, name: str, schema: pa.Schema | None = None) -> pa.Table | None:
        """The table ``name`` or None when absent (or an empty table of ``schema``)."""
        path = self.table_path(name)
        if not path.is_file():
            return schema.empty_table() if schema is not None else None
        return pq.read_table(path)

    # ---- chunked tables ------------------------------------------------------------------
    def append_chunk(self, kind: str, table: pa.Table) -> Path:
        """Add one chunk under ``DIR/<kind>/`` (e.g. ``candidates`` or ``scores/judge``)."""
        folder = self.root / kind
        path = folder / f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        atomic_write_table(table, path)
        return path

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
        if not parts:
            return schema.empty_table()
        try:
            import pyarrow.dataset as ds

            return ds.dataset([str(p) for p in parts], schema=schema, format="parquet").to_table()
        except (pa.ArrowInvalid, OSError):
            for part in parts:
                try:
                    pq.read_metadata(part)
                except (pa.ArrowInvalid, OSError) as exc:
                    raise StoreError(f"{part}: damaged chunk ({exc}); `monkeybarrel store repair "
                                     f"{self.root}` moves it aside (its rows are redone on the next run)") from None
            raise

    def candidates(self) -> pa.Table:
        """Every stored candidate (CANDIDATE_SCHEMA), checked for duplicate keys."""
        table = self.read_chunks("candidates", CANDIDATE_SCHEMA)
        _check_unique(table, CANDIDATE_KEY, "candidates")
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
        path = self.artifact_path(verifier, problem_id)
        atomic_write_bytes(path, json.dumps(record, indent=1, default=str).encode())
        return path

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
        atomic_write_bytes(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True, default=str).encode())

    def write_text(self, name: str, text: str) -> Path:
        path = self.root / name
        atomic_write_bytes(path, text.encode())
        return path


def newest_per_key(table: pa.Table) -> pa.Table:
    """One row per candidate key: its last (newest) occurrence, rows kept in their original order."""
    if table.num_rows == 0:
        return table
    indexed = table.append_column("__row", pa.array(np.arange(table.num_rows)))
    newest = indexed.group_by(list(CANDIDATE_KEY), use_threads=False).aggregate([("__row", "max")])
    if newest.num_rows == table.num_rows:
        return table
    return table.take(np.sort(newest.column("__row_max").to_numpy()))


def _discard_folder(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    """Remove the store's files (``suffixes``, and temporaries) under ``folder``, then the empty folders."""
    kept = []
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_file():
            if path.suffix in suffixes or path.name.startswith(_TMP_PREFIX):
                path.unlink()
            else:
                kept.append(path)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return kept


def _check_unique(table: pa.Table, key: Iterable[str], what: str) -> None:
    if table.num_rows == 0:
        return
    grouped = table.group_by(list(key)).aggregate([([], "count_all")])
    if grouped.num_rows != table.num_rows:
        raise StoreError(f"{what}: {table.num_rows - grouped.num_rows} duplicate key(s) in the store "
                         "(two writers at once?); `monkeybarrel store repair DIR` keeps the newest of each")
