"""Run a sweep's points: one point with retries, and a group's points on shared engines.

The same code runs in the driver process (one group after another) and in a lane (a worker process
holding one group's engines on its own GPUs, ``lanes.py``). What a point's run changes is handed to
a :class:`Journal`: the driver's writes ``DIR/sweep.json`` (or its shard's file); a lane's sends the
changes to the driver, which alone writes the manifest.

A point is tried up to ``retry.attempts`` times with exponential waits (tenacity); the engines of a
failed try are closed so the next try starts them afresh; a point whose every try fails is recorded
``failed`` with its error and the group goes on. Ctrl-C puts the point back to ``pending``, closes
the engines and propagates.
"""

from __future__ import annotations

import os
import socket
import traceback
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from ...core.config import ConfigError, ExperimentConfig
from ...core.files import TaskDataError
from ...core.registry import UnknownNameError
from ...samplers.engine_pool import EnginePool, shared_engines
from ..runner import run_experiment
from ..store.config_guard import ConfigConflictError
from ..store.lock import StoreLockedError
from ..store.manifest import now
from .manifest import config_hash, count_starts, point_record, stamp, write_manifest
from .spec import Point, RetrySpec

FINAL_ERRORS = (ConfigError, ConfigConflictError, TaskDataError, UnknownNameError, StoreLockedError)
"""Failures a retry cannot fix: bad config or data, a store of another config, a store another process writes."""


@dataclass
class Planned:
    """A point with the config it runs with and the engines it needs."""

    point: Point
    config: ExperimentConfig
    """``point.config``, its generators wrapped into ``backend: ray`` under ``--ray-address``."""
    engines: dict[str, str] = field(default_factory=dict)
    """Engine key (as the engine pool counts it) -> readable label (``model (backend)``)."""
    generator_engines: dict[str, str] = field(default_factory=dict)
    """Generator id -> engine label (for sharing engine starts in GPU-seconds)."""
    needs: dict[str, int | None] = field(default_factory=dict)
    """Engine key -> GPUs it holds (None: a ``ray`` engine, which places its own actors)."""
    group: tuple[str, ...] = ()
    """Points with equal groups run in one ``shared_engines()`` block."""


class Journal(Protocol):
    """Where a point's run records what it changes."""

    def save(self, record: dict[str, Any]) -> None:
        """The point's record changed (state, tries, error)."""

    def starts(self, starts: dict[str, int], served: dict[str, list[str]]) -> None:
        """Engine starts per label (an engine started: 1, as it happens; the block closed: 0) and the points
        each engine served so far."""

    def echo(self, text: str) -> None:
        """A line for the terminal."""


