"""Launcher of the paged, many-group shared-prefix decode kernel (CUDA or Triton's interpreter; imports triton).

One decode step over vLLM's paged KV cache: :class:`PagedStep` copies a :class:`PagedDecodePlan`
(built on the CPU from the block table, once per step) to the device and allocates the partial
buffers; :meth:`PagedStep.run` then issues two launches per layer, the fused prefix/suffix grid
(``_paged_decode_kernel``) and the log-sum-exp merge (``_merge_kernel``, shared with the contiguous
kernel). All layers of a step reuse one ``PagedStep``.
"""

from __future__ import annotations

import numpy as np
import torch
import triton

from .hydragen_launch import SUPPORTED_DTYPES, _interpreting, _num_sms
from .hydragen_triton import _merge_kernel, _paged_decode_kernel
from .prefix_groups import PagedDecodePlan, plan_paged_decode

__all__ = ["PagedStep", "paged_shared_prefix_decode"]

_LOG2E = 1.4426950408889634
_MERGE_ROWS = 32


class PagedStep:
    """A planned decode step: the plan on the device and the partial buffers, reused by every layer.

    Args:
        plan: from :func:`~monkeybarrel.kernels.prefix_groups.plan_paged_decode`.
        num_q_heads, num_kv_heads, head_dim: the attention layers' shape.
        device: where the KV cache lives.
        block_m, block_n: prefix tile rows / keys per step (block_n also for the suffix keys).
    """

    def __init__(self, plan: PagedDecodePlan, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 device: torch.device, *, block_m: int = 128, block_n: int | None = None) -> None:
        T = len(plan.order)
        self.plan, self.T = plan, T
        self.Hq, self.Hkv, self.D = num_q_heads, num_kv_heads, head_dim
        self.G = num_q_heads // num_kv_heads
        self.block_m = block_m
        self.block_n = block_n or (64 if head_dim >= 128 else 128)
        packed = np.concatenate([plan.items.reshape(-1), plan.order, plan.shared_len]).astype(np.int32)
        host = torch.from_numpy(packed)
        if device.type == "cuda":
            host = host.pin_memory()
        meta = host.to(device, non_blocking=True)
        n_items = plan.n_items
        self.items = meta[: n_items * 8]
        self.order = meta[n_items * 8: n_items * 8 + T]
        self.shared_len = meta[n_items * 8 + T:]
        n_rows = T * self.G
        f32 = dict(device=device, dtype=torch.float32)
        nsp, nss = plan.prefix_splits, plan.suffix_splits
        self.op = torch.empty((num_kv_heads, nsp, n_rows, head_dim), **f32)
        # slots no item writes (requests outside groups, groups with fewer splits) stay -inf for every layer
        self.lp = torch.full((num_kv_heads, nsp, n_rows), float("-inf"), **f32)
        self.os = torch.empty((T, num_kv_heads, nss, self.G, head_dim), **f32)
        self.ls = torch.empty((T, num_kv_heads, nss, self.G), **f32)
        self.n_prefix = n_items * num_kv_heads
        self.n_suffix = T * num_kv_heads * nss

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
            seq_lens: torch.Tensor, scale: float, out: torch.Tensor) -> torch.Tensor:
        """One layer's attention for the step's ``T`` decode tokens.

        Args:
            q: ``[T, Hq, D]`` queries, token ``t`` of request ``t`` (head dim contiguous).
            k_cache, v_cache: ``[num_blocks, block_size, Hkv, D]`` views of the paged cache (any
                strides with the head dim contiguous; vLLM's K and V interleave in one tensor).
            block_table: ``[>=T, W]`` int32 physical block ids, row ``t`` for request ``t``.
            seq_lens: ``[>=T]`` int32 tokens in each request's KV, the current token included.
            scale: softmax scale.
            out: ``[T, Hq, D]`` written in q's dtype.
        """
        T, G, D = self.T, self.G, self.D
        if q.dtype not in SUPPORTED_DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
            raise TypeError(f"q/k/v dtypes {q.dtype}/{k_cache.dtype}/{v_cache.dtype}: need one of bf16, fp16")
        if q.shape[0] < T or q.shape[1:] != (self.Hq, D) or k_cache.shape[2:] != (self.Hkv, D):
            raise ValueError(f"q {tuple(q.shape)} / k_cache {tuple(k_cache.shape)} do not match the step "
                             f"(T={T}, Hq={self.Hq}, Hkv={self.Hkv}, D={D})")
        if block_table.dtype != torch.int32 or seq_lens.dtype != torch.int32:
            raise TypeError("block_table and seq_lens must be int32")
        bs = k_cache.shape[1]
        n_rows = T * G
        args = (q, k_cache, v_cache, block_table, seq_lens, self.items, self.order, self.shared_len,
                self.op, self.lp, self.os, self.ls,
                n_rows, max(self.plan.n_items, 1), self.n_prefix, scale * _LOG2E,
                q.stride(0), q.stride(1),
                k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
                v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
                self.Hkv, self.plan.prefix_splits, self.plan.suffix_splits)
        opts = dict(num_warps=8, num_stages=2)
        if not _interpreting():
            opts["maxnreg"] = 128
        _paged_decode_kernel[(self.n_prefix + self.n_suffix,)](
            *args, G=G, D=D, BS=bs, BLOCK_M=self.block_m, BLOCK_N=self.block_n,
            BLOCK_G=max(16, triton.next_power_of_2(G)), BLOCK_NS=64, **opts)
        _merge_kernel[(triton.cdiv(T * self.Hq, _MERGE_ROWS),)](
            self.op, self.lp, self.os, self.ls, out, self.lp, n_rows, T * self.Hq, out.stride(0), out.stride(1),
            self.Hkv, self.plan.prefix_splits, self.plan.suffix_splits,
            G=G, D=D, BLOCK_R=_MERGE_ROWS, WRITE_LSE=False, num_warps=4)
        return out


def paged_shared_prefix_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_table: torch.Tensor, seq_lens: torch.Tensor, scale: float | None = None,
                               *, out: torch.Tensor | None = None, block_m: int = 128) -> torch.Tensor:
    """Plan (from CPU copies of ``block_table``/``seq_lens``) and run one step: the convenience path for
    tests and benchmarks; an engine plans once per step and reuses :class:`PagedStep` across layers.

    Returns ``out [T, Hq, D]`` with ``T = q.shape[0]``.
    """
    T, Hq, D = q.shape
    Hkv, bs = k_cache.shape[2], k_cache.shape[1]
    plan = plan_paged_decode(block_table[:T].cpu().numpy(), seq_lens[:T].cpu().numpy(), bs, Hq // Hkv, Hkv,
                             block_m=block_m, num_sms=_num_sms(q.device.index or 0) if q.is_cuda else 132)
    step = PagedStep(plan, Hq, Hkv, D, q.device, block_m=block_m)
    out = torch.empty_like(q) if out is None else out
    return step.run(q, k_cache, v_cache, block_table, seq_lens, D ** -0.5 if scale is None else scale, out)
