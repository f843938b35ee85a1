"""The embedded default sampler: a HF causal LM on CPU (SmolLM2-135M-Instruct from its GGUF).

For each request the prompt is encoded and prefilled once, its KV cache is repeated for the n
samples, and the n continuations decode together as one batch. Finished rows leave the batch
(their cache rows are dropped), so late steps cost only what is still running.
"""

from __future__ import annotations

import time

import torch

from ..core.config import GeneratorSpec
from ..core.records import Candidate
from .base import SAMPLERS, SampleRequest, Sampler
from .decoding import sample_next
from .kv_cache import GrowingCache
from ..core.models import resolve_model


@SAMPLERS.register("embedded")
class EmbeddedSampler(Sampler):
    """Samples with transformers on the local CPU.

    Args:
        spec: generator configuration; ``spec.model`` is ``smollm2-135m-instruct`` (default),
            a local HF directory, a ``.gguf`` file or a hub id.
        num_threads: torch CPU threads (default: torch's choice).
        max_batch: most samples decoded at once; a request with more indices is split.
    """

    def __init__(self, spec: GeneratorSpec, num_threads: int | None = None, max_batch: int = 64) -> None:
        super().__init__(spec)
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.num_threads, self.max_batch = num_threads, max_batch
        self._model = None
        self._tokenizer = None

    # ---- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Load model and tokenizer (done lazily on first use)."""
        if self._model is not None:
            return
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.num_threads:
            torch.set_num_threads(self.num_threads)
        path = resolve_model(self.spec.model)
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        config_eos = self._model.generation_config.eos_token_id
        eos = config_eos if isinstance(config_eos, list) else [config_eos]
        eos = [e for e in [*eos, self._tokenizer.eos_token_id] if e is not None]
        self._eos = torch.tensor(sorted(set(eos)), dtype=torch.long)

    @property
    def model(self):
        self.load()
        return self._model

    @property
    def tokenizer(self):
        self.load()
        return self._tokenizer

    def encode(self, request: SampleRequest) -> torch.Tensor:
        """Chat-templated prompt ids ``[1, prompt_len]``."""
        encoded = self.tokenizer.apply_chat_template(
            self.messages(request.problem), add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        return encoded["input_ids"]

    # ---- sampling ------------------------------------------------------------------------
    def _sample(self, request: SampleRequest) -> list[Candidate]:
        prompt_ids = self.encode(request)
        generator = torch.Generator().manual_seed(request.seed)
        candidates: list[Candidate] = []
        indices = list(request.sample_indices)
        for start in range(0, len(indices), self.max_batch):
            batch = indices[start : start + self.max_batch]
            began = time.perf_counter()
            tokens, finish = self.decode(prompt_ids, len(batch), generator)
            share = (time.perf_counter() - began) / len(batch)
            for row, sample_index in enumerate(batch):
                candidates.append(
                    Candidate(
                        problem_id=request.problem.problem_id, generator_id=self.generator_id,
                        sample_index=sample_index,
                        text=self.tokenizer.decode(tokens[row], skip_special_tokens=True),
                        prompt_tokens=int(prompt_ids.shape[1]), completion_tokens=len(tokens[row]),
                        finish_reason=finish[row], wall_time_s=share, seed=request.seed,
                    )
                )
        return candidates

    @torch.inference_mode()
    def decode(self, prompt_ids: torch.Tensor, n: int, generator: torch.Generator) -> tuple[list[list[int]], list[str]]:
        """Decode ``n`` continuations of one prompt.

        Args:
            prompt_ids: ``[1, prompt_len]`` token ids.
            n: number of samples.
            generator: RNG for sampling.

        Returns:
            per sample, the generated token ids (the stop token excluded) and the finish reason
            (``stop`` or ``length``).
        """
        spec, model = self.spec, self.model
        cache = GrowingCache()
        out = model(input_ids=prompt_ids, past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1, :].expand(n, -1)
        position = prompt_ids.shape[1]
        active = torch.arange(n)  # sample rows still decoding, in cache order
        tokens: list[list[int]] = [[] for _ in range(n)]
        finish = ["length"] * n
        for step in range(spec.max_tokens):
            next_ids = sample_next(logits, spec.temperature, spec.top_p, generator)
            stopped = torch.isin(next_ids, self._eos)
            for row, token, done in zip(active.tolist(), next_ids.tolist(), stopped.tolist()):
                if done:
                    finish[row] = "stop"
                else:
                    tokens[row].append(token)
            if step == spec.max_tokens - 1:
                break
            if stopped.any():
                keep = (~stopped).nonzero().squeeze(-1)
                if keep.numel() == 0:
                    break
                cache.batch_select_indices(keep)
                active, next_ids = active[keep], next_ids[keep]
            positions = torch.full((len(active), 1), position, dtype=torch.long)
            out = model(input_ids=next_ids[:, None], past_key_values=cache, position_ids=positions, use_cache=True)
            logits = out.logits[:, -1, :]
            position += 1
        return tokens, finish
