"""Local sandbox: one contained process tree per run, on this host.

Layers (``isolation``; default: the environment variable ``MONKEYBARREL_SANDBOX_ISOLATION``, else
``auto``: ``bwrap`` where it works, else ``unshare``, else a refusal that says how to opt out of
isolation by name; each can be forced, and the tests run under each):

* ``bwrap`` (bubblewrap, Debian package ``bubblewrap``): new user, pid, ipc, uts, cgroup and (unless
  ``Limits.network``) network namespaces; a minimal read-only view of the host (``/usr``, ``/lib*``,
  a few ``/etc`` files: ``layers.view_args``); the work directory ``/work`` and private ``/tmp``,
  ``/var/tmp``, ``/run``, ``/dev/shm`` are tmpfs mounts of ``Limits.disk_mb``; a fresh ``/proc``, a
  minimal ``/dev``. When the run's init ends, the kernel kills everything left in its pid namespace.
* ``unshare`` (util-linux): new pid (with its own init), IPC, UTS, mount and (unless
  ``Limits.network``) network namespaces, plus a user namespace when not root; the same minimal
  read-only view of the host as ``bwrap`` with sized private ``/work``, ``/tmp``, ``/var/tmp``,
  ``/run``, ``/dev/shm``, built by ``_unshare_root.py``, which pivots into it and detaches the host's
  tree (no host path, unix sockets included, can be named). A full layer like ``bwrap``.
* ``none``: no namespace: the host's network and file system. A keeper (``_reaper.py``, a child
  subreaper) kills whatever a run started when it ends; as another user than root, runs of that uid
  take turns machine-wide (``unisolated.py``). Refused unless the user asks for it by name
  (``isolation="none", allow_unisolated=True``); ``auto`` never picks it.

Always: the keyring filter (``seccomp.py``: keys would outlive a run under its uid), a per-slot
cgroup where the host allows one (``cgroups.py``: memory+swap and pids of the whole tree,
kernel-counted CPU time and OOM kills; otherwise a warning, RLIMIT_AS per process and
RLIMIT_NPROC per uid), rlimits through ``prlimit`` (CPU seconds, processes, file size, open files,
no core dumps), a new session, a minimal environment, the whole tree killed at the wall-time limit.
As root, each concurrent slot runs under its own unprivileged uid (``uid_base + slot``) and, under
``none``, its host work directory is a tmpfs of ``Limits.disk_mb``; without a namespace
layer the program never runs as root (``allow_root`` to override). Outcomes come from facts the
program cannot write (``layers.py``: the init's start byte on fd 9, exit status, cgroup counters,
the host's own timer), never from its output.
"""

from __future__ import annotations

import base64
import ctypes
import dataclasses
import fcntl
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

from .base import (SANDBOXES, ExecutionResult, LayerInfo, Limits, Outcome, OutputBuffer, Sandbox, check_relative_path,
                   classify, record_layer)
from .cgroups import CgroupTree, CgroupUnavailable, RunGroup, kill_until_gone
from .layers import (ISOLATION_ENV, ISOLATION_LEVELS, WORKDIR, RunSpec, above_status_fd, chain,
                     interpreter_prefix, which)
from .removal import remove_tree
from .sealed import SEALED_ENV, new_token, sealed_memfd, split_verdict
from .seccomp import keyring_filter
from .unisolated import UidTurn, start_ticks, stop_keeper, sweep_escapees, sweep_host_scratch
from .warm_python import WARM_SERVER_CAPS, WarmSlot, warm_argv

_NONE_AS_ROOT = ("programs run as their slot's own leased uid (never yours): other slots' processes and files are out "
                 "of their reach; when a run ends, a keeper process kills what it started, what is left of that uid is "
                 "killed, and its files in /tmp, /var/tmp, /dev/shm, /run/lock and its SysV IPC are removed; files it "
                 "wrote in other world-writable places of the host stay")
_NONE_AS_CALLER = ("programs run as YOUR uid ({uid}): they can read and write every file you can (this checkout, the "
                   "experiment's store, your home) and signal or take over every process of yours, this one included; "
                   "what a run starts is killed when it ends by a keeper process (a child subreaper), runs of uid "
                   "{uid} take turns machine-wide (never two at once), and if a run kills its keeper, the processes of "
                   "uid {uid} started during it that are not this process's are killed")
