"""Local sandbox: one fresh work directory and one contained process tree per run, on this host.

Layers, strongest available first (``isolation="auto"`` picks the first that works here):

* ``bwrap`` (bubblewrap, Debian package ``bubblewrap``): new user, pid, ipc, uts, cgroup and (unless
  ``Limits.network``) network namespaces; the host's root mounted read-only; private ``/tmp``,
  ``/var/tmp``, ``/run``, ``/dev/shm`` (tmpfs), a minimal ``/dev`` and a fresh ``/proc``; only the
  work directory is writable. When the sandbox's init process ends, the kernel kills every process
  left in its pid namespace, so background and orphaned processes never outlive a run.
* ``unshare`` (util-linux): new pid and network namespaces only (the file system is shared).
* ``none``: a new session and process group only.

Always: rlimits through ``prlimit`` (CPU seconds, address space, processes, file size, open
files, no core dumps), a new session, a minimal environment, the whole tree killed at the wall-time
limit, the work directory removed afterwards. As root, each concurrent slot also runs under its own
unprivileged uid (``uid_base + slot``), which makes the process limit per sandbox (the kernel does
not apply RLIMIT_NPROC to root) and keeps the program off every file it does not own.
"""

from __future__ import annotations

import base64
import os
import queue
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from .base import (SANDBOXES, ExecutionResult, Limits, Outcome, OutputBuffer, Sandbox, check_relative_path,
                   classify)
from .warm_python import WarmSlot, make_slot_root, warm_argv

ISOLATION_LEVELS = ("bwrap", "unshare", "none")
_PROBES: dict[tuple[str, bool], str | None] = {}
_PROBE_LOCK = threading.Lock()
_GRACE_S = 0.2
_UID_RANGE = 4096
_WRAPPER_ERRORS = ("bwrap: ", "prlimit: ", "unshare: ")
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1"}


