"""Chat completions for test writing and selection: any registered sampler, or an OpenAI-compatible endpoint.

``ChatLLM(backend="embedded", model="smollm2-135m-instruct")`` runs through the project's samplers
(``embedded``, ``vllm``, ``openai``, ... whatever ``SAMPLERS`` holds). ``backend="openai"`` (alias
``openai_compat``) posts to ``{base_url}/chat/completions`` (vLLM/SGLang servers, OpenAI, ...) through
the ``openai`` sampler (bounded concurrency, retries), with the key from ``api_key_env``. Every backend
returns ``n`` completions per conversation, seeded.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from ...core.config import GeneratorSpec
from ...core.records import Problem


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
        from ...samplers.base import SAMPLERS, SampleRequest, request_seed

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
