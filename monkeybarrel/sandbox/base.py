"""The Sandbox protocol: run untrusted code with limits and get a typed result back.

A sandbox takes files (written into a fresh work directory), a command (argv, run in that
directory), optional stdin and ``Limits``, and returns an ``ExecutionResult``: exit code, capped
stdout/stderr with a truncation mark, wall and CPU seconds and an ``Outcome``. Running never
raises for anything the program does; a failure of the sandbox itself is the outcome
``SANDBOX_ERROR`` with the reason in ``error``. ``run_many`` runs jobs with bounded concurrency
and returns results in job order.

Backends register in ``SANDBOXES`` (``local``: namespaces + rlimits on this host; ``docker``: one
container per run through docker-py). ``build_sandbox(spec)`` turns a config mapping such as
``{"type": "docker", "image": "...", "max_workers": 4}`` into a sandbox.
"""

from __future__ import annotations

import enum
import signal
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from ..core.registry import Registry

SANDBOXES: Registry["Sandbox"] = Registry("sandbox", package="monkeybarrel.sandbox")

TRUNCATION_MARK = "\n[... truncated: {dropped} more bytes of {total} ...]\n"
"""Appended to a stream that exceeded ``Limits.output_bytes`` (``{dropped}``, ``{total}`` in bytes)."""


class Outcome(str, enum.Enum):
    """How a run ended (a ``str`` enum: stored and compared as its value)."""

    OK = "ok"
    """Exited with status 0 within the limits."""
    ERROR_EXIT = "error_exit"
    """Exited with a non-zero status (an exception, a failed assert, ``sys.exit(1)``)."""
    TIMEOUT = "timeout"
    """Ran past the wall-clock or CPU time limit and was killed (with its whole process tree)."""
    MEMORY_LIMIT = "memory_limit"
    """The kernel's OOM killer ended it at the run's memory limit (a memory cgroup, or docker's)."""
    KILLED = "killed"
    """Ended by a signal that is not one of the above (e.g. SIGSEGV, SIGKILL from inside, SIGXFSZ)."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox could not run the command (missing image, no daemon, bad files, a wrapper that failed
    before the program started); see ``error``. Never decided from the program's own output."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run.

    Attributes:
        time_s: wall-clock seconds before the whole process tree is killed.
        cpu_s: CPU seconds per process (RLIMIT_CPU: SIGXCPU at the limit, SIGKILL one second later);
            default ``time_s`` rounded up.
        memory_mb: memory of the whole process tree, MiB: a memory cgroup (memory+swap) where the host
            allows one (docker always; local as root or with a delegated cgroup), else RLIMIT_AS per process.
        processes: processes/threads the run may have at once (a pids cgroup; else RLIMIT_NPROC per
            sandbox uid).
        file_size_mb: largest file the run may write, MiB (RLIMIT_FSIZE).
        disk_mb: size of each writable file system the run gets, MiB: the work directory and the
            private ``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm`` are tmpfs mounts of this size (their
            pages also count against ``memory_mb`` where a memory cgroup applies).
        open_files: open file descriptors per process (RLIMIT_NOFILE).
        output_bytes: bytes kept of stdout and of stderr each; the rest is dropped and marked.
        network: False (default) runs without any network interface but loopback of its own.
    """

    time_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    processes: int = 64
    file_size_mb: int = 64
    disk_mb: int = 256
    open_files: int = 256
    output_bytes: int = 1 << 20
    network: bool = False

    def __post_init__(self) -> None:
        for name in ("time_s", "memory_mb", "processes", "file_size_mb", "disk_mb", "open_files", "output_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"Limits.cpu_s must be > 0 or None, got {self.cpu_s!r}")

    @property
    def cpu_seconds(self) -> int:
        """The CPU limit in whole seconds (RLIMIT_CPU has one-second granularity)."""
        import math

        return max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.time_s))


