"""A pool of long-lived docker containers, one per (image, base commit, patch); commands run by exec.

Containers are the sandbox's ``DockerSession`` (``network_mode="none"``, dropped capabilities,
memory/pid/CPU limits, a per-command time limit: ``timeout -k`` inside, so a hung test is killed,
not waited on); this module adds the repository workspace (reset, patch) and the cache. At most
``max_workers`` containers exist at once. Results are cached on disk by a content hash of
(image id, base commit, patch, command, files, time limit), so an execution is never repeated.

Typical use::

    pool = ContainerPool(cache_dir="~/.cache/monkeybarrel/swe_exec", max_workers=4)
    ws = Workspace(image="monkeybarrel/swe-taskset:1", repo_dir="/repos/parse", base_commit=sha, patch=diff)
    [[result]] = pool.run([(ws, [Execution("python -m pytest -q tests")])])
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ...sandbox.docker_backend import DockerSession

OUTPUT_LIMIT = 64_000
"""Characters of output kept per execution (head and tail)."""
_SCRATCH = "/tmp/mb"
DEFAULT_CACHE = Path.home() / ".cache" / "monkeybarrel" / "swe_exec"
"""Where the pool caches execution results unless told otherwise."""


def cache_path(cache_dir: str | Path | None) -> Path:
    """``cache_dir`` with ``~`` expanded, or ``DEFAULT_CACHE`` when None."""
    return Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE


@dataclass(frozen=True)
class Workspace:
    """A repository state: ``image``'s checkout at ``repo_dir``, reset to ``base_commit``, plus ``patch``.

    ``patch`` None means the unpatched code.
    """

    image: str
    repo_dir: str
    base_commit: str
    patch: str | None = None


@dataclass(frozen=True)
class Execution:
    """A bash command run in the workspace's repository directory.

    Attributes:
        command: bash script text.
        files: extra files written before running, ``{absolute path: content}``.
        timeout_s: wall-clock limit; the command is killed at the limit.
        checked: the command runs a harness that attests its result with a sealed token
            (``DockerSession.exec_checked``); the result's ``verdict`` is what it wrote.
    """

    command: str
    files: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0
    checked: bool = False


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one execution.

    Attributes:
        exit_code: the command's exit status (None when it could not run).
        output: stdout+stderr (truncated to ``OUTPUT_LIMIT`` characters).
        timed_out: killed at the time limit.
        patch_applied: False when ``git apply`` rejected the workspace's patch (nothing ran).
        error: infrastructure failure message (container could not start, ...).
        wall_s: seconds the execution took (0 for a cache hit's original is kept).
        cached: served from the cache.
        verdict: for a ``checked`` execution, what its harness attested (None: no attestation: the
            harness never finished, or the line was forged).
    """

    exit_code: int | None
    output: str = ""
    timed_out: bool = False
    patch_applied: bool = True
    error: str | None = None
    wall_s: float = 0.0
    cached: bool = False
    verdict: str | None = None


@dataclass
class PoolStats:
    """Counters of what the pool did (for reports)."""

    containers: int = 0
    executions: int = 0
    cache_hits: int = 0
    apply_failures: int = 0
    timeouts: int = 0
    wall_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def as_dict(self) -> dict[str, float]:
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in vars(self).items() if not k.startswith("_")}


