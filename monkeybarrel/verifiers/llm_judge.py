"""LLM-as-judge with a local HF causal LM: P("Yes") at the first token of the judge's reply.

All candidates of a problem share the chat template and the problem text, so their token ids
share a long prefix. That prefix is run through the model once; its KV cache is then repeated
for batches of ``batch_size`` candidates, whose (right-padded) remainders run together in one
forward pass. Only the logits at each row's last real token are computed (``logits_to_keep``).
"""

from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

from ..core.models import LazyModel, load_pretrained
from ..core.records import Candidate, Problem
from .base import VERIFIERS, Verifier
from .judge_prompt import (DEFAULT_TEMPLATE, NO_WORDS, YES_WORDS, check_template, judge_messages, judgeable,
                           word_variants)


@VERIFIERS.register("llm_judge")
class LLMJudge(LazyModel, Verifier):
    """Scores each candidate with P("Yes") from a local causal LM asked whether it is correct.

    Args:
        name: score column name.
        model: ``smollm2-135m-instruct`` (embedded default), a local HF directory, a ``.gguf`` file
            or a hub id.
        prompt_template: user turn with ``{problem}`` and ``{solution}`` placeholders.
        system_prompt: optional system message (the model's chat-template default when None).
        batch_size: candidates per forward pass.
        max_solution_tokens: longer solutions keep only their last this-many tokens (the final
            answer is at the end).
        normalize: True scores P(yes) / (P(yes) + P(no)); False scores P(yes) over the vocabulary.
        share_prefix: run the candidates' common token prefix once and reuse its KV cache.
        num_threads: torch CPU threads (torch's default when None).
        device: torch device (``cpu``, ``cuda``).
        dtype: torch dtype name of the weights.
    """

    def __init__(self, name: str, model: str = "smollm2-135m-instruct", prompt_template: str = DEFAULT_TEMPLATE,
                 system_prompt: str | None = None, batch_size: int = 8, max_solution_tokens: int = 512,
                 normalize: bool = True, share_prefix: bool = True, num_threads: int | None = None,
                 device: str = "cpu", dtype: str = "float32") -> None:
        super().__init__(name)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_solution_tokens < 1:
            raise ValueError(f"max_solution_tokens must be >= 1, got {max_solution_tokens}")
        self.model_name, self.prompt_template = model, check_template(prompt_template)
        self.system_prompt, self.batch_size, self.max_solution_tokens = system_prompt, batch_size, max_solution_tokens
        self.normalize, self.share_prefix, self.num_threads = normalize, share_prefix, num_threads
        self.device, self.dtype = device, dtype

    # ---- loading -------------------------------------------------------------------------
    def _load(self) -> None:
        """Load the model and find the Yes/No token ids (``load``: on first use)."""
        self._tokenizer, self._model = load_pretrained(self.model_name, num_threads=self.num_threads,
                                                       dtype=self.dtype, device=self.device)
        if self._tokenizer.chat_template is None:
            raise ValueError(f"model {self.model_name!r}: tokenizer has no chat template; use an instruct model")
        self.yes_ids_ = self._word_ids(YES_WORDS)
        self.no_ids_ = self._word_ids(NO_WORDS)
        if not self.yes_ids_ or not self.no_ids_:
            raise ValueError(f"model {self.model_name!r}: no single-token spelling of Yes/No in its vocabulary")
        pad = self._tokenizer.pad_token_id
        self._pad = int(pad if pad is not None else (self._tokenizer.eos_token_id or 0))

    def _word_ids(self, words: Sequence[str]) -> list[int]:
        ids = set()
        for variant in word_variants(words):
            tokens = self._tokenizer.encode(variant, add_special_tokens=False)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return sorted(ids)

    def close(self) -> None:
        self._model = self._tokenizer = None

    # ---- scoring -------------------------------------------------------------------------
    def encode(self, problem: Problem, text: str) -> list[int]:
        """Token ids of the judge's chat for one solution, ending at the assistant's turn."""
        tokenizer = self.tokenizer
        solution_ids = tokenizer.encode(text, add_special_tokens=False)
        if len(solution_ids) > self.max_solution_tokens:
            text = "..." + tokenizer.decode(solution_ids[-self.max_solution_tokens:])
        messages = judge_messages(problem, text, self.prompt_template, self.system_prompt)
        chat = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return tokenizer(chat, add_special_tokens=False)["input_ids"]

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        scores = np.full(len(candidates), np.nan)
        rows = [i for i, c in enumerate(candidates) if judgeable(c)]
        if rows:
            sequences = [self.encode(problem, candidates[i].text) for i in rows]
            scores[rows] = self.yes_probabilities(sequences)
        return scores

    def yes_probabilities(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """``[len(sequences)]`` P(yes) of the next token after each token sequence.

        Args:
            sequences: token ids, each ending where the judge's reply starts.
        """
        import torch

        logprobs = self.next_token_logprobs(sequences)  # [k, V]
        yes = torch.logsumexp(logprobs[:, self.yes_ids_], dim=-1)
        no = torch.logsumexp(logprobs[:, self.no_ids_], dim=-1)
        if self.normalize:
            return torch.sigmoid(yes - no).double().numpy()
        return yes.exp().double().numpy()

    def next_token_logprobs(self, sequences: Sequence[Sequence[int]]):
        """``[k, V]`` float32 log-softmax of the next-token logits after each sequence."""
        import torch

        model = self.model
        lengths = [len(s) for s in sequences]
        if min(lengths) == 0:
            raise ValueError("cannot judge an empty token sequence")
        shared = _common_prefix_length(sequences) if self.share_prefix and len(sequences) > 1 else 0
        shared = min(shared, min(lengths) - 1)  # every row keeps at least one token of its own
        with torch.inference_mode():
            cache = None
            if shared > 0:
                prefix = torch.tensor([list(sequences[0][:shared])], device=self.device)
                cache = model(input_ids=prefix, use_cache=True, logits_to_keep=1).past_key_values
            order = sorted(range(len(sequences)), key=lambda i: -lengths[i])
            results: dict[int, torch.Tensor] = {}
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                suffixes = [list(sequences[i][shared:]) for i in rows]
                results.update(zip(rows, self._forward(suffixes, cache)))
        return torch.stack([results[i] for i in range(len(sequences))])

    def _forward(self, suffixes: list[list[int]], cache) -> "list":
        """Next-token log-probs after each right-padded suffix (continuing ``cache`` when given)."""
        import torch

        width = max(len(s) for s in suffixes)
        ids = torch.full((len(suffixes), width), self._pad, dtype=torch.long)
        for row, suffix in enumerate(suffixes):
            ids[row, :len(suffix)] = torch.tensor(suffix)
        last = torch.tensor([len(s) - 1 for s in suffixes])
        keep, where = torch.unique(last, return_inverse=True)  # positions whose logits are needed
        kwargs = {}
        if cache is not None:
            batch_cache = copy.deepcopy(cache)
            batch_cache.batch_repeat_interleave(len(suffixes))
            kwargs = {"past_key_values": batch_cache, "use_cache": True}
        # Right padding needs no attention mask: causal attention never lets a real token see later pads.
        logits = self._model(input_ids=ids.to(self.device), logits_to_keep=keep.to(self.device), **kwargs).logits
        picked = logits[torch.arange(len(suffixes)), where.to(self.device)].float()  # [B, V]
        return list(torch.log_softmax(picked, dim=-1).cpu())


def _common_prefix_length(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix shared by every sequence."""
    first = np.asarray(sequences[0])
    shared = len(first)
    for sequence in sequences[1:]:
        n = min(shared, len(sequence))
        mismatch = np.flatnonzero(first[:n] != np.asarray(sequence[:n]))
        shared = int(mismatch[0]) if mismatch.size else n
    return shared