_NONE_AS_ROOT_ITSELF = ("programs run as ROOT (allow_root): they can do anything on this machine; what a run starts is "
                        "killed when it ends by a keeper process (a child subreaper), and runs take turns (never two "
                        "at once)")
_OPT_IN = ("to run without isolation anyway, ask for it by name: sandbox options "
           "{type: local, isolation: none, allow_unisolated: true} (LocalSandbox(isolation='none', "
           "allow_unisolated=True))")
_PROBES: dict[tuple[str, bool], str | None] = {}
_PROBE_LOCK = threading.Lock()
_GRACE_S = 0.2
_UID_RANGE = 4096
_CHAIN_PROCESSES = {"bwrap": 2, "unshare": 2, "none": 2}
"""Processes of the wrapper chain in a run's pids cgroup besides the program: bwrap's monitor,
unshare's parent or the ``none`` keeper, and the init shell (the gate, setpriv and prlimit ``exec``
into the next one)."""
_WARM_PROCESSES = 2
"""Processes of a warm run in its pids cgroup besides the program: the maker (briefly) and the run's init."""
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1"}
_LIBC = ctypes.CDLL(None, use_errno=True)


@SANDBOXES.register("local")
class LocalSandbox(Sandbox):
    """Runs commands in contained process trees on this host.

    Args:
        limits: default ``Limits`` (or a mapping of its fields).
        max_workers: concurrent runs (also the number of sandbox uids used as root).
        isolation: ``auto`` (``bwrap``, else ``unshare``), ``bwrap``, ``unshare`` or ``none``; None reads
            ``$MONKEYBARREL_SANDBOX_ISOLATION`` (default ``auto``). A level that does not work here
            raises at construction with the reason; so does ``auto`` when neither layer works.
        allow_unisolated: accept ``isolation="none"``: programs get the host's network (also in runs
            with ``network=False``) and see the host's file system. Without it ``none`` is refused.
        work_root: where host work directories (``unshare``/``none``) and warm slots live (default:
            the system temp dir).
        uid_base: first uid of the unprivileged sandbox users when running as root (uids need no
            passwd entry); ``None`` keeps the caller's uid, which as root needs ``allow_root``.
        allow_root: let programs run as root (only with ``uid_base=None``); refused otherwise.
        cgroups: ``"auto"`` (use a per-slot cgroup where the host allows one, else warn), True
            (require one), False (rlimits only).
        ro_binds: extra host paths a ``bwrap`` sandbox sees read-only (e.g. a Python outside ``/usr``;
            the prefix of the command's interpreter is added on its own).
        env: extra environment variables for the program (the base is a minimal PATH/LANG set).
        warm_python: run ``python [flags] script args`` commands as forks of a warm interpreter kept in
            each slot's sandbox (``warm_python.py``); needs ``bwrap``; ``"auto"`` uses it where bwrap
            works. Other commands still run fresh.
        python_names: executable names that count as Python for ``warm_python``.
        recycle_after: runs after which a warm slot's sandbox is rebuilt.

    Examples:
        >>> sandbox = LocalSandbox()                                    # doctest: +SKIP
        >>> sandbox.run({"main.py": "print(6 * 7)"}, ["python3", "main.py"]).stdout  # doctest: +SKIP
        '42\\n'
    """

    name = "local"

    def __init__(self, limits: Limits | Mapping[str, Any] | None = None, max_workers: int = 2,
                 isolation: str | None = None, work_root: str | None = None, uid_base: int | None = 1_500_000,
                 allow_root: bool = False, cgroups: bool | str = "auto", ro_binds: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, warm_python: bool | str = False,
                 python_names: Sequence[str] = ("python3", "python"), recycle_after: int = 500,
                 allow_unisolated: bool = False) -> None:
        super().__init__(limits, max_workers)
        isolation = isolation or os.environ.get(ISOLATION_ENV) or "auto"
        if isolation != "auto" and isolation not in ISOLATION_LEVELS:
            raise ValueError(f"isolation must be 'auto' or one of {ISOLATION_LEVELS}, got {isolation!r}"
                             + (f" (from ${ISOLATION_ENV})" if os.environ.get(ISOLATION_ENV) == isolation else ""))
        if cgroups not in (True, False, "auto"):
            raise ValueError(f"cgroups must be true, false or 'auto', got {cgroups!r}")
        self.work_root = os.path.abspath(work_root or tempfile.gettempdir())
        if not Path(self.work_root).is_dir():
            raise ValueError(f"work_root {self.work_root!r} is not a directory")
        self.as_root = os.geteuid() == 0 and uid_base is not None
        if os.geteuid() == 0 and uid_base is None and not allow_root:
            raise ValueError("LocalSandbox: running as root with uid_base=None would run untrusted programs as root; "
                             "give a uid_base (the default) or pass allow_root=True")
        if self.as_root:
            _check_traversable(self.work_root)
        self.uid_base = uid_base
        self.env = {**_ENV, **dict(env or {})}
        self.ro_binds = tuple(os.path.abspath(p) for p in ro_binds)
        self._leases: list[Any] = []
        self._warm: dict[tuple, Any] = {}
        self._cgroups: CgroupTree | None = None
        self._server_groups: dict[int, RunGroup] = {}
        # as root: one uid per slot, leased machine-wide (flock) so no other sandbox shares or kills it
        self._uids = [self._lease_uid() for _ in range(self.max_workers)] if self.as_root else []
        self.allow_unisolated = bool(allow_unisolated)
        try:
            self.isolation = self._choose_isolation(isolation)
        except ValueError:
            self.close()
            raise
        if warm_python not in (True, False, "auto"):
            raise ValueError(f"warm_python must be true, false or 'auto', got {warm_python!r}")
        if warm_python is True and self.isolation != "bwrap":
            raise ValueError(f"warm_python needs bwrap isolation; this sandbox has {self.isolation!r}")
        warm_python = self.isolation == "bwrap" if warm_python == "auto" else warm_python
        self.warm_python, self.python_names = bool(warm_python), tuple(python_names)
        self.recycle_after = int(recycle_after)
        self.cgroup_problem: str | None = "disabled (cgroups=False)" if cgroups is False else None
        self._groups: list[RunGroup | None] = [None] * self.max_workers
        if cgroups is not False:
            try:
                self._cgroups = CgroupTree.create()
                self._groups = [self._cgroups.group(f"slot-{slot}") for slot in range(self.max_workers)]
            except (CgroupUnavailable, OSError) as exc:
                if self._cgroups is not None:
                    self._cgroups.remove()
                    self._cgroups = None
                if cgroups is True:
                    self.close()
                    raise ValueError(f"LocalSandbox: cgroups=True but {exc}") from None
                self.cgroup_problem = str(exc)
                warnings.warn(f"LocalSandbox: no per-run cgroup here ({exc}); memory is RLIMIT_AS per process and "
                              "processes RLIMIT_NPROC per uid, so a process tree can hold processes x memory_mb. "
                              f"Protections: {', '.join(self.protections)}", RuntimeWarning, stacklevel=2)
        self._slots: queue.Queue[int] = queue.Queue()
        for slot in range(self.max_workers):
            self._slots.put(slot)
        layer = self.layer()
        record_layer(layer)
        if self.isolation == "none":
            warnings.warn(f"LocalSandbox: {layer.line()}", RuntimeWarning, stacklevel=2)

    # ---- public -------------------------------------------------------------------------------
    @property
    def protections(self) -> tuple[str, ...]:
        """The isolation layers every run of this sandbox gets (network: when ``Limits.network`` is off)."""
        layers = ["session", "rlimits", "workdir"]
        if self.as_root:
            layers.append("uid")
        if getattr(self, "_cgroups", None) is not None:
            layers += ["cgroup-memory", "cgroup-pids", "cgroup-cpu"]
        if self.isolation != "none" or self.as_root:
            layers.append("disk-budget")
        if self.isolation == "none" and self.as_root:
            layers.append("scratch-swept")  # what the slot's uid leaves in /tmp, /var/tmp, /dev/shm, SysV IPC
        if self.isolation == "bwrap" or self.isolation == "unshare" and not self.as_root:
            layers.append("userns")
        if self.isolation in ("bwrap", "unshare"):
            layers += ["pidns", "netns", "ipcns", "mntns", "ro-root", "minimal-view", "private-tmp"]
        else:
            layers.append("keeper")  # a child subreaper kills what the run started (_reaper.py)
            if not self.as_root:
                layers.append("turns")  # runs of the caller's uid never overlap (unisolated.UidTurn)
        if keyring_filter() is not None:
            layers.append("no-keyring")
        return tuple(layers)

    def layer(self) -> LayerInfo:
        """The layer this sandbox runs (``bwrap``, ``bwrap+warm``, ``unshare``, ``none``) and what it lacks."""
        notes = () if self.cgroup_problem is None else (f"no per-run cgroup: {self.cgroup_problem}",)
        if self.isolation == "none":
            notes += (_NONE_AS_ROOT if self.as_root else _NONE_AS_ROOT_ITSELF if os.getuid() == 0
                      else _NONE_AS_CALLER.format(uid=os.getuid()),)
        return LayerInfo("local", self.isolation + ("+warm" if self.warm_python else ""), self.protections,
                         opt_in="allow_unisolated" if self.isolation == "none" else None, notes=notes)

    def run(self, files: Mapping[str, str | bytes], command: Sequence[str], *, stdin: str | bytes | None = None,
            limits: Limits | None = None, sealed: bytes | None = None) -> ExecutionResult:
        limits = limits or self.limits
        if not command:
            return self._failed("empty command", limits)
        try:
            for rel in files:
                check_relative_path(rel)
        except ValueError as exc:
            return self._failed(str(exc), limits)
        names = {os.path.normpath(rel) for rel in files}
        resolved = which(command[0], self.env["PATH"], names)
        if resolved is None:
            return self._failed(f"the command could not be run: {command[0]!r} is neither a file of the run nor an "
                                f"executable on the sandbox PATH {self.env['PATH']}", limits)
        slot = self._slots.get()
        try:
            uid = self._uids[slot] if self.as_root else None
            warm = warm_argv(command, self.python_names) if self.warm_python and not limits.network else None
            if warm is not None:
                result = self._execute_warm(self._warm_slot(slot, resolved, uid, limits), files, *warm, stdin, limits,
                                            self._groups[slot], sealed)
                if result is not None:
                    return result
            return self._execute(slot, files, [resolved, *command[1:]], stdin, limits, uid, sealed)
        except (OSError, ValueError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}", limits)
        finally:
            self._slots.put(slot)

    def close(self) -> None:
        """Stop warm slots, remove the cgroups and give the leased sandbox uids back."""
        for server in getattr(self, "_warm", {}).values():
            server.close()
        self._warm = {}
        self._server_groups = {}
        if getattr(self, "_cgroups", None) is not None:
            self._cgroups.remove()
            self._cgroups = None
        for uid in getattr(self, "_uids", ()):
            _kill_uid(uid)
        self._uids = []  # given back: a later close (e.g. from __del__) must not kill the next holder's runs
        for handle in getattr(self, "_leases", ()):
            handle.close()
        self._leases = []

    def __del__(self) -> None:
        self.close()

    # ---- steps --------------------------------------------------------------------------------
    def _spec(self, limits: Limits, uid: int | None, group: RunGroup | None, stdin_path: str, workdir: str,
              extra: tuple[str, ...], chain_processes: int, staging: str = "",
              seccomp_fd: int | None = None) -> RunSpec:
        nproc = limits.processes + chain_processes
        if not self.as_root:
            nproc += _own_process_count()
        return RunSpec(isolation=self.isolation, uid=uid, cgroup_procs=tuple(group.procs_files()) if group else (),
                       stdin_path=stdin_path, cpu_s=limits.cpu_seconds,
                       memory_bytes=None if group is not None else limits.memory_mb << 20, nproc=nproc,
                       fsize_bytes=limits.file_size_mb << 20, nofile=limits.open_files, network=limits.network,
                       disk_bytes=limits.disk_mb << 20, workdir=workdir, extra_binds=extra, staging=staging,
                       seccomp=keyring_filter(), seccomp_fd=seccomp_fd)

    def _extra_binds(self, command0: str) -> tuple[str, ...]:
        prefix = interpreter_prefix(command0, self.env["PATH"])
        return self.ro_binds + ((prefix,) if prefix else ())

    def _execute(self, slot: int, files: Mapping[str, str | bytes], command: list[str], stdin: str | bytes | None,
                 limits: Limits, uid: int | None, sealed: bytes | None = None) -> ExecutionResult:
        if self.isolation == "none" and not self.as_root:  # the caller's own uid: its runs never overlap
            try:
                with UidTurn(os.getuid()):
                    return self._execute_once(slot, files, command, stdin, limits, uid, sealed)
            except TimeoutError as exc:
                return self._failed(str(exc), limits)
        return self._execute_once(slot, files, command, stdin, limits, uid, sealed)

    def _execute_once(self, slot: int, files: Mapping[str, str | bytes], command: list[str],
                      stdin: str | bytes | None, limits: Limits, uid: int | None,
                      sealed: bytes | None = None) -> ExecutionResult:
        group = self._groups[slot]
        fds: list[int] = []
        host_workdir = staging = None
        token = None
        status_r, status_w = os.pipe()
        try:
            stdin_fd = _sealed_memfd("stdin", b"" if stdin is None else stdin)
            fds.append(stdin_fd)
            copies: list[tuple[int, str]] = []
            seccomp_fd = None
            if self.isolation == "bwrap":
                workdir = WORKDIR
                if keyring_filter() is not None:
                    seccomp_fd = _sealed_memfd("seccomp", keyring_filter())
                    fds.append(seccomp_fd)
                for rel, content in files.items():
                    fd = _sealed_memfd("file", content)
                    fds.append(fd)
                    copies.append((fd, f"{WORKDIR}/{os.path.normpath(rel)}"))
                env = {**self.env, "HOME": workdir, "TMPDIR": "/tmp"}
            elif self.isolation == "unshare":
                workdir, staging = WORKDIR, self._make_staging(files)
                env = {**self.env, "HOME": workdir, "TMPDIR": "/tmp"}
            else:
                host_workdir = workdir = self._make_workdir(files, uid, limits)
                env = {**self.env, "HOME": workdir, "TMPDIR": workdir}
            if sealed is not None:
                token = new_token()
                fds.append(sealed_memfd(token, sealed))
                env[SEALED_ENV] = f"fd:{fds[-1]}"
            if group is not None:
                group.set_limits(limits.memory_mb, limits.processes + _CHAIN_PROCESSES[self.isolation])
                before = group.counters()
            spec = self._spec(limits, uid, group, f"/proc/self/fd/{stdin_fd}", workdir,
                              self._extra_binds(command[0]), _CHAIN_PROCESSES[self.isolation], staging or "",
                              seccomp_fd)
            argv = chain(spec, copies) + command
            started = time.perf_counter()
            process = subprocess.Popen(argv, cwd=host_workdir or staging or "/", env=env, stdin=status_w,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                       close_fds=True, pass_fds=fds)
            born = start_ticks(process.pid)
        except BaseException:
            for path in (host_workdir, staging):
                if path is not None:
                    _remove_workdir(path)
            os.close(status_r)
            raise
        finally:
            os.close(status_w)
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
        try:
            out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
            end = stop_keeper if self.isolation == "none" else lambda p: _kill_tree(p.pid)
            try:
                timed_out = _drain(process, out, err, started + limits.time_s)
            except BaseException:  # e.g. Ctrl-C: nothing of the run outlives the caller's interruption
                end(process)
                if group is not None:
                    group.kill()
                process.wait()
                raise
            tree_cpu = _tree_cpu_seconds(process.pid) if timed_out and group is None else None
            end(process)  # timed out, or leftovers of a finished run (a no-op when nothing is left)
            if group is not None:
                group.kill()
            _, status, usage = os.wait4(process.pid, 0)
            escaped = []
            if self.isolation == "none" and os.WIFSIGNALED(status) and born is not None and os.getuid() != 0:
                # the keeper was killed (by the run, or by us when it was kept stopped): find what the run left
                escaped = sweep_escapees(os.getuid(), born)
            if uid is not None and group is None:
                _kill_uid(uid)  # the namespace dies asynchronously: return only when nothing of the run is left
            if uid is not None and self.isolation == "none":
                sweep_host_scratch(uid, remove_tree)  # no private /tmp or IPC namespace: remove what that uid left
            wall = time.perf_counter() - started
            for stream in (process.stdout, process.stderr):
                stream.close()
            os.set_blocking(status_r, False)
            try:
                began = os.read(status_r, 1) == b"s"
            except BlockingIOError:
                began = False
        finally:
            os.close(status_r)
            for path in (host_workdir, staging):
                if path is not None:
                    _remove_workdir(path)
        if not began:  # the wrapper failed before the program existed: its stderr is the wrapper's
            reason = err.text().strip()[:2000] or f"the sandbox wrapper exited with status {status}"
            if timed_out:
                reason = f"the sandbox wrapper did not start the program within {limits.time_s:g} s; {reason}"
            return self._failed(reason, limits)
        exit_code = _exit_code(status)
        if group is not None:
            spent = group.counters().since(before)
            cpu, oom = spent.cpu_ns / 1e9, spent.oom_kills > 0
        else:
            cpu, oom = tree_cpu if tree_cpu is not None else usage.ru_utime + usage.ru_stime, False
        outcome, note = classify(exit_code, timed_out, limits, cpu_s=cpu, oom_killed=oom)
        if escaped:
            note = (f"{note}; " if note else "") + (f"the run killed its keeper; {len(escaped)} process(es) it left "
                                                    "were found and killed")
        stdout, verdict = split_verdict(out.text(), token)
        return ExecutionResult(outcome=outcome, exit_code=exit_code, stdout=stdout, stderr=err.text(),
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=wall,
                               cpu_s=cpu, backend=self.name, protections=self._run_protections(limits), error=note,
                               verdict=verdict)

    def _make_staging(self, files: Mapping[str, str | bytes]) -> str:
        """An ``unshare`` run's host directory (only its creator can enter it): ``files/`` (copied into the
        run's sized ``/work`` by ``_unshare_root.py``) and an empty ``root/`` the run's root is built on."""
        staging = tempfile.mkdtemp(prefix="mb-sandbox-", dir=self.work_root)
        try:
            os.mkdir(os.path.join(staging, "root"))
            _write_files(os.path.join(staging, "files"), files)
        except BaseException:
            remove_tree(staging)
            raise
        return staging

    def _make_workdir(self, files: Mapping[str, str | bytes], uid: int | None, limits: Limits) -> str:
        """A host work directory (``unshare``/``none``): as root a tmpfs of ``disk_mb`` owned by ``uid``."""
        workdir = tempfile.mkdtemp(prefix="mb-sandbox-", dir=self.work_root)
        try:
            if self.as_root:
                _mount_tmpfs(workdir, limits.disk_mb, uid)
            _write_files(workdir, files)
            if uid is not None:
                for root, dirs, names in os.walk(workdir):
                    for name in [*dirs, *names]:
                        os.chown(os.path.join(root, name), uid, uid)
                os.chown(workdir, uid, uid)
            os.chmod(workdir, 0o700)
        except BaseException:
            _remove_workdir(workdir)
            raise
        return workdir

    def _lease_uid(self) -> int:
        """Lock a free uid in ``uid_base + [0, _UID_RANGE)`` (flock on a root-only file; freed on exit)."""
        lock_dir = Path("/tmp/monkeybarrel-sandbox-uids")  # one place machine-wide, whatever $TMPDIR says
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

    def _warm_slot(self, slot: int, interpreter: str, uid: int | None, limits: Limits) -> WarmSlot:
        key = (slot, interpreter)
        server = self._warm.get(key)
        if server is not None and server.runs >= self.recycle_after:
            server.stop()
        if server is None:
            for other in [k for k in self._warm if k[0] == slot]:  # one server per slot at a time
                self._warm.pop(other).close()
            server_group = self._server_groups.get(slot)
            if server_group is None and self._cgroups is not None:
                server_group = self._server_groups[slot] = self._cgroups.group(f"slot-{slot}-server")
            spec = self._spec(limits, uid, server_group, "/dev/null", WORKDIR, self._extra_binds(interpreter), 0)

            def prefix(seccomp_fd: int | None) -> list[str]:
                server_spec = dataclasses.replace(spec, seccomp_fd=seccomp_fd, caps=WARM_SERVER_CAPS)
                return chain(server_spec, init=False, rlimits=False, die_with_parent=False)

            server = self._warm[key] = WarmSlot(prefix, interpreter, server_group, keyring_filter())
        return server

    def _execute_warm(self, server: WarmSlot, files: Mapping[str, str | bytes], argv: list[str], flags: dict[str, bool],
                      stdin: str | bytes | None, limits: Limits, group: RunGroup | None,
                      sealed: bytes | None = None) -> ExecutionResult | None:
        """The run as a fork of the slot's server; None (the caller runs it fresh) when warm slots cannot make a
        run's namespaces on this host (then warm forks are switched off, with a warning)."""
        data = b"" if stdin is None else stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        env = {**self.env, "HOME": WORKDIR, "TMPDIR": "/tmp"}
        started = time.perf_counter()
        if group is not None:
            group.set_limits(limits.memory_mb, limits.processes + _WARM_PROCESSES)
            before = group.counters()
        token = None if sealed is None else new_token()

        def attempt() -> dict | str:
            sealed_fd = None if token is None else sealed_memfd(token, sealed)
            try:
                return server.run(files, argv, flags, data, env, limits, group, sealed_fd)
            finally:
                if sealed_fd is not None:
                    os.close(sealed_fd)

        reply = attempt()
        if reply == "died":  # the slot's server ended outside any run (e.g. recycled): once more, fresh
            reply = attempt()
        protections = (*self._run_protections(limits), "warm-python")
        if isinstance(reply, dict) and "failed" in reply:
            if group is not None:
                group.kill()
            if not reply["setup"]:  # its files did not fit: this run's failure
                return self._failed(f"the warm slot could not write the run's files: {reply['failed']}", limits)
            server.stop()  # the run's namespaces or mounts cannot be made on this host: fresh runs from now on
            self.warm_python = False
            warnings.warn(f"LocalSandbox: warm forks cannot set up a run here ({reply['failed']}); runs start fresh",
                          RuntimeWarning, stacklevel=3)
            return None
        if not isinstance(reply, dict):  # no answer in time ("timeout"), or the server died twice ("died")
            wall = time.perf_counter() - started
            if group is not None:
                group.kill()
            if reply == "died":
                return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, wall_s=wall,
                                       backend=self.name, protections=protections,
                                       error="the warm slot's server ended during the run"
                                       + (f": {server.last_words()}" if server.last_words() else ""))
            return ExecutionResult(outcome=Outcome.TIMEOUT, exit_code=None, wall_s=wall, backend=self.name,
                                   protections=protections, error="the warm slot stopped answering; it was rebuilt")
        if reply["timed_out"]:
            server.stop()  # rebuild the slot after a timeout (fresh namespaces for the next run)
        if group is not None:
            group.kill()
            spent = group.counters().since(before)
            cpu, oom = spent.cpu_ns / 1e9, spent.oom_kills > 0
        else:
            cpu, oom = reply["cpu_s"], False
        out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
        for buffer, key in ((out, "stdout"), (err, "stderr")):
            buffer.add(base64.b64decode(reply[key]))
            buffer.total = reply[f"{key}_total"]
        outcome, note = classify(reply["exit_code"], reply["timed_out"], limits, cpu_s=cpu, oom_killed=oom)
        stdout, verdict = split_verdict(out.text(), token)
        return ExecutionResult(outcome=outcome, exit_code=reply["exit_code"], stdout=stdout, stderr=err.text(),
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=reply["wall_s"],
                               cpu_s=cpu, backend=self.name, protections=protections, error=note, verdict=verdict)

    def _run_protections(self, limits: Limits) -> tuple[str, ...]:
        layers = self.protections
        return tuple(p for p in layers if p != "netns") if limits.network else layers

    def _failed(self, message: str, limits: Limits) -> ExecutionResult:
        return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, backend=self.name,
                               protections=self._run_protections(limits), error=message)

    def _choose_isolation(self, wanted: str) -> str:
        if wanted == "none" and not self.allow_unisolated:
            raise ValueError(f"isolation 'none' would run programs with the host's network and file system; "
                             f"{_OPT_IN}")
        uid = self._uids[0] if self._uids else None
        problems = {}
        for level in ISOLATION_LEVELS[:2] if wanted == "auto" else (wanted,):
            problems[level] = _probe(level, uid)
            if problems[level] is None:
                return level
        if wanted != "auto":
            raise ValueError(f"isolation {wanted!r} does not work here: {problems[wanted]}")
        raise ValueError("no isolation layer works here (bwrap: " + problems["bwrap"] + "; unshare: "
                         + problems["unshare"] + "). Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) "
                         "or allow unprivileged user namespaces; " + _OPT_IN)