@dataclass(frozen=True)
class ExecutionResult:
    """What one run did.

    Attributes:
        outcome: the typed ending (see ``Outcome``).
        exit_code: the process's exit status; ``-N`` when killed by signal N; None if it never ran.
        stdout, stderr: decoded output (UTF-8, invalid bytes replaced), each at most
            ``Limits.output_bytes`` bytes plus ``TRUNCATION_MARK`` when cut.
        stdout_truncated, stderr_truncated: whether the stream was cut.
        wall_s: wall-clock seconds from start to the end of the process tree.
        cpu_s: user+system CPU seconds of the whole tree (local), or of the container (docker).
        backend: the sandbox type that ran it (``local``, ``docker``).
        protections: the isolation layers that applied, e.g. ``("uid", "netns", "pidns", "ro-root")``.
        error: why the sandbox failed (SANDBOX_ERROR) or a note on the outcome; None otherwise.
        verdict: with ``sealed`` input only: the text the holder of the run's token wrote after it on
            stdout (that line is removed from ``stdout``); None when no line carried the token. Only
            the harness that took the sealed input can write it (``sealed.py``).
    """

    outcome: Outcome
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    backend: str = ""
    protections: tuple[str, ...] = ()
    error: str | None = None
    verdict: str | None = None

    @property
    def ok(self) -> bool:
        """True when the program exited 0 within its limits."""
        return self.outcome is Outcome.OK


@dataclass(frozen=True)
class Job:
    """One run for ``Sandbox.run_many``: the arguments of ``Sandbox.run``."""

    files: Mapping[str, str | bytes]
    command: Sequence[str]
    stdin: str | bytes | None = None
    limits: Limits | None = None
    sealed: bytes | None = None


