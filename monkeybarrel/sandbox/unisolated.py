"""What the local sandbox's ``none`` layer does on the host so that one run cannot reach another.

``none`` has no namespaces: a program sees the host's processes and files as its uid may. Runs are
kept apart by other means:

* **a keeper per run** (``_reaper.py``, in the run's wrapper chain): a child subreaper that kills
  everything the run started when it ends (daemons included) and starts the program with no new
  privileges and the keyring filter (``seccomp.py``); at the host's timeout it is asked to end the
  run (SIGTERM) before the chain is killed;
* **as root**, each slot runs as its own leased uid: other slots' processes and files are out of its
  reach, what is left of that uid is killed by uid (or by the slot's cgroup), and what it left in the
  host's shared scratch directories and SysV IPC is removed after each run (``sweep_host_scratch``);
* **as another user** (the caller's own uid: no uid of their own, no cgroup), runs of that uid take
  turns machine-wide (``UidTurn``: never two at once, so a run cannot rewrite a running one's files or
  steal its token), and a run that killed its keeper has the processes it started found and killed
  (``sweep_escapees``: same uid, started during the run, not descended from this process).

What stays possible as another user, and is stated in the layer's line: the program is the caller
(every file and process the caller can reach), so it can change files later runs read outside their
work directories (an interpreter in a directory the caller owns) and take over the caller's other
processes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .cgroups import kill_until_gone

HOST_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
"""The host's shared writable directories whose entries of a slot's uid are removed after each run (as root)."""

_TURN_POLL_S = 0.005


class UidTurn:
    """One ``none`` run at a time for a uid, across every process of this machine: the holder binds the
    abstract unix socket ``monkeybarrel-sandbox-none-<uid>`` (released by the kernel when it closes or
    dies; a run cannot take it away while its host holds it).

    Args:
        uid: whose runs take turns.
        patience_s: how long to wait for a turn before ``TimeoutError``.
    """

    def __init__(self, uid: int, patience_s: float = 600.0) -> None:
        self.name = f"\0monkeybarrel-sandbox-none-{uid}"
        self.patience_s = patience_s
        self.sock: socket.socket | None = None

    def __enter__(self) -> "UidTurn":
        deadline = time.monotonic() + self.patience_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(self.name)
            except OSError:
                sock.close()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no turn for a 'none' run within {self.patience_s:g} s: another process "
                                       f"of this uid holds {self.name[1:]!r}") from None
                time.sleep(_TURN_POLL_S)
                continue
            self.sock = sock
            return self

    def __exit__(self, *exc: object) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def stop_keeper(process: subprocess.Popen, patience_s: float = 2.0) -> None:
    """Ask a run's keeper to end the run (SIGCONT + SIGTERM: it kills everything it keeps and exits); then,
    or if it does not within ``patience_s``, kill the chain's process group."""
    for number in (signal.SIGCONT, signal.SIGTERM):
        try:
            os.kill(process.pid, number)
        except ProcessLookupError:
            break
    deadline = time.monotonic() + patience_s
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            break
        time.sleep(0.005)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/<pid>/stat`` field 22); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def sweep_escapees(uid: int, since_ticks: int, patience_s: float = 10.0) -> list[int]:
    """SIGKILL every process of ``uid`` that started at or after ``since_ticks`` and is not this process or
    one of its descendants (what a run left after killing its keeper); returns the pids found first."""
    me = os.getpid()

    def escaped() -> list[int]:
        parents, owners, starts = {}, {}, {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                owners[int(entry.name)] = entry.stat().st_uid
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            parents[int(entry.name)], starts[int(entry.name)] = int(fields[1]), int(fields[19])
        found = []
        for pid, owner in owners.items():
            if owner != uid or starts[pid] < since_ticks or pid == me:
                continue
            ancestor, seen = parents.get(pid, 0), 0
            while ancestor not in (0, 1, me) and seen < 4096:
                ancestor, seen = parents.get(ancestor, 0), seen + 1
            if ancestor != me:
                found.append(pid)
        return found

    first = escaped()
    if first:
        kill_until_gone(escaped, patience_s)
    return first


def sweep_host_scratch(uid: int, remove_tree) -> None:
    """Remove what ``uid`` (a sandbox slot's own uid) left in the host's shared scratch directories
    (``HOST_SCRATCH``) and SysV IPC: ``none`` has neither a mount nor an IPC namespace. Links are removed,
    never followed. ``remove_tree(path)``: how a directory of the slot is removed."""
    import ctypes

    for top in HOST_SCRATCH:
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
            except OSError:
                continue
    libc = ctypes.CDLL(None, use_errno=True)
    for kind, remove in (("shm", lambda i: libc.shmctl(i, 0, None)), ("sem", lambda i: libc.semctl(i, 0, 0)),
                         ("msg", lambda i: libc.msgctl(i, 0, None))):  # IPC_RMID = 0
        try:
            header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        except OSError:
            continue
        columns = header.split()
        for row in rows:
            fields = row.split()
            if int(fields[columns.index("uid")]) == uid or int(fields[columns.index("cuid")]) == uid:
                remove(int(fields[1]))
