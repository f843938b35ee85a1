"""transformers integration: an AttentionInterface function plus a KV store that keeps the prompt once.

Usage (what :mod:`monkeybarrel.kernels.shared_prefix_sampling` does)::

    register_hydragen_attention()                      # once per process
    kv = SharedPrefixKV.for_model(model, n=64, capacity=T)
    with hydragen_attention_enabled(model):
        model(prompt[None], position_ids=..., use_cache=False, shared_prefix_kv=kv.prefill_mode())
        model(tokens[:, None], position_ids=..., use_cache=False, shared_prefix_kv=kv.decode_mode())

The model is called with ``use_cache=False``: the HF cache is bypassed, and this module's attention
function keeps the KV itself. In prefill mode (batch 1, the prompt) it stores the prompt's keys and
values once per layer as ``[Hkv, P, D]`` and returns causal SDPA. In decode mode (batch n, one token
each) it appends each sequence's new key/value to its suffix buffer and calls
:func:`monkeybarrel.kernels.attention.shared_prefix_attention` (Triton on CUDA, reference on CPU).
Called without ``shared_prefix_kv`` it falls back to transformers' SDPA function.

Assumptions: the model's attention modules follow the transformers functional pattern
(Llama-family: ``module.layer_idx``, query ``[B, Hq, q, D]``, key/value ``[B, Hkv, k, D]``, rotary
applied before the attention function), no padding inside the prompt, no sliding window, no softcap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["ATTN_NAME", "SharedPrefixKV", "register_hydragen_attention", "hydragen_attention_enabled",
           "hydragen_attention_forward"]

ATTN_NAME = "monkeybarrel_hydragen"


class SharedPrefixKV:
    """KV of n sequences that share one prompt: the prompt once, a suffix buffer per sequence.

    Per layer ``l``: ``prefix_k[l], prefix_v[l]`` ``[Hkv, P, D]`` (set by the prefill) and
    ``suffix_k[l], suffix_v[l]`` ``[n, Hkv, capacity, D]``. ``lens`` ``[n]`` int32 counts the suffix
    rows written; ``kv_lens`` ``[n]`` int32 is ``lens + 1`` during a decode step (the new token
    included). Both live on the device, so a decode step can be captured in a CUDA graph.
    """

    def __init__(self, num_layers: int, n: int, num_kv_heads: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device | str, kernel_kwargs: dict[str, Any] | None = None):
        self.num_layers, self.n, self.capacity = num_layers, n, capacity
        self.num_kv_heads, self.head_dim = num_kv_heads, head_dim
        shape = (n, num_kv_heads, capacity, head_dim)
        self.suffix_k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.suffix_v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.prefix_k: list[torch.Tensor | None] = [None] * num_layers
        self.prefix_v: list[torch.Tensor | None] = [None] * num_layers
        self.lens = torch.zeros(n, dtype=torch.int32, device=device)
        self.kv_lens = torch.ones(n, dtype=torch.int32, device=device)
        self._rows = torch.arange(n, device=device)
        self.mode = "prefill"
        self.kernel_kwargs = dict(kernel_kwargs or {})

    @classmethod
    def for_model(cls, model: torch.nn.Module, n: int, capacity: int, **kw: Any) -> SharedPrefixKV:
        """Sized from a transformers model's config, in the model's dtype and device."""
        cfg = model.config
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        p = next(model.parameters())
        return cls(cfg.num_hidden_layers, n, kv_heads, head_dim, capacity, p.dtype, p.device, **kw)

    @property
    def prefix_len(self) -> int:
        return 0 if self.prefix_k[0] is None else self.prefix_k[0].shape[1]

    def prefill_mode(self) -> SharedPrefixKV:
        self.mode = "prefill"
        return self

    def decode_mode(self) -> SharedPrefixKV:
        self.mode = "decode"
        return self

    def reset_suffix(self) -> None:
        """Forget every suffix row (the prefix stays)."""
        self.lens.zero_()
        self.kv_lens.fill_(1)

    def begin_step(self) -> None:
        """Before a decode step: the new token is row ``lens[b]`` of each suffix."""
        torch.add(self.lens, 1, out=self.kv_lens)

    def end_step(self) -> None:
        """After a decode step: the new rows are now part of the suffixes."""
        self.lens.add_(1)

    def positions(self) -> torch.Tensor:
        """Rotary positions of the next decode token of each sequence, ``[n, 1]`` int64."""
        return (self.lens.to(torch.int64) + self.prefix_len).view(self.n, 1)

    # ---------------------------------------------------------------- the attention function's side
    def store_prefix(self, layer: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """key/value: ``[1, Hkv, P, D]`` of the prompt for one layer."""
        if key.shape[0] != 1:
            raise ValueError(f"prefill expects batch 1 (the shared prompt), got {key.shape[0]}")
        self.prefix_k[layer] = key[0].contiguous()
        self.prefix_v[layer] = value[0].contiguous()

    def append_and_attend(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          scale: float) -> torch.Tensor:
        """query ``[n, Hq, 1, D]``, key/value ``[n, Hkv, 1, D]`` -> attention output ``[n, Hq, D]``."""
        from .attention import shared_prefix_attention

        if query.shape[2] != 1:
            raise ValueError("decode mode takes one new token per sequence")
        if self.prefix_k[layer] is None:
            raise RuntimeError("decode before prefill: no prefix KV for layer %d" % layer)
        sk, sv = self.suffix_k[layer], self.suffix_v[layer]
        sk[self._rows, :, self.lens.long()] = key[:, :, 0]
        sv[self._rows, :, self.lens.long()] = value[:, :, 0]
        return shared_prefix_attention(query[:, :, 0], self.prefix_k[layer], self.prefix_v[layer], sk, sv,
                                       self.kv_lens, scale, **self.kernel_kwargs)


def hydragen_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    shared_prefix_kv: SharedPrefixKV | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """AttentionInterface function. Returns ``([B, q_len, Hq, D], None)`` like transformers' SDPA."""
    if shared_prefix_kv is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    layer = module.layer_idx
    kv = shared_prefix_kv
    if kv.mode == "prefill":
        kv.store_prefix(layer, key, value)
        out = F.scaled_dot_product_attention(query, key, value, is_causal=query.shape[2] > 1, scale=scale,
                                             enable_gqa=query.shape[1] != key.shape[1])
        return out.transpose(1, 2).contiguous(), None
    out = kv.append_and_attend(layer, query, key, value, scale)  # [n, Hq, D]
    return out.unsqueeze(1), None


def register_hydragen_attention() -> str:
    """Register :func:`hydragen_attention_forward` with transformers' AttentionInterface; returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_NAME, hydragen_attention_forward)
    return ATTN_NAME


@contextlib.contextmanager
def hydragen_attention_enabled(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """Switch ``model`` to the hydragen attention function inside the block, and back after."""
    register_hydragen_attention()
    before = model.config._attn_implementation
    _set_attn_implementation(model, ATTN_NAME)
    try:
        yield model
    finally:
        _set_attn_implementation(model, before)


def _set_attn_implementation(model: torch.nn.Module, name: str) -> None:
    """``model.set_attn_implementation`` where the transformers version has it, else the config field."""
    setter = getattr(model, "set_attn_implementation", None)
    if setter is not None:
        try:
            setter(name)
            return
        except (ValueError, KeyError, AttributeError):
            pass
    model.config._attn_implementation = name
