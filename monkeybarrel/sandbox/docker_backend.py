"""Docker sandbox: one fresh container per run, through docker-py (extra ``[docker]``).

Every container: ``network_mode="none"`` (always; there is no option for a bridge), an unprivileged
user, all capabilities dropped, ``no-new-privileges``, memory = memory+swap limit on the container's
cgroup (the kernel's OOM killer ends a run that exceeds it: docker's ``OOMKilled``, reported as
MEMORY_LIMIT), a pids limit, CPU quota, rlimits (CPU seconds, file size, open files, no cores), a
disk budget (``Limits.disk_mb``: the work directory, ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``
are tmpfs mounts of that size, and the writable layer gets ``--storage-opt size`` where the storage
driver supports it), no log driver, and removal after the run. The image is per task (``image``);
runs are bounded by ``max_workers`` concurrent containers.

A run: the container's pid 1 is a keeper (``sh`` waiting on a stdin that never sends); the program
runs by ``docker exec`` under a wrapper shell that copies the run's files from ``/.sandbox-in``
(root-owned, read-only to the run) into the work directory, feeds stdin from a file, and when the
program ends kills whatever it left (``kill -9 -1`` spares only pid 1) and exits with its status.
The exit status is the daemon's record of that exec; CPU seconds and OOM kills are the container
cgroup's counters, read by the host after the program ended while the container still exists (at a
timeout: before the kill): from the cgroup files where this host sees them, else docker's stats and
``OOMKilled``. Nothing the program writes can change them. With a daemon on
this host, stdout and stderr go through two FIFOs bind-mounted from the host (read at pipe speed
like the local backends: a 500 MB output is cut in about a second); with a remote daemon, through
the exec's stream. The image needs ``/bin/sh`` and ``cp`` (any Debian-based image has them). Whether
the command exists is checked once per command name in a container of its own (no untrusted code
in it), so a missing command is a SANDBOX_ERROR that no program output can fake.
"""

from __future__ import annotations

import base64
import io
import os
import selectors
import shlex
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

from .base import (SANDBOXES, ExecutionResult, LayerInfo, Limits, Outcome, OutputBuffer, Sandbox, check_relative_path,
                   classify, record_layer)
from .cgroups import ProcessCgroup
from .sealed import SEALED_ENV, new_token, sealed_bytes, split_verdict

DEFAULT_IMAGE = "monkeybarrel/sandbox-python:bookworm"
"""Built by ``.ci/docker_setup.sh`` (debootstrap minbase + python3, ``docker import``)."""

_INBOX = "/.sandbox-in"
_STDIN = _INBOX + "/.stdin"
_OUTBOX = "/.sandbox-out"
_SEALED = _OUTBOX + "/sealed"
_IO = "/.sandbox-io"
_KEEPER = ["/bin/sh", "-c", "read -r _; exit 0"]
_RUN = ('cp -R ' + _INBOX + '/. . && rm -f .stdin || exit 125; "$@" < "$SANDBOX_STDIN"; s=$?; '
        'kill -9 -1 2>/dev/null; exit $s')
_TO_FIFOS = "exec >" + _IO + "/out 2>" + _IO + "/err; "
_GRACE_S = 0.2
_KILL_LEFTOVERS = (  # a DockerSession's processes but its init (pid 1), its keeper (the lowest pid after it) and us
    'for _ in 1 2 3 4 5 6 7 8 9 10; do keep=; for d in /proc/[0-9]*; do p=${d#/proc/}; '
    'if [ "$p" -gt 1 ] && { [ -z "$keep" ] || [ "$p" -lt "$keep" ]; }; then keep=$p; fi; done; killed=; '
    'for d in /proc/[0-9]*; do p=${d#/proc/}; case " 1 $keep $$ $PPID " in *" $p "*) ;; '
    '*) kill -9 "$p" 2>/dev/null && killed=1;; esac; done; [ -z "$killed" ] && break; done; exit 0')
PROTECTIONS = ("container", "netns", "pidns", "mntns", "ipcns", "user", "cap-drop", "no-new-privileges", "cgroup-memory",
               "cgroup-pids", "cgroup-cpu", "rlimits", "disk-budget", "private-tmp")
