"""``monkeybarrel store check | repair | compact``: find and fix what damage, two writers or a crash left behind.

* check (``inspection.py``): names every file that is gone, damaged or not the store's, duplicate keys,
  rows of candidates that are not stored, stray temporaries, failed scores waiting for a retry. Changes nothing.
* repair: a listed file that is gone is dropped from ``written.jsonl`` (what it held is redone by the
  next run); one that cannot be read (permissions, a directory in its place) moves to ``DIR/damaged/``
  as it is; a folder that cannot be read is named and left to its owner (permissions are never
  changed). ``manifest.json`` is rebuilt from ``config.yaml`` and ``problems.parquet`` from the task
  (``load_problems``) where they are gone. A Parquet file that fails to read moves to ``DIR/damaged/``
  and the row groups that still read are written back (the rest is redone by the next run); one that
  reads but whose bytes differ is written again; a JSON/YAML file that does not parse moves aside, a
  damaged report or plot is deleted (the next ``report`` rebuilds it). Then duplicates keep the newest
  row per key, chunked tables are compacted, rows whose candidate is gone are dropped (so the
  candidate's next sample is answered, labelled and scored afresh), and ``written.jsonl`` is rewritten
  from what is now there. A file that cannot be fixed (not even moved) is named and skipped, with the
  tables it belongs to; everything else is still repaired.
* compact: each chunked table (candidates, ``scores/<verifier>``) becomes one file, newest row per key.

repair and compact hold the writer lock. A compaction writes the merged chunk before deleting the
old ones, so a crash in between leaves exact duplicates that the next ``repair`` removes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

import pyarrow as pa

from ...core.config import ExperimentConfig
from ...core.records import ANSWER_SCHEMA, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA, Problem, problems_to_table
from .experiment_store import ExperimentStore, newest_per_key
from .inspection import OTHER, StoreHealth, check, inspect, open_store, stored_mask, table_of  # noqa: F401 (check: public here)
from .integrity import one_line, parse_problem, salvage_parquet, scan_parquet
from .lock import RunLock
from .manifest import new_manifest
from .presence import LABELLED, file_state, gone
from .written import LIST_NAME, digest_if_readable, file_digest

_KEYED_TABLES = {"answers": ANSWER_SCHEMA, "labels": LABEL_SCHEMA}
_DERIVED = {"selections", "metrics", "report", "coverage", "allocation"}
"""Stems of files every ``report`` rebuilds (a damaged one that is not Parquet is simply deleted)."""
ProblemLoader = Callable[[ExperimentConfig], list[Problem]]
"""The configured task's problems (``stages.preflight.build_task(config).load()``), to rebuild ``problems.parquet``."""


def compact(directory: str | Path) -> dict[str, tuple[int, int]]:
    """Merge each chunked table into one chunk (newest row per key); returns ``{kind: (chunks before, after)}``."""
    store = open_store(directory)
    with RunLock(store.root, "store compact"):
        return {kind: (before, after) for kind, (before, after, _) in _compact(store).items()}


def repair(directory: str | Path, load_problems: ProblemLoader | None = None) -> list[str]:
    """Fix what ``check`` finds (see the module docstring); returns one line per action."""
    store = open_store(directory)
    actions: list[str] = []
    unfixed: set[str] = set()  # files that could not be fixed: their tables are left alone
    with RunLock(store.root, "store repair"):
        for tmp in store.remove_stale_temporaries():
            actions.append(f"removed leftover temporary {store.relative(tmp)}")
        found = sorted(inspect(store), key=lambda item: item[0] != LIST_NAME)  # the list first: fixes write to it
        for rel, problem, _ in found:
            if problem is not None:
                try:
                    actions.append(_repair_file(store, rel, problem))
                except OSError as exc:
                    unfixed.add(rel)
                    folder = _unreadable_folder(store, rel)
                    if folder is None:
                        actions.append(f"{rel}: {problem}; could not be fixed ({one_line(exc)}): fix it (its "
                                       "permissions?) and run `store repair` again; left as it is")
                    elif not any(line.startswith(f"{folder}/: ") for line in actions):
                        actions.append(f"{folder}/: cannot be read, so neither can its files: give it back its "
                                       f"permissions (chmod u+rwx {store.root / folder}) and run `store repair` again; "
                                       "left as it is, with what it holds")
        actions += _restore(store, load_problems)
        skipped = {table_of(rel) for rel in unfixed}
        for name, schema in _KEYED_TABLES.items():
            table = store.read_table(name, schema) if name not in skipped else None
            unique = newest_per_key(table) if table is not None else None
            if unique is not None and unique.num_rows != table.num_rows:
                store.write_table(name, unique)
                actions.append(f"{name}: removed {table.num_rows - unique.num_rows} duplicate row(s)")
        for kind, (before, after, dropped) in _compact(store, skipped).items():
            if dropped:
                actions.append(f"{kind}: removed {dropped} duplicate row(s), newest kept")
            if before != after:
                actions.append(f"{kind}: {before} chunk(s) merged into {after}")
        actions += _drop_orphans(store, skipped)
        _relist(store, unfixed)
        if skipped:
            actions.append(f"left alone because a file of theirs could not be fixed: {', '.join(sorted(skipped))}")
    return actions or ["nothing to repair"]


