"""Launcher of the paged, many-group shared-prefix decode kernel (CUDA or Triton's interpreter; imports triton).

One decode step over vLLM's paged KV cache. :class:`PagedWorkspace` owns the device buffers of every
step an engine runs (the plan's metadata and the float32 partials, sized for the largest batch);
:meth:`PagedWorkspace.step` gives the :class:`PagedStep` of a batch size, whose kernel arguments
depend on nothing but that size. :meth:`PagedStep.load` copies a
:class:`~monkeybarrel.kernels.prefix_groups.PagedDecodePlan` into the workspace (one asynchronous
host-to-device copy, skipped while the plan is unchanged) and :meth:`PagedStep.run` issues two
launches per layer: the fused prefix/suffix grid (``_paged_decode_kernel``) and the log-sum-exp merge
(``_paged_merge_kernel``). So a CUDA graph captured around :meth:`PagedStep.run` for a batch size
replays correctly for any later plan of that size that was loaded before the replay.
"""

from __future__ import annotations

import numpy as np
import torch
import triton

from .hydragen_launch import SUPPORTED_DTYPES, _interpreting, _num_sms
from .hydragen_triton import _paged_decode_kernel, _paged_merge_kernel
from .prefix_groups import ITEM_FIELDS, PagedDecodePlan, StepShape, plan_paged_decode, step_shape

__all__ = ["PagedWorkspace", "PagedStep", "paged_shared_prefix_decode"]

_LOG2E = 1.4426950408889634
_MERGE_ROWS = 32
_NF = len(ITEM_FIELDS)


class PagedWorkspace:
    """Device buffers for decode steps of up to ``max_rows`` requests, shared by every batch size
    (an engine runs one step at a time).

    Args:
        max_rows: the most requests in a step (vLLM's ``max_num_seqs``).
        num_q_heads, num_kv_heads, head_dim: the attention layers' shape.
        device: where the KV cache lives.
        block_m: prefix tile rows; block_n: keys per step (prefix and suffix).
        num_sms: streaming multiprocessors (default: the device's).
        prefix_waves: see :func:`~monkeybarrel.kernels.prefix_groups.plan_paged_decode`.

    Buffers (float32 partials; int32 metadata): ``meta [8 + 8*items + 3*rows]`` (live item count,
    items, order, shared_len, row_splits of the largest step) and the flat partials of
    ``OP [Hkv, NSP, rows*G, D]``, ``LP [Hkv, NSP, rows*G]``, ``OS [rows, Hkv, NSS, G, D]``,
    ``LS [rows, Hkv, NSS, G]`` for the largest step of each.
    """

    def __init__(self, max_rows: int, num_q_heads: int, num_kv_heads: int, head_dim: int, device: torch.device,
                 *, block_m: int = 128, block_n: int | None = None, num_sms: int | None = None,
                 prefix_waves: int = 1) -> None:
        self.Hq, self.Hkv, self.D = num_q_heads, num_kv_heads, head_dim
        self.G = num_q_heads // num_kv_heads
        self.device = device
        self.block_m = block_m
        self.block_n = block_n or (64 if head_dim >= 128 else 128)
        if num_sms is None:
            num_sms = _num_sms(device.index or 0) if device.type == "cuda" else 132
        self.num_sms, self.prefix_waves = num_sms, prefix_waves
        shapes = [self.shape(rows) for rows in range(1, max_rows + 1)]
        meta = max(8 + _NF * s.items + 3 * s.rows for s in shapes)
        prefix = max(self.Hkv * s.prefix_splits * s.rows * self.G for s in shapes)
        suffix = max(s.rows * self.Hkv * s.suffix_splits * self.G for s in shapes)
        self.max_rows = max_rows
        self.meta = torch.zeros(meta, dtype=torch.int32, device=device)
        self.op = torch.empty(prefix * head_dim, dtype=torch.float32, device=device)
        self.lp = torch.empty(prefix, dtype=torch.float32, device=device)
        self.os = torch.empty(suffix * head_dim, dtype=torch.float32, device=device)
        self.ls = torch.empty(suffix, dtype=torch.float32, device=device)
        self._steps: dict[int, PagedStep] = {}
        self.loaded: PagedDecodePlan | None = None  # the plan whose metadata the device buffer holds

    def shape(self, rows: int) -> StepShape:
        """The fixed sizes of a ``rows``-request step (:func:`~monkeybarrel.kernels.prefix_groups.step_shape`)."""
        return step_shape(rows, self.G, self.Hkv, block_m=self.block_m, num_sms=self.num_sms,
                          prefix_waves=self.prefix_waves)

    def plan(self, block_table: np.ndarray, seq_lens: np.ndarray, block_size: int) -> PagedDecodePlan:
        """:func:`~monkeybarrel.kernels.prefix_groups.plan_paged_decode` with this workspace's sizes (a
        plan that fits :meth:`step`)."""
        return plan_paged_decode(block_table, seq_lens, block_size, self.G, self.Hkv, block_m=self.block_m,
                                 num_sms=self.num_sms, prefix_waves=self.prefix_waves)

    def step(self, rows: int) -> "PagedStep":
        """The step of a ``rows``-request batch (the same object, hence the same buffers, every time)."""
        if not 0 < rows <= self.max_rows:
            raise ValueError(f"a decode step of {rows} requests: this workspace holds 1..{self.max_rows}")
        if rows not in self._steps:
            self._steps[rows] = PagedStep(self, self.shape(rows))
        return self._steps[rows]


