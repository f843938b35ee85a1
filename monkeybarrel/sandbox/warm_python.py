"""Warm Python slots for the local sandbox: one long-lived bubblewrap sandbox per slot, forking runs.

Starting an interpreter and building namespaces cost most of a short test run. With
``LocalSandbox(warm_python=True)``, each slot keeps one bubblewrap sandbox (the same read-only root,
private /tmp, new user/pid/net/ipc/uts namespaces and unprivileged uid as a fresh run) whose pid 1
is a small trusted server (``_zygote.py``, standard library only). Each eligible run
(``python3 [-I|-S|-E|-s|-B|-u]... script.py args``) is a fork of that server: own rlimits, own work
directory, own session, fresh stdio; the script runs through ``runpy`` as the interpreter would run
it. After each run the server kills every other process in the slot and empties its scratch
directories. The slot is rebuilt after ``recycle_after`` runs, after a run that timed out, and
whenever the server stops answering.

What differs from a fresh run: the slot's network, IPC and UTS namespaces and its private /tmp live
across the runs of that slot (scratch is wiped between runs, SysV IPC objects are not until the
slot is rebuilt), and the interpreter state a run starts from is the server's (a few standard
modules already imported, one hash seed per slot).
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from .base import Limits

ZYGOTE_SOURCE = Path(__file__).with_name("_zygote.py").read_text()
_FLAGS = {"-I", "-S", "-E", "-s", "-B", "-u"}
_REPLY_MARGIN_S = 10.0


def warm_argv(command: Sequence[str], interpreters: Sequence[str]) -> tuple[list[str], bool] | None:
    """``(script + args, isolated)`` when ``command`` is ``python [flags] script args``; else None."""
    if not command or os.path.basename(command[0]) not in interpreters:
        return None
    index = 1
    while index < len(command) and command[index] in _FLAGS:
        index += 1
    if index >= len(command) or command[index].startswith("-"):
        return None  # -c, -m and other modes run the fresh way
    return list(command[index:]), "-I" in command[1:index]


class WarmSlot:
    """One slot's sandboxed server: start it, send runs, rebuild it.

    Args:
        prefix: the bubblewrap argv (up to and including ``--``) binding ``root`` writable.
        interpreter: the python executable (absolute path) that runs the server.
        root: the slot's host directory (owned by ``uid``) holding run directories.
        uid: the slot's unprivileged uid (None: the caller's).
    """

    def __init__(self, prefix: list[str], interpreter: str, root: str, uid: int | None) -> None:
        self.prefix, self.interpreter, self.root, self.uid = prefix, interpreter, root, uid
        self.process: subprocess.Popen | None = None
        self.runs = 0

    def start(self) -> None:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        argv = [*self.prefix, self.interpreter, "-I", "-S", "-c",
                ZYGOTE_SOURCE.replace("CONTROL_IN, CONTROL_OUT = 3, 4",
                                      f"CONTROL_IN, CONTROL_OUT = {request_r}, {reply_w}")]
        try:
            self.process = subprocess.Popen(
                argv, cwd=self.root, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                pass_fds=(request_r, reply_w), start_new_session=True,
                user=self.uid, group=self.uid, extra_groups=[] if self.uid is not None else None)
        finally:
            os.close(request_r)
            os.close(reply_w)
        self.requests, self.replies, self.pending, self.runs = request_w, reply_r, b"", 0

    def run(self, workdir: str, argv: list[str], isolated: bool, stdin: bytes, env: Mapping[str, str],
            limits: Limits) -> dict | str:
        """The server's reply for one run, ``"timeout"`` when it did not answer within the run's limit
        plus a margin, or ``"died"`` when it ended without answering (the slot is stopped either way)."""
        if self.process is None or self.process.poll() is not None:
            self.start()
        request = {"cwd": workdir, "argv": argv, "isolated": isolated, "env": dict(env),
                   "stdin": base64.b64encode(stdin).decode(),
                   "limits": {"time_s": limits.time_s, "cpu_seconds": limits.cpu_seconds,
                              "memory_mb": limits.memory_mb, "processes": limits.processes,
                              "file_size_mb": limits.file_size_mb, "open_files": limits.open_files,
                              "output_bytes": limits.output_bytes}}
        data = json.dumps(request).encode() + b"\n"
        try:
            while data:
                data = data[os.write(self.requests, data):]
        except OSError:
            self.stop()
            return "died"
        deadline = time.perf_counter() + limits.time_s + _REPLY_MARGIN_S
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
        self.runs += 1
        return json.loads(line)

    def stop(self) -> None:
        """End the slot's sandbox (closing its pipe ends the server; the namespace dies with it)."""
        if self.process is None:
            return
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.process = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def make_slot_root(work_root: str, uid: int | None) -> str:
    """A host directory for one slot's run directories, owned by the slot's uid."""
    root = tempfile.mkdtemp(prefix="mb-sandbox-slot-", dir=work_root)
    if uid is not None:
        os.chown(root, uid, uid)
    os.chmod(root, 0o700)
    return root