def _probe(level: str, uid: int | None) -> str | None:
    """None when ``level`` works here for a run as ``uid`` (None: ours), cached; else why not."""
    key = (level, uid is not None)
    with _PROBE_LOCK:
        if key not in _PROBES:
            _PROBES[key] = _run_probe(level, uid)
        return _PROBES[key]


def _run_probe(level: str, uid: int | None) -> str | None:
    tools = {"bwrap": ("bwrap", "prlimit"), "unshare": ("unshare", "prlimit"), "none": ("prlimit",)}[level]
    if uid is not None and level != "unshare":
        tools += ("setpriv",)
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    staging = tempfile.mkdtemp(prefix="mb-sandbox-probe-") if level == "unshare" else ""
    try:
        if staging:
            for name in ("root", "files"):
                os.mkdir(os.path.join(staging, name))
        spec = RunSpec(isolation=level, uid=uid, cgroup_procs=(), stdin_path="/dev/null", cpu_s=10, memory_bytes=None,
                       nproc=1 << 16, fsize_bytes=1 << 20, nofile=64, network=False, disk_bytes=1 << 20,
                       workdir=WORKDIR if level != "none" else "/", staging=staging)
        done = subprocess.run([*chain(spec), "true"], cwd="/", env=_ENV, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=20)
        if done.returncode == 0:
            return None
        return done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        if staging:
            remove_tree(staging)


