"""A vLLM (V1) logits processor that teacher-forces requests (``benchmarks/greedy_parity.py``).

A module of its own, importable as ``forced_tokens:ForcedTokens`` (with this folder on ``PYTHONPATH``): vLLM
resolves a processor given by name in each process that samples, the engine core or, under tensor
parallelism, every worker, where a class object built inside a function could not be pickled to.
"""

from __future__ import annotations

from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

FORCED_KEY = "monkeybarrel_forced_tokens"
"""``SamplingParams.extra_args`` key holding the tokens a teacher-forced request is fed, one a step."""

NAME = "forced_tokens:ForcedTokens"
"""How an engine's ``logits_processors`` names :class:`ForcedTokens`."""


class ForcedTokens(AdapterLogitsProcessor):
    """A request whose ``extra_args[FORCED_KEY]`` lists tokens samples, at its i-th step, the i-th of them (every
    other logit set to -inf); requests without the key are untouched. vLLM computes ``logprobs`` from the raw
    logits, before processors, so the top logprob is still the model's own greedy choice at that step."""

    def is_argmax_invariant(self) -> bool:
        return False

    def new_req_logits_processor(self, params):
        forced = (params.extra_args or {}).get(FORCED_KEY)
        if not forced:
            return None

        def force(output_ids: list[int], logits):
            step = len(output_ids)
            if step < len(forced):
                logits.fill_(float("-inf"))
                logits[forced[step]] = 0.0
            return logits

        return force
