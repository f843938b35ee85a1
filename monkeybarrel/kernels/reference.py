"""Pure-PyTorch reference of shared-prefix ("Hydragen") decode attention.

Runs on any device (CPU included) and is the specification the Triton kernel is tested against.

Notation used throughout ``monkeybarrel.kernels``:

- ``B``   sequences decoding together (the samples of one prompt),
- ``Hq``  query heads, ``Hkv`` key/value heads, ``G = Hq // Hkv`` the GQA group size,
- ``D``   head dimension,
- ``P``   length of the shared prefix (the prompt), stored once,
- ``S``   capacity of each sequence's own suffix buffer; sequence ``b`` uses ``suffix_lens[b] <= S``.

One decode step: every sequence has one query token ``q[b]`` that attends to the shared prefix
``k_prefix/v_prefix`` and to the first ``suffix_lens[b]`` rows of its own suffix. No causal mask is
needed inside a decode step (the query is the newest token; its own key is the last suffix row).
"""

from __future__ import annotations

import torch

__all__ = [
    "attention_with_lse",
    "merge_attention_states",
    "shared_prefix_attention_reference",
    "replicated_attention_reference",
    "paged_attention_reference",
    "paged_plan_reference",
]


def attention_with_lse(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, kv_mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention that also returns the log-sum-exp of the scores, in float32.

    Args:
        q: ``[..., M, D]`` queries.
        k, v: ``[..., N, D]`` keys and values (broadcastable against ``q``'s leading dims).
        scale: multiplier of ``q @ k^T``.
        kv_mask: optional bool ``[..., 1 or M, N]``; False columns are excluded.

    Returns:
        ``(out [..., M, D], lse [..., M])`` in float32 (float64 for float64 inputs); rows with no
        visible key get ``out = 0`` and ``lse = -inf`` (neutral for :func:`merge_attention_states`).
    """
    acc = _acc_dtype(q.dtype)
    s = torch.matmul(q.to(acc), k.to(acc).transpose(-1, -2)) * scale
    if kv_mask is not None:
        s = s.masked_fill(~kv_mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    finite = torch.isfinite(lse)
    p = torch.exp(s - torch.where(finite, lse, torch.zeros_like(lse)).unsqueeze(-1))
    p = torch.where(finite.unsqueeze(-1), p, torch.zeros_like(p))
    return torch.matmul(p, v.to(acc)), lse


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 math for 16/32-bit inputs, float64 for float64 inputs."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def merge_attention_states(
    o_a: torch.Tensor, lse_a: torch.Tensor, o_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact merge of two partial attentions over disjoint key sets.

    ``o = (o_a e^{lse_a} + o_b e^{lse_b}) / (e^{lse_a} + e^{lse_b})``, computed with the max subtracted.

    Args:
        o_a, o_b: ``[..., D]`` float partial outputs (each normalised over its own keys).
        lse_a, lse_b: ``[...]`` log-sum-exp of the scores of each part (``-inf`` = empty part).

    Returns:
        ``(o [..., D], lse [...])`` of attention over the union of the key sets, in the inputs' dtype.
    """
    m = torch.maximum(lse_a, lse_b)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    denom = w_a + w_b
    safe = torch.where(denom > 0, denom, torch.ones_like(denom))
    o = (o_a * w_a.unsqueeze(-1) + o_b * w_b.unsqueeze(-1)) / safe.unsqueeze(-1)
    return o, m + torch.log(denom)


def _check_shapes(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens) -> tuple[int, int, int, int]:
    if q.dim() != 3:
        raise ValueError(f"q must be [B, Hq, D], got {tuple(q.shape)}")
    B, Hq, D = q.shape
    if k_prefix.dim() != 3 or k_prefix.shape != v_prefix.shape:
        raise ValueError(f"k_prefix/v_prefix must be [Hkv, P, D], got {tuple(k_prefix.shape)}, {tuple(v_prefix.shape)}")
    Hkv = k_prefix.shape[0]
    if k_prefix.shape[2] != D or Hq % Hkv != 0:
        raise ValueError(f"head dim / GQA mismatch: q {tuple(q.shape)}, k_prefix {tuple(k_prefix.shape)}")
    if k_suffix.dim() != 4 or k_suffix.shape != v_suffix.shape or k_suffix.shape[0] != B \
            or k_suffix.shape[1] != Hkv or k_suffix.shape[3] != D:
        raise ValueError(f"k_suffix/v_suffix must be [B, Hkv, S, D], got {tuple(k_suffix.shape)}")
    if suffix_lens.shape != (B,):
        raise ValueError(f"suffix_lens must be [B], got {tuple(suffix_lens.shape)}")
    return B, Hq, Hkv, D


def shared_prefix_attention_reference(
    q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor, v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor, scale: float | None = None, return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Hydragen decomposition in plain PyTorch: batched prefix attention, per-sequence suffix, LSE merge.

    Args:
        q: ``[B, Hq, D]`` one query token per sequence (bf16/fp16/fp32).
        k_prefix, v_prefix: ``[Hkv, P, D]`` shared prefix keys/values, stored once.
        k_suffix, v_suffix: ``[B, Hkv, S, D]`` per-sequence suffix buffers.
        suffix_lens: ``[B]`` integer, valid suffix rows per sequence (``0 <= len <= S``).
        scale: softmax scale; default ``D ** -0.5``.
        return_lse: also return the natural-log LSE ``[B, Hq]``.

    Returns:
        ``out [B, Hq, D]`` in ``q.dtype`` (and ``lse [B, Hq]``, float32, float64 for float64 q).
        The math runs in float32 (float64 for float64 inputs).
    """
    B, Hq, Hkv, D = _check_shapes(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens)
    G = Hq // Hkv
    scale = D ** -0.5 if scale is None else scale
    # prefix: the queries of all sequences and the GQA group form the M dimension: [Hkv, B*G, D]
    q_rows = q.view(B, Hkv, G, D).permute(1, 0, 2, 3).reshape(Hkv, B * G, D)
    o_p, l_p = attention_with_lse(q_rows, k_prefix, v_prefix, scale)
    o_p = o_p.view(Hkv, B, G, D).permute(1, 0, 2, 3)  # [B, Hkv, G, D]
    l_p = l_p.view(Hkv, B, G).permute(1, 0, 2)  # [B, Hkv, G]
    # suffix: per sequence, ragged lengths by mask
    S = k_suffix.shape[2]
    valid = torch.arange(S, device=q.device)[None, :] < suffix_lens.to(q.device).view(B, 1)  # [B, S]
    o_s, l_s = attention_with_lse(q.view(B, Hkv, G, D), k_suffix, v_suffix, scale, valid[:, None, None, :])
    o, lse = merge_attention_states(o_p, l_p, o_s, l_s)
    out = o.reshape(B, Hq, D).to(q.dtype)
    return (out, lse.reshape(B, Hq)) if return_lse else out


def replicated_attention_reference(
    q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor, v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor, scale: float | None = None,
) -> torch.Tensor:
    """What a naive engine computes: each sequence attends over its own copy ``[prefix; suffix[:len]]``.

    One softmax over the concatenated keys (no decomposition), float32 math (float64 for float64
    inputs). Same arguments and
    result as :func:`shared_prefix_attention_reference`; used to check the decomposition itself.
    """
    B, Hq, Hkv, D = _check_shapes(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens)
    G = Hq // Hkv
    scale = D ** -0.5 if scale is None else scale
    P, S = k_prefix.shape[1], k_suffix.shape[2]
    k = torch.cat([k_prefix.unsqueeze(0).expand(B, -1, -1, -1), k_suffix], dim=2)  # [B, Hkv, P+S, D]
    v = torch.cat([v_prefix.unsqueeze(0).expand(B, -1, -1, -1), v_suffix], dim=2)
    pos = torch.arange(P + S, device=q.device)
    valid = pos[None, :] < (P + suffix_lens.to(q.device).view(B, 1))  # [B, P+S]
    acc = _acc_dtype(q.dtype)
    s = torch.matmul(q.view(B, Hkv, G, D).to(acc), k.to(acc).transpose(-1, -2)) * scale
    s = s.masked_fill(~valid[:, None, None, :], float("-inf"))
    out = torch.matmul(torch.softmax(s, dim=-1), v.to(acc))
    return out.reshape(B, Hq, D).to(q.dtype)


def roofline_bytes(B: int, P: int, S: int, Hkv: int, D: int, elem_bytes: int = 2) -> int:
    """Fewest HBM bytes one shared-prefix decode step must read: prefix K,V once + every suffix K,V."""
    return 2 * (P + B * S) * Hkv * D * elem_bytes


def _gather_paged(cache: torch.Tensor, block_table_row: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """Token rows ``[lo, hi)`` of one request from a paged cache ``[num_blocks, block_size, Hkv, D]``:
    ``[Hkv, hi - lo, D]``."""
    bs = cache.shape[1]
    pos = torch.arange(lo, hi, device=cache.device)
    pages = block_table_row.to(cache.device).long()[pos // bs]
    return cache[pages, pos % bs].transpose(0, 1)


def paged_attention_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                              block_table: torch.Tensor, seq_lens: torch.Tensor, scale: float | None = None,
                              ) -> torch.Tensor:
    """Decode attention over a paged KV cache, one softmax per request (what vLLM's decode computes).

    Args:
        q: ``[T, Hq, D]`` the newest token of each request.
        k_cache, v_cache: ``[num_blocks, block_size, Hkv, D]`` (vLLM's NHD layout).
        block_table: ``[T, W]`` physical block ids; ``seq_lens``: ``[T]`` tokens in each request's KV.
        scale: default ``D ** -0.5``.

    Returns:
        ``[T, Hq, D]`` in ``q.dtype`` (float32 math, float64 for float64 q); a request with ``seq_len = 0`` gets zeros.
    """
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    scale = D ** -0.5 if scale is None else scale
    out = torch.zeros(T, Hq, D, dtype=_acc_dtype(q.dtype), device=q.device)
    for t in range(T):
        n = int(seq_lens[t])
        if n == 0:
            continue
        k = _gather_paged(k_cache, block_table[t], 0, n)
        v = _gather_paged(v_cache, block_table[t], 0, n)
        o, _ = attention_with_lse(q[t].view(Hkv, Hq // Hkv, D), k, v, scale)
        out[t] = o.reshape(Hq, D)
    return out.to(q.dtype)


def paged_plan_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                         seq_lens: torch.Tensor, plan, scale: float | None = None) -> torch.Tensor:
    """The paged kernel's decomposition in plain PyTorch, driven by a ``PagedDecodePlan``.

    Each group's members attend to the shared keys ``[0, shared_len)`` read through the group
    leader's block-table row; every request attends to its own keys ``[shared_len, seq_len)``; the two
    partials merge by log-sum-exp. Equal to :func:`paged_attention_reference` exactly when the plan's
    groups really share those blocks, which is what the tests check.
    """
    T, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    scale = D ** -0.5 if scale is None else scale
    groups = plan.groups
    acc = _acc_dtype(q.dtype)
    o_p = torch.zeros(T, Hkv, G, D, dtype=acc, device=q.device)
    l_p = torch.full((T, Hkv, G), float("-inf"), dtype=acc, device=q.device)
    for g in range(groups.n_groups):
        members = torch.as_tensor(groups.members(g), device=q.device).long()
        n = int(groups.shared_blocks[g]) * k_cache.shape[1]
        k = _gather_paged(k_cache, block_table[members[0]], 0, n)
        v = _gather_paged(v_cache, block_table[members[0]], 0, n)
        rows = q[members].view(-1, Hkv, G, D).permute(1, 0, 2, 3).reshape(Hkv, -1, D)
        o, l = attention_with_lse(rows, k, v, scale)
        o_p[members] = o.view(Hkv, -1, G, D).permute(1, 0, 2, 3)
        l_p[members] = l.view(Hkv, -1, G).permute(1, 0, 2)
    out = torch.zeros(T, Hq, D, dtype=acc, device=q.device)
    for t in range(T):
        lo, hi = int(plan.shared_len[t]), int(seq_lens[t])
        k = _gather_paged(k_cache, block_table[t], lo, max(lo, hi))
        v = _gather_paged(v_cache, block_table[t], lo, max(lo, hi))
        o_s, l_s = attention_with_lse(q[t].view(Hkv, G, D), k, v, scale)
        out[t] = merge_attention_states(o_p[t], l_p[t], o_s, l_s)[0].reshape(Hq, D)
    return out.to(q.dtype)
