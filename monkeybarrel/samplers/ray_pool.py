"""The ``ray`` backend: any other backend spread over a pool of Ray actors (extra ``[ray]``).

Each actor builds the inner sampler once (one per GPU with ``num_gpus_per_worker: 1``, the default for
``vllm``; or per ``num_cpus_per_worker`` CPUs) and samples tasks as streaming generators, so every
problem's candidates reach the runner, and so the store, as soon as a worker yields them.

Work is handed out by tokens, not by a count of problems: a problem costs its prompt (estimated at 4
characters a token) plus ``n x max_tokens``; each worker holds up to ``tokens_in_flight`` of them
(default: twice what its engine decodes at once, e.g. 2 x 2,048 sequences for vLLM with our attention), never
more than its fair share: what is not back yet (queued or held by any worker) / the workers, those still
starting included. So one worker is filled, N workers split the job N ways, and a worker that comes up late
finds its share waiting (:func:`hand_out`). Work starts on each worker as soon as it is up, not
when the last one is.
A worker whose inner sampler batches continuously (``vllm``: :meth:`VLLMSampler.serve`) runs one
engine loop fed by all of its tasks, so its batch never drains between tasks; other backends sample
one task at a time.

Start-up: :meth:`RaySampler.prestart` starts Ray and the actors and returns at once (the runner calls it
before the task's data load, so the actors' imports and engine start overlap it); ``timings`` records
``ray_init_s``, ``workers_ready_s`` and where the slowest worker's start went (:func:`start_figures`). Inside ``shared_engines()`` (a sweep) the actors outlive each
experiment: later experiments with the same model and options reuse them.

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

import itertools
import math
import os
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ..core.config import GeneratorSpec
from ..core.records import Candidate
from .base import SAMPLERS, SampleRequest, Sampler, wall_time_shares
from .gpu_sharing import gpu_turn, share_key
from .vllm_engine import OUTSIDE_SHARE, engine_devices, fits_one_gpu, shared_gpu_memory

ENGINE_ROWS = {"vllm": 2048, "embedded": 64, "openai": 64}
"""Sequences an inner backend decodes at once by default (vLLM's ``max_num_seqs`` with our attention, the
embedded sampler's ``max_batch``, the OpenAI client's ``max_concurrency``)."""
ROW_OPTION = {"vllm": ("engine_kwargs", "max_num_seqs"), "embedded": (None, "max_batch"),
              "openai": (None, "max_concurrency")}
ENGINE_IN_ACTOR = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""Environment of a one-GPU vLLM worker (``engine_in_actor``): vLLM's engine core runs in the actor's process.
Inside a Ray actor vLLM otherwise spawns the engine core, which imports torch and vLLM and initialises CUDA
again: on an H100 a worker was up 31 s sooner (engine start 45 s instead of 78 s, 8B shape, filled engine
cache) for 2.5 % less generation speed (benchmarks/multi_gpu_h100.json)."""


