"""Warm Python slots for the local sandbox: one long-lived bubblewrap sandbox per slot, forking runs.

Starting an interpreter and building namespaces cost most of a short test run. With
``LocalSandbox(warm_python=True)``, each slot keeps one bubblewrap sandbox (the same minimal
read-only view, new user/pid/net/ipc/uts namespaces, unprivileged uid and keyring filter as a fresh
run) whose pid 1 is a small trusted server (``_zygote.py``, standard library only) holding three
capabilities of the slot's own user namespace (``WARM_SERVER_CAPS``). Each eligible run
(``python3 [-I|-S|-E|-s|-B|-u]... script.py args``) is a fork of that server which (where the
sandbox has cgroups, once the host has moved it into the slot's run cgroup: ``cgroups.host_pid_of``
finds its host pid) makes the run namespaces of its own (mount, pid, IPC, UTS, network) with fresh
sized tmpfs ``/work``, ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``, a fresh ``/proc`` and
``/dev/mqueue``; the run's init writes its files, and the program, with every capability dropped,
sets its rlimits, takes fresh stdio and runs the script through ``runpy`` as the interpreter would.
A run's namespaces and mounts end with it, so nothing it writes, links, queues or numbers reaches
the next run of the slot. The slot is rebuilt after ``recycle_after`` runs, after a run that timed
out, and whenever the server stops answering.

What differs from a fresh run: the slot's user namespace (and uid) lives across its runs, and the
interpreter state a run starts from is the server's (a few standard modules already imported, one
hash seed per slot).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from .base import Limits
from .cgroups import RunGroup, host_pid_of
from .layers import above_status_fd

ZYGOTE_SOURCE = Path(__file__).with_name("_zygote.py").read_text()
_FLAGS = {"-I", "-S", "-E", "-s", "-B", "-u"}
_REPLY_MARGIN_S = 10.0
WARM_SERVER_CAPS = ("CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP")
"""What the server keeps, in the slot's user namespace only: mounts and namespaces for each run, bringing up
its loopback, and dropping every capability before the run's program (``_zygote.drop_capabilities``)."""


def warm_argv(command: Sequence[str], interpreters: Sequence[str]) -> tuple[list[str], dict[str, bool]] | None:
    """``(script + args, {"isolated": -I, "site": not -S})`` when ``command`` is ``python [flags] script args``;
    else None."""
    if not command or os.path.basename(command[0]) not in interpreters:
        return None
    index = 1
    while index < len(command) and command[index] in _FLAGS:
        index += 1
    if index >= len(command) or command[index].startswith("-"):
        return None  # -c, -m and other modes run the fresh way
    flags = command[1:index]
    return list(command[index:]), {"isolated": "-I" in flags, "site": "-S" not in flags}


