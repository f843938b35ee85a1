"""``monkeybarrel store check | repair | compact``: find and fix what two writers or a crash left behind.

* check: damaged chunks, duplicate keys (candidates, each verifier's scores, answers, labels),
  scores of candidates that are not stored, stray temporaries, chunk counts. Changes nothing.
* repair: damaged chunks move to ``DIR/damaged/`` (their rows are redone by the next run),
  duplicates keep the newest row per key, stale temporaries go; then compacts.
* compact: each chunked table (candidates, ``scores/<verifier>``) becomes one file, newest row per key.

repair and compact hold the writer lock. A compaction writes the merged chunk before deleting the
old ones, so a crash in between leaves exact duplicates that the next ``repair`` removes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...core.records import ANSWER_SCHEMA, CANDIDATE_KEY, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA
from .lock import RunLock
from .experiment_store import ExperimentStore, StoreError, newest_per_key


@dataclass
class StoreHealth:
    """What ``check`` found. ``problems`` empty = healthy."""

    chunks: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    damaged: list[Path] = field(default_factory=list)
    orphan_scores: dict[str, int] = field(default_factory=dict)
    temporaries: list[Path] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = [f"damaged chunk {p}" for p in self.damaged]
        found += [f"{kind}: {n} duplicate key(s)" for kind, n in self.duplicates.items() if n]
        found += [f"{kind}: {n} score(s) of candidates that are not stored" for kind, n in self.orphan_scores.items() if n]
        found += [f"leftover temporary {p}" for p in self.temporaries]
        return found

    def lines(self) -> list[str]:
        out = [f"{kind}: {self.rows.get(kind, 0):,} rows in {self.chunks[kind]} chunk(s)" for kind in self.chunks]
        return out + (self.problems or ["no problems found"])


def _schema(kind: str) -> pa.Schema:
    return CANDIDATE_SCHEMA if kind == "candidates" else SCORE_SCHEMA


def _readable(store: ExperimentStore, kind: str) -> tuple[list[Path], list[Path]]:
    good, bad = [], []
    for part in store.chunk_paths(kind):
        try:
            pq.read_metadata(part)
            good.append(part)
        except (pa.ArrowInvalid, OSError):
            bad.append(part)
    return good, bad


def _read_parts(parts: list[Path], schema: pa.Schema) -> pa.Table:
    if not parts:
        return schema.empty_table()
    return pa.concat_tables([pq.read_table(p).cast(schema) for p in parts])


def check(directory: str | Path) -> StoreHealth:
    """Inspect a store without changing it."""
    store = _open(directory)
    health = StoreHealth(temporaries=store.temporaries())
    candidate_keys = None
    for kind in store.chunk_kinds():
        good, bad = _readable(store, kind)
        health.chunks[kind], health.damaged = len(good) + len(bad), health.damaged + bad
        table = _read_parts(good, _schema(kind))
        health.rows[kind] = table.num_rows
        health.duplicates[kind] = table.num_rows - newest_per_key(table).num_rows
        keys = table.select(list(CANDIDATE_KEY))
        if kind == "candidates":
            candidate_keys = keys
        elif candidate_keys is not None and keys.num_rows:
            matched = keys.join(candidate_keys.append_column("__hit", pa.array(np.ones(candidate_keys.num_rows, bool))),
                                keys=list(CANDIDATE_KEY), join_type="left outer")
            health.orphan_scores[kind] = int(matched.column("__hit").null_count)
    for name, schema in (("answers", ANSWER_SCHEMA), ("labels", LABEL_SCHEMA)):
        table = store.read_table(name, schema)
        health.rows[name] = table.num_rows
        health.duplicates[name] = table.num_rows - newest_per_key(table).num_rows
    return health


def compact(directory: str | Path) -> dict[str, tuple[int, int]]:
    """Merge each chunked table into one chunk (newest row per key); returns ``{kind: (chunks before, after)}``."""
    store = _open(directory)
    with RunLock(store.root, "store compact"):
        return _compact(store)


def repair(directory: str | Path) -> list[str]:
    """Fix what ``check`` finds (see the module docstring); returns one line per action."""
    store = _open(directory)
    actions = []
    with RunLock(store.root, "store repair"):
        for tmp in store.remove_stale_temporaries():
            actions.append(f"removed leftover temporary {tmp}")
        for kind in store.chunk_kinds():
            for part in _readable(store, kind)[1]:
                target = store.root / "damaged" / part.relative_to(store.root)
                target.parent.mkdir(parents=True, exist_ok=True)
                part.replace(target)
                actions.append(f"moved damaged chunk {part} to {target}")
        for name, schema in (("answers", ANSWER_SCHEMA), ("labels", LABEL_SCHEMA)):
            table = store.read_table(name, schema)
            unique = newest_per_key(table)
            if unique.num_rows != table.num_rows:
                store.write_table(name, unique)
                actions.append(f"{name}: removed {table.num_rows - unique.num_rows} duplicate row(s)")
        for kind, (before, after, dropped) in _compact(store, report_dropped=True).items():
            if dropped:
                actions.append(f"{kind}: removed {dropped} duplicate row(s), newest kept")
            if before != after:
                actions.append(f"{kind}: {before} chunk(s) merged into {after}")
    return actions or ["nothing to repair"]


def compact_if_fragmented(store: ExperimentStore, max_chunks: int = 64) -> None:
    """Compact (the caller holds the lock) when a chunked table has more than ``max_chunks`` files."""
    if any(len(store.chunk_paths(kind)) > max_chunks for kind in store.chunk_kinds()):
        _compact(store)


def _compact(store: ExperimentStore, report_dropped: bool = False) -> dict:
    result = {}
    for kind in store.chunk_kinds():
        parts = store.chunk_paths(kind)
        table = _read_parts(parts, _schema(kind))
        unique = newest_per_key(table)
        dropped = table.num_rows - unique.num_rows
        if len(parts) > 1 or dropped:
            store.append_chunk(kind, unique)
            for part in parts:
                part.unlink()
        after = len(store.chunk_paths(kind))
        result[kind] = (len(parts), after, dropped) if report_dropped else (len(parts), after)
    return result


def _open(directory: str | Path) -> ExperimentStore:
    if not Path(directory).is_dir():
        raise StoreError(f"{directory}: no such directory")
    store = ExperimentStore(directory)
    if not store.is_store():
        raise StoreError(f"{directory}: not an experiment store (no config.yaml or manifest.json)")
    return store