class _Worker:
    """A Ray actor holding one inner sampler (wrapped with ``ray.remote`` at start-up).

    With a continuous inner sampler (one that has ``serve``), a thread runs its engine loop over a
    queue that every task feeds, and each task yields its own problems' candidates back; the actor is
    threaded (``max_concurrency``), so tasks wait on their queues side by side.
    """

    def __init__(self, spec: GeneratorSpec, options: dict[str, Any], expected_sharing: float | None = None,
                 spawned_at: float | None = None, start_alone: bool = False, share_token: str | None = None) -> None:
        from ..core.plugins import build_plugin

        began, entered = time.perf_counter(), time.time()
        backend = SAMPLERS.get(spec.backend) if spec.backend in SAMPLERS else None
        prepare = getattr(backend, "prepare", None)
        if prepare is not None:  # the engine library's import touches no GPU: workers sharing one import side by side
            prepare()
        imported_s = time.perf_counter() - began
        key, measures = share_key(backend, spec.backend, spec.model, options, share_token,
                                  expected_sharing=expected_sharing)
        with gpu_turn(start_alone, key, measures) as turn:  # engines sharing a GPU: gpu_sharing's module docstring
            turn_at = time.time()
            shared = {"kv_cache_memory_bytes": turn.shared_bytes} if turn.shared_bytes else {}
            self.sampler = build_plugin(SAMPLERS, spec.backend, f"generators[id={spec.id}].options.backend",
                                        spec=spec, **options, **shared)
            if expected_sharing is not None and hasattr(self.sampler, "expected_sharing"):
                self.sampler.expected_sharing = expected_sharing  # `attention: auto` decides before requests come
            if turn.measuring and hasattr(self.sampler, "on_kv_cache_sized"):
                self.sampler.on_kv_cache_sized = turn.publish  # the others of its key start once it has its size
            load = getattr(self.sampler, "load", None)
            if load is not None:
                load()  # a model that cannot load fails the actor's start, and so the run
            turn.publish(getattr(self.sampler, "kv_cache_bytes", None))  # if not done as the engine started
            up_at = time.time()
        self._turn = turn
        # where a worker's start goes: Ray placing it and starting its process (up to here, by the wall clock of
        # both ends: one host, or clocks in step), then importing the engine library (before the turn), building +
        # loading the inner sampler, of which the engine's own start (with the phases vLLM times)
        self.start = {"actor_up_s": round(entered - spawned_at, 3) if spawned_at is not None else None,
                      "init_s": round(time.perf_counter() - began, 3),
                      "import_s": (None if getattr(self.sampler, "import_s", None) is None
                                   else round(imported_s + self.sampler.import_s, 3)),
                      "engine_start_s": getattr(self.sampler, "engine_start_s", None),
                      "engine_phases": dict(getattr(self.sampler, "start_phases", None) or {}),
                      "turn_wait_s": turn.wait_s, "before_turn_s": round(imported_s, 3),
                      # the KV cache: the size it started with, published by its GPU's first engine of its kind (None:
                      # measured its own), the bytes and blocks it got, and when it published its own (into its turn)
                      "kv_cache_shared_bytes": turn.shared_bytes,
                      "kv_cache_bytes": getattr(self.sampler, "kv_cache_bytes", None),
                      "kv_cache_blocks": getattr(self.sampler, "kv_cache_blocks", None),
                      "kv_cache_published_s": turn.published_s,
                      "turn_at": round(turn_at, 3), "up_at": round(up_at, 3)}  # wall clock: its start's span
        self._feed: queue.Queue = queue.Queue()
        self._routes: dict[int, queue.Queue] = {}
        self._tasks = itertools.count()
        self._lock = threading.Lock()
        self._engine: threading.Thread | None = None

    def info(self) -> dict[str, Any]:
        import ray

        context = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": context.get_node_id(), "gpu_ids": ray.get_gpu_ids(), **self.start}

    def sample(self, requests: list[SampleRequest], spec: GeneratorSpec) -> Iterator[list[Candidate]]:
        if not hasattr(self.sampler, "serve"):
            with self._lock:  # one task at a time through a sampler that is not continuous
                self.sampler.rebind(spec)
                yield from self.sampler.sample(requests)
            return
        task, out = next(self._tasks), queue.Queue()
        self._routes[task] = out
        self._start_engine()
        for request in requests:
            self._feed.put((task, request, spec))
        remaining = sum(len(r.sample_indices) for r in requests)
        try:
            while remaining > 0:
                candidates = out.get()
                if isinstance(candidates, BaseException):
                    raise candidates
                remaining -= len(candidates)
                yield candidates
        finally:
            del self._routes[task]

    def _start_engine(self) -> None:
        with self._lock:
            if self._engine is None:
                self._engine = threading.Thread(target=self._serve, name="monkeybarrel-engine", daemon=True)
                self._engine.start()

    def _serve(self) -> None:
        def take(block: bool):
            try:
                return self._feed.get(block=block)
            except queue.Empty:
                return None

        try:
            for task, candidates in self.sampler.serve(take, lambda: False):
                route = self._routes.get(task)
                if route is not None:
                    route.put(candidates)
        except BaseException as exc:  # the engine died: every waiting task fails with its error
            for route in list(self._routes.values()):
                route.put(exc)

    def close(self) -> None:
        self.sampler.close()
        self._turn.forget()  # the pool is closing: its published sizes go


@dataclass
class _Handle:
    actor: Any
    started: float
    ready: Any = None  # the ObjectRef of ``info()`` until the actor is up
    info: dict[str, Any] = field(default_factory=dict)
    busy: int = 0
    tokens: float = 0.0  # estimated tokens of its samples not yet back
    ended: float | None = None


