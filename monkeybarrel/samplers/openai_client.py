"""The ``openai`` backend: sampling from any OpenAI-compatible chat-completions server.

Works with ``vllm serve``, SGLang, TGI, llama.cpp's server, hosted APIs and
``python -m monkeybarrel.samplers.chat_server``. Requests run concurrently on an asyncio loop in a
background thread (``max_concurrency`` HTTP requests in flight) and each problem's candidates are
yielded as soon as they are back. A problem's samples go out as one request with ``n`` choices
(split into pieces of at most ``max_n``); a server that refuses ``n`` > 1 (HTTP 400) or returns fewer
choices than asked gets one request per sample from then on. HTTP goes through
``kits.chat.ChatEndpoint`` (retries of 408/409/429/5xx, time-outs and connection errors with
exponential backoff and full jitter, honouring ``Retry-After``); a request that still fails becomes
error candidates.

Token counts come from ``usage``: exact per sample when a request carries one sample or the server
returns per-choice ``token_ids`` (vLLM with ``extra_body: {return_token_ids: true}``); otherwise a
choice cut at ``max_tokens`` counts ``max_tokens`` and the rest of the request's completion tokens is
split over the other choices in proportion to their text length (the total stays exact).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import queue
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from ..core.config import GeneratorSpec
from ..core.records import Candidate
from ..kits.chat import ChatEndpoint, ServerError
from .base import SAMPLERS, SampleRequest, Sampler, wall_time_shares

@dataclass(frozen=True)
class _Piece:
    """One HTTP request: these sample indices with ``n = len(indices)`` choices."""

    indices: tuple[int, ...]
    seed: int


def sub_seed(seed: int, offset: int) -> int:
    """The seed of the piece starting ``offset`` samples into a request (``seed`` itself at 0)."""
    if offset == 0:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}/{offset}".encode()).digest()[:8], "little") >> 1


def split_tokens(total: int, texts: list[str], truncated: list[bool], max_tokens: int) -> list[int]:
    """Split a request's ``total`` completion tokens over its choices (when the server gives no per-choice counts).

    A choice cut at ``max_tokens`` (``truncated``) holds exactly ``max_tokens``; the rest of the total is
    split over the others in proportion to their text length (largest remainders), so the sum is ``total``.
    If the counts are inconsistent (too few tokens for the truncated ones) everything is split by length.
    """
    if not texts:
        return []
    fixed = max_tokens * sum(truncated)
    free = [i for i, cut in enumerate(truncated) if not cut]
    if fixed > total or (not free and fixed != total):
        truncated, free, fixed = [False] * len(texts), list(range(len(texts))), 0
    counts = [max_tokens if cut else 0 for cut in truncated]
    rest = total - fixed
    weights = [max(len(texts[i]), 1) for i in free]
    shares = [rest * w / sum(weights) for w in weights] if free else []
    for i, share in zip(free, shares):
        counts[i] = int(share)
    order = sorted(range(len(free)), key=lambda j: int(shares[j]) - shares[j])
    for j in order[: rest - sum(counts[i] for i in free)]:
        counts[free[j]] += 1
    return counts


@SAMPLERS.register("openai")
class OpenAISampler(Sampler):
    """Samples from an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        spec: ``model`` is the served model name; ``temperature``, ``top_p``, ``max_tokens`` and the
            request seeds go into every request.
        base_url: the API root including ``/v1`` (default ``$OPENAI_BASE_URL``, else
            ``http://127.0.0.1:8000/v1``, where ``vllm serve`` listens).
        api_key: bearer token (default ``$OPENAI_API_KEY``; no header when neither is set).
        max_concurrency: HTTP requests in flight at once.
        max_retries: retries of one HTTP request after a retryable failure.
        backoff_s: delay cap before the first retry (seconds); doubles each retry up to ``max_backoff_s``.
        max_backoff_s: largest delay cap between retries (seconds).
        timeout_s: time-out of one HTTP request (seconds).
        use_n: ask for several choices per request (None: yes until the server shows it cannot).
        max_n: most choices in one request; larger requests are split.
        extra_body: extra JSON fields for every request, e.g. ``{"top_k": 20}`` or
            ``{"return_token_ids": true}`` for vLLM.
    """

    def __init__(self, spec: GeneratorSpec, base_url: str | None = None, api_key: str | None = None,
                 max_concurrency: int = 32, max_retries: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 60.0,
                 timeout_s: float = 600.0, use_n: bool | None = None, max_n: int = 128,
                 extra_body: dict[str, Any] | None = None) -> None:
        super().__init__(spec)
        if max_n < 1:
            raise ValueError(f"max_n must be >= 1, got {max_n}")
        self.endpoint = ChatEndpoint(
            (base_url or os.environ.get("OPENAI_BASE_URL") or "http://127.0.0.1:8000/v1"),
            api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"), max_concurrency=max_concurrency,
            max_retries=max_retries, backoff_s=backoff_s, max_backoff_s=max_backoff_s, timeout_s=timeout_s)
        self.base_url, self.max_concurrency = self.endpoint.base_url, max_concurrency
        self.use_n, self.max_n = use_n, max_n
        self.extra_body = dict(extra_body or {})
        self.http_stats: dict[str, int] = self.endpoint.stats
        """HTTP requests sent and retries made (for tests and logs)."""

    # ---- the sync face ---------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        return [c for batch in self.sample([request]) for c in batch]

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield each request's candidates in completion order (requests run concurrently).

        ``wall_time_s``: each candidate's share of the time since the previous request's candidates
        came back (``wall_time_shares``), not its request's latency, which overlaps the others'."""
        return wall_time_shares(self._completed(requests))

    def _completed(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        requests = list(requests)
        if not requests:
            return
        results: queue.Queue = queue.Queue()
        loop = asyncio.new_event_loop()
        holder: dict[str, asyncio.Task] = {}

        def run() -> None:
            asyncio.set_event_loop(loop)
            holder["task"] = loop.create_task(self._run(requests, results))
            try:
                loop.run_until_complete(holder["task"])
            except BaseException as exc:  # cancelled by close(), or a bug: surface it to the caller
                results.put(exc)
            finally:
                loop.close()

        thread = threading.Thread(target=run, daemon=True, name=f"openai-sampler-{self.generator_id}")
        thread.start()
        try:
            for _ in requests:
                item = results.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if thread.is_alive() and "task" in holder:
                try:
                    loop.call_soon_threadsafe(holder["task"].cancel)
                except RuntimeError:  # the loop finished and closed between the check and the call
                    pass
            thread.join()

    # ---- the async core --------------------------------------------------------------------
    async def _run(self, requests: list[SampleRequest], results: queue.Queue) -> None:
        slots = asyncio.Semaphore(self.max_concurrency)
        todo: asyncio.Queue[SampleRequest] = asyncio.Queue()
        for request in requests:
            todo.put_nowait(request)
        async with self.endpoint.client() as client:

            async def worker() -> None:
                while not todo.empty():
                    request = todo.get_nowait()
                    try:
                        candidates = await self._request(client, slots, request)
                    except Exception as exc:  # a failed request is recorded, the others go on
                        candidates = self.failed(request, exc, 0.0)
                    results.put(candidates)

            await asyncio.gather(*(worker() for _ in range(min(self.max_concurrency, len(requests)))))

    async def _request(self, client, slots: asyncio.Semaphore, request: SampleRequest) -> list[Candidate]:
        """All candidates of one request: ``n``-choice pieces, or one HTTP request per sample."""
        indices = request.sample_indices
        if self.use_n is False:
            pieces = [_Piece((i,), sub_seed(request.seed, k)) for k, i in enumerate(indices)]
        else:
            pieces = [_Piece(indices[k:k + self.max_n], sub_seed(request.seed, k))
                      for k in range(0, len(indices), self.max_n)]
        parts = await asyncio.gather(*(self._piece(client, slots, request, piece) for piece in pieces))
        return sorted((c for part in parts for c in part), key=lambda c: c.sample_index)

    async def _piece(self, client, slots: asyncio.Semaphore, request: SampleRequest, piece: _Piece) -> list[Candidate]:
        try:
            answer = await self.endpoint.post(client, slots, self._body(request, len(piece.indices), piece.seed))
        except ServerError as exc:
            if exc.status != 400 or len(piece.indices) == 1:
                raise
            # Some servers refuse n > 1: draw the samples one by one; stay that way if it works.
            single = [_Piece((i,), sub_seed(piece.seed, k)) for k, i in enumerate(piece.indices)]
            parts = await asyncio.gather(*(self._piece(client, slots, request, p) for p in single))
            if self.use_n is None:
                self.use_n = False
            return [c for part in parts for c in part]
        choices = sorted(answer.get("choices") or [], key=lambda c: c.get("index", 0))[: len(piece.indices)]
        candidates = self._candidates(request, piece, answer, choices)
        if len(choices) < len(piece.indices):  # the server ignored n: fetch the rest one by one
            if self.use_n is None:
                self.use_n = False
            rest = [_Piece((i,), sub_seed(piece.seed, k)) for k, i in enumerate(piece.indices) if k >= len(choices)]
            parts = await asyncio.gather(*(self._piece(client, slots, request, p) for p in rest))
            candidates += [c for part in parts for c in part]
        return candidates

    def _body(self, request: SampleRequest, n: int, seed: int) -> dict[str, Any]:
        spec = self.spec
        body: dict[str, Any] = {"model": spec.model, "messages": self.messages(request.problem),
                                "temperature": spec.temperature, "top_p": spec.top_p,
                                "max_tokens": spec.max_tokens, "seed": seed}
        if n > 1:
            body["n"] = n
        return {**body, **self.extra_body}

    def _candidates(self, request: SampleRequest, piece: _Piece, answer: dict[str, Any],
                    choices: list[dict[str, Any]]) -> list[Candidate]:
        usage = answer.get("usage") or {}
        texts = [(c.get("message") or {}).get("content") or "" for c in choices]
        if all(isinstance(c.get("token_ids"), list) for c in choices):
            tokens = [len(c["token_ids"]) for c in choices]
        else:
            tokens = split_tokens(int(usage.get("completion_tokens") or 0), texts,
                                  [c.get("finish_reason") == "length" for c in choices], self.spec.max_tokens)
        out = []
        for index, choice, text, count in zip(piece.indices, choices, texts, tokens):
            reason = choice.get("finish_reason") or "stop"
            out.append(Candidate(
                problem_id=request.problem.problem_id, generator_id=self.generator_id, sample_index=index,
                text=text, prompt_tokens=int(usage.get("prompt_tokens") or 0), completion_tokens=count,
                finish_reason="error" if reason == "abort" else reason, seed=piece.seed,
                error="the server aborted the request" if reason == "abort" else None))
        return out
