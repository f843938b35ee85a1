"""The KV cache size a vLLM engine got, in bytes, read the moment its worker has measured it.

vLLM's engine core asks its workers for the memory the KV cache may take (``determine_available_memory``: a
profiling run, or ``kv_cache_memory_bytes`` when given) and turns those bytes into blocks
(``get_kv_cache_configs``) before it allocates the cache, captures CUDA graphs and warms up. Given back as
``kv_cache_memory_bytes`` to an engine of the same configuration, the same bytes make the same blocks without
profiling. :func:`kv_cache_sizing` catches them on their way (the engine core in this process: a Ray worker's
``engine_in_actor``, the default; vLLM 0.26 and 0.32); :func:`engine_kv_cache_bytes` reads them from a started
engine. An engine core in another process gives neither: None.

No vLLM import at module level.
"""

from __future__ import annotations

import contextlib
import logging
import numbers
import os
import threading
from typing import Any, Callable, Iterator

__all__ = ["kv_cache_sizing", "engine_kv_cache_bytes", "engine_kv_cache_blocks"]

_log = logging.getLogger(__name__)
_SIZING: dict[int, Callable[[Any, list[int]], None]] = {}  # thread id -> what catches its engine's bytes
_PATCH_LOCK = threading.Lock()
_PATCHED: list = []  # [vLLM's engine-core module, its get_kv_cache_configs, ours] while any thread catches


def _sizes_later(vllm_config: Any) -> bool:
    """Whether the worker still measures memory for its own use after sizing the cache: vLLM 0.26 saves a start-up
    plan (``VLLM_ENABLE_STARTUP_PLAN``, set by an engine cache) from the memory its CUDA graphs took, unless the
    size came from a plan or was given; an engine starting beside it then would skew the plan."""
    if os.environ.get("VLLM_ENABLE_STARTUP_PLAN", "").lower() not in ("1", "true"):
        return False
    cache = getattr(vllm_config, "cache_config", None)
    return getattr(cache, "kv_cache_memory_bytes", None) is None


@contextlib.contextmanager
def kv_cache_sizing(on_sized: Callable[[int], Any] | None = None) -> Iterator[dict[str, Any]]:
    """While the block starts an engine in this thread, catch the KV cache bytes its (single) worker measured.

    Yields a dict that gets ``bytes`` (the KV cache size, bytes) once known; ``on_sized`` is called with them
    then, before the engine allocates its cache and captures graphs (not when the worker will still measure
    memory for a start-up plan, :func:`_sizes_later`: the caller then has the bytes after the block).
    ``on_sized`` failing is logged, never raised into the engine's start. Nothing is caught where vLLM's engine
    core runs in another process, or where vLLM has no ``get_kv_cache_configs`` in its engine core."""
    sized: dict[str, Any] = {}

    def catch(vllm_config: Any, available: list[int]) -> None:
        size = int(available[0]) if len(available) == 1 and isinstance(available[0], numbers.Integral) else 0
        if size <= 0:
            return  # several workers (tensor parallel) or no KV cache: nothing one engine could reuse
        sized["bytes"] = size
        if on_sized is not None and not _sizes_later(vllm_config):
            try:
                on_sized(size)
            except Exception as exc:
                _log.warning("KV cache size callback failed: %s", exc)

    thread = threading.get_ident()
    with _PATCH_LOCK:
        if not _PATCHED:
            _patch()
        _SIZING[thread] = catch
    try:
        yield sized
    finally:
        with _PATCH_LOCK:
            _SIZING.pop(thread, None)
            if not _SIZING and _PATCHED:
                module, original, ours = _PATCHED
                if getattr(module, "get_kv_cache_configs", None) is ours:
                    module.get_kv_cache_configs = original
                _PATCHED.clear()


def _patch() -> None:
    """Wrap vLLM's engine-core ``get_kv_cache_configs`` (called with the workers' available bytes) once."""
    try:
        from vllm.v1.engine import core as module
    except ImportError:
        return
    original = getattr(module, "get_kv_cache_configs", None)
    if original is None:
        return

    def get_kv_cache_configs(vllm_config: Any, kv_cache_specs: Any, available_memory: Any, *args: Any,
                             **kwargs: Any) -> Any:
        catch = _SIZING.get(threading.get_ident())
        if catch is not None:
            catch(vllm_config, list(available_memory))
        return original(vllm_config, kv_cache_specs, available_memory, *args, **kwargs)

    module.get_kv_cache_configs = get_kv_cache_configs
    _PATCHED[:] = [module, original, get_kv_cache_configs]


def _engine_core(llm: Any) -> Any:
    """The ``EngineCore`` of an ``LLM`` whose engine core runs in this process, else None."""
    client = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    return getattr(client, "engine_core", None)


def engine_kv_cache_bytes(llm: Any) -> int | None:
    """Bytes the started engine's worker had for its KV cache (what ``kv_cache_memory_bytes`` would reproduce), or
    None (engine core in another process, no KV cache, an unknown vLLM)."""
    size = getattr(_engine_core(llm), "available_gpu_memory_for_kv_cache", None)
    return size if type(size) is int and size > 0 else None


def engine_kv_cache_blocks(llm: Any) -> int | None:
    """KV cache blocks of the started engine (``cache_config.num_gpu_blocks``, known in every process), or None."""
    config = getattr(getattr(llm, "llm_engine", None), "vllm_config", None)
    blocks = getattr(getattr(config, "cache_config", None), "num_gpu_blocks", None)
    return blocks if type(blocks) is int and blocks > 0 else None