SESSION_PROTECTIONS = ("container", "netns", "pidns", "mntns", "ipcns", "cap-drop", "no-new-privileges", "cgroup-memory",
                       "cgroup-pids", "cgroup-cpu")
"""A ``DockerSession``'s: the image's user, its writable layer and ``/tmp`` (a repository checkout needs them)."""


def docker_unavailable_reason(image: str | None = DEFAULT_IMAGE, base_url: str | None = None) -> str | None:
    """None when a Docker daemon answers (and ``image`` is present), else why not (for skips/errors)."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed (pip install monkeybarrel[docker])"
    try:
        client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
        client.ping()
    except Exception as exc:  # docker raises several types for a missing daemon
        return f"no Docker daemon answers ({type(exc).__name__}: {exc}); run .ci/docker_setup.sh as root"
    try:
        if image is not None:
            client.images.get(image)
    except Exception:
        return f"Docker image {image!r} is missing; run .ci/docker_setup.sh to build it"
    finally:
        client.close()
    return None


@SANDBOXES.register("docker")
class DockerSandbox(Sandbox):
    """Runs each command in a new container of ``image``.

    Args:
        image: the task's image (must contain ``/bin/sh`` and what the command needs).
        limits: default ``Limits`` (or a mapping of its fields).
        max_workers: containers at once.
        user: ``uid:gid`` the command runs as (default ``nobody``).
        workdir: the work directory inside the container.
        cpus: CPU quota per container (cores).
        base_url: Docker daemon address (default: the environment, e.g. ``DOCKER_HOST``).
        env: extra environment variables.
        output_fifos: read stdout/stderr through FIFOs bind-mounted from this host (``"auto"``: when the
            daemon is reached through a unix socket, i.e. runs here); else through the exec's stream.
            Pass False when the daemon does not share this file system (a socket forwarded into a
            container, or from another host).

    Raises:
        ValueError: no daemon answers, or the image is missing (the message says how to fix it).
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, limits: Limits | Mapping[str, Any] | None = None,
                 max_workers: int = 4, user: str = "65534:65534", workdir: str = "/work", cpus: float = 1.0,
                 base_url: str | None = None, env: Mapping[str, str] | None = None,
                 output_fifos: bool | str = "auto") -> None:
        super().__init__(limits, max_workers)
        reason = docker_unavailable_reason(image, base_url)
        if reason is not None:
            raise ValueError(reason)
        import docker

        self.image, self.user, self.workdir, self.cpus = image, user, workdir.rstrip("/") or "/work", float(cpus)
        self.env = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **dict(env or {})}
        # one connection per concurrent run (requests' pool), so calls do not queue behind each other
        self._client = (docker.DockerClient(base_url=base_url, max_pool_size=2 * self.max_workers + 2) if base_url
                        else docker.from_env(max_pool_size=2 * self.max_workers + 2))
        if output_fifos not in (True, False, "auto"):
            raise ValueError(f"output_fifos must be true, false or 'auto', got {output_fifos!r}")
        self.output_fifos = (self._client.api.base_url.startswith("http+docker://localhost")
                             if output_fifos == "auto" else bool(output_fifos))
        """Whether output comes through FIFOs on this host (pipe speed) rather than the daemon's stream."""
        self._bound = threading.BoundedSemaphore(self.max_workers)
        self.owner = uuid.uuid4().hex
        """Label value ``monkeybarrel.sandbox.owner`` on this sandbox's containers (``close`` removes strays)."""
        self._commands: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.storage_quota = self._storage_quota_supported()
        """Whether the writable layer can get ``--storage-opt size`` (overlay2 on xfs with pquota)."""
        record_layer(self.layer())

    @property
    def protections(self) -> tuple[str, ...]:
        return PROTECTIONS

    def layer(self) -> LayerInfo:
        notes = ["cpu_s from the container's cgroup after the program ended",
                 "output through FIFOs on this host" if self.output_fifos else "output through the daemon's stream"]
        return LayerInfo("docker", f"docker ({self.image})", self.protections, notes=tuple(notes))

    def run(self, files: Mapping[str, str | bytes], command: Sequence[str], *, stdin: str | bytes | None = None,
            limits: Limits | None = None, sealed: bytes | None = None) -> ExecutionResult:
        limits = limits or self.limits
        if not command:
            return self._failed("empty command")
        with self._bound:
            container = fifos = None
            try:
                token = None if sealed is None else new_token()
                archive = self._archive(files, stdin, None if token is None else sealed_bytes(token, sealed))
                if not self._command_exists(command[0], {check_relative_path(rel) for rel in files}):
                    return self._failed(f"the command could not be run: {command[0]!r} is not on the PATH of "
                                        f"image {self.image!r}")
                fifos = _Fifos(int(self.user.partition(":")[0])) if self.output_fifos else None
                container = self._create(limits, fifos)
                if not container.put_archive("/", archive):
                    return self._failed("could not copy the files into the container")
                container.start()
                environment = {**self.env, "HOME": self.workdir, "TMPDIR": "/tmp",
                               "SANDBOX_STDIN": _STDIN if stdin is not None else "/dev/null"}
                if token is not None:
                    environment[SEALED_ENV] = f"file:{_SEALED}"
                return self._execute(container, list(command), environment, limits, fifos, token)
            except Exception as exc:  # the daemon or docker-py failed: a recorded failure, not a crash
                return self._failed(f"{type(exc).__name__}: {exc}")
            finally:
                if container is not None:
                    try:
                        container.remove(force=True)
                    except Exception:
                        pass
                if fifos is not None:
                    fifos.close()

    def close(self) -> None:
        """Removes any container of this sandbox still present (e.g. after an interrupted run)."""
        try:
            for container in self._client.containers.list(all=True, filters={"label": self.owner_label}):
                container.remove(force=True)
        except Exception:
            pass
        self._client.close()

    @property
    def owner_label(self) -> str:
        """The ``key=value`` label filter that finds exactly this sandbox's containers."""
        return f"monkeybarrel.sandbox.owner={self.owner}"

    # ---- steps --------------------------------------------------------------------------------
    def _archive(self, files: Mapping[str, str | bytes], stdin: str | bytes | None, sealed: bytes | None) -> bytes:
        """A tar of the inbox (root-owned, read-only to the run) and the outbox (the run's user's, with the
        sealed input for the run's first reader)."""
        uid, _, gid = self.user.partition(":")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            dirs = {""}
            entries = dict(files)
            if stdin is not None:
                entries[".stdin"] = stdin
            for rel in entries:
                parts = check_relative_path(rel).split("/")
                dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
            for rel in sorted(dirs):
                info = tarfile.TarInfo(f"{_INBOX[1:]}/{rel}".rstrip("/"))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            for rel, content in entries.items():
                data = content.encode() if isinstance(content, str) else bytes(content)
                info = tarfile.TarInfo(f"{_INBOX[1:]}/{rel}")
                info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
                tar.addfile(info, io.BytesIO(data))
            info = tarfile.TarInfo(_OUTBOX[1:])
            info.type, info.mode = tarfile.DIRTYPE, 0o700
            info.uid, info.gid = int(uid), int(gid or uid)
            tar.addfile(info)
            if sealed is not None:
                info = tarfile.TarInfo(_SEALED[1:])
                info.size, info.mode, info.uid, info.gid = len(sealed), 0o600, int(uid), int(gid or uid)
                tar.addfile(info, io.BytesIO(sealed))
        return buffer.getvalue()

    def _command_exists(self, name: str, files: set[str]) -> bool:
        """Whether ``name`` is a file of the run or found on the image's PATH (checked once per name, in a
        container that runs only ``command -v``)."""
        if "/" in name and not name.startswith("/"):
            return name.lstrip("./") in files or name in files
        with self._lock:
            if name not in self._commands:
                output = self._client.containers.run(
                    self.image, ["/bin/sh", "-c", 'command -v "$1" >/dev/null && echo found || echo missing', "check",
                                 name], user=self.user, network_mode="none", cap_drop=["ALL"], remove=True,
                    security_opt=["no-new-privileges"], labels={"monkeybarrel.sandbox.owner": self.owner})
                self._commands[name] = output.strip() == b"found"
            return self._commands[name]

    def _storage_quota_supported(self) -> bool:
        info = self._client.info()
        backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem")
        if info.get("Driver") != "overlay2" or backing != "xfs":
            return False
        try:  # xfs without the pquota mount option refuses the option at create time
            self._client.containers.create(self.image, ["true"], storage_opt={"size": "64m"},
                                           labels={"monkeybarrel.sandbox.owner": self.owner}).remove(force=True)
        except Exception:
            return False
        return True

    def _create(self, limits: Limits, fifos: "_Fifos | None"):
        from docker.types import LogConfig, Mount, Ulimit

        cpu = limits.cpu_seconds
        uid, _, gid = self.user.partition(":")
        size = f"size={limits.disk_mb}m"
        tmpfs = {path: f"{size},mode=1777" for path in ("/tmp", "/var/tmp", "/run")}
        tmpfs[self.workdir] = f"{size},mode=0700,uid={uid},gid={gid or uid}"
        mounts = [Mount(_IO, fifos.directory, type="bind", read_only=True)] if fifos is not None else None
        return self._client.containers.create(
            self.image, _KEEPER, stdin_open=True, working_dir=self.workdir, user=self.user,
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m", pids_limit=limits.processes,
            nano_cpus=int(self.cpus * 1e9), tmpfs=tmpfs, shm_size=f"{limits.disk_mb}m", mounts=mounts,
            storage_opt={"size": f"{limits.disk_mb}m"} if self.storage_quota else None,
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 1), Ulimit(name="fsize", soft=limits.file_size_mb << 20,
                                                                     hard=limits.file_size_mb << 20),
                     Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                     Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="none"),
            labels={"monkeybarrel.sandbox": "1", "monkeybarrel.sandbox.owner": self.owner}, detach=True)

    def _execute(self, container, command: list[str], environment: dict[str, str], limits: Limits,
                 fifos: "_Fifos | None", token: str | None) -> ExecutionResult:
        api = self._client.api
        out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
        script = (_TO_FIFOS if fifos is not None else "") + _RUN
        exec_id = api.exec_create(container.id, ["/bin/sh", "-c", script, "sandbox-run", *command], user=self.user,
                                  workdir=self.workdir, environment=environment)["Id"]
        ended = lambda: not api.exec_inspect(exec_id)["Running"]  # noqa: E731
        counters = ProcessCgroup.of(api.inspect_container(container.id)["State"]["Pid"])
        started = time.perf_counter()
        deadline = started + limits.time_s
        if fifos is not None:
            fifos.open()
            api.exec_start(exec_id, detach=True)
            timed_out = fifos.drain(out, err, deadline, ended)
        else:
            timed_out = _drain_stream(api.exec_start(exec_id, stream=True, demux=True), out, err, deadline,
                                      lambda: self._kill(container))
        while not timed_out and not ended():  # output closed: the program is ending (or closed its streams)
            if time.perf_counter() >= deadline:
                timed_out = True
                break
            time.sleep(0.005)
        wall = time.perf_counter() - started
        cpu, oom = self._counters(container, counters)  # the kernel's counts, before anything is killed
        code = api.exec_inspect(exec_id).get("ExitCode")
        exit_code = -9 if code is None else int(code)
        if exit_code > 128:  # the wrapper shell reports death by signal N as 128 + N
            exit_code = -(exit_code - 128)
        outcome, note = classify(exit_code, timed_out, limits, cpu_s=cpu, oom_killed=oom)
        stdout, verdict = split_verdict(out.text(), token)
        return ExecutionResult(outcome=outcome, exit_code=exit_code, stdout=stdout, stderr=err.text(),
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=wall,
                               cpu_s=cpu if cpu is not None else float("nan"), backend=self.name,
                               protections=self.protections, error=note, verdict=verdict)

    @staticmethod
    def _kill(container) -> None:
        try:
            container.kill()
        except Exception:  # already stopped
            pass

    def _counters(self, container, counters: ProcessCgroup | None) -> tuple[float | None, bool]:
        """CPU seconds and whether the OOM killer struck, from the container's cgroup: read on this host
        where its cgroup files are visible, else docker's stats (CPU) and ``OOMKilled`` (after a kill).
        CPU is None when neither can tell (the container already stopped)."""
        if counters is not None:
            cpu, oom = counters.cpu_seconds(), counters.oom_kills()
            if cpu is not None and oom is not None:
                return cpu, oom > 0
        try:
            stats = self._client.api.stats(container.id, stream=False, one_shot=True)
            cpu = stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9
        except Exception:
            cpu = None
        self._kill(container)
        return cpu, bool(self._client.api.inspect_container(container.id)["State"].get("OOMKilled"))

    def _failed(self, message: str) -> ExecutionResult:
        return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, backend=self.name,
                               protections=self.protections, error=message)


