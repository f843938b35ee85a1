"""The Sampler protocol (its registry ``SAMPLERS`` and ``SampleRequest`` live in ``core.sampling``).

A sampler draws candidates for requests of the form "these sample indices of this problem,
with this seed" and yields each request's candidates as soon as they are done, so the runner can
store them in chunks. A request that fails yields error candidates instead of raising.
"""

from __future__ import annotations

import dataclasses
import json
import time
import traceback
from abc import ABC, abstractmethod
from typing import Hashable, Iterable, Iterator

from ..core.config import GeneratorSpec
from ..core.records import Candidate, Problem
from ..core.sampling import SAMPLERS, SampleRequest, request_seed

__all__ = ["SAMPLERS", "SampleRequest", "Sampler", "request_seed", "wall_time_shares"]


def wall_time_shares(batches: Iterable[list[Candidate]]) -> Iterator[list[Candidate]]:
    """Yield ``batches`` with each candidate's ``wall_time_s`` set to its share of the sampler's wall time.

    The seconds from the first request for a batch (or from the previous yield) to a yield are split
    evenly over the candidates yielded then. Over one ``sample`` call the column therefore sums to the
    call's wall time (model loading and the caller's writes between yields included), however the
    backend overlaps its work (several problems in one decode batch, concurrent HTTP requests): a
    cost share, not a sample's latency.
    """
    last = time.perf_counter()  # a generator's body starts at the caller's first request
    try:
        for batch in batches:
            now = time.perf_counter()
            share = (now - last) / max(len(batch), 1)
            last = now
            yield [dataclasses.replace(c, wall_time_s=share) for c in batch]
    finally:  # a caller that stops early (Ctrl-C, an error) closes the backend's generator now, not at GC
        close = getattr(batches, "close", None)
        if close is not None:
            close()


class Sampler(ABC):
    """Draws candidates for one generator.

    Args:
        spec: the generator's configuration (model, prompt, sampling settings, backend options).
    """

    def __init__(self, spec: GeneratorSpec) -> None:
        self.spec = spec

    @property
    def generator_id(self) -> str:
        return self.spec.id

    # ---- engine sharing (samplers.engine_pool) ---------------------------------------------
    SAMPLING_FIELDS = ("id", "num_samples", "temperature", "top_p", "max_tokens", "seed", "system_prompt",
                       "prompt_template")
    """Spec fields a request's sampling reads per call: they may differ between users of one engine."""

    def key_for(self, spec: GeneratorSpec) -> Hashable | None:
        """What starts this backend's engine for ``spec`` (backend, model, options), or None if not shareable.

        Two specs with equal keys can share one started sampler: everything else of the spec
        (:attr:`SAMPLING_FIELDS`) is read per request.
        """
        fields = spec.model_dump(exclude=set(self.SAMPLING_FIELDS))
        return json.dumps(fields, sort_keys=True, default=str)

    def engine_key(self) -> Hashable | None:
        """:meth:`key_for` of this sampler's own spec."""
        return self.key_for(self.spec)

    def rebind(self, spec: GeneratorSpec) -> None:
        """Serve ``spec`` (same engine key) from now on: its id, prompt and sampling settings."""
        self.spec = spec

    def messages(self, problem: Problem, spec: GeneratorSpec | None = None) -> list[dict[str, str]]:
        """The chat sent for ``problem``: optional system prompt, then the templated user turn (``spec``: this one's)."""
        spec = spec or self.spec
        chat = problem.chat(spec.system_prompt)
        last = chat[-1]
        if last["role"] == "user":
            chat[-1] = {"role": "user", "content": spec.prompt_template.format(prompt=last["content"])}
        return chat

    @abstractmethod
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        """Candidates for one request (may raise: ``sample`` records the failure)."""

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield the candidates of each request, in completion order; failures become error candidates.

        Backends that batch across requests override this (and set ``wall_time_s`` with
        :func:`wall_time_shares`, so it means the same for every backend).
        """
        return wall_time_shares(self._each(requests))

    def _each(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        for request in requests:
            started = time.perf_counter()
            try:
                yield self._sample(request)
            except Exception as exc:  # a crashing sample is a recorded failure, never a lost run
                yield self.failed(request, exc, time.perf_counter() - started)

    def failed(self, request: SampleRequest, exc: BaseException, wall_time_s: float,
               spec: GeneratorSpec | None = None) -> list[Candidate]:
        """Error candidates for every index of ``request`` (of ``spec``'s generator; default this sampler's)."""
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        share = wall_time_s / max(len(request.sample_indices), 1)
        return [
            Candidate(problem_id=request.problem.problem_id, generator_id=(spec or self.spec).id, sample_index=i,
                      text=None, finish_reason="error", wall_time_s=share, seed=request.seed, error=message)
            for i in request.sample_indices
        ]

    def close(self) -> None:
        """Release resources (servers, actors, GPU memory)."""