@SANDBOXES.register("local")
class LocalSandbox(Sandbox):
    """Runs commands in contained process trees on this host.

    Args:
        limits: default ``Limits`` (or a mapping of its fields).
        max_workers: concurrent runs (also the number of sandbox uids used as root).
        isolation: ``auto`` (best available), ``bwrap``, ``unshare`` or ``none``; asking for a level
            that does not work here raises at construction.
        work_root: where work directories are created (default: the system temp dir).
        uid_base: first uid of the unprivileged sandbox users when running as root (uids need no
            passwd entry); ``None`` keeps the caller's uid.
        env: extra environment variables for the program (the base is a minimal PATH/LANG set).
        warm_python: run ``python [flags] script args`` commands as forks of a warm interpreter kept in
            each slot's sandbox (``warm_python.py``: same layers, several times the throughput for
            short programs); needs ``bwrap`` isolation; ``"auto"`` uses it where bwrap works. Other
            commands still run fresh.
        python_names: executable names that count as Python for ``warm_python``.
        recycle_after: runs after which a warm slot's sandbox is rebuilt.

    Examples:
        >>> sandbox = LocalSandbox()                                    # doctest: +SKIP
        >>> sandbox.run({"main.py": "print(6 * 7)"}, ["python3", "main.py"]).stdout  # doctest: +SKIP
        '42\\n'
    """

    name = "local"

    def __init__(self, limits: Limits | Mapping[str, Any] | None = None, max_workers: int = 2,
                 isolation: str = "auto", work_root: str | None = None, uid_base: int | None = 1_500_000,
                 env: Mapping[str, str] | None = None, warm_python: bool | str = False,
                 python_names: Sequence[str] = ("python3", "python"), recycle_after: int = 500) -> None:
        super().__init__(limits, max_workers)
        if isolation != "auto" and isolation not in ISOLATION_LEVELS:
            raise ValueError(f"isolation must be 'auto' or one of {ISOLATION_LEVELS}, got {isolation!r}")
        self.work_root = os.path.abspath(work_root or tempfile.gettempdir())
        if not Path(self.work_root).is_dir():
            raise ValueError(f"work_root {self.work_root!r} is not a directory")
        self.as_root = os.geteuid() == 0 and uid_base is not None
        if self.as_root:
            _check_traversable(self.work_root)
        self.uid_base = uid_base
        self.env = {**_ENV, **dict(env or {})}
        self._leases: list[Any] = []
        # as root: one uid per slot, leased machine-wide (flock) so no other sandbox shares or kills it
        self._uids = [self._lease_uid() for _ in range(self.max_workers)] if self.as_root else []
        self.isolation = self._choose_isolation(isolation)
        if warm_python not in (True, False, "auto"):
            raise ValueError(f"warm_python must be true, false or 'auto', got {warm_python!r}")
        if warm_python is True and self.isolation != "bwrap":
            raise ValueError(f"warm_python needs bwrap isolation; this sandbox has {self.isolation!r}")
        warm_python = self.isolation == "bwrap" if warm_python == "auto" else warm_python
        self.warm_python, self.python_names = bool(warm_python), tuple(python_names)
        self.recycle_after = int(recycle_after)
        self._warm: dict[tuple[int, str], Any] = {}
        self._slots: queue.Queue[int] = queue.Queue()
        for slot in range(self.max_workers):
            self._slots.put(slot)

    # ---- public -------------------------------------------------------------------------------
    @property
    def protections(self) -> tuple[str, ...]:
        """The isolation layers every run of this sandbox gets (network: when ``Limits.network`` is off)."""
        layers = ["session", "rlimits", "tmp-workdir"]
        if self.as_root:
            layers.append("uid")
        if self.isolation == "bwrap":
            layers += ["userns", "pidns", "netns", "ro-root", "private-tmp"]
        elif self.isolation == "unshare":
            layers += ["pidns", "netns"]
        return tuple(layers)

    def run(self, files: Mapping[str, str | bytes], command: Sequence[str], *, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecutionResult:
        limits = limits or self.limits
        if not command:
            return self._failed("empty command", limits)
        slot = self._slots.get()
        workdir = None
        try:
            uid = self._uids[slot] if self.as_root else None
            warm = warm_argv(command, self.python_names) if self.warm_python and not limits.network else None
            if warm is not None:
                server = self._warm_slot(slot, command[0], uid)
                workdir = self._make_workdir(files, uid, root=server.root)
                return self._execute_warm(server, workdir, *warm, stdin, limits)
            workdir = self._make_workdir(files, uid)
            return self._execute(workdir, list(command), stdin, limits, uid)
        except (OSError, ValueError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}", limits)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, onerror=_force_remove)
            self._slots.put(slot)

    def close(self) -> None:
        """Stop warm slots and give the leased sandbox uids back."""
        for server in getattr(self, "_warm", {}).values():
            server.close()
        self._warm = {}
        for uid in getattr(self, "_uids", ()):
            _kill_uid(uid)
        for handle in getattr(self, "_leases", ()):
            handle.close()
        self._leases = []

    def __del__(self) -> None:
        self.close()

    # ---- steps --------------------------------------------------------------------------------
    def _make_workdir(self, files: Mapping[str, str | bytes], uid: int | None, root: str | None = None) -> str:
        for rel in files:
            check_relative_path(rel)
        workdir = tempfile.mkdtemp(prefix="mb-sandbox-", dir=root or self.work_root)
        try:
            for rel, content in files.items():
                path = Path(workdir, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content.encode() if isinstance(content, str) else bytes(content))
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        if uid is not None:
            for root, dirs, names in os.walk(workdir):
                for name in [*dirs, *names]:
                    os.chown(os.path.join(root, name), uid, uid)
            os.chown(workdir, uid, uid)
        os.chmod(workdir, 0o700)
        return workdir

    def _argv(self, workdir: str, command: list[str], limits: Limits) -> list[str]:
        nproc = limits.processes if self.as_root else limits.processes + _own_process_count()
        argv = ["prlimit", f"--cpu={limits.cpu_seconds}", f"--as={limits.memory_mb << 20}", f"--nproc={nproc}",
                f"--fsize={limits.file_size_mb << 20}", f"--nofile={limits.open_files}", "--core=0", "--"]
        if self.isolation == "bwrap":
            argv += _bwrap_prefix(workdir, limits.network)
        elif self.isolation == "unshare":
            argv += _unshare_prefix(os.geteuid() == 0 and not self.as_root, limits.network)
        return argv + command

    def _execute(self, workdir: str, command: list[str], stdin: str | bytes | None, limits: Limits,
                 uid: int | None) -> ExecutionResult:
        stdin_file = None
        if stdin is not None:
            stdin_file = tempfile.TemporaryFile()
            stdin_file.write(stdin.encode() if isinstance(stdin, str) else bytes(stdin))
            stdin_file.seek(0)
        env = {**self.env, "HOME": workdir, "TMPDIR": workdir}
        started = time.perf_counter()
        try:
            process = subprocess.Popen(
                self._argv(workdir, command, limits), cwd=workdir, env=env,
                stdin=stdin_file if stdin_file is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                user=uid, group=uid, extra_groups=[] if uid is not None else None)
        finally:
            if stdin_file is not None:
                stdin_file.close()
        out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
        timed_out = _drain(process, out, err, started + limits.time_s)
        _kill_tree(process.pid)  # timed out, or leftovers of a finished run (a no-op when none)
        _, status, usage = os.wait4(process.pid, 0)
        if uid is not None:
            _kill_uid(uid)  # the namespace dies asynchronously: return only when nothing of the run is left
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        for stream in (process.stdout, process.stderr):
            stream.close()
        exit_code = process.returncode
        if self.isolation == "bwrap" and exit_code > 128:  # bwrap reports a child's death by signal N as 128 + N
            exit_code = -(exit_code - 128)
        stderr_text = err.text()
        if exit_code != 0 and not timed_out and stderr_text.startswith(_WRAPPER_ERRORS):
            return self._failed(stderr_text.strip()[:2000], limits)
        outcome, note = classify(exit_code, timed_out, stderr_text, limits, wall)
        return ExecutionResult(outcome=outcome, exit_code=exit_code, stdout=out.text(), stderr=stderr_text,
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=wall,
                               cpu_s=usage.ru_utime + usage.ru_stime, backend=self.name,
                               protections=self._run_protections(limits), error=note)

    def _lease_uid(self) -> int:
        """Lock a free uid in ``uid_base + [0, _UID_RANGE)`` (flock on a root-only file; freed on exit)."""
        import fcntl

        lock_dir = Path(tempfile.gettempdir(), "monkeybarrel-sandbox-uids")
        lock_dir.mkdir(mode=0o700, exist_ok=True)
        for uid in range(self.uid_base, self.uid_base + _UID_RANGE):
            handle = open(lock_dir / f"{uid}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            self._leases.append(handle)
            _kill_uid(uid)  # anything left under this uid belongs to a dead sandbox
            return uid
        raise ValueError(f"no free sandbox uid in [{self.uid_base}, {self.uid_base + _UID_RANGE})")

    def _warm_slot(self, slot: int, python: str, uid: int | None) -> WarmSlot:
        key = (slot, python)
        server = self._warm.get(key)
        if server is not None and server.runs >= self.recycle_after:
            server.stop()
        if server is None:
            interpreter = shutil.which(python, path=self.env["PATH"])
            if interpreter is None:
                raise ValueError(f"{python!r} is not on the sandbox PATH {self.env['PATH']}")
            root = make_slot_root(self.work_root, uid)
            prefix = _bwrap_prefix(root, network=False, init_shell=False, die_with_parent=False)
            server = self._warm[key] = WarmSlot(prefix, interpreter, root, uid)
        return server

    def _execute_warm(self, server: WarmSlot, workdir: str, argv: list[str], isolated: bool,
                      stdin: str | bytes | None, limits: Limits) -> ExecutionResult:
        data = b"" if stdin is None else stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        env = {**self.env, "HOME": workdir, "TMPDIR": workdir}
        started = time.perf_counter()
        reply = server.run(workdir, argv, isolated, data, env, limits)
        if reply == "died":  # the slot's server ended outside any run (e.g. recycled): once more, fresh
            reply = server.run(workdir, argv, isolated, data, env, limits)
        protections = (*self._run_protections(limits), "warm-python")
        if not isinstance(reply, dict):  # no answer in time ("timeout"), or the server died twice ("died")
            wall = time.perf_counter() - started
            if reply == "died":
                return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, wall_s=wall,
                                       backend=self.name, protections=protections,
                                       error="the warm slot's server ended during the run")
            return ExecutionResult(outcome=Outcome.TIMEOUT, exit_code=None, wall_s=wall, backend=self.name,
                                   protections=protections, error="the warm slot stopped answering; it was rebuilt")
        if reply["timed_out"]:
            server.stop()  # rebuild the slot after a timeout (fresh namespaces for the next run)
        out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
        for buffer, key in ((out, "stdout"), (err, "stderr")):
            buffer.add(base64.b64decode(reply[key]))
            buffer.total = reply[f"{key}_total"]
        stderr_text = err.text()
        outcome, note = classify(reply["exit_code"], reply["timed_out"], stderr_text, limits, reply["wall_s"])
        return ExecutionResult(outcome=outcome, exit_code=reply["exit_code"], stdout=out.text(), stderr=stderr_text,
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=reply["wall_s"],
                               cpu_s=reply["cpu_s"], backend=self.name, protections=protections, error=note)

    def _run_protections(self, limits: Limits) -> tuple[str, ...]:
        layers = self.protections
        return tuple(p for p in layers if p != "netns") if limits.network else layers

    def _failed(self, message: str, limits: Limits) -> ExecutionResult:
        return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, backend=self.name,
                               protections=self._run_protections(limits), error=message)

    def _choose_isolation(self, wanted: str) -> str:
        levels = ISOLATION_LEVELS if wanted == "auto" else (wanted,)
        for level in levels:
            problem = _probe(level, self._uids[0] if self._uids else None)
            if problem is None:
                return level
            if wanted != "auto":
                raise ValueError(f"isolation {wanted!r} does not work here: {problem}")
        warnings.warn("LocalSandbox: neither bubblewrap nor unshare works here, so runs get a process group and "
                      "rlimits only (no network or file-system isolation); install bubblewrap or use the docker "
                      "backend for untrusted code", RuntimeWarning, stacklevel=3)
        return "none"


