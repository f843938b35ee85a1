"""Docker sandbox: one fresh container per run, through docker-py (extra ``[docker]``).

Every container: ``network_mode="none"`` (always; there is no option for a bridge), an unprivileged
user, all capabilities dropped, ``no-new-privileges``, memory = memory+swap limit on the container's
cgroup (the kernel's OOM killer ends a run that exceeds it: docker's ``OOMKilled``, reported as
MEMORY_LIMIT), a pids limit, CPU quota, rlimits (CPU seconds, file size, open files, no cores), a
disk budget (``Limits.disk_mb``: the work directory, ``/tmp``, ``/var/tmp``, ``/run`` and ``/dev/shm``
are tmpfs mounts of that size, and the writable layer gets ``--storage-opt size`` where the storage
driver supports it), no log driver (output streams through the attach socket, capped), and removal
after the run. The image is per task (``image``); runs are bounded by ``max_workers`` concurrent
containers.

Inside, pid 1 is ``/bin/sh``: it copies the run's files from ``/.sandbox-in`` (root-owned, read-only
to the run) into the work directory, feeds stdin from a file, waits, records the children's CPU time
and exits with the command's status; when it exits the container stops, so background processes die
with it. The image needs ``/bin/sh`` and ``cp`` (any Debian-based image has them). Whether the
command exists is checked once per command name in a container of its own (no untrusted code in
it), so a missing command is a SANDBOX_ERROR that no program output can fake.
"""

from __future__ import annotations

import base64
import io
import shlex
import tarfile
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

from .base import SANDBOXES, ExecutionResult, Limits, Outcome, OutputBuffer, Sandbox, check_relative_path, classify

DEFAULT_IMAGE = "monkeybarrel/sandbox-python:bookworm"
"""Built by ``.ci/docker_setup.sh`` (debootstrap minbase + python3, ``docker import``)."""

_INBOX = "/.sandbox-in"
_STDIN = _INBOX + "/.stdin"
_OUTBOX = "/.sandbox-out"
_TIMES = _OUTBOX + "/times"
_INIT = ('cp -R ' + _INBOX + '/. . && rm -f .stdin && "$@" < "$SANDBOX_STDIN"; s=$?; times > ' + _TIMES
         + '; exit $s')