class WarmSlot:
    """One slot's sandboxed server: start it, send runs, rebuild it.

    Args:
        prefix: ``prefix(seccomp_fd)`` is the argv (gate, uid drop, bubblewrap with ``--``) that starts the
            server in the slot's sandbox, joining ``server_group`` first, with the seccomp filter read from
            ``seccomp_fd`` (None: no filter).
        interpreter: the python executable (absolute path) that runs the server.
        server_group: the cgroup the server lives in (where the host finds a run's fork by its
            namespace pid); None without cgroups.
        seccomp: the filter program for bubblewrap (``seccomp.keyring_filter``), or None.
    """

    def __init__(self, prefix: Callable[[int | None], list[str]], interpreter: str, server_group: RunGroup | None,
                 seccomp: bytes | None = None) -> None:
        self.prefix, self.interpreter, self.server_group, self.seccomp = prefix, interpreter, server_group, seccomp
        self.process: subprocess.Popen | None = None
        self.runs = 0

    def start(self) -> None:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        request_r, reply_w = above_status_fd(request_r), above_status_fd(reply_w)  # fd 9 is the gate's
        fds_host, fds_server = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)  # sealed inputs by SCM_RIGHTS
        server_fds = above_status_fd(os.dup(fds_server.fileno()))
        fds_server.close()
        seccomp_fd = None
        if self.seccomp is not None:
            seccomp_fd = above_status_fd(os.memfd_create("seccomp"))
            os.write(seccomp_fd, self.seccomp)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
        passed = (request_r, reply_w, server_fds) + ((seccomp_fd,) if seccomp_fd is not None else ())
        argv = [*self.prefix(seccomp_fd), self.interpreter, "-I", "-S", "-c",
                ZYGOTE_SOURCE.replace("CONTROL_IN, CONTROL_OUT, CONTROL_FDS = 3, 4, 5",
                                      f"CONTROL_IN, CONTROL_OUT, CONTROL_FDS = {request_r}, {reply_w}, {server_fds}")]
        self.log = tempfile.TemporaryFile()  # the wrapper's and server's own messages, for ``last_words``
        try:
            self.process = subprocess.Popen(
                argv, cwd="/", env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log,
                pass_fds=passed, start_new_session=True)
        finally:
            for fd in passed:
                os.close(fd)
        self.requests, self.replies, self.pending, self.runs, self.failure = request_w, reply_r, b"", 0, None
        self.fd_channel = fds_host

    def run(self, files: Mapping[str, str | bytes], argv: list[str], flags: Mapping[str, bool], stdin: bytes,
            env: Mapping[str, str], limits: Limits, group: RunGroup | None = None,
            sealed_fd: int | None = None) -> dict | str:
        """The server's reply for one run (``{"failed": reason}`` when the run could not be set up),
        ``"timeout"`` when it did not answer within the run's limit
        plus a margin, or ``"died"`` when it ended without answering (the slot is stopped either way).
        With ``group``, the run's fork is moved into it before it runs anything of the program. With
        ``sealed_fd`` (a memfd: ``sealed.py``), the fd goes to the server by ``SCM_RIGHTS`` and becomes
        the run's fd 3 (``$MONKEYBARREL_SEALED``); the server never reads it."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        join = group is not None and self.server_group is not None
        request = {"argv": argv, **flags, "env": dict(env), "join": join, "sealed": sealed_fd is not None,
                   "files": {rel: base64.b64encode(c.encode() if isinstance(c, str) else bytes(c)).decode()
                             for rel, c in files.items()},
                   "stdin": base64.b64encode(stdin).decode(),
                   "limits": {"time_s": limits.time_s, "cpu_seconds": limits.cpu_seconds,
                              "memory_bytes": None if join else limits.memory_mb << 20,
                              "processes": limits.processes, "file_size_mb": limits.file_size_mb,
                              "disk_bytes": limits.disk_mb << 20,
                              "open_files": limits.open_files, "output_bytes": limits.output_bytes}}
        if not self._send(json.dumps(request).encode() + b"\n"):
            return "died"
        if sealed_fd is not None:
            try:
                socket.send_fds(self.fd_channel, [b"s"], [sealed_fd])
            except OSError:
                self.stop()
                return "died"
        deadline = time.perf_counter() + limits.time_s + _REPLY_MARGIN_S
        if join:
            forked = self._receive(deadline)
            if not isinstance(forked, dict):
                return forked
            host_pid = host_pid_of(forked["forked"], self.server_group.pids())
            try:
                if host_pid is None:
                    raise OSError(f"the run's fork (namespace pid {forked['forked']}) is not among the server "
                                  f"cgroup's processes {self.server_group.pids()}")
                group.join(host_pid)
            except OSError as exc:
                self.failure = f"could not move the run into its cgroup: {exc}"
                self._send(b"abort\n")
                self._receive(deadline)
                self.stop()
                return "died"
            if not self._send(b"go\n"):
                return "died"
        reply = self._receive(deadline)
        if isinstance(reply, dict):
            self.runs += 1
        return reply

    def _send(self, data: bytes) -> bool:
        try:
            while data:
                data = data[os.write(self.requests, data):]
        except OSError:
            self.stop()
            return False
        return True

    def _receive(self, deadline: float) -> dict | str:
        while b"\n" not in self.pending:
            remaining = deadline - time.perf_counter()
            if remaining <= 0 or not select.select([self.replies], [], [], remaining)[0]:
                self.stop()
                return "timeout"
            chunk = os.read(self.replies, 1 << 20)
            if not chunk:
                self.stop()
                return "died"
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return json.loads(line)

    def last_words(self) -> str:
        """Why the server ended: a host-side failure, or the end of what the slot's wrapper and server
        wrote to stderr."""
        if getattr(self, "failure", None):
            return self.failure
        log = getattr(self, "log", None)
        if log is None or log.closed:
            return ""
        log.seek(max(0, log.seek(0, os.SEEK_END) - 500))
        return log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        """End the slot's sandbox (closing its pipe ends the server; the namespace dies with it)."""
        if self.process is None:
            return
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        self.fd_channel.close()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.process = None
        if self.server_group is not None:
            self.server_group.kill()

    def close(self) -> None:
        self.stop()
        if getattr(self, "log", None) is not None:
            self.log.close()
