"""``monkeybarrel store check | repair | compact``: find and fix what damage, two writers or a crash left behind.

* check: reads every file of the store to its last byte and names each damaged one (its bytes differ
  from what ``written.jsonl`` recorded, or its data fails to read); then duplicate keys (candidates,
  each verifier's scores, answers, labels), rows whose candidate is not stored (scores, answers,
  labels, selections), stray temporaries, chunk counts. Changes nothing.
* repair: a Parquet file that fails to read moves to ``DIR/damaged/`` and the row groups that still
  read are written back (the rest is redone by the next run); one that reads but whose bytes differ
  is written again; a JSON/YAML file that does not parse moves aside, a damaged report or plot is
  deleted (the next ``report`` rebuilds it). Then duplicates keep the newest row per key, chunked
  tables are compacted, rows whose candidate is gone are dropped (so the candidate's next sample is
  answered, labelled and scored afresh), and ``written.jsonl`` is rewritten from what is now there.
* compact: each chunked table (candidates, ``scores/<verifier>``) becomes one file, newest row per key.

repair and compact hold the writer lock. A compaction writes the merged chunk before deleting the
old ones, so a crash in between leaves exact duplicates that the next ``repair`` removes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ...core.records import ANSWER_SCHEMA, CANDIDATE_KEY, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA
from .experiment_store import ExperimentStore, StoreError, newest_per_key
from .integrity import digest_problem, parse_problem, salvage_parquet, scan_parquet
from .lock import RunLock
from .written import LIST_NAME, file_digest

_KEYED_TABLES = {"answers": ANSWER_SCHEMA, "labels": LABEL_SCHEMA}
_TABLES = ("problems", "answers", "labels", "selections", "allocation")
_OTHER = {"answers": "labels", "labels": "answers"}
_DERIVED = {"selections", "metrics", "report", "coverage", "allocation"}
"""Stems of files every ``report`` rebuilds (a damaged one that is not Parquet is simply deleted)."""


@dataclass
class StoreHealth:
    """What ``check`` found. ``problems`` empty = healthy."""

    chunks: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    """Relative path -> what is wrong with the file (one line)."""
    orphans: dict[str, int] = field(default_factory=dict)
    """Table -> rows whose candidate is not stored."""
    unpaired: dict[str, int] = field(default_factory=dict)
    """``answers`` / ``labels`` -> rows whose candidate the other table lacks (the label stage writes both)."""
    temporaries: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = [f"{path}: {what}" for path, what in self.damaged.items()]
        found += [f"{kind}: {n} duplicate key(s)" for kind, n in self.duplicates.items() if n]
        found += [f"{kind}: {n} row(s) of candidates that are not stored" for kind, n in self.orphans.items() if n]
        found += [f"{name}: {n} row(s) of candidates missing from {_OTHER[name]}" for name, n in self.unpaired.items() if n]
        found += [f"leftover temporary {p}" for p in self.temporaries]
        return found

    def lines(self) -> list[str]:
        out = [f"{kind}: {self.rows.get(kind, 0):,} rows in {self.chunks[kind]} chunk(s)" for kind in self.chunks]
        return out + self.notes + (self.problems or ["no problems found"])


def check(directory: str | Path) -> StoreHealth:
    """Inspect a store without changing it (reads every byte of every file it wrote)."""
    store = _open(directory)
    health = StoreHealth(temporaries=store.temporaries())
    keys: dict[str, list[pa.Table]] = {}
    unreadable: set[str] = set()
    for rel, problem, table in _inspect(store):
        if problem is not None:
            health.damaged[rel] = problem
        if table is not None and table.num_columns:
            keys.setdefault(_table_of(rel), []).append(table)
        elif rel.endswith(".parquet") and problem is not None:
            unreadable.add(_table_of(rel))
    if not store.written.exists():
        health.notes.append(f"no {LIST_NAME} (a store written before it existed): damage is found where data "
                            "fails to read; `store repair` starts the list")
    for kind in store.chunk_kinds():
        health.chunks[kind] = len(store.chunk_paths(kind))
    candidates = _concat(keys.get("candidates"))
    for name, parts in keys.items():
        table = _concat(parts)
        health.rows[name] = table.num_rows
        if name != "selections":
            health.duplicates[name] = table.num_rows - newest_per_key(table).num_rows
        if name != "candidates" and "candidates" not in unreadable:  # else every row would look orphaned
            health.orphans[name] = int((~_stored(table, candidates)).sum())
    if not unreadable & set(_OTHER):
        for name, other in _OTHER.items():
            health.unpaired[name] = int((~_stored(_concat(keys.get(name)), _concat(keys.get(other)))).sum())
    return health


def compact(directory: str | Path) -> dict[str, tuple[int, int]]:
    """Merge each chunked table into one chunk (newest row per key); returns ``{kind: (chunks before, after)}``."""
    store = _open(directory)
    with RunLock(store.root, "store compact"):
        return {kind: (before, after) for kind, (before, after, _) in _compact(store).items()}


def repair(directory: str | Path) -> list[str]:
    """Fix what ``check`` finds (see the module docstring); returns one line per action."""
    store = _open(directory)
    actions = []
    with RunLock(store.root, "store repair"):
        for tmp in store.remove_stale_temporaries():
            actions.append(f"removed leftover temporary {store.relative(tmp)}")
        for rel, problem, _ in list(_inspect(store)):
            if problem is not None:
                actions.append(_repair_file(store, rel, problem))
        for name, schema in _KEYED_TABLES.items():
            table = store.read_table(name, schema)
            unique = newest_per_key(table)
            if unique.num_rows != table.num_rows:
                store.write_table(name, unique)
                actions.append(f"{name}: removed {table.num_rows - unique.num_rows} duplicate row(s)")
        for kind, (before, after, dropped) in _compact(store).items():
            if dropped:
                actions.append(f"{kind}: removed {dropped} duplicate row(s), newest kept")
            if before != after:
                actions.append(f"{kind}: {before} chunk(s) merged into {after}")
        actions += _drop_orphans(store)
        _relist(store)
    return actions or ["nothing to repair"]


def compact_if_fragmented(store: ExperimentStore, max_chunks: int = 64) -> None:
    """Compact (the caller holds the lock) when a chunked table has more than ``max_chunks`` files."""
    if any(len(store.chunk_paths(kind)) > max_chunks for kind in store.chunk_kinds()):
        _compact(store)


# ---- inspection ----------------------------------------------------------------------------------
def _inspect(store: ExperimentStore):
    """``(relative path, what is wrong or None, its key columns or None)`` for every file of the store.

    The files: those ``written.jsonl`` lists (less what ``damaged/`` holds), every chunk, every table."""
    listed, bad_lines = store.written.read()
    if bad_lines:
        yield LIST_NAME, f"line(s) {', '.join(map(str, bad_lines[:10]))} are not valid entries", None
    chunks = {store.relative(p) for kind in store.chunk_kinds() for p in store.chunk_paths(kind)}
    tables = {f"{name}.parquet" for name in _TABLES if store.table_path(name).is_file()}
    present = {rel for rel in listed if not rel.startswith("damaged/") and (store.root / rel).is_file()}
    for rel in sorted(present | chunks | tables):
        path = store.root / rel
        unlisted = store.written.exists() and rel not in listed
        if path.suffix == ".parquet":
            table, problem = scan_parquet(path, _key_columns(rel))
        else:
            table, problem = None, parse_problem(path)
        problem = problem or digest_problem(path, listed.get(rel, set()))
        if problem is None and unlisted:
            problem = f"not listed in {LIST_NAME} (not written by this store)"
        yield rel, problem, table


def _table_of(rel: str) -> str:
    """``candidates``, ``scores/<verifier>`` or a table's stem, for a store file's relative path."""
    return rel.rsplit("/", 1)[0] if "/part-" in rel else rel.split(".", 1)[0]


def _key_columns(rel: str) -> list[str]:
    """The columns ``check`` keeps of a Parquet file: the candidate key (none of other tables)."""
    keyed = rel.startswith(("candidates/", "scores/")) or _table_of(rel) in (*_KEYED_TABLES, "selections")
    return list(CANDIDATE_KEY) if keyed else []


def _concat(parts: list[pa.Table] | None) -> pa.Table:
    if not parts:
        return CANDIDATE_SCHEMA.empty_table().select(list(CANDIDATE_KEY))
    return pa.concat_tables([p.select(list(CANDIDATE_KEY)).cast(parts[0].select(list(CANDIDATE_KEY)).schema)
                             for p in parts])


def _stored(table: pa.Table, candidates: pa.Table) -> np.ndarray:
    """``[rows of table]`` whether the row's candidate is stored (rows without a key, e.g. a selection
    that picked nothing, count as stored)."""
    key = list(CANDIDATE_KEY)
    rows = table.select(key).append_column("__row", pa.array(np.arange(table.num_rows)))
    stored = candidates.select(key).cast(rows.select(key).schema)
    hits = rows.join(stored.append_column("__hit", pa.array(np.ones(stored.num_rows, bool))), keys=key,
                     join_type="left outer")
    found = np.zeros(table.num_rows, bool)
    found[hits.column("__row").to_numpy()] = hits.column("__hit").is_valid().to_numpy(zero_copy_only=False)
    keyless = table.column("sample_index").is_null().to_numpy(zero_copy_only=False)
    return found | keyless


# ---- repair --------------------------------------------------------------------------------------
def _repair_file(store: ExperimentStore, rel: str, problem: str) -> str:
    """Fix one damaged file; returns what was done (one line)."""
    path = store.root / rel
    if rel == LIST_NAME:
        return f"{rel}: {problem}; rewritten from the files present"
    if path.suffix == ".parquet":
        table, read_error = scan_parquet(path)
        if read_error is None:
            store.write_parquet(rel, table)
            return f"{rel}: {problem}; its data reads intact, so it was written again"
        saved, lost = salvage_parquet(path)
        target = store.move_aside(path)
        if saved is not None and saved.num_rows:
            store.write_parquet(rel, saved)
        kept = saved.num_rows if saved is not None else 0
        return (f"{rel}: {problem}; moved to {store.relative(target)}, {kept} row(s) that still read kept, "
                f"{'its other' if kept else 'its'} rows are redone by the next run" + (f" ({lost} lost)" if lost else ""))
    if path.stem in _DERIVED and path.parent == store.root:
        path.unlink()
        return f"{rel}: {problem}; deleted (the next `monkeybarrel report` or run rebuilds it)"
    if parse_problem(path) is None:
        store.written.record(path, *file_digest(path))
        return f"{rel}: {problem}; it still parses, kept as it is and listed again (compare it with what you expect)"
    target = store.move_aside(path)
    return f"{rel}: {problem}; moved to {store.relative(target)} (the next run writes it again)"


def _compact(store: ExperimentStore) -> dict[str, tuple[int, int, int]]:
    """Merge each chunked table into one chunk; ``{kind: (chunks before, after, duplicate rows dropped)}``."""
    result = {}
    for kind in store.chunk_kinds():
        parts = store.chunk_paths(kind)
        table = store.read_chunks(kind, _schema(kind))
        unique = newest_per_key(table)
        dropped = table.num_rows - unique.num_rows
        if len(parts) > 1 or dropped:
            _replace_chunks(store, kind, parts, unique)
        result[kind] = (len(parts), len(store.chunk_paths(kind)), dropped)
    return result


def _replace_chunks(store: ExperimentStore, kind: str, parts: list[Path], table: pa.Table) -> None:
    """Write ``table`` as one chunk of ``kind``, then delete ``parts`` (a crash in between leaves duplicates)."""
    if table.num_rows:
        store.append_chunk(kind, table)
    for part in parts:
        part.unlink()


def _drop_orphans(store: ExperimentStore) -> list[str]:
    """Drop scores, answers, labels and selections of candidates that are not stored; one line per table."""
    candidates = store.read_chunks("candidates", CANDIDATE_SCHEMA)
    actions = []
    for kind in store.chunk_kinds()[1:]:
        table = store.read_chunks(kind, SCORE_SCHEMA)
        keep = _stored(table, candidates)
        if not keep.all():
            _replace_chunks(store, kind, store.chunk_paths(kind), table.filter(pa.array(keep)))
            actions.append(f"{kind}: removed {int((~keep).sum())} score(s) of candidates that are not stored")
    for name in (*_KEYED_TABLES, "selections"):
        table = store.read_table(name)
        if table is None:
            continue
        keep = _stored(table, candidates)
        if not keep.all():
            store.write_table(name, table.filter(pa.array(keep)))
            actions.append(f"{name}: removed {int((~keep).sum())} row(s) of candidates that are not stored")
    tables = {name: store.read_table(name, schema) for name, schema in _KEYED_TABLES.items()}
    for name, other in _OTHER.items():  # the label stage redoes a candidate only when both lack it
        keep = _stored(tables[name], tables[other])
        if not keep.all():
            store.write_table(name, tables[name].filter(pa.array(keep)))
            actions.append(f"{name}: removed {int((~keep).sum())} row(s) of candidates missing from {other} "
                           "(the next run redoes both)")
    return actions


def _relist(store: ExperimentStore) -> None:
    """Rewrite ``written.jsonl``: one entry per file of the store now there (all checked sound by repair)."""
    listed, _ = store.written.read()
    files = {rel for rel in listed if (store.root / rel).is_file()}
    files |= {store.relative(p) for kind in store.chunk_kinds() for p in store.chunk_paths(kind)}
    store.written.rewrite({rel: file_digest(store.root / rel) for rel in sorted(files)})


def _schema(kind: str) -> pa.Schema:
    return CANDIDATE_SCHEMA if kind == "candidates" else SCORE_SCHEMA


def _open(directory: str | Path) -> ExperimentStore:
    if not Path(directory).is_dir():
        raise StoreError(f"{directory}: no such directory")
    store = ExperimentStore(directory)
    if not store.is_store():
        raise StoreError(f"{directory}: not an experiment store (no {LIST_NAME} or manifest.json)")
    return store
