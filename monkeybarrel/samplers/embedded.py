"""The embedded default sampler: a HF causal LM on CPU (SmolLM2-135M-Instruct from its GGUF).

Decoding on a small CPU model is bound by reading the weights once per step, so rows are
cheap: several requests (problems) decode together in one batch of up to ``max_batch`` rows.
Each prompt is prefilled once (left-padded with its batch-mates) and its KV cache rows are
repeated for its n samples. Finished rows leave the batch (their cache rows are dropped), and a
request's candidates are yielded as soon as all of its rows have finished. Each request draws
from its own seeded RNG.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import torch

from ..core.config import GeneratorSpec
from ..core.models import LazyModel, load_pretrained
from ..core.records import Candidate
from .base import SAMPLERS, SampleRequest, Sampler, wall_time_shares
from .decoding import sample_next
from .kv_cache import GrowingCache


@dataclass
class _Group:
    """One request's rows inside a decode batch."""

    request: SampleRequest
    indices: tuple[int, ...]
    prompt_ids: torch.Tensor
    generator: torch.Generator
    tokens: list[list[int]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)


@SAMPLERS.register("embedded")
class EmbeddedSampler(LazyModel, Sampler):
    """Samples with transformers on the local CPU.

    Args:
        spec: generator configuration; ``spec.model`` is ``smollm2-135m-instruct`` (default),
            a local HF directory, a ``.gguf`` file or a hub id.
        num_threads: torch CPU threads (default: torch's choice).
        max_batch: most rows (samples) decoded together, across requests.
    """

    def __init__(self, spec: GeneratorSpec, num_threads: int | None = None, max_batch: int = 64) -> None:
        super().__init__(spec)
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.num_threads, self.max_batch = num_threads, max_batch

    # ---- loading -------------------------------------------------------------------------
    def _load(self) -> None:
        """Load model and tokenizer, find the EOS and pad ids (``load``: on first use)."""
        self._tokenizer, self._model = load_pretrained(self.spec.model, num_threads=self.num_threads)
        config_eos = self._model.generation_config.eos_token_id
        eos = config_eos if isinstance(config_eos, list) else [config_eos]
        eos = [e for e in [*eos, self._tokenizer.eos_token_id] if e is not None]
        self._eos = torch.tensor(sorted(set(eos)), dtype=torch.long)
        pad = self._tokenizer.pad_token_id
        self._pad = int(pad if pad is not None else self._eos[0])

    def encode(self, request: SampleRequest) -> torch.Tensor:
        """Chat-templated prompt ids ``[prompt_len]``."""
        encoded = self.tokenizer.apply_chat_template(
            self.messages(request.problem), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        return encoded["input_ids"][0]

    # ---- sampling ------------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        return [c for batch in self.sample([request]) for c in batch]

    def sample(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        """Yield each request's candidates; requests are packed into batches of ``max_batch`` rows.

        The model is loaded first: a model that cannot load stops the run (nothing is recorded),
        while a request that fails afterwards becomes error candidates. ``wall_time_s``: each
        candidate's share of the time since the previous yield (see ``wall_time_shares``), so the
        requests of one decode batch, which finish at different steps, never count the same seconds twice.
        """
        return wall_time_shares(self._batches(requests))

    def _batches(self, requests: Iterable[SampleRequest]) -> Iterator[list[Candidate]]:
        self.load()
        pending: list[_Group] = []
        rows = 0
        for request in requests:
            try:
                prompt_ids = self.encode(request)
            except Exception as exc:
                yield self.failed(request, exc, 0.0)
                continue
            generator = torch.Generator().manual_seed(request.seed)
            indices = list(request.sample_indices)
            pieces = [tuple(indices[i : i + self.max_batch]) for i in range(0, len(indices), self.max_batch)]
            parts: list[_Group] = [_Group(request, piece, prompt_ids, generator) for piece in pieces]
            for group in parts:
                if rows + len(group.indices) > self.max_batch and pending:
                    yield from self._run_batch(pending)
                    pending, rows = [], 0
                pending.append(group)
                rows += len(group.indices)
        if pending:
            yield from self._run_batch(pending)

    def _run_batch(self, groups: list[_Group]) -> Iterator[list[Candidate]]:
        done: set[int] = set()
        try:
            for group in self.decode(groups):
                done.add(id(group))
                yield self._candidates(group)
        except Exception as exc:  # the batch failed: record the failure of every request not yielded yet
            for group in groups:
                if id(group) not in done:
                    yield self.failed(SampleRequest(group.request.problem, group.indices, group.request.seed), exc, 0.0)

    def _candidates(self, group: _Group) -> list[Candidate]:
        return [
            Candidate(
                problem_id=group.request.problem.problem_id, generator_id=self.generator_id, sample_index=index,
                text=self.tokenizer.decode(tokens, skip_special_tokens=True),
                prompt_tokens=int(group.prompt_ids.shape[0]), completion_tokens=len(tokens),
                finish_reason=finish, seed=group.request.seed,
            )
            for index, tokens, finish in zip(group.indices, group.tokens, group.finish)
        ]

    @torch.inference_mode()
    def decode(self, groups: list[_Group]) -> Iterator[_Group]:
        """Decode all rows of ``groups`` together; yields each group once all its rows finished.

        Prompts are left-padded to a common length ``L`` and prefilled in one forward pass
        (``[G, L]``); each group's cache row is then repeated once per sample, giving
        ``[rows, heads, L, head_dim]`` caches and a ``[rows, L]`` attention mask that grows by one
        column per step.
        """
        spec, model = self.spec, self.model
        lengths = torch.tensor([g.prompt_ids.shape[0] for g in groups])
        width = int(lengths.max())
        ids = torch.full((len(groups), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(groups), width), dtype=torch.long)
        for row, group in enumerate(groups):
            ids[row, width - lengths[row]:] = group.prompt_ids
            mask[row, width - lengths[row]:] = 1
            group.tokens = [[] for _ in group.indices]
            group.finish = ["length"] * len(group.indices)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = GrowingCache()
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)
        counts = torch.tensor([len(g.indices) for g in groups])
        expand = torch.repeat_interleave(torch.arange(len(groups)), counts)
        cache.batch_select_indices(expand)
        mask = mask[expand]
        logits = out.logits[expand, -1, :]
        position = lengths[expand].clone()
        # Row bookkeeping: which group and which of its samples each batch row is.
        row_group = expand.clone()
        row_sample = torch.cat([torch.arange(int(c)) for c in counts])
        remaining = counts.clone()
        for step in range(spec.max_tokens):
            next_ids = torch.empty(len(row_group), dtype=torch.long)
            for g in torch.unique(row_group).tolist():
                rows = (row_group == g).nonzero().squeeze(-1)
                next_ids[rows] = sample_next(logits[rows], spec.temperature, spec.top_p, groups[g].generator)
            stopped = torch.isin(next_ids, self._eos)
            for g, s, token, done in zip(row_group.tolist(), row_sample.tolist(), next_ids.tolist(), stopped.tolist()):
                if done:
                    groups[g].finish[s] = "stop"
                    remaining[g] -= 1
                else:
                    groups[g].tokens[s].append(token)
            if stopped.any():
                for g in torch.unique(row_group[stopped]).tolist():
                    if remaining[g] == 0:
                        yield groups[g]
            if step == spec.max_tokens - 1:
                break
            if stopped.any():
                keep = (~stopped).nonzero().squeeze(-1)
                if keep.numel() == 0:
                    return
                cache.batch_select_indices(keep)
                mask, position = mask[keep], position[keep]
                row_group, row_sample, next_ids = row_group[keep], row_sample[keep], next_ids[keep]
            mask = torch.cat([mask, torch.ones((len(row_group), 1), dtype=mask.dtype)], dim=1)
            out = model(input_ids=next_ids[:, None], attention_mask=mask, position_ids=position[:, None],
                        past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :]
            position += 1
        for g in torch.unique(row_group).tolist():  # rows that hit max_tokens
            if remaining[g] > 0:
                yield groups[g]
