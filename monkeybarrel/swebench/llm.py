"""Chat completions for test writing and selection: any registered sampler, or an OpenAI-compatible endpoint.

``ChatLLM(backend="embedded", model="smollm2-135m-instruct")`` runs through the project's samplers
(``embedded``, ``vllm``, ... whatever ``SAMPLERS`` holds); ``backend="openai_compat"`` posts to
``{base_url}/chat/completions`` (vLLM/SGLang servers, OpenAI, ...) with the key from
``api_key_env``. Both return ``n`` completions per conversation, seeded.
"""

from __future__ import annotations

import json
import os
import urllib.request
from typing import Any, Sequence

from ..core.config import GeneratorSpec
from ..core.records import Problem


class ChatLLM:
    """``complete(conversations, n)`` -> ``n`` replies per conversation.

    Args:
        backend: a sampler backend name, or ``openai_compat``.
        model: model name/path (sampler) or the endpoint's model id.
        temperature, top_p, max_tokens: sampling settings.
        base_url: endpoint root for ``openai_compat`` (e.g. ``http://localhost:8000/v1``).
        api_key_env: environment variable holding the endpoint's key (may be unset for local servers).
        timeout_s: HTTP timeout per request.
        options: extra sampler options (e.g. ``num_threads``).
    """

    def __init__(self, backend: str = "embedded", model: str = "smollm2-135m-instruct", temperature: float = 0.7,
                 top_p: float = 0.95, max_tokens: int = 512, base_url: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 600.0, options: dict[str, Any] | None = None) -> None:
        self.backend, self.model, self.temperature, self.top_p, self.max_tokens = backend, model, temperature, top_p, max_tokens
        self.base_url, self.api_key_env, self.timeout_s = base_url, api_key_env, timeout_s
        self.options = dict(options or {})
        self._sampler = None
        self.calls = 0
        self.completion_tokens = 0

    def complete(self, conversations: Sequence[list[dict[str, str]]], n: int = 1, seed: int = 0) -> list[list[str]]:
        """``[len(conversations)][n]`` reply texts ("" for a failed completion)."""
        self.calls += len(conversations)
        if self.backend == "openai_compat":
            return [self._http(messages, n, seed + i) for i, messages in enumerate(conversations)]
        return self._via_sampler(conversations, n, seed)

    # ---- samplers ---------------------------------------------------------------------------
    def _via_sampler(self, conversations, n: int, seed: int) -> list[list[str]]:
        from ..samplers.base import SAMPLERS, SampleRequest, request_seed

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

    # ---- HTTP ---------------------------------------------------------------------------------
    def _http(self, messages: list[dict[str, str]], n: int, seed: int) -> list[str]:
        if not self.base_url:
            raise ValueError("backend openai_compat needs base_url")
        body = {"model": self.model, "messages": messages, "n": n, "temperature": self.temperature,
                "top_p": self.top_p, "max_tokens": self.max_tokens, "seed": seed}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.base_url.rstrip("/") + "/chat/completions", json.dumps(body).encode(), headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            data = json.loads(response.read())
        self.completion_tokens += int(data.get("usage", {}).get("completion_tokens", 0))
        texts = [c["message"]["content"] or "" for c in sorted(data["choices"], key=lambda c: c.get("index", 0))]
        return (texts + [""] * n)[:n]

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None
