"""Lanes: a sweep's engine groups run side by side, each in a worker process on its own GPUs.

The driver (this process) keeps the manifest and the points still waiting; ``placement.Placement``
says which group starts a lane on which devices. A lane is a process started with ``spawn`` whose
environment names its devices (``CUDA_VISIBLE_DEVICES``, set before the process starts, so nothing
in it sees another lane's GPUs). It opens one ``shared_engines()`` block and asks the driver for
its next point until none is left (``points.run_group``): the engines start once per lane. Every
change of a point's record, every engine start and every line goes back to the driver on one
queue, and the driver alone writes the manifest.

Failures: a failing point is retried and recorded by its lane as in the driver, and the lane goes
on. A lane whose process dies (out of memory, a crash in CUDA, SIGKILL) has its point recorded
``failed`` with the exit code; its group's waiting points go to a new lane, unless ``MAX_DEATHS``
lanes of that group died, and then they are recorded failed too. The other lanes go on.

Ctrl-C: lanes ignore SIGINT (a terminal sends it to the whole process group); the driver sends each
lane SIGTERM, which the lane turns into KeyboardInterrupt: its point goes back to ``pending``, its
engines close, it says goodbye. After ``STOP_TIMEOUT_S`` the driver kills what is left, and the
interrupt propagates (the CLI exits 130; the same command resumes).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ...core.environment import environment
from ..store.manifest import now
from .placement import Devices, Group, Placement, group_need, work
from .points import Journal, Planned, run_group
from .spec import RetrySpec

MAX_DEATHS = 2
"""Lanes of one group that may die before its waiting points are recorded failed."""
STOP_TIMEOUT_S = 120.0
"""How long lanes get to close their engines after Ctrl-C."""


@dataclass
class _Lane:
    number: int
    group: Group
    ids: list[str]
    process: Any
    inbox: Any
    current: int | None = None
    """Index of the point it runs."""
    done: bool = False
    """It said goodbye (it ended on purpose)."""


class LaneRunner:
    """Runs ``todo`` (planned points with their manifest ``records``) in lanes on ``devices``."""

    def __init__(self, todo: list[Planned], records: dict[str, dict[str, Any]], directory: Path, journal: Journal,
                 devices: Devices, retry: RetrySpec, label: Callable[[Planned], str]) -> None:
        self.todo, self.records, self.directory, self.journal = todo, records, directory, journal
        self.devices, self.retry, self.label = devices, retry, label
        grouped: dict[tuple[str, ...], list[int]] = {}
        for index, item in enumerate(todo):
            grouped.setdefault(item.group, []).append(index)
        self.groups = [Group(name=", ".join(sorted(set(todo[ix[0]].engines.values()))),
                             need=group_need({k: n for i in ix for k, n in todo[i].needs.items()}, len(devices.ids)),
                             waiting=deque(ix), weight=sum(work(todo[i].config) for i in ix))
                       for ix in grouped.values()]
        self.placement = Placement(self.groups, list(devices.ids))
        self.context = multiprocessing.get_context("spawn")
        self.events = self.context.Queue()
        self.lanes: dict[int, _Lane] = {}
        self.started = 0
        self.dispatched = 0
        self.stopping = False

    def run(self) -> None:
        try:
            while self.placement.busy() or self.lanes:
                while not self.stopping and (choice := self.placement.next_lane()) is not None:
                    self._start(*choice)
                self._pump(0.5)
                self._reap()
        except KeyboardInterrupt:
            self._stop()
            raise
        finally:
            for lane in self.lanes.values():  # a second Ctrl-C, or an error here: nothing outlives the driver
                if lane.process.is_alive():
                    lane.process.kill()
                lane.process.join()
            self.events.close()

    # ---- lanes ---------------------------------------------------------------------------
    def _start(self, group: Group, ids: list[str]) -> None:
        self.started += 1
        number = self.started
        items = {i: self.todo[i] for i in list(group.waiting)}
        inbox = self.context.Queue()
        with environment(self.devices.lane_env(ids)):  # the spawned process starts with these: CUDA sees its GPUs
            process = self.context.Process(target=lane_main, name=f"monkeybarrel-lane-{number}",
                                           args=(number, items, str(self.directory), self.retry, self.events, inbox))
            process.start()
        self.lanes[number] = _Lane(number, group, ids, process, inbox)
        self.journal.echo(f"lane {number}: {group.name} on {self.devices.describe(ids)}")

    def _pump(self, timeout: float) -> None:
        """Handle the lanes' messages: one within ``timeout``, then every one already there."""
        try:
            message = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(*message)
            try:
                message = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, kind: str, number: int, *payload: Any) -> None:
        lane = self.lanes.get(number)
        if kind == "next" and lane is not None:
            index = None if self.stopping or not lane.group.waiting else lane.group.waiting.popleft()
            lane.current = index
            if index is None:
                lane.inbox.put(None)
                return
            item = self.todo[index]
            record = self.records[item.point.id]
            record.update(devices=",".join(lane.ids), lane=number)
            self.dispatched += 1
            self.journal.echo(f"[{self.dispatched}/{len(self.todo)}] {self.label(item)} on "
                              f"{self.devices.describe(lane.ids)}")
            lane.inbox.put((index, dict(record)))
        elif kind == "record":
            self.journal.save(payload[0])
        elif kind == "starts":
            self.journal.starts(*payload)
        elif kind == "echo":
            self.journal.echo(payload[0])
        elif kind == "bye" and lane is not None:
            lane.done, lane.current = True, None

    def _reap(self) -> None:
        """Lanes whose process ended: free their devices; a death fails its point (and its group after MAX_DEATHS)."""
        for number, lane in list(self.lanes.items()):
            if lane.process.is_alive():
                continue
            self._pump(0.05)  # what it sent before it ended
            lane.process.join()
            del self.lanes[number]
            self.placement.release(lane.group, lane.ids)
            if lane.done:
                continue
            code = lane.process.exitcode
            if lane.current is not None:
                self._end(lane.current, "pending" if self.stopping else "failed",
                          f"LaneDied: the worker process on {self.devices.describe(lane.ids)} ended "
                          f"(exit code {code})")
            if self.stopping:
                continue
            lane.group.deaths += 1
            self.journal.echo(f"lane {number} ({lane.group.name}) died with exit code {code}")
            if lane.group.deaths >= MAX_DEATHS:
                while lane.group.waiting:
                    self._end(lane.group.waiting.popleft(), "failed",
                              f"LaneDied: not run: {MAX_DEATHS} worker processes of its engines died "
                              f"(last exit code {code})")

    def _end(self, index: int, state: str, error: str) -> None:
        record = self.records[self.todo[index].point.id]
        if record.get("state") in ("running", "pending"):
            record.update(state=state, finished=now(), error=error if state == "failed" else record.get("error"))
            self.journal.save(record)

    def _stop(self) -> None:
        """Ctrl-C: every lane puts its point back and closes its engines; the stubborn ones are killed."""
        self.stopping = True
        for lane in self.lanes.values():
            if lane.process.is_alive():
                os.kill(lane.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.lanes and time.monotonic() < deadline:
            self._pump(0.2)
            self._reap()
        for lane in list(self.lanes.values()):
            lane.process.kill()
            lane.process.join()
        self._reap()


class _QueueJournal:
    """A lane's journal: everything goes to the driver."""

    def __init__(self, events: Any, number: int) -> None:
        self.events, self.number = events, number

    def save(self, record: dict[str, Any]) -> None:
        self.events.put(("record", self.number, dict(record)))

    def starts(self, starts: dict[str, int], served: dict[str, list[str]]) -> None:
        self.events.put(("starts", self.number, starts, served))

    def echo(self, text: str) -> None:
        self.events.put(("echo", self.number, text))


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def lane_main(number: int, items: dict[int, Planned], directory: str, retry: RetrySpec, events: Any,
              inbox: Any) -> None:
    """A lane process: run the points the driver hands out on one set of shared engines, then say goodbye."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    journal, parent = _QueueJournal(events, number), os.getppid()

    def next_item() -> tuple[Planned, dict[str, Any]] | None:
        events.put(("next", number))
        while True:
            try:
                job = inbox.get(timeout=5.0)
            except queue.Empty:
                if os.getppid() != parent:  # the driver is gone
                    return None
                continue
            return None if job is None else (items[job[0]], job[1])

    try:
        run_group(next_item, Path(directory), journal, retry, show_progress=False)
    except KeyboardInterrupt:
        pass
    finally:
        events.put(("bye", number))
        events.close()
        events.join_thread()