class ContainerPool:
    """Runs executions in per-workspace containers with bounded parallelism and a result cache.

    Args:
        cache_dir: where results are cached (None = no cache).
        max_workers: containers alive at once.
        mem_limit: docker memory limit per container.
        pids_limit: process limit per container (fork bombs).
        cpus: CPU share per container.
        client: a ``docker.DockerClient`` (default: ``docker.from_env()``).
    """

    def __init__(self, cache_dir: str | Path | None = None, max_workers: int = 2, mem_limit: str = "1g",
                 pids_limit: int = 256, cpus: float = 1.0, client: Any = None) -> None:
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else None
        self.max_workers, self.mem_limit, self.pids_limit, self.cpus = max_workers, mem_limit, pids_limit, cpus
        self._client = client
        self._image_ids: dict[str, str] = {}
        self.stats = PoolStats()

    # ---- docker -------------------------------------------------------------------------
    @property
    def client(self):
        if self._client is None:
            try:
                import docker
            except ImportError as exc:  # pragma: no cover - environment dependent
                raise ImportError("the container pool needs `pip install monkeybarrel[swebench]` (docker)") from exc
            self._client = docker.from_env()
        return self._client

    def image_id(self, image: str) -> str:
        """The image's content id (part of every cache key); raises if the image is missing."""
        if image not in self._image_ids:
            import docker.errors

            try:
                self._image_ids[image] = self.client.images.get(image).id
            except docker.errors.ImageNotFound:
                raise RuntimeError(f"docker image {image!r} not found; build it (e.g. .ci/swe_setup.sh)") from None
        return self._image_ids[image]

    # ---- cache --------------------------------------------------------------------------
    def cache_key(self, workspace: Workspace, execution: Execution) -> str:
        blob = json.dumps([self.image_id(workspace.image), workspace.repo_dir, workspace.base_commit, workspace.patch,
                           execution.command, sorted(execution.files), execution.timeout_s, execution.checked],
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _cache_get(self, key: str) -> ExecResult | None:
        if self.cache_dir is None:
            return None
        path = self.cache_dir / key[:2] / f"{key}.json"
        if not path.is_file():
            return None
        try:
            return ExecResult(**{**json.loads(path.read_text()), "cached": True})
        except (ValueError, TypeError):
            return None

    def _cache_put(self, key: str, result: ExecResult) -> None:
        if self.cache_dir is None or result.error is not None:
            return
        path = self.cache_dir / key[:2] / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps({**asdict(result), "cached": False}))
        tmp.replace(path)

    # ---- running ------------------------------------------------------------------------
    def run(self, jobs: Sequence[tuple[Workspace, Sequence[Execution]]]) -> list[list[ExecResult]]:
        """Run each job's executions in one container per distinct workspace.

        Args:
            jobs: ``(workspace, executions)`` pairs; equal workspaces share one container.

        Returns:
            ``results[j][e]``: the result of execution ``e`` of job ``j``.
        """
        began = time.perf_counter()
        results: list[list[ExecResult | None]] = [[None] * len(execs) for _, execs in jobs]
        todo: dict[Workspace, list[tuple[int, int, Execution, str]]] = {}
        for j, (workspace, executions) in enumerate(jobs):
            for e, execution in enumerate(executions):
                key = self.cache_key(workspace, execution)
                hit = self._cache_get(key)
                if hit is not None:
                    results[j][e] = hit
                    self.stats.add(cache_hits=1)
                else:
                    todo.setdefault(workspace, []).append((j, e, execution, key))
        with ThreadPoolExecutor(max_workers=max(1, self.max_workers)) as pool:
            for workspace, items, outcomes in zip(todo, todo.values(),
                                                  pool.map(lambda kv: self._run_workspace(*kv), todo.items())):
                for (j, e, _, key), outcome in zip(items, outcomes):
                    results[j][e] = outcome
                    self._cache_put(key, outcome)
        self.stats.add(wall_s=time.perf_counter() - began)
        return [list(r) for r in results]  # type: ignore[arg-type]

    def _run_workspace(self, workspace: Workspace, items: list[tuple[int, int, Execution, str]]) -> list[ExecResult]:
        """Start one container, reset + patch the repository, run the executions, remove the container."""
        try:
            with DockerSession(workspace.image, workspace.repo_dir, self.mem_limit, self.pids_limit, self.cpus,
                               client=self.client) as session:
                self.stats.add(containers=1)
                setup = f"git -c advice.detachedHead=false checkout -q -f {workspace.base_commit} && git clean -fdxq"
                files = {}
                if workspace.patch is not None:  # reset + patch in one exec (each docker round trip costs ~0.2 s)
                    files = {f"{_SCRATCH}/candidate.diff": workspace.patch}
                    setup = (f"{setup} || {{ echo 'MB_SETUP_FAILED'; exit 99; }}; "
                             f"git apply --verbose {_SCRATCH}/candidate.diff || "
                             f"git apply --verbose --recount --ignore-whitespace {_SCRATCH}/candidate.diff")
                code, output = _decoded(session.exec(setup, 120, files))
                if code != 0 and (workspace.patch is None or "MB_SETUP_FAILED" in output):
                    raise RuntimeError(f"cannot check out {workspace.base_commit} in {workspace.repo_dir}: {output[-500:]}")
                if code != 0:
                    self.stats.add(apply_failures=1)
                    failed = ExecResult(exit_code=None, output=_truncate(output), patch_applied=False)
                    return [failed] * len(items)
                return [self._execute(session, execution) for _, _, execution, _ in items]
        except Exception as exc:  # infrastructure failure: recorded on every execution, never raised
            return [ExecResult(exit_code=None, error=f"{type(exc).__name__}: {exc}")] * len(items)

    def _execute(self, session: DockerSession, execution: Execution) -> ExecResult:
        began = time.perf_counter()
        verdict = None
        if execution.checked:
            code, raw, verdict = session.exec_checked(execution.command, execution.timeout_s, dict(execution.files))
        else:
            code, raw = session.exec(execution.command, execution.timeout_s, dict(execution.files))
        code, output = _decoded((code, raw))
        timed_out = code in (124, 137) and time.perf_counter() - began >= execution.timeout_s * 0.95
        self.stats.add(executions=1, timeouts=int(timed_out))
        return ExecResult(exit_code=code, output=_truncate(output), timed_out=timed_out,
                          wall_s=round(time.perf_counter() - began, 3), verdict=verdict)


def _decoded(result: tuple[int, bytes]) -> tuple[int, str]:
    return result[0], result[1].decode("utf-8", "replace")


def _truncate(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    half = OUTPUT_LIMIT // 2
    return text[:half] + f"\n... [{len(text) - OUTPUT_LIMIT} characters cut] ...\n" + text[-half:]