def compact_if_fragmented(store: ExperimentStore, max_chunks: int = 64) -> None:
    """Compact (the caller holds the lock) when a chunked table has more than ``max_chunks`` files."""
    if any(len(store.chunk_paths(kind)) > max_chunks for kind in store.chunk_kinds()):
        _compact(store)


# ---- repair --------------------------------------------------------------------------------------
def _repair_file(store: ExperimentStore, rel: str, problem: str) -> str:
    """Fix one file that is gone, unreadable, damaged or left over; returns what was done (one line).

    Raises:
        OSError: it cannot be fixed (not even moved aside)."""
    path = store.root / rel
    state = file_state(path)
    if state == "missing" and path.is_symlink():
        state = "a dangling symbolic link"
    if rel == LIST_NAME:  # rebuilt from the store's file names by ``_relist`` (or the first write before it)
        if state in (None, "missing"):
            return f"{rel}: {problem}; rewritten from the files present"
        target = store.root / "damaged" / f"{LIST_NAME}-{time.time_ns()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        path.replace(target)
        return f"{rel}: {problem}; moved to {store.relative(target)} as it is, and rewritten from the files present"
    if state == "missing" and rel == "config.yaml":
        return f"{rel}: {problem}; cannot be rebuilt here: the next `monkeybarrel run CONFIG --out {store.root}` writes it"
    if state == "missing":
        if rel in ("manifest.json", "problems.parquet", *LABELLED):
            return f"{rel}: {problem}"  # rebuilt below where it can be (``_restore``, ``_drop_orphans``)
        return f"{rel}: {problem}; dropped from {LIST_NAME} (what it held is redone by the next run)"
    if state is not None:
        target = store.move_aside(path)
        return f"{rel}: {problem}; moved to {store.relative(target)} as it is (what it held is redone by the next run)"
    if problem.startswith("deleted by the store"):
        store.delete([path])
        return f"{rel}: {problem}; deleted"
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
        store.delete([path])
        return f"{rel}: {problem}; deleted (the next `monkeybarrel report` or run rebuilds it)"
    if parse_problem(path) is None:
        store.written.record(path, *file_digest(path))
        return f"{rel}: {problem}; it still parses, kept as it is and listed again (compare it with what you expect)"
    target = store.move_aside(path)
    return f"{rel}: {problem}; moved to {store.relative(target)} (the next run writes it again)"


def _unreadable_folder(store: ExperimentStore, rel: str) -> str | None:
    """The outermost folder of ``rel`` (inside the store) that cannot be listed, or None."""
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        try:
            os.listdir(store.root.joinpath(*parts[:depth]))
        except FileNotFoundError:
            return None
        except OSError:
            return "/".join(parts[:depth])
    return None


