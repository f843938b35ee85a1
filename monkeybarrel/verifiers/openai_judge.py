"""LLM-as-judge against an OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI), from logprobs.

Same prompt and read-out as ``llm_judge``, for large judges served on a cluster: one
``/chat/completions`` request per candidate with ``max_tokens=1`` and ``top_logprobs``; P("Yes")
sums the probabilities of the Yes-like tokens among the top ones. Requests run concurrently through
``kits.chat.ChatEndpoint`` (time-outs; retries on connection errors, 408/409/429/5xx, ``Retry-After``). A candidate whose request keeps failing
scores NaN as a failure (``VerifierFailure``: the next run asks again); one whose top tokens hold
neither Yes nor No scores NaN as an abstention. Never a lost run.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..kits.chat import ChatEndpoint
from .base import VERIFIERS, Verifier, VerifierFailure
from .judge_prompt import DEFAULT_TEMPLATE, NO_WORDS, YES_WORDS, check_template, judge_messages, judgeable, yes_probability


class EndpointError(RuntimeError):
    """The endpoint answered with an error or a reply without logprobs."""


@VERIFIERS.register("openai_judge")
class OpenAIJudge(Verifier):
    """Scores each candidate with P("Yes") from a served judge's first-token logprobs.

    Args:
        name: score column name.
        model: model name the server knows (``model`` field of the request).
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key_env: environment variable holding the API key (sent as a Bearer token when set).
        prompt_template: user turn with ``{problem}`` and ``{solution}`` placeholders.
        system_prompt: optional system message.
        top_logprobs: alternatives requested for the first token (OpenAI allows up to 20).
        normalize: P(yes) / (P(yes) + P(no)) when True; P(yes) alone when False.
        max_concurrency: requests in flight at once.
        timeout_s: per-request timeout in seconds.
        max_retries: retries per request after the first attempt.
    """

    def __init__(self, name: str, model: str, base_url: str = "http://127.0.0.1:8000/v1",
                 api_key_env: str = "OPENAI_API_KEY", prompt_template: str = DEFAULT_TEMPLATE,
                 system_prompt: str | None = None, top_logprobs: int = 20, normalize: bool = True,
                 max_concurrency: int = 16, timeout_s: float = 60.0, max_retries: int = 3) -> None:
        super().__init__(name)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not 1 <= top_logprobs <= 20:
            raise ValueError(f"top_logprobs must be in 1..20, got {top_logprobs}")
        if max_concurrency < 1 or max_retries < 0 or timeout_s <= 0:
            raise ValueError("max_concurrency >= 1, max_retries >= 0 and timeout_s > 0 are required")
        self.model, self.base_url, self.api_key_env = model, base_url.rstrip("/"), api_key_env
        self.prompt_template, self.system_prompt = check_template(prompt_template), system_prompt
        self.top_logprobs, self.normalize = top_logprobs, normalize
        self.max_concurrency, self.timeout_s, self.max_retries = max_concurrency, timeout_s, max_retries

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.score_detailed(problem, candidates)[0]

    def score_detailed(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        """Scores and, per NaN, why (request failure, no Yes/No among the top tokens, nothing to judge).

        Raises:
            EndpointError: when every request failed (the endpoint is down or misconfigured).
        """
        scores = np.full(len(candidates), np.nan)
        reasons: list[str | None] = ["no text to judge" if not judgeable(c) else None for c in candidates]
        rows = [i for i, c in enumerate(candidates) if judgeable(c)]
        if not rows:
            return scores, reasons
        bodies = [self.request_body(judge_messages(problem, candidates[i].text, self.prompt_template, self.system_prompt))
                  for i in rows]
        results = [self._read(answer) for answer in self.endpoint().post_many(bodies)]
        failures = [r for r in results if isinstance(r, EndpointError)]
        if len(failures) == len(rows):
            raise failures[0]
        for row, result in zip(rows, results):
            if isinstance(result, EndpointError):
                reasons[row] = VerifierFailure(result)
            elif math.isnan(result):
                reasons[row] = f"neither Yes nor No among the top {self.top_logprobs} first tokens"
            else:
                scores[row] = result
        return scores, reasons

    def request_body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The JSON body of one judging request."""
        return {"model": self.model, "messages": messages, "max_tokens": 1, "temperature": 0.0,
                "logprobs": True, "top_logprobs": self.top_logprobs}

    def endpoint(self) -> ChatEndpoint:
        """The HTTP client (key from ``api_key_env`` at call time; backoff 0.5 s doubling up to 8 s)."""
        return ChatEndpoint(self.base_url, os.environ.get(self.api_key_env) or None, max_concurrency=self.max_concurrency,
                            max_retries=self.max_retries, backoff_s=0.5, max_backoff_s=8.0, timeout_s=self.timeout_s)

    def _read(self, answer: dict[str, Any] | Exception) -> float | EndpointError:
        if isinstance(answer, Exception):
            return EndpointError(str(answer))
        try:
            return self.yes_probability(answer)
        except EndpointError as exc:
            return exc

    def yes_probability(self, reply: dict[str, Any]) -> float:
        """P(yes) from a chat-completion reply's first-token ``top_logprobs`` (NaN when neither appears)."""
        try:
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"reply has no first-token top_logprobs: {json.dumps(reply)[:300]}") from None
        yes = [t["logprob"] for t in top if t["token"].strip() in YES_WORDS]
        no = [t["logprob"] for t in top if t["token"].strip() in NO_WORDS]
        return yes_probability(yes, no, self.normalize)
