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
so a process killed at any moment leaves either the whole chunk or nothing; leftover temporary
files are removed when the store is opened.
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
import pyarrow.parquet as pq

from ..core.records import CANDIDATE_KEY, CANDIDATE_SCHEMA, SCORE_SCHEMA

_TMP_PREFIX = ".tmp-"


class StoreError(RuntimeError):
    """The store directory cannot be used as asked (config conflict, damaged files)."""


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}-{path.name}"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def atomic_write_table(table: pa.Table, path: Path) -> None:
    """Write ``table`` as Parquet to ``path`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}-{path.name}"
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
        self._remove_temporaries()

    # ---- paths ---------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    def table_path(self, name: str) -> Path:
        return self.root / f"{name}.parquet"

    def _remove_temporaries(self) -> None:
        for tmp in self.root.rglob(f"{_TMP_PREFIX}*"):
            tmp.unlink(missing_ok=True)

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

    def read_chunks(self, kind: str, schema: pa.Schema) -> pa.Table:
        """All chunks of ``kind`` concatenated (an empty table of ``schema`` when none)."""
        folder = self.root / kind
        parts = sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []
        if not parts:
            return schema.empty_table()
        tables = [pq.read_table(p).cast(schema) for p in parts]
        return pa.concat_tables(tables)

    def candidates(self) -> pa.Table:
        """Every stored candidate (CANDIDATE_SCHEMA), checked for duplicate keys."""
        table = self.read_chunks("candidates", CANDIDATE_SCHEMA)
        _check_unique(table, CANDIDATE_KEY, "candidates")
        return table

    def scores(self, verifier: str) -> pa.Table:
        """Stored scores of one verifier (SCORE_SCHEMA), one row per candidate: where a candidate was
        scored again (``Verifier.scores_whole_problem``), the newest chunk's row wins."""
        table = self.read_chunks(f"scores/{verifier}", SCORE_SCHEMA)
        if table.num_rows == 0:
            return table
        indexed = table.append_column("__row", pa.array(np.arange(table.num_rows)))
        newest = indexed.group_by(list(CANDIDATE_KEY), use_threads=False).aggregate([("__row", "max")])
        if newest.num_rows == table.num_rows:
            return table
        return table.take(np.sort(newest.column("__row_max").to_numpy()))

    def scored_verifiers(self) -> list[str]:
        folder = self.root / "scores"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

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


def _check_unique(table: pa.Table, key: Iterable[str], what: str) -> None:
    if table.num_rows == 0:
        return
    grouped = table.group_by(list(key)).aggregate([([], "count_all")])
    if grouped.num_rows != table.num_rows:
        raise StoreError(f"{what}: {table.num_rows - grouped.num_rows} duplicate key(s) in the store")
