"""Pure sampling functions for our decode loop: temperature, nucleus (top-p), greedy."""

from __future__ import annotations

import torch

_TOP_K_PRESELECT = 256


def sample_next(logits: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row.

    Args:
        logits: ``[batch, vocab]`` float scores of the next token.
        temperature: 0 means greedy (argmax); otherwise logits are divided by it.
        top_p: keep the smallest set of tokens whose probability mass reaches ``top_p`` (1 = off).
        generator: torch RNG to draw from (for reproducible samples).

    Returns:
        ``[batch]`` int64 token ids.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        # A top-k pre-selection is exact whenever it already holds top_p of the mass in every row,
        # and far cheaper than sorting the whole vocabulary; otherwise fall back to the full sort.
        sorted_probs, order = probs.topk(min(_TOP_K_PRESELECT, probs.shape[-1]), dim=-1)
        if bool((sorted_probs.sum(dim=-1) < top_p).any()):
            sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        choice = torch.multinomial(sorted_probs, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