@dataclass
class _Task:
    handle: _Handle
    outstanding: dict[str, tuple[SampleRequest, set[int]]]  # problem_id -> (request, indices not yet back)
    per_sample: dict[str, float]  # problem_id -> estimated tokens per sample


class _Todo(deque):
    """Requests still to hand out, as (request, estimated tokens) pairs, with their running token total."""

    def __init__(self, items: Iterable[tuple[SampleRequest, float]] = ()) -> None:
        super().__init__()
        self.tokens = 0.0
        for item in items:
            self.append(item)

    def append(self, item: tuple[SampleRequest, float]) -> None:
        super().append(item)
        self.tokens += item[1]

    def appendleft(self, item: tuple[SampleRequest, float]) -> None:
        super().appendleft(item)
        self.tokens += item[1]

    def popleft(self) -> tuple[SampleRequest, float]:
        item = super().popleft()
        self.tokens -= item[1]
        return item


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
        num_cpus_per_worker: CPUs each actor reserves.
        num_gpus_per_worker: GPUs each actor reserves; None = the inner vLLM's ``tensor_parallel_size``
            (1) for ``vllm``, else 0 (or 1 / ``engines_per_gpu``).
        engines_per_gpu: ``vllm`` workers sharing each GPU (tensor_parallel_size 1): each reserves 1 / this of a
            GPU and, unless ``backend_options`` say otherwise, its ``gpu_memory_utilization`` share
            (:func:`~monkeybarrel.samplers.vllm_engine.shared_gpu_memory`: 0.43 for 2, 0.195 for 4). Where a step is
            bound by vLLM's per-sequence CPU work (small models, thousands of sequences), K engines do it in K
            processes: 1B on an H100, two engines 2.00x one (benchmarks/monkeys_throughput_h100.json); an 8B
            engine is GPU-bound and two are slower. Engines sharing a GPU import vLLM side by side; the first
            measures its KV cache alone and publishes the size, then the others start together with that size
            (:mod:`~monkeybarrel.samplers.gpu_sharing`; one after another where the size cannot be read).
        tokens_in_flight: estimated tokens (prompt + n x max_tokens per problem) a worker holds at once;
            None = 2 x the sequences its engine decodes at once x (max_tokens + 256).
        requests_per_task: at most this many problems per task (None: only tokens decide).
        tasks_per_worker: tasks queued on each actor at once.
        max_worker_restarts: replacement actors started after worker deaths, in all.
        max_attempts: worker deaths a problem may see before it is recorded as failed.
        start_timeout_s: how long to wait for a replacement worker when no other work is running (seconds).
        engine_in_actor: a ``vllm`` worker of one GPU runs vLLM's engine core in its own process
            (:data:`ENGINE_IN_ACTOR`; False: vLLM's own engine-core process, spawned). Ignored for other backends,
            tensor or pipeline parallel workers, and when ``runtime_env`` sets that variable itself.
        runtime_env: Ray runtime environment for the job (``pip``, ``env_vars``, ``working_dir``...).
        init_options: further ``ray.init`` arguments (e.g. ``{"object_store_memory": 10**9}``).
    """

    def __init__(self, spec: GeneratorSpec, backend: str = "embedded", backend_options: dict[str, Any] | None = None,
                 num_workers: int | None = None, address: str | None = None, num_cpus_per_worker: float = 1.0,
                 num_gpus_per_worker: float | None = None, tokens_in_flight: int | None = None,
                 requests_per_task: int | None = None, tasks_per_worker: int = 2, max_worker_restarts: int = 4,
                 max_attempts: int = 3, start_timeout_s: float = 900.0, engine_in_actor: bool = True,
                 engines_per_gpu: int = 1, runtime_env: dict[str, Any] | None = None,
                 init_options: dict[str, Any] | None = None) -> None:
        super().__init__(spec)
        if backend == "ray":
            raise ValueError("backend must be another sampler backend than 'ray'")
        options = dict(backend_options or {})
        if engines_per_gpu != 1:
            num_gpus_per_worker = share_gpus(backend, options, engines_per_gpu, num_gpus_per_worker)
        if num_gpus_per_worker is None:
            num_gpus_per_worker = float(options.get("tensor_parallel_size", 1)) if backend == "vllm" else 0.0
        for name, value, low in (("num_workers", num_workers, 1), ("requests_per_task", requests_per_task, 1),
                                 ("tokens_in_flight", tokens_in_flight, 1),
                                 ("tasks_per_worker", tasks_per_worker, 1), ("max_attempts", max_attempts, 1),
                                 ("max_worker_restarts", max_worker_restarts, 0),
                                 ("num_cpus_per_worker", num_cpus_per_worker, 0),
                                 ("num_gpus_per_worker", num_gpus_per_worker, 0)):
            if value is not None and value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        self.backend = backend
        self.inner_spec = spec.model_copy(update={"backend": backend, "options": options})
        self.num_workers, self.address = num_workers, address
        self.num_cpus_per_worker, self.num_gpus_per_worker = num_cpus_per_worker, num_gpus_per_worker
        self.tokens_in_flight, self.requests_per_task = tokens_in_flight, requests_per_task
        self.tasks_per_worker = tasks_per_worker
        self.max_worker_restarts, self.max_attempts = max_worker_restarts, max_attempts
        self.start_timeout_s = start_timeout_s
        self.runtime_env, self.init_options = runtime_env, dict(init_options or {})
        self.engine_in_actor = engine_in_actor
        self.workers: list[_Handle] = []
        self.stats = {"worker_deaths": 0, "requeued_samples": 0, "restarts": 0, "start_failures": 0}
        """Worker deaths seen, samples queued again after them, replacement workers started, workers that
        could not start."""
        self.timings: dict[str, float] = {}
        """``ray_init_s`` (joining or starting Ray) and ``workers_ready_s`` (from :meth:`prestart` until every
        first worker has built its sampler, model and engine included; when a job ends before all are up, until
        the last that was, with ``workers_not_up`` counting the others)."""
        self._retired: list[_Handle] = []
        self._started_ray = False
        self._actor_class = None
        self._prestarted: float | None = None
        self._first_start: list[_Handle] = []  # the workers :meth:`prestart` started (the start figures' cohort)
        self._start_error: BaseException | None = None
        self._share_token = uuid.uuid4().hex[:12]  # this pool's engines on a GPU share a KV size (gpu_sharing)

    # ---- engine sharing ------------------------------------------------------------------
    def rebind(self, spec: GeneratorSpec) -> None:
        super().rebind(spec)
        self.inner_spec = spec.model_copy(update={"backend": self.backend, "options": self.inner_spec.options})

    # ---- workers -------------------------------------------------------------------------
    def prestart(self) -> None:
        """Join or start Ray and start the workers without waiting for them (their models load meanwhile)."""
        if self.workers:
            return
        try:
            import ray
        except ImportError as exc:
            raise ImportError("the ray backend needs Ray: `pip install 'monkeybarrel[ray]'`") from exc
        self._prestarted = time.perf_counter()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS")
            options = {"include_dashboard": False} if address is None else {}
            ray.init(address=address, runtime_env=self.runtime_env, log_to_driver=False,
                     **{**options, **self.init_options})
            self._started_ray = True
        self.timings["ray_init_s"] = round(time.perf_counter() - self._prestarted, 3)
        self._actor_class = ray.remote(_Worker)
        count = self.num_workers or default_workers(ray.cluster_resources(), self.num_gpus_per_worker,
                                                        self.num_cpus_per_worker)
        self.workers = [self._spawn() for _ in range(count)]
        self._first_start = list(self.workers)

    def load(self) -> None:
        """Start Ray and the workers, and wait until each has loaded its model (raises if one cannot)."""
        self.prestart()
        import ray

        starting = {h.ready: h for h in self.workers if h.ready is not None}
        while starting:  # one at a time, to know when each came up
            done, _ = ray.wait(list(starting), num_returns=1)
            error = self._started(starting.pop(done[0]))
            if error is not None:
                raise error  # e.g. its model cannot load

    def _started(self, handle: _Handle) -> BaseException | None:
        """``handle`` finished starting: keep its ``info`` (with ``ready_s``), or retire it and return the error
        if it could not start. Once every worker of the first start is up (or failed), the start figures."""
        import ray

        try:
            handle.info, handle.ready = ray.get(handle.ready), None
        except Exception as exc:
            self._retire(handle)
            self.stats["start_failures"] += 1
            self._start_error = exc
            return exc
        handle.info["ready_s"] = round(time.perf_counter() - self._prestarted, 3)
        self._record_start()
        return None

    def _record_start(self, job_done: bool = False) -> None:
        """The start figures (:func:`start_figures`) of the first start's workers that came up, once the last
        of them is up, or when the job is done (``workers_not_up``: the others); recorded once."""
        up = [h.info for h in self._first_start if h.info]
        starting = any(h.ready is not None and h.ended is None for h in self._first_start)
        if "workers_ready_s" in self.timings or not up or (starting and not job_done):
            return
        self.timings.update(start_figures(up))
        if len(up) < len(self._first_start) and job_done:
            self.timings["workers_not_up"] = len(self._first_start) - len(up)

    def actor_options(self) -> dict[str, Any]:
        """Ray ``.options()`` of each worker actor: its resources and, for a one-GPU ``vllm`` worker with
        ``engine_in_actor``, the environment keeping vLLM's engine core in the actor (merged with the job's)."""
        options = {"num_cpus": self.num_cpus_per_worker, "num_gpus": self.num_gpus_per_worker, "max_restarts": 0,
                   "max_concurrency": self.tasks_per_worker + 1}
        chosen = set(((self.runtime_env or {}).get("env_vars") or {})) & set(ENGINE_IN_ACTOR)
        one_gpu = engine_devices(self.inner_spec.options) == 1
        if self.backend == "vllm" and self.engine_in_actor and one_gpu and not chosen:
            options["runtime_env"] = {"env_vars": dict(ENGINE_IN_ACTOR)}
        return options

    def _spawn(self) -> _Handle:
        actor = self._actor_class.options(**self.actor_options()).remote(  # workers sharing a GPU start in turn
            self.inner_spec, self.inner_spec.options, float(self.spec.num_samples), time.time(),
            0 < self.num_gpus_per_worker < 1, self._share_token)
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

    # ---- work sizing ---------------------------------------------------------------------
    def worker_tokens(self) -> float:
        """Estimated tokens a worker holds at once (``tokens_in_flight`` or its default)."""
        if self.tokens_in_flight is not None:
            return float(self.tokens_in_flight)
        container, key = ROW_OPTION.get(self.backend, (None, ""))
        options = self.inner_spec.options
        rows = (options.get(container) or {}) if container else options
        engine_rows = rows.get(key) or ENGINE_ROWS.get(self.backend, 64)
        return 2.0 * engine_rows * (self.spec.max_tokens + 256)

    def request_tokens(self, request: SampleRequest) -> float:
        """Estimated tokens of ``request``: its prompt (4 characters a token) + samples x max_tokens."""
        prompt = sum(len(m["content"]) for m in self.messages(request.problem)) / 4
        return prompt + len(request.sample_indices) * self.spec.max_tokens

    def _hand_out(self, todo: _Todo) -> list[tuple[_Handle, list[tuple[SampleRequest, float]]]]:
        """Next tasks for the workers that are up (:func:`hand_out` with this pool's sizes)."""
        return hand_out(todo, self.workers, self.worker_tokens(), self.tasks_per_worker, self.requests_per_task)

    # ---- sampling ------------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        return [c for batch in self.sample([request]) for c in batch]

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield candidates as workers produce them (one list per request or part of a request); each
        candidate's ``wall_time_s`` is its share of this call's wall time (``wall_time_shares``: the
        workers' own figures overlap)."""
        return wall_time_shares(self._gather(requests))

    def _gather(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        import ray
        from ray.exceptions import RayActorError

        self.prestart()  # each worker gets work as soon as it is up (:meth:`_hand_out` keeps the others' share)
        todo = _Todo((r, self.request_tokens(r)) for r in requests)
        attempts: dict[str, int] = {}
        inflight: dict[Any, _Task] = {}
        while todo or inflight:
            for handle, batch in self._hand_out(todo):
                generator = handle.actor.sample.options(num_returns="streaming").remote(
                    [r for r, _ in batch], self.inner_spec)
                inflight[generator] = _Task(handle, {r.problem.problem_id: (r, set(r.sample_indices))
                                                     for r, _ in batch},
                                            {r.problem.problem_id: t / len(r.sample_indices) for r, t in batch})
            starting = {h.ready: h for h in self.workers if h.ready is not None}
            if not inflight and not starting:
                if not any(h.info for h in self.workers + self._retired) and self._start_error is not None:
                    raise self._start_error  # no worker ever started (e.g. the model cannot load)
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
                task.handle.tokens -= _unreturned_tokens(task)
                yield from self._unreturned(task, RuntimeError("the worker finished the task without these samples"))
                continue
            except RayActorError as exc:
                yield from self._worker_died(task.handle, inflight, todo, attempts, exc)
                continue
            except Exception as exc:  # the inner sampler raised: its problems become error candidates
                del inflight[ready[0]]
                task.handle.busy -= 1
                task.handle.tokens -= _unreturned_tokens(task)
                yield from self._unreturned(task, exc)
                continue
            if candidates:
                pid = candidates[0].problem_id
                _, indices = task.outstanding.get(pid, (None, set()))
                back = indices & {c.sample_index for c in candidates}
                indices.difference_update(back)
                task.handle.tokens -= len(back) * task.per_sample.get(pid, 0.0)
                yield candidates
        self._record_start(job_done=True)  # the job may end before every worker is up

    def _retire(self, handle: _Handle) -> None:
        handle.ended = time.perf_counter()
        self.workers = [h for h in self.workers if h is not handle]
        self._retired.append(handle)

    def _unreturned(self, task: _Task, exc: BaseException) -> Iterator[list[Candidate]]:
        for request, indices in task.outstanding.values():
            if indices:
                yield self.failed(_subset(request, indices), exc, 0.0)

    def _worker_died(self, handle: _Handle, inflight: dict[Any, _Task], todo: _Todo,
                     attempts: dict[str, int], exc: BaseException) -> Iterator[list[Candidate]]:
        """Queue the lost samples again (or record them as failed) and replace the worker."""
        self.stats["worker_deaths"] += 1
        self._retire(handle)
        for generator in [g for g, t in inflight.items() if t.handle is handle]:
            task = inflight.pop(generator)
            for request, indices in task.outstanding.values():
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
                    todo.appendleft((lost, len(indices) * task.per_sample.get(pid, 0.0)))
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


def hand_out(todo: _Todo, workers: list[_Handle], room: float, tasks_per_worker: int,
             requests_per_task: int | None) -> list[tuple[_Handle, list[tuple[SampleRequest, float]]]]:
    """Next tasks for the ``workers`` that are up, taken from ``todo`` (their tokens and ``busy`` counted in).

    A worker holds at most ``min(room, share)`` estimated tokens, where ``share`` is what is not back yet
    (``todo`` plus every live worker's held tokens) divided by all ``workers``, starting ones included; an idle
    worker always gets at least one request, and a worker at most ``tasks_per_worker`` tasks of at most
    ``requests_per_task`` problems. The least loaded worker is served first.
    """
    live = sorted((h for h in workers if h.ready is None), key=lambda h: h.tokens)
    if not todo or not live:
        return []
    limit = min(room, math.ceil((todo.tokens + sum(h.tokens for h in live)) / len(workers)))
    tasks = []
    for handle in live:
        while todo and handle.busy < tasks_per_worker and (handle.busy == 0 or handle.tokens < limit):
            batch = next_task(todo, limit - handle.tokens, requests_per_task)
            handle.busy += 1
            handle.tokens += sum(t for _, t in batch)
            tasks.append((handle, batch))
    return tasks


def next_task(todo: deque[tuple[SampleRequest, float]], room: float,
              requests_per_task: int | None) -> list[tuple[SampleRequest, float]]:
    """(request, tokens) pairs taken from ``todo`` while they fit in ``room`` tokens (at least one request, at
    most ``requests_per_task``)."""
    batch = [todo.popleft()]
    tokens = batch[0][1]
    while todo and tokens + todo[0][1] <= room and (requests_per_task is None or len(batch) < requests_per_task):
        tokens += todo[0][1]
        batch.append(todo.popleft())
    return batch


def start_figures(infos: list[dict[str, Any]]) -> dict[str, float]:
    """Where the workers' start went, seconds: ``workers_ready_s`` (the last worker up, from
    :meth:`RaySampler.prestart`) and ``first_worker_ready_s``; then the slowest worker's (the last up) split:
    ``worker_actor_up_s`` (Ray placing it and starting its process), ``worker_init_s`` (its inner sampler built
    and loaded), within that ``worker_turn_wait_s`` (waiting for engines sharing its GPU: :mod:`.gpu_sharing`),
    ``worker_import_s`` (the engine library's import) and ``worker_engine_start_s``
    (the engine's own start), and within that ``worker_<phase>`` for each phase vLLM timed
    (:data:`~monkeybarrel.samplers.vllm_engine.START_PHASES`). Where workers started with the KV cache size their
    GPU's first engine measured (:mod:`~monkeybarrel.samplers.gpu_sharing`), ``kv_shared_workers`` counts them."""
    slowest = max(infos, key=lambda i: i["ready_s"])
    figures = {"workers_ready_s": slowest["ready_s"], "first_worker_ready_s": min(i["ready_s"] for i in infos)}
    for key in ("actor_up_s", "init_s", "turn_wait_s", "import_s", "engine_start_s"):
        if slowest.get(key) is not None:
            figures[f"worker_{key}"] = slowest[key]
    figures.update({f"worker_{phase}": seconds for phase, seconds in (slowest.get("engine_phases") or {}).items()})
    shared = sum(1 for i in infos if i.get("kv_cache_shared_bytes"))
    if shared:
        figures["kv_shared_workers"] = shared
    return figures


def share_gpus(backend: str, options: dict[str, Any], engines_per_gpu: int, gpus_per_worker: float | None) -> float:
    """GPUs each of ``engines_per_gpu`` ``vllm`` workers sharing a GPU reserves (``1 / engines_per_gpu``); sets
    their ``gpu_memory_utilization`` in ``options`` (:func:`~monkeybarrel.samplers.vllm_engine.shared_gpu_memory`,
    unless given). Raises ValueError naming the option for anything that cannot share a GPU this way."""
    if not isinstance(engines_per_gpu, int) or engines_per_gpu < 1:
        raise ValueError(f"engines_per_gpu must be an integer >= 1, got {engines_per_gpu!r}")
    devices = engine_devices(options)
    if backend != "vllm" or devices != 1:
        given = f"backend {backend!r}" if backend != "vllm" else f"vllm workers of {devices} GPUs"
        raise ValueError("engines_per_gpu shares a GPU between vllm workers of one GPU each (backend vllm, "
                         f"tensor_parallel_size 1), not {given}")
    if gpus_per_worker is not None:
        raise ValueError("set engines_per_gpu or num_gpus_per_worker, not both")
    memory = options.setdefault("gpu_memory_utilization", shared_gpu_memory(engines_per_gpu))
    if not fits_one_gpu(memory, engines_per_gpu):
        raise ValueError(f"backend_options.gpu_memory_utilization {memory} x engines_per_gpu {engines_per_gpu} is more "
                         f"than the GPU holds (each engine also takes ~{OUTSIDE_SHARE:g} of it outside its share): give "
                         f"each engine at most {shared_gpu_memory(engines_per_gpu, 1.0)}")
    return 1.0 / engines_per_gpu


def default_workers(resources: dict[str, float], gpus_per_worker: float, cpus_per_worker: float) -> int:
    """Workers a cluster with ``resources`` holds: its GPUs / ``gpus_per_worker``, or else CPUs / ``cpus_per_worker``."""
    if gpus_per_worker > 0:
        count = int(resources.get("GPU", 0) // gpus_per_worker)
        if count < 1:
            raise RuntimeError(f"the Ray cluster has {resources.get('GPU', 0)} GPUs; "
                               f"num_gpus_per_worker={gpus_per_worker} needs at least that many")
        return count
    return max(1, int(resources.get("CPU", 1) // max(cpus_per_worker, 1e-9)))


def _subset(request: SampleRequest, indices: set[int]) -> SampleRequest:
    """``request`` restricted to ``indices`` (same problem and seed)."""
    return SampleRequest(request.problem, tuple(i for i in request.sample_indices if i in indices), request.seed)


def _unreturned_tokens(task: _Task) -> float:
    return sum(len(indices) * task.per_sample.get(pid, 0.0) for pid, (_, indices) in task.outstanding.items())
