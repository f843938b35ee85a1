"""Per-run control groups for the local sandbox: memory and process limits on the whole tree, and
kernel-counted facts (CPU time, OOM kills) that the program cannot write.

``CgroupTree.create()`` makes a directory of ours under this process's own cgroup (v1: in the
``memory``, ``pids`` and ``cpuacct`` hierarchies; v2: in the unified hierarchy with the ``memory``
and ``pids`` controllers enabled) or raises ``CgroupUnavailable`` with the reason (not root and no
delegated cgroup, a controller missing, v2's no-internal-processes rule). Each sandbox slot gets
one ``RunGroup`` that its runs reuse one after another: limits are written before a run, counters
are read before and after it (``Counters``), and ``kill()`` ends every process in it.

A process joins a group by writing its own pid to each ``procs_files()`` path (the local backend's
gate shell does that before anything else runs, so every descendant is inside from the start).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

V1_CONTROLLERS = ("memory", "pids", "cpuacct")


class CgroupUnavailable(RuntimeError):
    """No usable cgroup here; the message says why."""


@dataclass(frozen=True)
class Counters:
    """Kernel counters of one group: cumulative CPU nanoseconds, OOM kills and pids-limit hits."""

    cpu_ns: int
    oom_kills: int
    pids_refused: int

    def since(self, before: "Counters") -> "Counters":
        return Counters(self.cpu_ns - before.cpu_ns, self.oom_kills - before.oom_kills,
                        self.pids_refused - before.pids_refused)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _field(text: str, key: str) -> int:
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class RunGroup:
    """One slot's cgroup (a directory per hierarchy); runs of the slot reuse it one at a time."""

    def __init__(self, dirs: dict[str, Path], version: int) -> None:
        self.dirs, self.version = dirs, version
        self._limits: tuple[int, int] | None = None

    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid to, to join (every hierarchy)."""
        return [str(d / "cgroup.procs") for d in dict.fromkeys(self.dirs.values())]

    def set_limits(self, memory_mb: int, processes: int) -> None:
        """Memory (+swap) of the whole group and the most processes/threads at once."""
        if self._limits == (memory_mb, processes):
            return
        size = str(memory_mb << 20)
        if self.version == 1:
            memory = self.dirs["memory"]
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text("-1")  # memsw must stay >= the limit while both change
            (memory / "memory.limit_in_bytes").write_text(size)
            if swap.exists():
                swap.write_text(size)
            (self.dirs["pids"] / "pids.max").write_text(str(processes))
        else:
            directory = self.dirs["memory"]
            (directory / "memory.max").write_text(size)
            if (directory / "memory.swap.max").exists():
                (directory / "memory.swap.max").write_text("0")
            (directory / "pids.max").write_text(str(processes))
        self._limits = (memory_mb, processes)

    def counters(self) -> Counters:
        if self.version == 1:
            cpu = _read(self.dirs["cpuacct"] / "cpuacct.usage").strip()
            oom = _field(_read(self.dirs["memory"] / "memory.oom_control"), "oom_kill")
            refused = _field(_read(self.dirs["pids"] / "pids.events"), "max")
            return Counters(int(cpu or 0), oom, refused)
        directory = self.dirs["memory"]
        cpu = _field(_read(directory / "cpu.stat"), "usage_usec") * 1000
        return Counters(cpu, _field(_read(directory / "memory.events"), "oom_kill"),
                        _field(_read(directory / "pids.events"), "max"))

    def pids(self) -> list[int]:
        text = _read(self.dirs["pids"] / "cgroup.procs")
        return [int(p) for p in text.split()]

    def join(self, pid: int) -> None:
        """Move ``pid`` (a host pid) into the group."""
        for path in self.procs_files():
            Path(path).write_text(str(pid))

    def kill(self, patience_s: float = 10.0) -> None:
        """SIGKILL every process in the group until none is left (new forks are caught by the loop)."""
        kill_file = self.dirs["pids"] / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            kill_file.write_text("1")
        kill_until_gone(self.pids, patience_s)

    def remove(self) -> None:
        self.kill()
        for directory in dict.fromkeys(self.dirs.values()):
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # processes still exiting
                    time.sleep(0.01)


class CgroupTree:
    """This sandbox's own cgroup directory (one per hierarchy), holding one ``RunGroup`` per slot."""

    def __init__(self, dirs: dict[str, Path], version: int) -> None:
        self.dirs, self.version = dirs, version
        self.groups: list[RunGroup] = []

    @classmethod
    def create(cls, name: str | None = None) -> "CgroupTree":
        """A fresh directory under our own cgroup; ``CgroupUnavailable`` says why not."""
        name = name or f"monkeybarrel-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        mounts = _cgroup_mounts()
        own = _own_cgroups()
        if all(c in mounts for c in V1_CONTROLLERS):
            dirs = {}
            for controller in V1_CONTROLLERS:
                base = mounts[controller] / own.get(controller, "/").lstrip("/")
                dirs[controller] = base / name
            try:
                for directory in dirs.values():
                    directory.mkdir()
            except OSError as exc:
                for directory in dirs.values():
                    try:
                        directory.rmdir()
                    except OSError:
                        pass
                raise CgroupUnavailable(f"cannot create cgroup v1 directories ({exc})") from None
            return cls(dirs, 1)
        if "unified" in mounts:
            base = mounts["unified"] / own.get("", "/").lstrip("/")
            available = _read(base / "cgroup.controllers").split()
            missing = [c for c in ("memory", "pids") if c not in available]
            if missing:
                raise CgroupUnavailable(f"cgroup v2 at {base} lacks the {', '.join(missing)} controller(s)")
            directory = base / name
            try:
                (base / "cgroup.subtree_control").write_text("+memory +pids")
                directory.mkdir()
                (directory / "cgroup.subtree_control").write_text("+memory +pids")
            except OSError as exc:
                try:
                    directory.rmdir()
                except OSError:
                    pass
                raise CgroupUnavailable(f"cannot create a cgroup v2 directory under {base} ({exc}; not root, no "
                                        "delegated subtree, or processes in our own cgroup)") from None
            return cls({"memory": directory, "pids": directory, "cpuacct": directory}, 2)
        raise CgroupUnavailable("no cgroup v1 memory/pids/cpuacct hierarchies and no cgroup v2 mount")

    def group(self, name: str) -> RunGroup:
        """A new child group (a slot's run group, or a warm slot's server group)."""
        dirs = {c: d / name for c, d in self.dirs.items()}
        for directory in dict.fromkeys(dirs.values()):
            directory.mkdir()
        group = RunGroup(dirs, self.version)
        self.groups.append(group)
        return group

    def remove(self) -> None:
        for group in self.groups:
            group.remove()
        self.groups = []
        for directory in dict.fromkeys(self.dirs.values()):
            try:
                directory.rmdir()
            except OSError:
                pass


