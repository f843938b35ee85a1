"""Reward model: any HF sequence-classification model scoring (problem, solution) pairs.

Outcome reward models on the hub (Skywork-Reward, ArmoRM, INF-ORM, ...) are
``AutoModelForSequenceClassification`` checkpoints with one output: the raw head value is the
reward (unbounded; selectors normalise per verifier). Two-class heads score the log-odds of
``positive_label``. With a chat template the pair is the conversation user=problem,
assistant=solution; without one it is encoded as a text pair.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.models import LazyModel, load_pretrained
from ..core.records import Candidate, Problem
from .base import VERIFIERS, Verifier
from .judge_prompt import judgeable, problem_text


@VERIFIERS.register("reward_model")
class RewardModel(LazyModel, Verifier):
    """Scores candidates with a sequence-classification reward model.

    Args:
        name: score column name.
        model: local HF directory or hub id.
        batch_size: candidates per forward pass.
        max_length: longest input in tokens; longer ones keep their end (the final answer).
        positive_label: class index of "correct" for heads with more than one output.
        num_threads: torch CPU threads (torch's default when None).
        device: torch device.
        dtype: torch dtype name of the weights.
        trust_remote_code: passed to ``from_pretrained`` (some reward models ship custom code).
    """

    def __init__(self, name: str, model: str, batch_size: int = 8, max_length: int = 2048, positive_label: int = -1,
                 num_threads: int | None = None, device: str = "cpu", dtype: str = "float32",
                 trust_remote_code: bool = False) -> None:
        super().__init__(name)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {max_length}")
        self.model_name, self.batch_size, self.max_length = model, batch_size, max_length
        self.positive_label, self.num_threads = positive_label, num_threads
        self.device, self.dtype, self.trust_remote_code = device, dtype, trust_remote_code

    def _load(self) -> None:
        """Load the sequence-classification model and set its padding (``load``: on first use)."""
        try:
            self._tokenizer, self._model = load_pretrained(
                self.model_name, "AutoModelForSequenceClassification", num_threads=self.num_threads, dtype=self.dtype,
                device=self.device, trust_remote_code=self.trust_remote_code)
        except (OSError, ValueError) as exc:
            raise ValueError(f"reward model {self.model_name!r}: cannot load a sequence-classification model: {exc}") from None
        if self._model.config.pad_token_id is None:  # needed to find each row's last token
            pad = self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else self._tokenizer.eos_token_id
            self._model.config.pad_token_id = pad
        if self._tokenizer.pad_token_id is None:
            self._tokenizer.pad_token_id = self._model.config.pad_token_id
        self._tokenizer.truncation_side = "left"
        labels = self._model.config.num_labels
        if not -labels <= self.positive_label < labels:
            raise ValueError(f"positive_label {self.positive_label} out of range for a head with {labels} outputs")

    def close(self) -> None:
        self._model = self._tokenizer = None

    def texts(self, problem: Problem, candidates: Sequence[Candidate]) -> list[str | tuple[str, str]]:
        """What the model reads per candidate: the rendered chat, or a (problem, solution) pair."""
        self.load()
        question = problem_text(problem)
        if self._tokenizer.chat_template:
            return [self._tokenizer.apply_chat_template(
                [{"role": "user", "content": question}, {"role": "assistant", "content": c.text}], tokenize=False)
                for c in candidates]
        return [(question, c.text) for c in candidates]

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        import torch

        scores = np.full(len(candidates), np.nan)
        rows = [i for i, c in enumerate(candidates) if judgeable(c)]
        if not rows:
            return scores
        inputs = self.texts(problem, [candidates[i] for i in rows])
        order = sorted(range(len(rows)), key=lambda r: -len(str(inputs[r])))  # similar lengths pad less
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                scores[[rows[r] for r in batch]] = self._forward([inputs[r] for r in batch])
        return scores

    def _forward(self, inputs: list) -> np.ndarray:
        pairs = isinstance(inputs[0], tuple)
        encoded = self._tokenizer(
            [i[0] for i in inputs] if pairs else inputs, [i[1] for i in inputs] if pairs else None,
            padding=True, truncation="only_second" if pairs else True, max_length=self.max_length,
            return_tensors="pt", add_special_tokens=pairs)
        logits = self._model(**{k: v.to(self.device) for k, v in encoded.items()}).logits.float()
        if logits.shape[-1] == 1:
            return logits[:, 0].double().cpu().numpy()
        logprobs = logits.log_softmax(-1)
        positive = logprobs[:, self.positive_label]
        rest = torch_logsumexp_except(logprobs, self.positive_label % logits.shape[-1])
        return (positive - rest).double().cpu().numpy()


def torch_logsumexp_except(logprobs, column: int):
    """``log(sum(exp(logprobs[:, j]) for j != column))`` per row."""
    import torch

    others = torch.cat([logprobs[:, :column], logprobs[:, column + 1:]], dim=-1)
    return torch.logsumexp(others, dim=-1)
