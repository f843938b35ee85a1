"""``DIR/written.jsonl``: every file the store wrote, with its size and SHA-256.

One JSON line per write, ``{"path": "candidates/part-….parquet", "bytes": 81234, "sha256": "…"}``
(``path`` relative to the store, ``/``-separated), appended and fsynced *before* the file is renamed
into place; one line ``{"path": …, "deleted": true}`` per file the store deletes (a compaction's old
chunks, a changed verifier's scores), appended before the file goes, or moves away (a file ``store
repair`` sets aside), appended once it moved. So a file at a listed path holds one of the contents listed for it (the one before a write
killed between the two steps, or the new one), and:

* ``monkeybarrel store check`` finds damage anywhere in a file (its bytes no longer hash to what was
  written), also where the file still parses, and names every listed file that is gone or cannot be
  read (``presence.py``);
* ``run --force`` deletes exactly the listed paths: a user's ``fig.png``, ``notes.parquet`` or
  ``candidates/mine.parquet`` in the directory is never touched.

The manifest of a store that keeps the list says so (``LIST_KEY``), so a deleted list is found too.
A store written before the list existed is recognised by its manifest (a config hash, no
``LIST_KEY``); its files are the fixed names and ``part-<ns>-<hex>.parquet`` chunks the store has
always used (``legacy_files``), and the list is started from them at the store's next write.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

LIST_NAME = "written.jsonl"
LIST_KEY = "files_listed_in"
"""Manifest key of a store that keeps ``written.jsonl`` (its value is ``LIST_NAME``)."""

_LEGACY_TOP = ("config.yaml", "manifest.json", "metrics.json", "report.md", "report.html", "coverage.png",
               "allocation.png", "export.csv", "export.jsonl", "problems.parquet", "answers.parquet",
               "labels.parquet", "selections.parquet", "allocation.parquet")
_LEGACY_NESTED = re.compile(r"^(?:(?:damaged/)?(?:candidates|scores/[^/]+)/part-\d{20}-[0-9a-f]{8}\.parquet"
                            r"|artifacts/[^/]+/[^/]+\.json)$")


def file_digest(path: Path) -> tuple[str, int]:
    """``(sha256 hex, size in bytes)`` of a file, read in blocks."""
    with open(path, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
        return digest, os.fstat(handle.fileno()).st_size


def digest_if_readable(path: Path) -> tuple[str | None, int]:
    """``file_digest``, or ``(None, size or 0)`` for a file that cannot be read (listed without a digest)."""
    try:
        return file_digest(path)
    except OSError:
        try:
            return None, os.lstat(path).st_size
        except OSError:
            return None, 0


def _manifest(root: Path) -> dict:
    """The store's manifest as far as it reads ({} when absent, damaged or unreadable)."""
    try:
        data = json.loads((root / "manifest.json").read_text())
    except (ValueError, UnicodeDecodeError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def is_legacy_store(root: Path) -> bool:
    """Does ``root`` hold a store written before ``written.jsonl`` existed (a manifest with a config hash,
    without ``LIST_KEY``)?"""
    if os.path.lexists(root / LIST_NAME):
        return False
    manifest = _manifest(root)
    return "config_hash" in manifest and LIST_KEY not in manifest


def list_lost(root: Path) -> bool:
    """Is the ``written.jsonl`` of a store that keeps one (its manifest names the list) gone, or not a file?"""
    return not (root / LIST_NAME).is_file() and LIST_KEY in _manifest(root)


def legacy_files(root: Path) -> list[str]:
    """The files of a pre-list store: its fixed names and its chunk and artifact names (relative paths)."""
    found = [name for name in _LEGACY_TOP if (root / name).is_file()]
    for folder in ("candidates", "scores", "damaged", "artifacts"):
        if (root / folder).is_dir():
            found += [rel for p in sorted((root / folder).rglob("*"))
                      if p.is_file() and _LEGACY_NESTED.match(rel := p.relative_to(root).as_posix())]
    return found


@dataclass
class Listing:
    """What ``written.jsonl`` says: the files the store holds, those it deleted, its lines that do not parse."""

    files: dict[str, set[str]]
    """Relative path -> the SHA-256 digests written there (empty: unknown)."""
    deleted: set[str]
    """Relative paths the store deleted (and has not written again)."""
    bad_lines: list[int]


class WrittenFiles:
    """The list of files one store wrote (``DIR/written.jsonl``).

    Args:
        root: the store directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def path(self) -> Path:
        return self.root / LIST_NAME

    def exists(self) -> bool:
        return self.path.is_file()

    def record(self, path: Path, digest: str | None, size: int) -> None:
        """List ``path`` (inside the store) with its content's digest (None: unknown, the file cannot be
        read) and size; durable when this returns."""
        if not self.exists() and (is_legacy_store(self.root) or list_lost(self.root)):
            self._start_from_legacy()
        self._append([{"path": path.relative_to(self.root).as_posix(), "bytes": size, "sha256": digest}])

    def forget(self, paths: list[Path]) -> None:
        """Note that the store deletes ``paths`` (call before deleting them); durable when this returns."""
        if paths:
            self._append([{"path": p.relative_to(self.root).as_posix(), "deleted": True} for p in paths])

    def read(self) -> Listing:
        """The store's files: each listed path with the digests written there, paths deleted since, bad lines.

        A store without a list (a legacy one, or one whose list is gone or unreadable) gives its files
        by their names (``legacy_files``), with no digests (sizes and bytes are unknown)."""
        listing = Listing({}, set(), [])
        try:
            handle = open(self.path, "rb")
        except OSError:
            if self.root.is_dir() and (self.root / "manifest.json").exists():
                listing.files.update({rel: set() for rel in legacy_files(self.root)})
            return listing
        with handle:
            for number, line in enumerate(handle, 1):
                try:
                    entry = json.loads(line)
                    rel = _safe_relative(entry["path"])
                    if entry.get("deleted") is True:
                        listing.files.pop(rel, None)
                        listing.deleted.add(rel)
                        continue
                    digests = listing.files.setdefault(rel, set())
                    listing.deleted.discard(rel)
                    if entry["sha256"] is not None:
                        digests.add(str(entry["sha256"]))
                except (ValueError, KeyError, TypeError, AttributeError):
                    listing.bad_lines.append(number)
        return listing

    def paths(self) -> list[str]:
        """Every path the store wrote (relative), whether or not a file is there now (deleted ones too)."""
        listing = self.read()
        return sorted(set(listing.files) | listing.deleted)

    def rewrite(self, entries: dict[str, tuple[str | None, int]]) -> None:
        """Replace the list by one entry per path (``{path: (digest or None, size)}``), atomically."""
        tmp = self.path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}-{LIST_NAME}")  # a store temporary
        lines = [{"path": rel, "bytes": size, "sha256": digest} for rel, (digest, size) in sorted(entries.items())]
        with open(tmp, "wb") as handle:
            handle.write(b"".join(json.dumps(e).encode() + b"\n" for e in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def _start_from_legacy(self) -> None:
        self.rewrite({rel: digest_if_readable(self.root / rel) for rel in legacy_files(self.root)})

    def _append(self, entries: list[dict]) -> None:
        data = b"".join(json.dumps(e).encode() + b"\n" for e in entries)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            end = os.fstat(fd).st_size
            if end and os.pread(fd, 1, end - 1) != b"\n":  # a torn last line stays one bad line
                data = b"\n" + data
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def _safe_relative(path: str) -> str:
    """A listed path, refused if it could point outside the store (absolute, or with ``..``)."""
    if not isinstance(path, str) or path.startswith("/") or ".." in path.split("/") or not path:
        raise ValueError(path)
    return path
