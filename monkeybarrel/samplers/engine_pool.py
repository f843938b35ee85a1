"""Engines shared across experiments: a sweep starts one engine per model, not one per experiment.

An engine (a vLLM ``LLM``, the embedded model, a pool of Ray actors) costs seconds to minutes to
start (~90 s for an 8B vLLM engine on an H100) and nothing to keep. Inside ``with shared_engines():``
the sample stage asks the pool for its sampler: generators whose :meth:`Sampler.engine_key` is equal
(same backend, model and engine options; sampling settings such as temperature, prompt or
max_tokens may differ) get the same sampler object, rebound to their own spec, so its engine starts
once. The pool closes every sampler when the block ends (also on Ctrl-C or an error). Outside such a
block nothing is shared: each stage builds and closes its own sampler, as before.

``EnginePool.starts`` counts the samplers built per engine key: the number of engine starts.
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from typing import Callable, Hashable, Iterator

from ..core.config import GeneratorSpec
from .base import Sampler

_active: list["EnginePool"] = []


class EnginePool:
    """Samplers kept by engine key for the life of a ``shared_engines()`` block."""

    def __init__(self, on_start: Callable[[str], None] | None = None) -> None:
        self._samplers: dict[Hashable, Sampler] = {}
        self.starts: Counter[str] = Counter()
        """Samplers built (engines started) per engine key, keyed by its readable form."""
        self._on_start = on_start
        """Told each start's key as it happens (a sweep records it at once: a killed run keeps its count)."""

    def sampler(self, spec: GeneratorSpec, build: Callable[[], Sampler]) -> Sampler:
        """The pooled sampler for ``spec``'s engine, rebound to ``spec``; ``build()`` makes it the first time."""
        for key, sampler in self._samplers.items():  # keyed by engine key: a sampler's never changes
            if sampler.spec.backend == spec.backend and sampler.key_for(spec) == key:
                sampler.rebind(spec)
                return sampler
        sampler = build()
        key = sampler.engine_key()
        if key is None:  # this backend cannot be shared: a private sampler the pool still closes
            key = ("unshared", id(sampler))
        self._samplers[key] = sampler
        self.starts[str(key)] += 1
        if self._on_start is not None:
            self._on_start(str(key))
        return sampler

    def owns(self, sampler: Sampler) -> bool:
        return any(s is sampler for s in self._samplers.values())

    def close(self) -> None:
        """Close every pooled sampler (errors in one do not keep the others open)."""
        samplers, self._samplers = list(self._samplers.values()), {}
        for sampler in samplers:
            try:
                sampler.close()
            except Exception:
                pass


@contextmanager
def shared_engines(on_start: Callable[[str], None] | None = None) -> Iterator[EnginePool]:
    """Share engines between the experiments run inside the block; close them all at its end.

    ``on_start(key)`` is called as each engine starts."""
    pool = EnginePool(on_start)
    _active.append(pool)
    try:
        yield pool
    finally:
        _active.remove(pool)
        pool.close()


def active_pool() -> EnginePool | None:
    """The innermost open ``shared_engines()`` pool, or None."""
    return _active[-1] if _active else None
