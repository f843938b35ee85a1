"""The store's writer lock: one process at a time writes an experiment directory.

``DIR/.lock`` is held with ``fcntl.flock`` (released by the kernel when the holder exits, also on
SIGKILL, so a lock is never stale) and records the holder's pid, host, start time and command, so a
second writer is told who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path
from types import TracebackType

from .experiment_store import LOCK_NAME, StoreError
from .manifest import now


class StoreLockedError(StoreError):
    """Another process holds the directory's writer lock."""


class RunLock:
    """Exclusive, non-blocking writer lock on one experiment directory (a context manager).

    Args:
        root: the experiment directory (created if missing).
        purpose: what the holder does (``run``, ``report``, ``store repair``), shown to a second writer.

    Raises:
        StoreLockedError: on ``acquire`` when another process holds the lock; the message names its pid.
    """

    def __init__(self, root: str | Path, purpose: str = "run") -> None:
        self.root, self.purpose = Path(root), purpose
        self._handle = None

    @property
    def path(self) -> Path:
        return self.root / LOCK_NAME

    def acquire(self) -> "RunLock":
        self.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _parse(handle.read())
            handle.close()
            raise StoreLockedError(
                f"{self.root}: another monkeybarrel process is writing this store "
                f"(pid {holder.get('pid', '?')} on {holder.get('host', '?')}, {holder.get('purpose', '?')} "
                f"since {holder.get('since', '?')}: {holder.get('command', '?')}); wait for it to finish or stop it"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "purpose": self.purpose,
                                 "since": now(), "command": " ".join(sys.argv)}))
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def _parse(text: str) -> dict:
    try:
        data = json.loads(text)
        return data if isinstance(data, dict) else {}
    except json.JSONDecodeError:
        return {}
