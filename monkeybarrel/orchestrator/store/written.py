"""``DIR/written.jsonl``: every file the store wrote, with its size and SHA-256.

One JSON line per write, ``{"path": "candidates/part-….parquet", "bytes": 81234, "sha256": "…"}``
(``path`` relative to the store, ``/``-separated), appended and fsynced *before* the file is renamed
into place. So a file at a listed path holds one of the contents listed for it (the one before a
write killed between the two steps, or the new one), and:

* ``monkeybarrel store check`` finds damage anywhere in a file (its bytes no longer hash to what was
  written), also where the file still parses;
* ``run --force`` deletes exactly the listed paths: a user's ``fig.png``, ``notes.parquet`` or
  ``candidates/mine.parquet`` in the directory is never touched.

A store written before the list existed is recognised by its manifest; its files are the fixed
names and ``part-<ns>-<hex>.parquet`` chunks the store has always used (``legacy_files``), and the
list is started from them at the store's next write.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from pathlib import Path

LIST_NAME = "written.jsonl"

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


def is_legacy_store(root: Path) -> bool:
    """Does ``root`` hold a store written before ``written.jsonl`` existed (a manifest with a config hash)?"""
    manifest = root / "manifest.json"
    if (root / LIST_NAME).exists() or not manifest.is_file():
        return False
    try:
        return "config_hash" in json.loads(manifest.read_text())
    except (ValueError, UnicodeDecodeError, OSError):
        return False


def legacy_files(root: Path) -> list[str]:
    """The files of a pre-list store: its fixed names and its chunk and artifact names (relative paths)."""
    found = [name for name in _LEGACY_TOP if (root / name).is_file()]
    for folder in ("candidates", "scores", "damaged", "artifacts"):
        if (root / folder).is_dir():
            found += [rel for p in sorted((root / folder).rglob("*"))
                      if p.is_file() and _LEGACY_NESTED.match(rel := p.relative_to(root).as_posix())]
    return found


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

    def record(self, path: Path, digest: str, size: int) -> None:
        """List ``path`` (inside the store) with its content's digest and size; durable when this returns."""
        if not self.exists() and is_legacy_store(self.root):
            self._start_from_legacy()
        self._append([{"path": path.relative_to(self.root).as_posix(), "bytes": size, "sha256": digest}])

    def read(self) -> tuple[dict[str, set[str]], list[int]]:
        """``({path: digests written there}, numbers of lines that are not valid entries)``.

        A legacy store (no list yet) gives its files with no digests (sizes and bytes are unknown)."""
        if not self.exists():
            return ({rel: set() for rel in legacy_files(self.root)} if is_legacy_store(self.root) else {}), []
        listed: dict[str, set[str]] = {}
        bad = []
        with open(self.path, "rb") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    entry = json.loads(line)
                    listed.setdefault(_safe_relative(entry["path"]), set()).add(str(entry["sha256"]))
                except (ValueError, KeyError, TypeError):
                    bad.append(number)
        return listed, bad

    def paths(self) -> list[str]:
        """Every path the store wrote (relative), whether or not a file is there now."""
        return sorted(self.read()[0])

    def rewrite(self, entries: dict[str, tuple[str, int]]) -> None:
        """Replace the list by one entry per path (``{path: (digest, size)}``), atomically."""
        tmp = self.path.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}-{LIST_NAME}")  # a store temporary
        lines = [{"path": rel, "bytes": size, "sha256": digest} for rel, (digest, size) in sorted(entries.items())]
        with open(tmp, "wb") as handle:
            handle.write(b"".join(json.dumps(e).encode() + b"\n" for e in lines))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def _start_from_legacy(self) -> None:
        self.rewrite({rel: file_digest(self.root / rel) for rel in legacy_files(self.root)})

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