def _write_files(directory: str, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = Path(directory, rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else bytes(content))


def _sealed_memfd(name: str, content: str | bytes) -> int:
    """A read-only in-memory file holding ``content`` (sealed: nobody can write or grow it)."""
    fd = os.memfd_create(name, os.MFD_ALLOW_SEALING)
    data = content.encode() if isinstance(content, str) else bytes(content)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
    return above_status_fd(fd)


def _mount_tmpfs(path: str, size_mb: int, uid: int | None) -> None:
    owner = f",uid={uid},gid={uid}" if uid is not None else ""
    options = f"size={size_mb}m,mode=0700,nr_inodes=65536{owner}".encode()
    if _LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", 0x2 | 0x4, options) != 0:  # MS_NOSUID | MS_NODEV
        error = ctypes.get_errno()
        raise OSError(error, f"mounting a {size_mb} MiB tmpfs on {path}: {os.strerror(error)}")


def _remove_workdir(path: str) -> None:
    _LIBC.umount2(path.encode(), 2)  # MNT_DETACH; fails harmlessly when nothing is mounted
    remove_tree(path)


def _exit_code(status: int) -> int:
    """The program's exit code from the chain's wait status: ``-N`` for signal N, including the init
    shell's ``128 + N``."""
    code = os.waitstatus_to_exitcode(status)
    if 128 < code < 128 + 65:
        return -(code - 128)
    return code


def _tree_cpu_seconds(root: int) -> float:
    """User+system CPU seconds of ``root`` and its live descendants, children reaped by them included
    (from /proc, before a timeout's kill; used where no cgroup counts it)."""
    parents, times = {}, {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                text = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2:].split()
            parents[int(entry.name)] = int(fields[1])
            times[int(entry.name)] = sum(int(v) for v in fields[11:15]) / tick
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return sum(times.get(pid, 0.0) for pid in tree)


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
    kill_until_gone(lambda: _pids_of_uid(uid), patience_s)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


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