class _Fifos:
    """Two FIFOs (``out``, ``err``) in a fresh host directory, bind-mounted read-only into the container at
    ``/.sandbox-io``: the run's stdout and stderr reach the host at pipe speed, past the daemon."""

    def __init__(self, writer_uid: int) -> None:
        self.directory = tempfile.mkdtemp(prefix="mb-docker-io-")
        os.chmod(self.directory, 0o711)
        self.fds: list[int] = []
        for name in ("out", "err"):
            path = os.path.join(self.directory, name)
            os.mkfifo(path, 0o600)
            if os.geteuid() == 0:  # only the container's user may write; only we read
                os.chown(path, writer_uid, -1)
                os.chmod(path, 0o200)
            else:
                os.chmod(path, 0o622)

    def open(self) -> None:
        """Open both ends for reading (non-blocking), so the run's writers never wait for a reader."""
        self.fds = [os.open(os.path.join(self.directory, name), os.O_RDONLY | os.O_NONBLOCK) for name in ("out", "err")]

    def drain(self, out: OutputBuffer, err: OutputBuffer, deadline: float, ended) -> bool:
        """Read both FIFOs into the buffers until both closed or ``deadline`` (True). A FIFO opened before
        any writer polls as hung up only once a writer has come and gone, so an end of file here is the
        run's. ``ended()`` (polled a few times a second) says the program ended: then a writer it left
        behind gets a short grace before reading stops."""
        buffers = dict(zip(self.fds, (out, err)))
        open_fds = set(self.fds)
        next_poll, ended_at = 0.0, None
        with selectors.DefaultSelector() as selector:
            for fd in self.fds:
                selector.register(fd, selectors.EVENT_READ)
            while open_fds:
                now = time.perf_counter()
                if now >= deadline:
                    return True
                if ended_at is None and now >= next_poll:
                    next_poll = now + 0.25
                    if ended():
                        ended_at = now
                if ended_at is not None and now - ended_at > _GRACE_S:
                    return False
                for key, _ in selector.select(timeout=min(deadline - now, 0.05)):
                    try:
                        data = os.read(key.fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if data:
                        buffers[key.fd].add(data)
                    else:
                        selector.unregister(key.fd)
                        open_fds.discard(key.fd)
        return False

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        shutil.rmtree(self.directory, ignore_errors=True)


def _drain_stream(stream, out: OutputBuffer, err: OutputBuffer, deadline: float, kill) -> bool:
    """Read the exec's demultiplexed stream until it ends; at ``deadline`` ``kill()`` the container and
    return True."""
    timer = threading.Timer(max(0.0, deadline - time.perf_counter()), kill)
    timer.daemon = True
    timer.start()
    try:
        for stdout_chunk, stderr_chunk in stream:
            if stdout_chunk:
                out.add(stdout_chunk)
            if stderr_chunk:
                err.add(stderr_chunk)
    finally:
        timer.cancel()
    return time.perf_counter() >= deadline


def session_isolation(mem_limit: str = "1g", pids_limit: int = 256, cpus: float = 1.0) -> dict[str, Any]:
    """``containers.run`` options every ``DockerSession`` container gets: no network, no capabilities,
    no privilege gain, bounded memory (swap included), processes and CPU, an init process."""
    return dict(network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"], mem_limit=mem_limit,
                memswap_limit=mem_limit, pids_limit=pids_limit, nano_cpus=int(cpus * 1e9), init=True,
                labels={"monkeybarrel.sandbox": "1"})


class DockerSession:
    """One long-lived container of ``image``; commands run in it by ``exec`` (state such as a git
    checkout persists between them). The container layer of repository workloads (SWE-bench).

    Isolation: ``network_mode="none"``, all capabilities dropped, ``no-new-privileges``, memory =
    memory+swap limit, a pids limit, a CPU quota, an init process; every command runs under
    ``timeout -k 2 T`` inside, so a hung command is killed, not waited on. Unlike ``DockerSandbox``
    the image's own user runs the commands (repositories in images belong to it). Use as a context
    manager; ``close`` removes the container.

    Args:
        image: the image (needs ``bash``, ``timeout`` and ``base64``: any Debian-based image).
        workdir: the working directory of every command.
        mem_limit: docker memory limit (e.g. ``"1g"``).
        pids_limit: most processes (fork bombs).
        cpus: CPU quota (cores).
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).
    """

    INLINE_LIMIT = 96_000
    """Bytes of files written inline in the command (one bash argument may hold at most 128 KiB)."""

    def __init__(self, image: str, workdir: str, mem_limit: str = "1g", pids_limit: int = 256, cpus: float = 1.0,
                 client: Any = None) -> None:
        if client is None:
            import docker

            client = docker.from_env()
        self.image, self.workdir = image, workdir
        self.container = client.containers.run(image, ["sleep", "infinity"], working_dir=workdir, detach=True,
                                               **session_isolation(mem_limit, pids_limit, cpus))
        record_layer(LayerInfo("docker", f"docker session ({image})", SESSION_PROTECTIONS,
                               notes=("commands run as the image's user with no capabilities",)))

    def exec(self, script: str, timeout_s: float, files: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """Run ``script`` with bash (after writing ``files``, ``{absolute path: text}``); ``(exit code, output)``.

        Exit code 124 or 137 means the time limit killed it (SIGTERM at ``timeout_s``, SIGKILL 2 s later).
        """
        prefix = self._write_files(dict(files or {}))
        result = self.container.exec_run(["timeout", "-k", "2", f"{timeout_s:g}", "bash", "-c", prefix + script],
                                         demux=False)
        return int(result.exit_code), result.output or b""

    def exec_checked(self, script: str, timeout_s: float, files: Mapping[str, str] | None = None,
                     sealed: bytes = b"") -> tuple[int, bytes, str | None]:
        """``exec`` for a script whose trusted harness attests its result: ``(exit code, output without the
        token's line, verdict)`` (``sealed.py``; verdict None when no line carried the token).

        Commands of this session run as one user, so a process left by an earlier command (code under
        test daemonized itself) could read a later token: first every process of the container but its
        init, its keeper and this command's own is killed, then the sealed input is written (a file named
        by ``$MONKEYBARREL_SEALED``, unlinked by the harness), then ``script`` runs.
        """
        self.container.exec_run(["bash", "-c", _KILL_LEFTOVERS], demux=False)
        token, folder = new_token(), f".mb-sealed-{uuid.uuid4().hex}"
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:  # any image user may read and unlink it
            data = sealed_bytes(token, sealed)
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o777
            tar.addfile(info)
            info = tarfile.TarInfo(f"{folder}/sealed")
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        self.container.put_archive("/tmp", buffer.getvalue())
        path = f"/tmp/{folder}/sealed"
        prefix = self._write_files(dict(files or {}))
        result = self.container.exec_run(["timeout", "-k", "2", f"{timeout_s:g}", "bash", "-c", prefix + script],
                                         environment={SEALED_ENV: f"file:{path}"}, demux=False)
        output, verdict = split_verdict((result.output or b"").decode("utf-8", "replace"), token)
        return int(result.exit_code), output.encode(), verdict

    def _write_files(self, files: dict[str, str]) -> str:
        """Bash that writes ``files`` inline (base64, no upload round trip); larger sets are uploaded
        now with ``put_archive`` and the prefix is empty."""
        if sum(len(c) for c in files.values()) * 4 // 3 > self.INLINE_LIMIT:
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                for path, content in files.items():
                    data = content.encode()
                    info = tarfile.TarInfo(path.lstrip("/"))
                    info.size, info.mode, info.mtime = len(data), 0o644, 0
                    tar.addfile(info, io.BytesIO(data))
            self.container.put_archive("/", buffer.getvalue())
            return ""
        parts = []
        for path, content in files.items():
            folder = shlex.quote(path.rsplit("/", 1)[0] or "/")
            encoded = base64.b64encode(content.encode()).decode()
            parts.append(f"mkdir -p {folder} && echo {encoded} | base64 -d > {shlex.quote(path)}; ")
        return "".join(parts)

    def close(self) -> None:
        try:
            self.container.remove(force=True)
        except Exception:  # best effort: the container may already be gone
            pass

    def __enter__(self) -> "DockerSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