class ManifestJournal:
    """The driver's journal: records go into ``manifest`` and it is written at once (``DIR/<file>``)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], run: dict[str, Any], file: str,
                 echo: Callable[[str], None]) -> None:
        self.directory, self.manifest, self.run, self.file, self._echo = directory, manifest, run, file, echo

    def save(self, record: dict[str, Any]) -> None:
        own = point_record(self.manifest, record["id"])
        if own is not record:  # a copy from a lane
            own.clear()
            own.update(record)
        own["updated"] = stamp()
        write_manifest(self.directory, self.manifest, self.file)

    def starts(self, starts: dict[str, int], served: dict[str, list[str]]) -> None:
        count_starts(self.manifest, self.run, starts, served)
        write_manifest(self.directory, self.manifest, self.file)

    def echo(self, text: str) -> None:
        self._echo(text)


class Engines:
    """The open ``shared_engines()`` block of a group; closed and reopened after a failed try."""

    def __init__(self, on_close: Callable[[EnginePool], None], on_start: Callable[[str], None]) -> None:
        self._stack: ExitStack | None = None
        self._on_close, self._on_start = on_close, on_start
        self.pool: EnginePool | None = None

    def open(self) -> None:
        if self.pool is None:
            self._stack = ExitStack()
            self.pool = self._stack.enter_context(shared_engines(self._on_start))

    def close(self) -> None:
        if self.pool is not None:
            pool, stack, self.pool, self._stack = self.pool, self._stack, None, None
            try:
                stack.close()
            finally:
                self._on_close(pool)


def run_group(next_item: Callable[[], tuple[Planned, dict[str, Any]] | None], directory: Path, journal: Journal,
              retry: RetrySpec, show_progress: bool, announce: Callable[[Planned], str] | None = None) -> None:
    """Run points of one engine group inside one ``shared_engines()`` block until ``next_item()`` gives None.

    ``next_item`` returns a point and its manifest record (which ``run_point`` updates); ``announce``
    makes the line printed before each point.
    """
    labels: dict[str, str] = {}
    served: dict[str, list[str]] = {}

    def points_served() -> dict[str, list[str]]:  # a copy: a lane's journal sends it on a queue later
        return {label: list(points) for label, points in served.items()}

    def started(key: str) -> None:  # recorded at once: a run killed with SIGKILL keeps its count
        journal.starts({labels.get(key, "unshared engine"): 1}, points_served())

    def closed(pool: EnginePool) -> None:  # the points served since the engines started
        journal.starts({labels.get(key, "unshared engine"): 0 for key in pool.starts}, points_served())

    engines = Engines(closed, started)
    try:
        while (job := next_item()) is not None:
            item, record = job
            labels.update(item.engines)
            for label in item.engines.values():
                served.setdefault(label, []).append(item.point.name)
            if announce is not None:
                journal.echo(announce(item))
            run_point(item, record, directory, journal, engines, retry, show_progress)
    finally:
        engines.close()


def run_point(item: Planned, record: dict[str, Any], directory: Path, journal: Journal, engines: Engines,
              retry: RetrySpec, show_progress: bool) -> None:
    """Run (resume) one point into ``directory/<its name>`` with retries; ``record`` is updated and saved."""
    record.update(state="running", started=now(), finished=None, host=socket.gethostname(), pid=os.getpid(), tries=0)
    journal.save(record)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        record.update(error=one_line(error), traceback=_traceback(error))
        engines.close()  # the next try starts its engines afresh
        journal.save(record)
        journal.echo(f"  {record['name']}: try {state.attempt_number} of {retry.attempts} failed: {one_line(error)}; "
                     f"trying again in {state.upcoming_sleep:.0f} s")

    retrying = Retrying(stop=stop_after_attempt(retry.attempts),
                        wait=wait_exponential(multiplier=retry.wait_s, max=retry.max_wait_s),
                        retry=retry_if_exception(lambda e: isinstance(e, Exception) and not isinstance(e, FINAL_ERRORS)),
                        before_sleep=before_sleep, reraise=True)
    try:
        for attempt in retrying:
            with attempt:
                record["tries"] = attempt.retry_state.attempt_number
                record["attempts"] = record.get("attempts", 0) + 1
                engines.open()
                run_experiment(item.config, directory / record["name"], show_progress=show_progress)
    except KeyboardInterrupt:
        record.update(state="pending", finished=now())
        raise
    except Exception as exc:
        record.update(state="failed", finished=now(), error=one_line(exc), traceback=_traceback(exc))
        engines.close()
        tries = record["tries"]
        journal.echo(f"  {record['name']}: failed after {tries} tr{'y' if tries == 1 else 'ies'}: {one_line(exc)}")
    else:
        record.update(state="done", finished=now(), config_hash=config_hash(item.point))
        if record["tries"] == 1:
            record.update(error=None, traceback=None)
    finally:
        journal.save(record)


def one_line(exc: BaseException | None) -> str | None:
    """``Type: the whole message on one line`` (a multi-line message's lines joined: the cause is kept)."""
    if exc is None:
        return None
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _traceback(exc: BaseException | None) -> str | None:
    return None if exc is None else "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
