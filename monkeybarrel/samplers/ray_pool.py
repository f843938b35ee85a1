"""The ``ray`` backend: any other backend spread over a pool of Ray actors (extra ``[ray]``).

Each actor builds the inner sampler once (one per GPU with ``num_gpus_per_worker: 1``, or per
``num_cpus_per_worker`` CPUs) and samples tasks of ``requests_per_task`` problems as streaming
generators, so every problem's candidates reach the runner, and so the store, as soon as a worker
yields them. Each worker has up to ``tasks_per_worker`` tasks queued, so it never idles between tasks.

Failures: when a worker process dies (killed, out of memory, node lost) the samples of its
unfinished tasks that had not come back are queued again for the other workers, and a replacement
worker is started (at most ``max_worker_restarts`` in all); what came back before the death is kept,
so nothing is lost or sampled twice. A problem in flight during ``max_attempts`` worker deaths
becomes error candidates (it probably kills its worker). An exception inside the inner sampler
becomes error candidates like in any backend.

Cluster: ``address`` (or ``$RAY_ADDRESS``) joins a running cluster (``ray://head:10001`` or
``auto``); otherwise a local Ray instance is started and shut down again by ``close()``.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ..core.config import GeneratorSpec
from ..core.records import Candidate
from .base import SAMPLERS, SampleRequest, Sampler


class _Worker:
    """A Ray actor holding one inner sampler (wrapped with ``ray.remote`` at start-up)."""

    def __init__(self, spec: GeneratorSpec, options: dict[str, Any]) -> None:
        from ..core.plugins import build_plugin

        self.sampler = build_plugin(SAMPLERS, spec.backend, f"generators[id={spec.id}].options.backend", spec=spec,
                                    **options)
        load = getattr(self.sampler, "load", None)
        if load is not None:
            load()  # a model that cannot load fails the actor's start, and so the run

    def info(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": context.get_node_id(), "gpu_ids": ray.get_gpu_ids()}

    def sample(self, requests: list[SampleRequest]) -> Iterator[list[Candidate]]:
        yield from self.sampler.sample(requests)

    def close(self) -> None:
        self.sampler.close()


@dataclass
class _Handle:
    actor: Any
    started: float
    ready: Any = None  # the ObjectRef of ``info()`` until the actor is up
    info: dict[str, Any] = field(default_factory=dict)
    busy: int = 0
    ended: float | None = None


@dataclass
class _Task:
    handle: _Handle
    outstanding: dict[str, tuple[SampleRequest, set[int]]]  # problem_id -> (request, indices not yet back)


@SAMPLERS.register("ray")
class RaySampler(Sampler):
    """Spreads problems over Ray actors that each run another backend.

    Args:
        spec: generator configuration; its sampling settings go to the inner backend.
        backend: the backend each worker runs (``embedded``, ``vllm``, ``openai`` or a plug-in).
        backend_options: options of that backend (e.g. ``{"num_threads": 1}``, ``{"tensor_parallel_size": 2}``).
        num_workers: actors to start; None = one per GPU of the cluster when ``num_gpus_per_worker`` > 0,
            else cluster CPUs // ``num_cpus_per_worker``.
        address: Ray cluster to join (``auto``, ``ray://host:10001``); None = ``$RAY_ADDRESS`` or a local instance.
        num_cpus_per_worker, num_gpus_per_worker: resources each actor reserves.
        requests_per_task: problems per actor task (the inner backend batches across them).
        tasks_per_worker: tasks queued on each actor at once.
        max_worker_restarts: replacement actors started after worker deaths, in all.
        max_attempts: worker deaths a problem may see before it is recorded as failed.
        start_timeout_s: how long to wait for a replacement worker when no other work is running (seconds).
        runtime_env: Ray runtime environment for the job (``pip``, ``env_vars``, ``working_dir``...).
        init_options: further ``ray.init`` arguments (e.g. ``{"object_store_memory": 10**9}``).
    """

    def __init__(self, spec: GeneratorSpec, backend: str = "embedded", backend_options: dict[str, Any] | None = None,
                 num_workers: int | None = None, address: str | None = None, num_cpus_per_worker: float = 1.0,
                 num_gpus_per_worker: float = 0.0, requests_per_task: int = 4, tasks_per_worker: int = 2,
                 max_worker_restarts: int = 4, max_attempts: int = 3, start_timeout_s: float = 900.0,
                 runtime_env: dict[str, Any] | None = None, init_options: dict[str, Any] | None = None) -> None:
        super().__init__(spec)
        if backend == "ray":
            raise ValueError("backend must be another sampler backend than 'ray'")
        for name, value, low in (("num_workers", num_workers or 1, 1), ("requests_per_task", requests_per_task, 1),
                                 ("tasks_per_worker", tasks_per_worker, 1), ("max_attempts", max_attempts, 1),
                                 ("max_worker_restarts", max_worker_restarts, 0),
                                 ("num_cpus_per_worker", num_cpus_per_worker, 0),
                                 ("num_gpus_per_worker", num_gpus_per_worker, 0)):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        self.inner_spec = spec.model_copy(update={"backend": backend, "options": dict(backend_options or {})})
        self.num_workers, self.address = num_workers, address
        self.num_cpus_per_worker, self.num_gpus_per_worker = num_cpus_per_worker, num_gpus_per_worker
        self.requests_per_task, self.tasks_per_worker = requests_per_task, tasks_per_worker
        self.max_worker_restarts, self.max_attempts = max_worker_restarts, max_attempts
        self.start_timeout_s = start_timeout_s
        self.runtime_env, self.init_options = runtime_env, dict(init_options or {})
        self.workers: list[_Handle] = []
        self.stats = {"worker_deaths": 0, "requeued_samples": 0, "restarts": 0}
        """Worker deaths seen, samples queued again after them, replacement workers started."""
        self._retired: list[_Handle] = []
        self._started_ray = False
        self._actor_class = None

    # ---- workers -------------------------------------------------------------------------
    def load(self) -> None:
        """Join or start Ray and start the workers (each loads its model before this returns)."""
        if self.workers:
            return
        try:
            import ray
        except ImportError as exc:
            raise ImportError("the ray backend needs Ray: `pip install 'monkeybarrel[ray]'`") from exc
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            options = {"include_dashboard": False} if address is None else {}
            ray.init(address=address, runtime_env=self.runtime_env, log_to_driver=False,
                     **{**options, **self.init_options})
            self._started_ray = True
        self._actor_class = ray.remote(_Worker)
        count = self.num_workers or self._default_workers(ray.cluster_resources())
        handles = [self._spawn() for _ in range(count)]
        infos = ray.get([h.ready for h in handles])  # raises if a worker cannot start (e.g. its model)
        for handle, info in zip(handles, infos):
            handle.info, handle.ready = info, None
        self.workers = handles

    def _default_workers(self, resources: dict[str, float]) -> int:
        if self.num_gpus_per_worker > 0:
            count = int(resources.get("GPU", 0) // self.num_gpus_per_worker)
            if count < 1:
                raise RuntimeError(f"the Ray cluster has {resources.get('GPU', 0)} GPUs; "
                                   f"num_gpus_per_worker={self.num_gpus_per_worker} needs at least that many")
            return count
        return max(1, int(resources.get("CPU", 1) // max(self.num_cpus_per_worker, 1e-9)))

    def _spawn(self) -> _Handle:
        actor = self._actor_class.options(num_cpus=self.num_cpus_per_worker, num_gpus=self.num_gpus_per_worker,
                                          max_restarts=0).remote(self.inner_spec, self.inner_spec.options)
        return _Handle(actor, time.perf_counter(), ready=actor.info.remote())

    def worker_info(self) -> list[dict[str, Any]]:
        """``pid``, ``node_id`` and ``gpu_ids`` of each live worker."""
        self.load()
        return [h.info for h in self.workers if h.ready is None]

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds held by the workers: GPUs per worker x seconds each worker was alive."""
        now = time.perf_counter()
        return sum(self.num_gpus_per_worker * ((h.ended or now) - h.started) for h in self.workers + self._retired)

    # ---- sampling ------------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        return [c for batch in self.sample([request]) for c in batch]

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield candidates as workers produce them (one list per request or part of a request)."""
        import ray
        from ray.exceptions import RayActorError

        self.load()
        todo: deque[SampleRequest] = deque(requests)
        attempts: dict[str, int] = {}
        inflight: dict[Any, _Task] = {}
        while todo or inflight:
            for handle in self.workers:
                while todo and handle.ready is None and handle.busy < self.tasks_per_worker:
                    batch = [todo.popleft() for _ in range(min(self.requests_per_task, len(todo)))]
                    generator = handle.actor.sample.options(num_returns="streaming").remote(batch)
                    inflight[generator] = _Task(handle, {r.problem.problem_id: (r, set(r.sample_indices))
                                                         for r in batch})
                    handle.busy += 1
            starting = {h.ready: h for h in self.workers if h.ready is not None}
            if not inflight and not starting:
                raise RuntimeError(f"no Ray sampler workers left; {len(todo)} problems were not sampled "
                                   "(run again to resume)")
            ready, _ = ray.wait([*inflight, *starting], num_returns=1,
                                timeout=None if inflight else self.start_timeout_s)
            if not ready:
                raise RuntimeError(f"no Ray sampler worker started within {self.start_timeout_s} s; "
                                   f"{len(todo)} problems were not sampled (run again to resume)")
            if ready[0] in starting:
                self._started(starting[ready[0]])
                continue
            task = inflight[ready[0]]
            try:
                candidates = ray.get(next(ready[0]))
            except StopIteration:
                del inflight[ready[0]]
                task.handle.busy -= 1
                yield from self._unreturned(task, RuntimeError("the worker finished the task without these samples"))
                continue
            except RayActorError as exc:
                yield from self._worker_died(task.handle, inflight, todo, attempts, exc)
                continue
            except Exception as exc:  # the inner sampler raised: its problems become error candidates
                del inflight[ready[0]]
                task.handle.busy -= 1
                yield from self._unreturned(task, exc)
                continue
            if candidates:
                _, indices = task.outstanding.get(candidates[0].problem_id, (None, set()))
                indices.difference_update(c.sample_index for c in candidates)
                yield candidates

    def _started(self, handle: _Handle) -> None:
        """A replacement worker finished starting (or failed to)."""
        import ray

        try:
            handle.info, handle.ready = ray.get(handle.ready), None
        except Exception:
            self._retire(handle)

    def _retire(self, handle: _Handle) -> None:
        handle.ended = time.perf_counter()
        self.workers = [h for h in self.workers if h is not handle]
        self._retired.append(handle)

    def _unreturned(self, task: _Task, exc: BaseException) -> Iterator[list[Candidate]]:
        for request, indices in task.outstanding.values():
            if indices:
                yield self.failed(_subset(request, indices), exc, 0.0)

    def _worker_died(self, handle: _Handle, inflight: dict[Any, _Task], todo: deque[SampleRequest],
                     attempts: dict[str, int], exc: BaseException) -> Iterator[list[Candidate]]:
        """Queue the lost samples again (or record them as failed) and replace the worker."""
        self.stats["worker_deaths"] += 1
        self._retire(handle)
        for generator in [g for g, t in inflight.items() if t.handle is handle]:
            for request, indices in inflight.pop(generator).outstanding.values():
                if not indices:
                    continue
                pid = request.problem.problem_id
                attempts[pid] = attempts.get(pid, 0) + 1
                lost = _subset(request, indices)
                if attempts[pid] >= self.max_attempts:
                    yield self.failed(lost, RuntimeError(
                        f"sampler worker died {attempts[pid]} times while sampling this problem: {exc}"), 0.0)
                else:
                    self.stats["requeued_samples"] += len(indices)
                    todo.appendleft(lost)
        if self.stats["restarts"] < self.max_worker_restarts:
            self.stats["restarts"] += 1
            self.workers.append(self._spawn())  # gets tasks once it has started

    def close(self) -> None:
        """Stop the workers, and the local Ray instance if this sampler started it."""
        if not self.workers and not self._started_ray:
            return
        import ray

        for handle in self.workers:
            try:
                ray.get(handle.actor.close.remote(), timeout=60)
            except Exception:
                pass
            ray.kill(handle.actor)
            handle.ended = time.perf_counter()
        self._retired += self.workers
        self.workers = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


def _subset(request: SampleRequest, indices: set[int]) -> SampleRequest:
    """``request`` restricted to ``indices`` (same problem and seed)."""
    return SampleRequest(request.problem, tuple(i for i in request.sample_indices if i in indices), request.seed)