PROTECTIONS = ("container", "netns", "pidns", "mntns", "ipcns", "user", "cap-drop", "no-new-privileges", "cgroup-memory",
               "cgroup-pids", "cgroup-cpu", "rlimits", "disk-budget", "private-tmp")


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

    Raises:
        ValueError: no daemon answers, or the image is missing (the message says how to fix it).
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, limits: Limits | Mapping[str, Any] | None = None,
                 max_workers: int = 4, user: str = "65534:65534", workdir: str = "/work", cpus: float = 1.0,
                 base_url: str | None = None, env: Mapping[str, str] | None = None) -> None:
        super().__init__(limits, max_workers)
        reason = docker_unavailable_reason(image, base_url)
        if reason is not None:
            raise ValueError(reason)
        import docker

        self.image, self.user, self.workdir, self.cpus = image, user, workdir.rstrip("/") or "/work", float(cpus)
        self.env = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", **dict(env or {})}
        # one connection per concurrent run (requests' pool), so attaches do not queue behind each other
        self._client = (docker.DockerClient(base_url=base_url, max_pool_size=self.max_workers + 2) if base_url
                        else docker.from_env(max_pool_size=self.max_workers + 2))
        self._bound = threading.BoundedSemaphore(self.max_workers)
        self.owner = uuid.uuid4().hex
        """Label value ``monkeybarrel.sandbox.owner`` on this sandbox's containers (``close`` removes strays)."""
        self._commands: dict[str, bool] = {}
        self._lock = threading.Lock()
        self.storage_quota = self._storage_quota_supported()
        """Whether the writable layer can get ``--storage-opt size`` (overlay2 on xfs with pquota)."""

    @property
    def protections(self) -> tuple[str, ...]:
        return PROTECTIONS

    def run(self, files: Mapping[str, str | bytes], command: Sequence[str], *, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecutionResult:
        limits = limits or self.limits
        if not command:
            return self._failed("empty command")
        with self._bound:
            container = None
            try:
                archive = self._archive(files, stdin)
                if not self._command_exists(command[0], {check_relative_path(rel) for rel in files}):
                    return self._failed(f"the command could not be run: {command[0]!r} is not on the PATH of "
                                        f"image {self.image!r}")
                container = self._create(list(command), limits, stdin is not None)
                if not container.put_archive("/", archive):
                    return self._failed("could not copy the files into the container")
                return self._execute(container, limits)
            except Exception as exc:  # the daemon or docker-py failed: a recorded failure, not a crash
                return self._failed(f"{type(exc).__name__}: {exc}")
            finally:
                if container is not None:
                    try:
                        container.remove(force=True)
                    except Exception:
                        pass

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
    def _archive(self, files: Mapping[str, str | bytes], stdin: str | bytes | None) -> bytes:
        """A tar of the inbox (root-owned, read-only to the run) and the outbox (the run's user's)."""
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

    def _create(self, command: list[str], limits: Limits, has_stdin: bool):
        from docker.types import LogConfig, Ulimit

        cpu = limits.cpu_seconds
        environment = {**self.env, "HOME": self.workdir, "TMPDIR": "/tmp",
                       "SANDBOX_STDIN": _STDIN if has_stdin else "/dev/null"}
        uid, _, gid = self.user.partition(":")
        size = f"size={limits.disk_mb}m"
        tmpfs = {path: f"{size},mode=1777" for path in ("/tmp", "/var/tmp", "/run")}
        tmpfs[self.workdir] = f"{size},mode=0700,uid={uid},gid={gid or uid}"
        return self._client.containers.create(
            self.image, ["/bin/sh", "-c", _INIT, "sandbox-init", *command],
            working_dir=self.workdir, user=self.user, environment=environment,
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m", pids_limit=limits.processes,
            nano_cpus=int(self.cpus * 1e9), tmpfs=tmpfs, shm_size=f"{limits.disk_mb}m",
            storage_opt={"size": f"{limits.disk_mb}m"} if self.storage_quota else None,
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 1), Ulimit(name="fsize", soft=limits.file_size_mb << 20,
                                                                     hard=limits.file_size_mb << 20),
                     Ulimit(name="nofile", soft=limits.open_files, hard=limits.open_files),
                     Ulimit(name="core", soft=0, hard=0)],
            log_config=LogConfig(type="none"),
            labels={"monkeybarrel.sandbox": "1", "monkeybarrel.sandbox.owner": self.owner}, detach=True)

    def _execute(self, container, limits: Limits) -> ExecutionResult:
        out, err = OutputBuffer(limits.output_bytes), OutputBuffer(limits.output_bytes)
        stream = container.attach(stdout=True, stderr=True, stream=True, demux=True, logs=False)
        timed_out = threading.Event()
        cpu_at_kill: list[float] = []

        def kill() -> None:
            try:
                cpu_at_kill.append(self._cgroup_cpu_seconds(container))  # the kernel's count, before the kill
            except Exception:
                pass
            try:
                container.kill()  # raises when the container already stopped: then it was not a timeout
                timed_out.set()
            except Exception:
                pass

        started = time.perf_counter()
        container.start()
        timer = threading.Timer(limits.time_s, kill)
        timer.daemon = True
        timer.start()
        try:
            for stdout_chunk, stderr_chunk in stream:
                if stdout_chunk:
                    out.add(stdout_chunk)
                if stderr_chunk:
                    err.add(stderr_chunk)
            status = container.wait(timeout=limits.time_s + 30)
        finally:
            timer.cancel()
            stream.close()
        wall = time.perf_counter() - started
        state = self._client.api.inspect_container(container.id)["State"]
        exit_code = int(status.get("StatusCode", state.get("ExitCode", -1)))
        if exit_code > 128:  # the init shell reports death by signal N as 128 + N
            exit_code = -(exit_code - 128)
        cpu = cpu_at_kill[0] if timed_out.is_set() and cpu_at_kill else self._cpu_seconds(container)
        outcome, note = classify(exit_code, timed_out.is_set(), limits, cpu_s=cpu,
                                 oom_killed=bool(state.get("OOMKilled")))
        return ExecutionResult(outcome=outcome, exit_code=exit_code, stdout=out.text(), stderr=err.text(),
                               stdout_truncated=out.truncated, stderr_truncated=err.truncated, wall_s=wall,
                               cpu_s=cpu, backend=self.name, protections=self.protections, error=note)

    def _cgroup_cpu_seconds(self, container) -> float:
        """CPU seconds the container's cgroup has used so far (docker's stats: the kernel's count)."""
        stats = self._client.api.stats(container.id, stream=False, one_shot=True)
        return stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9

    def _cpu_seconds(self, container) -> float:
        """Children's user+system CPU seconds, as the init shell's ``times`` wrote them (0 if unreadable)."""
        try:
            chunks, _ = container.get_archive(_TIMES)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
                member = tar.next()
                lines = tar.extractfile(member).read().decode().split("\n") if member else []
            return sum(_parse_duration(part) for part in lines[1].split())
        except Exception:
            return 0.0

    def _failed(self, message: str) -> ExecutionResult:
        return ExecutionResult(outcome=Outcome.SANDBOX_ERROR, exit_code=None, backend=self.name,
                               protections=self.protections, error=message)


def _parse_duration(text: str) -> float:
    """Seconds of a POSIX ``times`` field such as ``0m0.020000s``."""
    minutes, _, seconds = text.rstrip("s").partition("m")
    return float(minutes) * 60 + float(seconds) if seconds else float(minutes)


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

    def exec(self, script: str, timeout_s: float, files: Mapping[str, str] | None = None) -> tuple[int, bytes]:
        """Run ``script`` with bash (after writing ``files``, ``{absolute path: text}``); ``(exit code, output)``.

        Exit code 124 or 137 means the time limit killed it (SIGTERM at ``timeout_s``, SIGKILL 2 s later).
        """
        prefix = self._write_files(dict(files or {}))
        result = self.container.exec_run(["timeout", "-k", "2", f"{timeout_s:g}", "bash", "-c", prefix + script],
                                         demux=False)
        return int(result.exit_code), result.output or b""

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
