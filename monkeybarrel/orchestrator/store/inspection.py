"""``monkeybarrel store check``: what is wrong with a store, read to its last byte; changes nothing.

In order: every file that is gone (listed in ``written.jsonl`` and missing or unreadable, or one every
store has: ``presence.py``); every damaged file (its bytes differ from what ``written.jsonl``
recorded, or its data fails to read); duplicate keys (candidates, answers, labels); rows whose
candidate is not stored (scores, answers, labels, selections); leftover temporaries; and failed
verifier scores that wait for a retry by the next run (``store.score_attempts``). Notes, which are
not problems: chunk counts, scores superseded by a newer one of the same candidate (``store
compact`` drops them), failed scores that are final.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from ...core.config import StoreSpec
from ...core.records import CANDIDATE_KEY, CANDIDATE_SCHEMA, SCORE_SCHEMA
from .experiment_store import ExperimentStore, StoreError, newest_per_key
from .integrity import digest_problem, parse_problem, scan_parquet
from .presence import gone
from .written import LIST_NAME, Listing

KEYED_TABLES = ("answers", "labels")
TABLES = ("problems", "answers", "labels", "selections", "allocation")
OTHER = {"answers": "labels", "labels": "answers"}
_RETRY_COLUMNS = ("failed_attempts", "error")


@dataclass
class FailedScores:
    """Failed scores of one verifier: how many, the most tries any of them had, the commonest reason."""

    count: int
    tries: int
    reason: str


@dataclass
class StoreHealth:
    """What ``check`` found. ``problems`` empty = healthy."""

    chunks: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    damaged: dict[str, str] = field(default_factory=dict)
    """Relative path -> what is wrong with the file (one line): gone, unreadable, damaged, unlisted."""
    orphans: dict[str, int] = field(default_factory=dict)
    """Table -> rows whose candidate is not stored."""
    unpaired: dict[str, int] = field(default_factory=dict)
    """``answers`` / ``labels`` -> rows whose candidate the other table lacks (the label stage writes both)."""
    temporaries: list[Path] = field(default_factory=list)
    superseded: dict[str, int] = field(default_factory=dict)
    """``scores/<verifier>`` -> rows replaced by a newer score of the same candidate (a retry, a re-score)."""
    waiting: dict[str, FailedScores] = field(default_factory=dict)
    """``scores/<verifier>`` -> failed scores the next run tries again."""
    final: dict[str, FailedScores] = field(default_factory=dict)
    """``scores/<verifier>`` -> failed scores tried ``score_attempts`` times: final, their reason kept."""
    score_attempts: int = StoreSpec.model_fields["score_attempts"].default
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = [f"{path}: {what}" for path, what in self.damaged.items()]
        found += [f"{kind}: {n} duplicate key(s)" for kind, n in self.duplicates.items() if n]
        found += [f"{kind}: {n} row(s) of candidates that are not stored" for kind, n in self.orphans.items() if n]
        found += [f"{name}: {n} row(s) of candidates missing from {OTHER[name]}" for name, n in self.unpaired.items() if n]
        found += [f"leftover temporary {p}" for p in self.temporaries]
        found += [f"{kind}: {f.count} failed score(s) wait for a retry (tried up to {f.tries} of "
                  f"{self.score_attempts} times; {f.reason}); the next run tries them again"
                  for kind, f in self.waiting.items()]
        return found

    def lines(self) -> list[str]:
        out = [f"{kind}: {self.rows.get(kind, 0):,} rows in {self.chunks[kind]} chunk(s)" for kind in self.chunks]
        out += [f"{kind}: {n} row(s) superseded by a newer score of the same candidate (`store compact` drops them)"
                for kind, n in self.superseded.items() if n]
        out += [f"{kind}: {f.count} failed score(s) are final (tried up to {f.tries} times; {f.reason})"
                for kind, f in self.final.items()]
        return out + self.notes + (self.problems or ["no problems found"])


def check(directory: str | Path) -> StoreHealth:
    """Inspect a store without changing it (opens every file it lists, reads every byte of every file it holds)."""
    store = open_store(directory)
    listing = store.written.read()
    attempts, configured = retry_policy(store)
    health = StoreHealth(temporaries=store.temporaries(), score_attempts=attempts)
    keys: dict[str, list[pa.Table]] = {}
    unreadable: set[str] = set()
    for rel, problem, table in inspect(store, listing):
        if problem is not None:
            health.damaged[rel] = problem
        if table is not None and table.num_columns:
            keys.setdefault(table_of(rel), []).append(table)
        elif rel.endswith(".parquet") and problem is not None and not problem.startswith("missing"):
            unreadable.add(table_of(rel))  # (a missing file's rows are not stored: they count as such below)
    if not store.written.exists() and LIST_NAME not in health.damaged:
        health.notes.append(f"no {LIST_NAME} (a store written before it existed): damage is found where data "
                            "fails to read; `store repair` starts the list")
    for kind in store.chunk_kinds():
        health.chunks[kind] = len(store.chunk_paths(kind))
    candidates = concat_keys(keys.get("candidates"))
    for name, parts in keys.items():
        table = concat_keys(parts)
        health.rows[name] = table.num_rows
        if name.startswith("scores/"):
            health.superseded[name] = table.num_rows - newest_per_key(table).num_rows
            _count_failures(health, name, parts, configured is None or name[len("scores/"):] in configured)
        elif name != "selections":
            health.duplicates[name] = table.num_rows - newest_per_key(table).num_rows
        if name != "candidates" and "candidates" not in unreadable:  # else every row would look orphaned
            health.orphans[name] = int((~stored_mask(table, candidates)).sum())
    if not unreadable & set(OTHER):
        for name, other in OTHER.items():
            health.unpaired[name] = int((~stored_mask(concat_keys(keys.get(name)), concat_keys(keys.get(other)))).sum())
    return health


def retry_policy(store: ExperimentStore) -> tuple[int, set[str] | None]:
    """``(store.score_attempts, names of the configured verifiers)`` of the stored config (the default and None
    where it does not say or read): only configured verifiers try their failures again."""
    default = StoreSpec.model_fields["score_attempts"].default
    try:
        config = yaml.safe_load(store.config_path.read_text()) or {}
        value = config.get("store", {}).get("score_attempts", default)
        names = {str(v.get("name")) for v in config.get("verifiers") or []}
    except (OSError, ValueError, yaml.YAMLError, AttributeError):
        return default, None
    return (value if isinstance(value, int) and value >= 1 else default), names


def _count_failures(health: StoreHealth, kind: str, parts: list[pa.Table], configured: bool) -> None:
    """Count ``kind``'s failed scores (newest row per candidate) into ``health.waiting`` and ``health.final``
    (all final for a verifier the config no longer has)."""
    if not any("failed_attempts" in part.column_names and part.column("failed_attempts").null_count < part.num_rows
               for part in parts):
        return  # (no failure: no newest-row search over the scores)
    columns = [*CANDIDATE_KEY, *_RETRY_COLUMNS]
    schema = pa.schema([SCORE_SCHEMA.field(name) for name in columns])
    tables = []
    for part in parts:  # a chunk written before ``failed_attempts`` existed has none
        for name in _RETRY_COLUMNS:
            if name not in part.column_names:
                part = part.append_column(schema.field(name), pa.nulls(part.num_rows, schema.field(name).type))
        tables.append(part.select(columns).cast(schema))
    newest = newest_per_key(pa.concat_tables(tables))
    failed = newest.filter(pc.is_valid(newest.column("failed_attempts")))
    tries = np.asarray(failed.column("failed_attempts").to_numpy(zero_copy_only=False))
    reasons = failed.column("error").to_pylist()
    waits = (tries < health.score_attempts) & configured
    for target, mask in ((health.waiting, waits), (health.final, ~waits)):
        if mask.any():
            reason, _ = Counter(str(r) for r, m in zip(reasons, mask) if m).most_common(1)[0]
            target[kind] = FailedScores(int(mask.sum()), int(tries[mask].max()), " ".join(reason.split())[:200])


# ---- inspection ----------------------------------------------------------------------------------
def inspect(store: ExperimentStore, listing: Listing | None = None) -> Iterator[tuple[str, str | None, pa.Table | None]]:
    """``(relative path, what is wrong or None, its key columns or None)`` for every file of the store.

    The files: those that are gone first (``presence.gone``), then those ``written.jsonl`` lists (less
    what ``damaged/`` holds), every chunk, every table."""
    listing = store.written.read() if listing is None else listing
    if listing.bad_lines:
        yield LIST_NAME, f"line(s) {', '.join(map(str, listing.bad_lines[:10]))} are not valid entries", None
    lost = gone(store, listing)
    for rel, what in lost.items():
        yield rel, what, None
    chunks = {store.relative(p) for kind in store.chunk_kinds() for p in store.chunk_paths(kind)}
    tables = {f"{name}.parquet" for name in TABLES if store.table_path(name).is_file()}
    present = {rel for rel in listing.files if not rel.startswith("damaged/")}
    for rel in sorted((present | chunks | tables) - set(lost)):
        path = store.root / rel
        if path.suffix == ".parquet":
            columns, optional = key_columns(rel)
            table, problem = scan_parquet(path, columns, optional)
        else:
            table, problem = None, parse_problem(path)
        problem = problem or digest_problem(path, listing.files.get(rel, set()))
        if problem is None and rel in listing.deleted:
            problem = "deleted by the store, yet still there (a deletion cut short: `store repair` finishes it)"
        elif problem is None and store.written.exists() and rel not in listing.files:
            problem = f"not listed in {LIST_NAME} (not written by this store)"
        yield rel, problem, table


def table_of(rel: str) -> str:
    """``candidates``, ``scores/<verifier>`` or a table's stem, for a store file's relative path."""
    return rel.rsplit("/", 1)[0] if "/part-" in rel else rel.split(".", 1)[0]


def key_columns(rel: str) -> tuple[list[str], tuple[str, ...]]:
    """The columns ``check`` keeps of a Parquet file: the candidate key (none of other tables), and for
    scores the failure columns where the file has them."""
    keyed = rel.startswith(("candidates/", "scores/")) or table_of(rel) in (*KEYED_TABLES, "selections")
    return (list(CANDIDATE_KEY) if keyed else []), (_RETRY_COLUMNS if rel.startswith("scores/") else ())


def concat_keys(parts: list[pa.Table] | None) -> pa.Table:
    """The candidate key columns of ``parts``, concatenated (an empty key table when none)."""
    if not parts:
        return CANDIDATE_SCHEMA.empty_table().select(list(CANDIDATE_KEY))
    return pa.concat_tables([p.select(list(CANDIDATE_KEY)).cast(parts[0].select(list(CANDIDATE_KEY)).schema)
                             for p in parts])


def stored_mask(table: pa.Table, candidates: pa.Table) -> np.ndarray:
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


def open_store(directory: str | Path) -> ExperimentStore:
    """The store in ``directory``; ``StoreError`` when there is none."""
    if not Path(directory).is_dir():
        raise StoreError(f"{directory}: no such directory")
    store = ExperimentStore(directory)
    if not store.is_store():
        raise StoreError(f"{directory}: not an experiment store (no {LIST_NAME} or manifest.json)")
    return store