class PagedStep:
    """The decode step of one batch size: views of the workspace and the launch arguments.

    Not built directly: :meth:`PagedWorkspace.step`.
    """

    def __init__(self, ws: PagedWorkspace, shape: StepShape) -> None:
        self.ws, self.shape, self.T = ws, shape, shape.rows
        T, G, D, Hkv = shape.rows, ws.G, ws.D, ws.Hkv
        items = shape.items
        self.meta = ws.meta[: 8 + _NF * items + 3 * T]
        self.n_live = self.meta[:1]
        self.items = self.meta[8: 8 + _NF * items]
        self.order = self.meta[8 + _NF * items: 8 + _NF * items + T]
        self.shared_len = self.meta[8 + _NF * items + T: 8 + _NF * items + 2 * T]
        self.row_splits = self.meta[8 + _NF * items + 2 * T:]
        n_prefix = Hkv * shape.prefix_splits * T * G
        n_suffix = T * Hkv * shape.suffix_splits * G
        self.op, self.lp = ws.op[: n_prefix * D], ws.lp[:n_prefix]
        self.os, self.ls = ws.os[: n_suffix * D], ws.ls[:n_suffix]
        self.grid = items * Hkv + T * Hkv * shape.suffix_splits

    def load(self, plan: PagedDecodePlan) -> None:
        """Copy ``plan`` into the workspace (asynchronously, on the current stream; nothing to do
        when it is the plan already there)."""
        if plan.shape != self.shape:
            raise ValueError(f"a plan for {plan.shape} loaded into a step of {self.shape}")
        if self.ws.loaded is plan:
            return
        host = np.zeros(len(self.meta), dtype=np.int32)
        host[0] = plan.n_items
        items = self.shape.items
        host[8: 8 + _NF * plan.n_items] = plan.items.reshape(-1)
        base = 8 + _NF * items
        T = self.T
        host[base: base + T] = plan.order
        host[base + T: base + 2 * T] = plan.shared_len
        host[base + 2 * T:] = plan.row_splits
        staged = torch.from_numpy(host)
        if self.meta.is_cuda:
            staged = staged.pin_memory()  # the caching host allocator keeps it until the copy is done
        self.meta.copy_(staged, non_blocking=True)
        self.ws.loaded = plan

    def run(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
            seq_lens: torch.Tensor, scale: float, out: torch.Tensor, k_scale: float = 1.0,
            v_scale: float = 1.0) -> torch.Tensor:
        """One layer's attention for the step's ``T`` decode tokens, with the loaded plan.

        Args:
            q: ``[T, Hq, D]`` queries, token ``t`` of request ``t`` (head dim contiguous), bf16 or fp16.
            k_cache, v_cache: ``[num_blocks, block_size, Hkv, D]`` views of the paged cache (any
                strides with the head dim contiguous; vLLM's K and V interleave in one tensor), in q's
                dtype or FP8 e4m3 (``torch.float8_e4m3fn``: read at one byte an element, widened in
                registers; the stored values times ``k_scale`` / ``v_scale`` are the keys / values).
            block_table: ``[>=T, W]`` int32 physical block ids, row ``t`` for request ``t``.
            seq_lens: ``[>=T]`` int32 tokens in each request's KV, the current token included
                (0 for a padded row: its output is zeros).
            scale: softmax scale.
            out: ``[T, Hq, D]`` written in q's dtype.
            k_scale, v_scale: dequantisation scales of an FP8 cache (1.0 for a bf16/fp16 cache).
        """
        ws, T, G, D = self.ws, self.T, self.ws.G, self.ws.D
        kv_ok = {q.dtype, torch.float8_e4m3fn}
        if q.dtype not in SUPPORTED_DTYPES or k_cache.dtype not in kv_ok or v_cache.dtype != k_cache.dtype:
            raise TypeError(f"q/k/v dtypes {q.dtype}/{k_cache.dtype}/{v_cache.dtype}: need q in bf16 or fp16 and "
                            "k/v in q's dtype or float8_e4m3fn")
        if q.shape[0] < T or q.shape[1:] != (ws.Hq, D) or k_cache.shape[2:] != (ws.Hkv, D):
            raise ValueError(f"q {tuple(q.shape)} / k_cache {tuple(k_cache.shape)} do not match the step "
                             f"(T={T}, Hq={ws.Hq}, Hkv={ws.Hkv}, D={D})")
        if block_table.dtype != torch.int32 or seq_lens.dtype != torch.int32:
            raise TypeError("block_table and seq_lens must be int32")
        shape = self.shape
        opts = dict(num_warps=8, num_stages=2)
        if not _interpreting():
            opts["maxnreg"] = 128
        _paged_decode_kernel[(self.grid,)](
            q, k_cache, v_cache, block_table, seq_lens, self.n_live, self.items, self.order, self.shared_len,
            self.op, self.lp, self.os, self.ls,
            T * G, shape.items, scale * k_scale * _LOG2E,
            q.stride(0), q.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
            v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), block_table.stride(0),
            ws.Hkv, shape.prefix_splits, shape.suffix_splits,
            G=G, D=D, BS=k_cache.shape[1], BLOCK_M=ws.block_m, BLOCK_N=ws.block_n,
            BLOCK_G=max(16, triton.next_power_of_2(G)), BLOCK_NS=64, **opts)
        _paged_merge_kernel[(triton.cdiv(T * ws.Hq, _MERGE_ROWS),)](
            self.op, self.lp, self.os, self.ls, self.row_splits, out, T * G, T * ws.Hq, out.stride(0), out.stride(1),
            ws.Hkv, shape.prefix_splits, shape.suffix_splits, float(v_scale), G=G, D=D, BLOCK_R=_MERGE_ROWS,
            num_warps=4)
        return out


def paged_shared_prefix_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_table: torch.Tensor, seq_lens: torch.Tensor, scale: float | None = None,
                               *, out: torch.Tensor | None = None, block_m: int = 128,
                               workspace: PagedWorkspace | None = None, k_scale: float = 1.0,
                               v_scale: float = 1.0) -> torch.Tensor:
    """Plan (from CPU copies of ``block_table``/``seq_lens``) and run one step: the convenience path for
    tests and benchmarks; an engine keeps one :class:`PagedWorkspace` and plans once per step.

    Returns ``out [T, Hq, D]`` with ``T = q.shape[0]``.
    """
    T, Hq, D = q.shape
    Hkv, bs = k_cache.shape[2], k_cache.shape[1]
    ws = workspace or PagedWorkspace(T, Hq, Hkv, D, q.device, block_m=block_m)
    step = ws.step(T)
    step.load(ws.plan(block_table[:T].cpu().numpy(), seq_lens[:T].cpu().numpy(), bs))
    out = torch.empty_like(q) if out is None else out
    return step.run(q, k_cache, v_cache, block_table, seq_lens, D ** -0.5 if scale is None else scale, out,
                    k_scale=k_scale, v_scale=v_scale)
