"""Engines sharing one GPU: who starts when, and the KV cache size the first one measured (issue #31).

vLLM sizes an engine's KV cache by profiling the GPU's memory while the engine starts: another engine starting
beside it would change what it measures. So on each node and GPU a read-write lock (a file,
``monkeybarrel-gpu-<ids>.lock``, :func:`gpu_turn`) orders the starts: an engine that measures holds it alone
(exclusive); an engine that does not measure, because it was given its KV size, holds it shared, so such engines
start side by side, but never beside one that measures.

Engines of one pool and one configuration on a GPU (a *key*: :func:`share_key`, the pool's run token and
:func:`engine_fingerprint`) measure once: the first takes the GPU alone and, as soon as it knows its KV size,
publishes it (:meth:`GpuTurn.publish`: a small JSON file beside the lock) and lets go of its exclusive hold. The
others of its key wait for that on a lock of the key (blocked in ``flock``, no polling), then all start at once
with the published size (vLLM's ``kv_cache_memory_bytes``: no profiling). An engine whose size cannot be read
publishes nothing, and the others then take turns as before. A run token in every file name keeps a file left
over from an earlier run from ever being read.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import re
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Iterator

from ..core.files import atomic_write_bytes

__all__ = ["GpuTurn", "gpu_turn", "engine_fingerprint", "share_key", "read_published", "publish_size", "forget"]

_log = logging.getLogger(__name__)
_NAME = re.compile(r"^[0-9A-Za-z._-]+$")


def engine_fingerprint(backend: str, model: str, options: dict[str, Any], **extra: Any) -> str:
    """A hex digest of an engine's configuration: ``backend``, ``model``, its ``options`` (the memory share
    ``gpu_memory_utilization`` among them) and ``extra`` settings that change how it starts. Equal configurations
    (whatever the order of their keys) give the same digest; 16 hex digits."""
    text = json.dumps({"backend": backend, "model": model, "options": options, "extra": extra}, sort_keys=True,
                      default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def share_key(sampler_class: Any, backend: str, model: str, options: dict[str, Any], token: str | None,
              **extra: Any) -> tuple[str | None, bool]:
    """(key, measures) of an engine of ``sampler_class`` with these ``options`` in the pool of run ``token``.

    ``key`` names the engines that may share a measured KV size (``<token>-<fingerprint>``): None where the backend
    cannot take one (no ``kv_cache_given`` on its class), there is no token, or the size is given. ``measures``:
    whether the engine sizes its cache from the memory it sees (False when ``options`` give the size)."""
    given = getattr(sampler_class, "kv_cache_given", None)
    if given is None:
        return None, True
    if given(options) is not None:
        return None, False
    if not token:
        return None, True
    return f"{token}-{engine_fingerprint(backend, model, options, **extra)}", True


def _paths(directory: Path, gpus: str, key: str) -> tuple[Path, Path]:
    """The published size (JSON) and the lock of ``key`` on ``gpus``."""
    stem = directory / f"monkeybarrel-gpu-{gpus}-kv-{key}"
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".lock")


def publish_size(directory: Path, gpus: str, key: str, size: int) -> None:
    """Write ``size`` (bytes of KV cache) for ``key`` on ``gpus`` (atomically: a reader sees all of it or none)."""
    published, _ = _paths(directory, gpus, key)
    atomic_write_bytes(published, json.dumps({"gpus": gpus, "key": key, "kv_cache_memory_bytes": int(size)}).encode())


def read_published(directory: Path, gpus: str, key: str) -> int | None:
    """The KV cache size (bytes) published for ``key`` on ``gpus``, or None: none yet, unreadable, or a file that is
    not this key's (its recorded key and GPUs must match)."""
    published, _ = _paths(directory, gpus, key)
    try:
        record = json.loads(published.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or record.get("gpus") != gpus:
        return None
    size = record.get("kv_cache_memory_bytes")
    return size if type(size) is int and size > 0 else None


def forget(directory: Path, gpus: str, key: str) -> None:
    """Remove ``key``'s files on ``gpus`` (the pool is closing: none of its engines starts any more)."""
    for path in _paths(directory, gpus, key):
        path.unlink(missing_ok=True)


class GpuTurn:
    """An engine's turn to start on its GPU (what :func:`gpu_turn` yields).

    Attributes:
        wait_s: seconds waited before the start could begin (None when the engine does not share a GPU): for the
            first engine of a key, until the GPU was free of other starts; for the others, until the first
            published its size, then until no engine was measuring.
        shared_bytes: the KV cache size (bytes) published by the first engine of the key, to start with (None: this
            engine measures its own, or was given one).
        published_bytes: the size this engine published (None: it did not).
        published_s: seconds from the start of the turn until it published.
    """

    def __init__(self, directory: Path | None = None, gpus: str | None = None, key: str | None = None) -> None:
        self.wait_s: float | None = None
        self.shared_bytes: int | None = None
        self.published_bytes: int | None = None
        self.published_s: float | None = None
        self.directory, self.gpus, self.key = directory, gpus, key
        self._gpu: IO | None = None  # the GPU's lock, held exclusive (measuring) or shared
        self._mine: IO | None = None  # the key's lock, held exclusive while this engine measures for the key
        self._measuring = False
        self._began: float | None = None

    @property
    def measuring(self) -> bool:
        """Whether the engine holds the GPU alone to measure its KV cache (and may publish the size)."""
        return self._measuring

    def publish(self, size: int | None) -> bool:
        """Publish ``size`` (bytes of KV cache the engine got) for the engine's key and let the others start: the
        GPU's lock goes from exclusive to shared, the key's lock is let go. Once per turn; nothing without a key, for
        an engine that did not measure, or for a size that is not a positive int (the others then take turns)."""
        if not self._measuring or self.key is None or self.published_bytes is not None:
            return False
        if type(size) is not int or size <= 0:
            return False
        try:
            publish_size(self.directory, self.gpus, self.key, size)
        except OSError as exc:
            _log.warning("could not publish the KV cache size on GPU %s: %s", self.gpus, exc)
            return False
        self.published_bytes = size
        self.published_s = round(time.perf_counter() - self._began, 3)
        self._measuring = False
        fcntl.flock(self._gpu, fcntl.LOCK_SH)  # may wait while another kind measures (flock converts, not atomically)
        if self._mine is not None:
            fcntl.flock(self._mine, fcntl.LOCK_UN)
        return True

    def forget(self) -> None:
        """Remove this engine's key files (when its pool closes)."""
        if self.key is not None and self.directory is not None:
            forget(self.directory, self.gpus, self.key)

    # ---- taking the turn -----------------------------------------------------------------
    def _take(self, stack: contextlib.ExitStack, measures: bool) -> None:
        """Wait for this engine's turn (module docstring); ``stack`` closes the lock files when the turn ends."""
        self._gpu = stack.enter_context(open(self.directory / f"monkeybarrel-gpu-{self.gpus}.lock", "a+"))
        if not measures:
            fcntl.flock(self._gpu, fcntl.LOCK_SH)
            return
        if self.key is None:
            self._measure()
            return
        size = read_published(self.directory, self.gpus, self.key)
        if size is None:
            self._mine = stack.enter_context(open(_paths(self.directory, self.gpus, self.key)[1], "a+"))
            try:
                fcntl.flock(self._mine, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another engine of the key measures: wait until it publishes or gives up
                fcntl.flock(self._mine, fcntl.LOCK_SH)
                fcntl.flock(self._mine, fcntl.LOCK_UN)
                self._mine = None
            size = read_published(self.directory, self.gpus, self.key)
            if size is None:
                self._measure()
                size = read_published(self.directory, self.gpus, self.key)  # published while it waited for the GPU
                if size is None:
                    return
                self._measuring = False
        if self._mine is not None:
            fcntl.flock(self._mine, fcntl.LOCK_UN)
            self._mine = None
        fcntl.flock(self._gpu, fcntl.LOCK_SH)
        self.shared_bytes = size

    def _measure(self) -> None:
        fcntl.flock(self._gpu, fcntl.LOCK_EX)
        self._measuring = True


@contextlib.contextmanager
def gpu_turn(alone: bool, key: str | None = None, measures: bool = True, gpus: str | None = None,
             directory: str | Path | None = None) -> Iterator[GpuTurn]:
    """Hold this engine's turn on its GPU while the block builds and starts it (module docstring).

    Args:
        alone: the engine shares its GPU with others (False: no lock, the turn is free).
        key: engines that may share the first one's KV size (:func:`share_key`); None: each measures in turn.
        measures: the engine measures its KV cache (False: its size was given; it starts beside others like it).
        gpus: the GPU ids as a name (``0``, ``0-1``); None = this Ray actor's (``ray.get_gpu_ids()``).
        directory: where the lock and size files are (default: the system's temporary directory, one per node).

    Yields the :class:`GpuTurn`: ``shared_bytes`` to start with, if any; call ``publish(bytes)`` as soon as the
    engine's KV size is known (the turn also publishes nothing if never called, and lets go when the block ends).
    """
    if not alone:
        yield GpuTurn()
        return
    if gpus is None:
        import ray

        gpus = "-".join(str(g) for g in ray.get_gpu_ids()) or "none"
    for name in (gpus, key or "x"):
        if not _NAME.match(name):
            raise ValueError(f"not a file-name part: {name!r}")
    turn = GpuTurn(Path(directory or tempfile.gettempdir()), gpus, key)
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:  # closing a lock file lets go of its lock, also after an error
        turn._take(stack, measures)
        turn._began = time.perf_counter()
        turn.wait_s = round(turn._began - began, 3)
        try:
            yield turn
        except BaseException:  # the engine that published did not start after all: later starts measure again
            if turn.published_bytes is not None:
                _paths(turn.directory, gpus, key)[0].unlink(missing_ok=True)
            raise