def _cgroup_mounts() -> dict[str, Path]:
    """Mount points by v1 controller name (``unified`` for cgroup2), from /proc/self/mountinfo."""
    mounts: dict[str, Path] = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        if extra[0] == "cgroup2":
            mounts.setdefault("unified", Path(fields[4]))
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                mounts.setdefault(option, Path(fields[4]))
    return mounts


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per v1 controller (``""`` for v2), from /proc/self/cgroup."""
    own: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


class ProcessCgroup:
    """The kernel's counters of the cgroup another process is in (e.g. a container's, found from its pid
    on this host), read from our view of the cgroup file systems."""

    def __init__(self, cpu_file: Path, oom_file: Path | None, version: int) -> None:
        self.cpu_file, self.oom_file, self.version = cpu_file, oom_file, version

    @classmethod
    def of(cls, pid: int) -> "ProcessCgroup | None":
        """The counters of host process ``pid``'s cgroup, or None when they are not visible here."""
        mounts = _cgroup_mounts()
        paths: dict[str, str] = {}
        for line in _read(Path(f"/proc/{pid}/cgroup")).splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                paths[controller] = path.lstrip("/")
        if "cpuacct" in paths and "cpuacct" in mounts:
            cpu = mounts["cpuacct"] / paths["cpuacct"] / "cpuacct.usage"
            oom = mounts["memory"] / paths["memory"] / "memory.oom_control" if "memory" in paths and "memory" in mounts else None
            version = 1
        elif "" in paths and "unified" in mounts:
            cpu = mounts["unified"] / paths[""] / "cpu.stat"
            oom, version = mounts["unified"] / paths[""] / "memory.events", 2
        else:
            return None
        return cls(cpu, oom, version) if cpu.is_file() else None

    def cpu_seconds(self) -> float | None:
        text = _read(self.cpu_file)
        if not text:
            return None
        return int(text) / 1e9 if self.version == 1 else _field(text, "usage_usec") / 1e6

    def oom_kills(self) -> int | None:
        text = _read(self.oom_file) if self.oom_file is not None else ""
        return _field(text, "oom_kill") if text else None


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended: a zombie (ended, its parent has not collected it yet;
    the host's init may take seconds) runs nothing and holds nothing, so it is not running."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] not in ("Z", "X")  # zombie, dead


def kill_until_gone(list_pids: Callable[[], list[int]], patience_s: float = 10.0) -> None:
    """SIGKILL the processes ``list_pids()`` names, again and again, until it names none (or time is up)."""
    deadline = time.perf_counter() + patience_s
    while True:
        pids = list_pids()
        if not pids or time.perf_counter() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def host_pid_of(namespace_pid: int, candidates: list[int]) -> int | None:
    """The host pid among ``candidates`` whose innermost pid-namespace pid is ``namespace_pid``."""
    for pid in candidates:
        for line in _read(Path(f"/proc/{pid}/status")).splitlines():
            if line.startswith("NSpid:"):
                ids = line.split()[1:]
                if len(ids) >= 2 and int(ids[-1]) == namespace_pid:
                    return pid
                break
    return None