class OutputBuffer:
    """Keeps the first ``cap`` bytes of a stream and counts the rest (O(cap) memory)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: list[bytes] = []
        self.kept = 0
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - self.kept
        if room > 0:
            piece = data[:room]
            self.chunks.append(piece)
            self.kept += len(piece)

    @property
    def truncated(self) -> bool:
        return self.total > self.kept

    def text(self) -> str:
        body = b"".join(self.chunks).decode("utf-8", errors="replace")
        if self.truncated:
            body += TRUNCATION_MARK.format(dropped=self.total - self.kept, total=self.total)
        return body


FULL_ISOLATION: dict[str, tuple[tuple[str, ...], str]] = {
    "network namespace": (("netns",), "programs reach the host's network, also in runs with network=False"),
    "host file system hidden": (("minimal-view", "container"),
                                "programs see the host's files and unix sockets (file permissions only)"),
    "pid namespace": (("pidns",), "programs see the host's processes and can signal those of their uid; what a "
                                  "run starts is killed when it ends by its keeper"),
    "IPC namespace": (("ipcns",), "programs share the host's SysV IPC and message queues"),
    "private scratch": (("private-tmp",), "programs share the host's /tmp, /var/tmp and /dev/shm"),
    "separate uid": (("uid", "userns", "user"), "programs run as a uid that is not the sandbox's own (yours, or "
                                                "an image's): they can signal that uid's processes and read their "
                                                "memory"),
    "memory of the whole run": (("cgroup-memory",), "memory is limited per process (RLIMIT_AS), not for the "
                                                   "run's process tree"),
    "processes of the whole run": (("cgroup-pids",), "processes are limited per uid (RLIMIT_NPROC), not per run"),
    "disk budget": (("disk-budget",), "the work directory has no size limit"),
    "no kernel keyrings": (("no-keyring", "container"), "programs can leave keys in the kernel keyrings of their uid, "
                                                        "where later runs of that uid read them"),
}
"""What a full layer gives: ``{name: (protections that provide it (any), what a run lacks without it)}``."""


@dataclass(frozen=True)
class LayerInfo:
    """Which isolation layer a sandbox runs, and what it lacks against a full layer (``FULL_ISOLATION``).

    Attributes:
        backend: ``local`` or ``docker``.
        layer: e.g. ``bwrap``, ``bwrap+warm``, ``unshare``, ``none``, ``docker``.
        protections: the layers every run gets (``Sandbox.protections``).
        opt_in: the option by which the user accepted a weaker layer (e.g. ``allow_unisolated``), or None.
        notes: further facts a reader of the results should know (e.g. where CPU seconds come from).
    """

    backend: str
    layer: str
    protections: tuple[str, ...]
    opt_in: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def lacks(self) -> dict[str, str]:
        """``{missing protection: what that means}`` (empty for a full layer)."""
        have = set(self.protections)
        return {name: meaning for name, (providers, meaning) in FULL_ISOLATION.items()
                if not have.intersection(providers)}

    def line(self) -> str:
        """One line for logs and reports."""
        head = f"sandbox {self.backend}/{self.layer}" + (f" (accepted by {self.opt_in})" if self.opt_in else "")
        lacks = self.lacks
        body = ("full isolation" if not lacks else
                "LACKS " + "; ".join(f"{name} ({meaning})" for name, meaning in lacks.items()))
        return f"{head}: {body}" + "".join(f"; {note}" for note in self.notes)

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "layer": self.layer, "protections": list(self.protections),
                "lacks": self.lacks, "opt_in": self.opt_in, "notes": list(self.notes), "line": self.line()}


_LAYERS_USED: list[LayerInfo] = []
_LAYERS_LOCK = threading.Lock()


def record_layer(info: LayerInfo) -> None:
    """Note that a sandbox with this layer was built in this process (``layers_used`` reads them)."""
    with _LAYERS_LOCK:
        _LAYERS_USED.append(info)


def layers_used(since: int = 0) -> list[LayerInfo]:
    """The distinct layers of the sandboxes built in this process since ``layers_mark()`` gave ``since``."""
    with _LAYERS_LOCK:
        return list(dict.fromkeys(_LAYERS_USED[since:]))


def layers_mark() -> int:
    """A mark for ``layers_used(since=...)``: the layers recorded so far."""
    with _LAYERS_LOCK:
        return len(_LAYERS_USED)


class Sandbox(ABC):
    """Runs commands on files under limits. Subclasses implement ``run``.

    Args:
        limits: default limits for runs that pass none.
        max_workers: runs at once in ``run_many`` (and the bound a backend enforces).
    """

    name: str = "sandbox"

    def __init__(self, limits: Limits | Mapping[str, Any] | None = None, max_workers: int = 2) -> None:
        self.limits = as_limits(limits)
        if int(max_workers) < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self.max_workers = int(max_workers)

    @abstractmethod
    def run(self, files: Mapping[str, str | bytes], command: Sequence[str], *, stdin: str | bytes | None = None,
            limits: Limits | None = None, sealed: bytes | None = None) -> ExecutionResult:
        """Write ``files`` (relative paths -> content) into a fresh work directory and run ``command`` there.

        Args:
            files: relative POSIX paths (no ``..``) to text or bytes content.
            command: argv; ``command[0]`` is looked up on the sandbox's PATH.
            stdin: data fed to the program's standard input (empty when None).
            limits: this run's limits (default: the sandbox's).
            sealed: a payload for the run's first reader only, behind a fresh token (``sealed.py``);
                the result's ``verdict`` is what that reader wrote after the token.

        Returns:
            The result; never raises for anything the program does.
        """

    @property
    def protections(self) -> tuple[str, ...]:
        """The isolation layers every run of this sandbox gets (network: when ``Limits.network`` is off)."""
        return ()

    def layer(self) -> "LayerInfo":
        """Which layer this sandbox runs and what it lacks against a full one (``LayerInfo``)."""
        return LayerInfo(self.name, self.name, self.protections)

    def run_many(self, jobs: Sequence[Job]) -> list[ExecutionResult]:
        """Run ``jobs`` with at most ``max_workers`` at once; results in job order."""
        def one(j: Job) -> ExecutionResult:
            return self.run(j.files, j.command, stdin=j.stdin, limits=j.limits, sealed=j.sealed)

        if len(jobs) <= 1 or self.max_workers == 1:
            return [one(j) for j in jobs]
        with ThreadPoolExecutor(self.max_workers, thread_name_prefix=f"sandbox-{self.name}") as pool:
            return list(pool.map(one, jobs))

    def close(self) -> None:
        """Release resources (clients, pools)."""

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def classify(exit_code: int, timed_out: bool, limits: Limits, cpu_s: float | None = None,
             oom_killed: bool = False) -> tuple[Outcome, str | None]:
    """The outcome of a finished run and a note on it, from facts the program cannot write.

    Args:
        exit_code: exit status, ``-N`` for death by signal N (an init shell's ``128 + N`` already
            mapped: a program can make a failure look like a signal, never a success or a limit).
        timed_out: the sandbox killed the run at its wall-clock limit (the host's own timer).
        limits: the run's limits (for the notes and the CPU-limit check).
        cpu_s: CPU seconds of the run's whole tree as the kernel counted them (cgroup or rusage);
            None when unknown.
        oom_killed: the kernel's OOM killer ended a process of the run (its memory cgroup's counter,
            or docker's ``OOMKilled``).

    The program's stdout/stderr are never read here: printing ``MemoryError`` or a wrapper's error
    text changes nothing.
    """
    if timed_out:
        return Outcome.TIMEOUT, f"wall-clock limit of {limits.time_s:g} s reached; process tree killed"
    if oom_killed:
        return Outcome.MEMORY_LIMIT, f"killed by the OOM killer at the {limits.memory_mb} MiB memory limit"
    if exit_code == 0:
        return Outcome.OK, None
    if exit_code < 0:
        signum = -exit_code
        cpu_spent = cpu_s is not None and cpu_s >= limits.cpu_seconds * 0.8  # accounting granularity
        if signum == signal.SIGXCPU and (cpu_s is None or cpu_spent) or signum == signal.SIGKILL and cpu_spent:
            return Outcome.TIMEOUT, f"CPU limit of {limits.cpu_seconds} s reached"
        if signum == signal.SIGXFSZ:
            return Outcome.KILLED, f"file size limit of {limits.file_size_mb} MiB reached (SIGXFSZ)"
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        return Outcome.KILLED, f"killed by signal {signum} ({name})"
    return Outcome.ERROR_EXIT, None


def as_limits(value: Limits | Mapping[str, Any] | None, base: Limits | None = None) -> Limits:
    """A ``Limits`` from a Limits, a mapping of its fields (unknown keys are errors) or None (``base``)."""
    base = base or Limits()
    if value is None:
        return base
    if isinstance(value, Limits):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"limits must be a mapping of Limits fields, got {type(value).__name__}")
    known = set(Limits.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValueError(f"limits: unknown key(s) {unknown}; expected some of {sorted(known)}")
    return replace(base, **value)


def check_relative_path(path: str) -> str:
    """``path`` if it is a safe relative POSIX path inside the work directory, else ValueError."""
    from pathlib import PurePosixPath

    parts = PurePosixPath(path).parts
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        raise ValueError(f"sandbox file path {path!r} must be relative and stay inside the work directory")
    return path


def build_sandbox(spec: "Sandbox | Mapping[str, Any] | str | None" = None, **defaults: Any) -> "Sandbox":
    """A sandbox from a config value: an instance, a type name, or ``{"type": name, **options}``.

    Args:
        spec: e.g. ``"local"`` or ``{"type": "docker", "image": "monkeybarrel/sandbox-python:bookworm"}``;
            None means ``local``.
        **defaults: constructor options used when the spec does not give them (e.g. ``limits``).
    """
    if isinstance(spec, Sandbox):
        return spec
    if spec is None or isinstance(spec, str):
        spec = {"type": spec or "local"}
    if not isinstance(spec, Mapping):
        raise ValueError(f"sandbox must be a type name or a mapping with 'type', got {type(spec).__name__}")
    options = dict(spec)
    kind = options.pop("type", "local")
    for key, value in defaults.items():
        options.setdefault(key, value)
    factory = SANDBOXES.get(kind)
    try:
        return factory(**options)
    except TypeError as exc:
        raise ValueError(f"sandbox {kind!r}: {exc}") from None