def _bwrap_prefix(workdir: str, network: bool, init_shell: bool = True, die_with_parent: bool = True) -> list[str]:
    """bubblewrap's argv up to the command. ``die_with_parent`` ties the sandbox to the spawning
    *thread* (PR_SET_PDEATHSIG): right for one run, wrong for a warm slot started from a pool thread."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run", "--tmpfs", "/dev/shm",
            "--bind", workdir, workdir, "--chdir", workdir,
            "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "sandbox", "--new-session", "--as-pid-1"]
    if die_with_parent:
        argv.append("--die-with-parent")
    if not network:
        argv.append("--unshare-net")
    # pid 1 is a shell that waits for the command (so its CPU time reaches our wait4) and exits with
    # its status (128 + N after signal N); when it exits, the kernel kills what is left in the namespace.
    return argv + (["--", "/bin/sh", "-c", '"$@"; exit $?', "sandbox-init"] if init_shell else ["--"])


def _unshare_prefix(privileged: bool, network: bool) -> list[str]:
    argv = ["unshare", "--pid", "--fork", "--kill-child"]
    if not privileged:
        argv.insert(1, "--user")
        argv.insert(2, "--map-root-user")
    if not network:
        argv.append("--net")
    return argv + ["--"]


def _probe(level: str, uid: int | None) -> str | None:
    """None when ``level`` works here for a run as ``uid`` (None: ours), cached; else why not."""
    key = (level, uid is not None)
    with _PROBE_LOCK:
        if key not in _PROBES:
            _PROBES[key] = _run_probe(level, uid)
        return _PROBES[key]


def _run_probe(level: str, uid: int | None) -> str | None:
    if level == "none":
        return None if shutil.which("prlimit") else "prlimit (util-linux) is not installed"
    tool = "bwrap" if level == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        return f"{tool} is not installed"
    workdir = tempfile.mkdtemp(prefix="mb-sandbox-probe-")
    try:
        if uid is not None:
            os.chown(workdir, uid, uid)
        privileged = os.geteuid() == 0 and uid is None
        argv = _bwrap_prefix(workdir, False) if level == "bwrap" else _unshare_prefix(privileged, False)
        done = subprocess.run([*argv, "true"], cwd=workdir, capture_output=True, timeout=20,
                              user=uid, group=uid, extra_groups=[] if uid is not None else None)
        if done.returncode == 0:
            return None
        return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _drain(process: subprocess.Popen, out: OutputBuffer, err: OutputBuffer, deadline: float) -> bool:
    """Read stdout/stderr into the buffers until both close; True if ``deadline`` passed first.

    If the top process has exited but something it left behind still holds a stream open (possible
    without a pid namespace), reading stops after a short grace period and the caller kills the group.
    """
    exited_at = None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, out)
        selector.register(process.stderr, selectors.EVENT_READ, err)
        open_streams = 2
        while open_streams:
            now = time.perf_counter()
            if now >= deadline:
                return True
            if exited_at is None and _exited(process.pid):
                exited_at = now
            if exited_at is not None and now - exited_at > _GRACE_S:
                break
            for key, _ in selector.select(timeout=min(deadline - now, 0.05)):
                data = os.read(key.fd, 1 << 16)
                if data:
                    key.data.add(data)
                else:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
    while not _exited(process.pid):  # streams closed: wait for the top process within the limit
        if time.perf_counter() >= deadline:
            return True
        time.sleep(0.001)
    return False


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has ended, without reaping it (``os.wait4`` collects it and its rusage)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _kill_tree(pid: int) -> None:
    """SIGKILL the run's process group (bwrap's die-with-parent and pid namespace take the rest)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_uid(uid: int, patience_s: float = 10.0) -> None:
    """SIGKILL every process of ``uid`` (a sandbox slot's own uid) until none is left."""
    deadline = time.perf_counter() + patience_s
    while True:
        pids = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat().st_uid == uid:
                        pids.append(int(entry.name))
                except OSError:
                    continue
        if not pids or time.perf_counter() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.002)


def _check_traversable(path: str) -> None:
    """The sandbox uid must be able to reach its work directory: every ancestor needs o+x."""
    current = Path(path)
    for directory in [current, *current.parents]:
        if not directory.stat().st_mode & 0o001:
            raise ValueError(f"work_root {path!r}: {directory} is not searchable by other users (mode "
                             f"{directory.stat().st_mode & 0o777:o}); the unprivileged sandbox uid could not "
                             "reach its work directory. Pick a work_root such as /tmp.")


def _own_process_count() -> int:
    """Processes of the current real uid (RLIMIT_NPROC counts them all when we cannot switch uid)."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _force_remove(function, path, exc_info) -> None:  # pragma: no cover - only for odd permissions
    try:
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o700)
        function(path)
    except OSError:
        pass