def _restore(store: ExperimentStore, load_problems: ProblemLoader | None) -> list[str]:
    """Rebuild a ``manifest.json`` (from ``config.yaml``) or ``problems.parquet`` (from the task) that is gone."""
    lost = gone(store)
    wanted = [rel for rel in ("manifest.json", "problems.parquet") if rel in lost]
    if not wanted:
        return []
    if file_state(store.config_path) is not None:
        return [f"{rel}: cannot be rebuilt without config.yaml; the next `monkeybarrel run CONFIG --out "
                f"{store.root}` writes it" for rel in wanted]
    try:
        config = ExperimentConfig.from_yaml(store.config_path)
    except Exception as exc:  # noqa: BLE001 — any reason the stored config does not load is reported, not raised
        return [f"{rel}: cannot be rebuilt, config.yaml does not load ({one_line(exc)})" for rel in wanted]
    actions = []
    if "manifest.json" in wanted:
        store.write_manifest(new_manifest(config))
        actions.append("manifest.json: rebuilt from config.yaml (the history of runs and their costs is lost)")
    if "problems.parquet" in wanted and load_problems is None:
        actions.append("problems.parquet: the next run writes it from the task")
    elif "problems.parquet" in wanted:
        try:
            store.write_table("problems", problems_to_table(load_problems(config)))
            actions.append("problems.parquet: rebuilt from the configured task")
        except Exception as exc:  # noqa: BLE001 — a task whose data is not reachable now
            actions.append(f"problems.parquet: not rebuilt ({one_line(exc)}); the next run writes it from the task")
    return actions


def _compact(store: ExperimentStore, skipped: set[str] = frozenset()) -> dict[str, tuple[int, int, int]]:
    """Merge each chunked table (but ``skipped`` ones) into one chunk; ``{kind: (chunks before, after, duplicate
    rows dropped)}``."""
    result = {}
    for kind in store.chunk_kinds():
        if kind in skipped:
            continue
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
    store.delete(parts)


def _drop_orphans(store: ExperimentStore, skipped: set[str]) -> list[str]:
    """Drop scores, answers, labels and selections of candidates that are not stored; one line per table.
    A pair of answers and labels that lost one of its tables is emptied (the next run redoes both)."""
    if "candidates" in skipped:
        return []
    candidates = store.read_chunks("candidates", CANDIDATE_SCHEMA)
    actions = []
    for kind in [kind for kind in store.chunk_kinds()[1:] if kind not in skipped]:
        table = store.read_chunks(kind, SCORE_SCHEMA)
        keep = stored_mask(table, candidates)
        if not keep.all():
            _replace_chunks(store, kind, store.chunk_paths(kind), table.filter(pa.array(keep)))
            actions.append(f"{kind}: removed {int((~keep).sum())} score(s) of candidates that are not stored")
    for name in [name for name in (*_KEYED_TABLES, "selections") if name not in skipped]:
        table = store.read_table(name)
        if table is None:
            continue
        keep = stored_mask(table, candidates)
        if not keep.all():
            store.write_table(name, table.filter(pa.array(keep)))
            actions.append(f"{name}: removed {int((~keep).sum())} row(s) of candidates that are not stored")
    if skipped & set(_KEYED_TABLES):
        return actions
    lost = gone(store)
    tables = {name: store.read_table(name, schema) for name, schema in _KEYED_TABLES.items()}
    for name, other in OTHER.items():  # the label stage redoes a candidate only when both lack it
        keep = stored_mask(tables[name], tables[other])
        if not keep.all():
            store.write_table(name, tables[name].filter(pa.array(keep)))
            actions.append(f"{name}: removed {int((~keep).sum())} row(s) of candidates missing from {other} "
                           "(the next run redoes both)")
        elif f"{name}.parquet" in lost:
            store.write_table(name, tables[name])
            actions.append(f"{name}.parquet: written again, empty (the next run answers and labels every candidate)")
    return actions


def _relist(store: ExperimentStore, unfixed: set[str]) -> None:
    """Rewrite ``written.jsonl``: one entry per file of the store now there (all checked sound by repair), and
    the files that could not be fixed (so ``check`` names them again)."""
    listing = store.written.read()
    files = {rel for rel in listing.files if rel in unfixed or file_state(store.root / rel) != "missing"}
    files |= {store.relative(p) for kind in store.chunk_kinds() for p in store.chunk_paths(kind)}
    store.written.rewrite({rel: digest_if_readable(store.root / rel) for rel in sorted(files)})


def _schema(kind: str) -> pa.Schema:
    return CANDIDATE_SCHEMA if kind == "candidates" else SCORE_SCHEMA


__all__ = ["StoreHealth", "check", "compact", "compact_if_fragmented", "repair"]
