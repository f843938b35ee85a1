"""What is gone from a store: listed files that are missing or cannot be read, and files every store has.

``written.jsonl`` lists every file the store wrote and every file it deleted (``written.py``), so a
listed file that is not there was lost (deleted by hand, by a disk, by a sync tool), and one that
cannot be opened for reading (its permissions or its folder's, a directory or a FIFO in its place)
is as good as lost. Besides, every store a run wrote (its manifest records the run) has
``config.yaml``, ``manifest.json``, ``problems.parquet`` and, where its manifest says it keeps one,
``written.jsonl``; once a run finished with candidates, ``answers.parquet`` and ``labels.parquet``.
These are found also where the list is gone or never existed (an older store). Files set aside in
``damaged/`` may be deleted by the user.

``gone`` opens each file (it reads no byte: ``store check`` reads them all); ``require_intact`` is the
quick test ``run`` and ``report`` make before they use a store, so a store that lost a file is
refused by name instead of read as if the file had never been written. Cost: one ``open`` per file.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .experiment_store import ExperimentStore, StoreError
from .written import LIST_NAME, Listing, list_lost

REQUIRED = ("config.yaml", "manifest.json", "problems.parquet")
"""Files every store has (a run writes them before anything else)."""
LABELLED = ("answers.parquet", "labels.parquet")
"""Tables every store has once a run finished with candidates stored (the label stage writes both)."""
OUTPUTS = ("selections.parquet", "metrics.json", "report.md", "report.html", "coverage.png", "allocation.png",
           "equal_compute.parquet", "export.csv", "export.jsonl")
"""Files ``report`` (or ``export``) derives from the rest: missing, they stop nothing (``report`` writes them again)."""
REWRITTEN_BY_RUN = ("config.yaml", "problems.parquet", *OUTPUTS)
"""Files a run writes itself (its config and task's problems before it reads anything, the outputs at the end)."""


def file_state(path: Path) -> str | None:
    """Why ``path`` is not a file that can be read (``missing``, ``unreadable (…)``, ``not a file (…)``),
    or None when it is one. Opens it without reading (a FIFO does not block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    try:
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if stat.S_ISREG(mode):
        return None
    return f"not a file (a {'directory' if stat.S_ISDIR(mode) else 'FIFO' if stat.S_ISFIFO(mode) else 'special file'})"


def gone(store: ExperimentStore, listing: Listing | None = None) -> dict[str, str]:
    """``{relative path: what is wrong}`` for every listed file that is missing or unreadable, and every
    file the store must have that is not a readable file; sorted by path."""
    listing = store.written.read() if listing is None else listing
    found: dict[str, str] = {}
    own = file_state(store.written.path)
    if own is not None and (own != "missing" or list_lost(store.root)):
        found[LIST_NAME] = (f"{own} (the store's list of its files; the manifest says it keeps one, so files lost "
                            "with it cannot be named)" if own == "missing" else own)
    for rel in listing.files:
        if not rel.startswith("damaged/"):
            state = file_state(store.root / rel)
            if state is not None:
                found[rel] = f"{state} (listed in {LIST_NAME}: the store wrote it and never deleted it)" \
                    if state == "missing" else state
    for rel in _required(store, listing):
        if rel not in found:
            state = file_state(store.root / rel)
            if state is not None:
                found[rel] = f"{state} (every store has one)" if state == "missing" else state
    return dict(sorted(found.items()))


def require_intact(directory: str | Path, missing_ok: tuple[str, ...] = ()) -> None:
    """Refuse (``StoreError``, one line naming the first file) a store that lost a file (``gone``), but for the
    ``missing_ok`` relative paths when they are missing (not when unreadable: writing them would fail); a
    directory that holds no store passes (its user says so).

    ``report`` passes ``OUTPUTS``, ``run`` ``REWRITTEN_BY_RUN``."""
    if not Path(directory).is_dir():  # (opening a store creates its directory)
        return
    store = ExperimentStore(directory)
    if not store.is_store():
        return
    lost = {rel: what for rel, what in gone(store).items() if not (rel in missing_ok and what.startswith("missing"))}
    if lost:
        rel, what = next(iter(lost.items()))
        more = f"; {len(lost) - 1} more file(s) are gone" if len(lost) > 1 else ""
        raise StoreError(f"{store.root / rel}: {what}{more}. `monkeybarrel store check {store.root}` names every "
                         f"one; `monkeybarrel store repair {store.root}` drops them or sets them aside, and the next "
                         "run redoes what they held")


def _required(store: ExperimentStore, listing: Listing) -> list[str]:
    """The files this store must have: ``REQUIRED`` once its manifest records a run (none for a store written
    through the API alone, or whose manifest is gone: that is named as a listed file), and ``LABELLED`` once
    a run finished with candidates stored."""
    try:
        runs = json.loads(store.manifest_path.read_text()).get("runs") or []
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(runs, list) or not runs:
        return []
    finished = any(isinstance(run, dict) and run.get("finished") for run in runs)
    has_candidates = any(rel.startswith("candidates/") for rel in listing.files) or bool(store.chunk_paths("candidates"))
    return [*REQUIRED, *(LABELLED if finished and has_candidates else ())]
