"""The one chat client: OpenAI-compatible HTTP endpoints, and chat replies from any registered sampler.

``ChatEndpoint`` is the HTTP layer every caller of an OpenAI-compatible server shares (the
``openai`` sampler, the ``openai_judge`` verifier, and through the sampler ``ChatLLM``): one
``httpx`` connection pool with ``max_concurrency`` requests in flight, a time-out per request, and
retries of HTTP 408/409/429/5xx answers, time-outs and connection errors with exponential backoff
and full jitter, honouring ``Retry-After``. (Falling back from ``n`` choices to one request per
sample lives in the ``openai`` sampler, the only caller that asks for ``n`` > 1.)

``ChatLLM(backend="embedded", model="smollm2-135m-instruct")`` returns ``n`` seeded replies per
conversation from any sampler in ``core.sampling.SAMPLERS`` (``embedded``, ``vllm``, ``openai``, ...);
``backend="openai"`` (alias ``openai_compat``) posts to ``{base_url}/chat/completions`` through the
``openai`` sampler, with the key from ``api_key_env``. SWE-bench's test writer and selection state
machine use it.
"""

from __future__ import annotations

import asyncio
import os
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import httpx

from ..core.config import GeneratorSpec
from ..core.records import Problem
from ..core.sampling import SAMPLERS, SampleRequest, request_seed

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses worth retrying: time-outs, rate limits and server-side failures."""


class ServerError(RuntimeError):
    """An HTTP error answer (``status``) or a failed transport (``status`` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ChatEndpoint:
    """An OpenAI-compatible API root, with bounded concurrency, time-outs and retries.

    Args:
        base_url: the API root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        api_key: bearer token (no ``Authorization`` header when None).
        max_concurrency: HTTP requests in flight at once.
        max_retries: retries of one request after a retryable failure.
        backoff_s: delay cap before the first retry (seconds); doubles each retry up to ``max_backoff_s``.
        max_backoff_s: largest delay cap between retries (seconds).
        timeout_s: time-out of one HTTP request (seconds).

    Attributes:
        stats: ``{"requests": int, "retries": int}`` sent so far.
    """

    def __init__(self, base_url: str, api_key: str | None = None, max_concurrency: int = 32, max_retries: int = 5,
                 backoff_s: float = 1.0, max_backoff_s: float = 60.0, timeout_s: float = 600.0) -> None:
        for name, value, low in (("max_concurrency", max_concurrency, 1), ("max_retries", max_retries, 0),
                                 ("timeout_s", timeout_s, 1e-3), ("backoff_s", backoff_s, 0)):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        self.base_url, self.api_key = base_url.rstrip("/"), api_key
        self.max_concurrency, self.max_retries = max_concurrency, max_retries
        self.backoff_s, self.max_backoff_s, self.timeout_s = backoff_s, max_backoff_s, timeout_s
        self.stats: dict[str, int] = {"requests": 0, "retries": 0}

    def client(self) -> httpx.AsyncClient:
        """A connection pool for one event loop (use as ``async with endpoint.client() as client``)."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, limits=limits,
                                 timeout=httpx.Timeout(self.timeout_s))

    async def post(self, client: httpx.AsyncClient, slots: asyncio.Semaphore, body: dict[str, Any],
                   route: str = "/chat/completions") -> dict[str, Any]:
        """POST ``body`` to ``route`` with retries; the JSON answer, or ServerError.

        ``slots`` bounds the requests in flight across concurrent callers on one loop.
        """
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                async with slots:
                    self.stats["requests"] += 1
                    response = await client.post(route, json=body)
            except httpx.TransportError as exc:  # time-outs, refused or dropped connections
                error = ServerError(f"{type(exc).__name__} talking to {self.base_url}: {exc}")
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError:
                        error = ServerError(f"{self.base_url}{route}: the answer is not JSON: {response.text[:300]!r}")
                else:
                    error = ServerError(f"HTTP {response.status_code} from {self.base_url}{route}: "
                                        f"{_error_message(response)}", response.status_code)
                    if response.status_code not in RETRY_STATUS:
                        raise error
                    retry_after = _retry_after(response.headers.get("Retry-After"))
            if attempt == self.max_retries:
                raise ServerError(f"gave up after {attempt + 1} attempts: {error}", error.status)
            self.stats["retries"] += 1
            cap = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
            await asyncio.sleep(max(random.uniform(0, cap), retry_after or 0.0))
        raise AssertionError("unreachable")

    def post_many(self, bodies: Sequence[dict[str, Any]], route: str = "/chat/completions"
                  ) -> list[dict[str, Any] | ServerError]:
        """POST every body concurrently (from synchronous code); per body its answer or its ServerError."""

        async def run() -> list[dict[str, Any] | ServerError]:
            slots = asyncio.Semaphore(self.max_concurrency)
            async with self.client() as client:
                return list(await asyncio.gather(*(self._post_or_error(client, slots, b, route) for b in bodies)))

        if not bodies:
            return []
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread (the usual case)
            return asyncio.run(run())
        with ThreadPoolExecutor(1) as thread:  # called from async code (e.g. a notebook): use a thread of its own
            return thread.submit(asyncio.run, run()).result()

    async def _post_or_error(self, client, slots, body, route) -> dict[str, Any] | ServerError:
        try:
            return await self.post(client, slots, body, route)
        except ServerError as exc:
            return exc


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        return str(error.get("message", error)) if isinstance(error, dict) else str(error)
    except Exception:
        return response.text[:500]


def _retry_after(value: str | None) -> float | None:
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


class ChatLLM:
    """``complete(conversations, n)`` -> ``n`` replies per conversation.

    Args:
        backend: a sampler backend name (``openai_compat`` is an alias of ``openai``).
        model: model name/path (sampler) or the endpoint's model id.
        temperature, top_p, max_tokens: sampling settings.
        base_url: endpoint root for ``openai`` (e.g. ``http://localhost:8000/v1``).
        api_key_env: environment variable holding the endpoint's key (may be unset for local servers).
        timeout_s: HTTP timeout per request (``openai``).
        options: extra sampler options (e.g. ``num_threads``).
    """

    def __init__(self, backend: str = "embedded", model: str = "smollm2-135m-instruct", temperature: float = 0.7,
                 top_p: float = 0.95, max_tokens: int = 512, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 600.0, options: dict[str, Any] | None = None) -> None:
        backend = "openai" if backend == "openai_compat" else backend
        self.backend, self.model, self.temperature, self.top_p, self.max_tokens = backend, model, temperature, top_p, max_tokens
        self.options = dict(options or {})
        if backend == "openai":
            if not base_url:
                raise ValueError("backend openai needs base_url (e.g. http://localhost:8000/v1)")
            self.options.setdefault("base_url", base_url)
            self.options.setdefault("timeout_s", timeout_s)
            if os.environ.get(api_key_env):
                self.options.setdefault("api_key", os.environ[api_key_env])
        self._sampler = None
        self.calls = 0
        self.completion_tokens = 0

    def complete(self, conversations: Sequence[list[dict[str, str]]], n: int = 1, seed: int = 0) -> list[list[str]]:
        """``[len(conversations)][n]`` reply texts ("" for a failed completion)."""
        self.calls += len(conversations)
        if self._sampler is None:
            spec = GeneratorSpec(id="swe-llm", backend=self.backend, model=self.model, num_samples=n,
                                 temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_tokens)
            self._sampler = SAMPLERS.create(self.backend, spec=spec, **self.options)
        requests = [SampleRequest(Problem(problem_id=f"c{i}", task="swe-llm", messages=tuple(m)), tuple(range(n)),
                                  request_seed(seed, "swe-llm", f"c{i}", 0)) for i, m in enumerate(conversations)]
        replies: dict[str, list[str]] = {}
        for candidates in self._sampler.sample(requests):
            ordered = sorted(candidates, key=lambda c: c.sample_index)
            self.completion_tokens += sum(c.completion_tokens for c in ordered)
            replies[ordered[0].problem_id] = [c.text or "" for c in ordered]
        return [replies.get(f"c{i}", [""] * n) for i in range(len(conversations))]

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
