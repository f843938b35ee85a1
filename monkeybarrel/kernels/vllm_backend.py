"""A vLLM attention backend whose decode steps run the paged shared-prefix kernel (vLLM 0.26; imports vllm).

Loaded by vLLM itself (``attention_backend="CUSTOM"``, registered by :mod:`.vllm_plugin`). It is
vLLM's FlashAttention backend (same KV-cache layout, same cache writes, same prefill, chunked prefill
and mixed batches) with one change: a step that is all one-token decodes runs
:class:`~monkeybarrel.kernels.paged_launch.PagedStep`. The metadata builder groups the requests by
the physical KV blocks prefix caching made them share
(:func:`~monkeybarrel.kernels.prefix_groups.plan_paged_decode`, on the CPU mirror of the block table,
once per step and only when the batch changed) and copies the plan into the step's device buffers;
every layer then reads each group's shared blocks once for all its members and each request's own
blocks through its own block-table row.

CUDA graphs: the builder declares ``UNIFORM_SINGLE_TOKEN_DECODE``, so vLLM captures whole decode
steps (the kernel inside) for each batch size up to its capture limit, and runs other batches
piecewise with FlashAttention eager between the pieces. A step's launch arguments depend only on its
batch size and its plan lives in persistent buffers, so a replay runs the plan the builder loaded
just before it. Decode batches above the capture limit run eagerly and fall back to FlashAttention
when grouping saves less than ``MONKEYBARREL_MIN_SAVED`` (default 0.2) of the KV reads.

The block table comes from the V2 model runner's CPU mirror (vLLM 0.26's default runner; no
synchronisation); with the V1 runner it is copied back from the GPU each step.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time

import numpy as np
import torch
from vllm.v1.attention.backend import AttentionCGSupport, AttentionType, CommonAttentionMetadata
from vllm.v1.attention.backends.flash_attn import (
    FlashAttentionBackend,
    FlashAttentionImpl,
    FlashAttentionMetadata,
    FlashAttentionMetadataBuilder,
)

from .paged_launch import PagedStep, PagedWorkspace
from .prefix_groups import PlanCache
from .vllm_plugin import cpu_block_table

__all__ = ["MonkeybarrelAttentionBackend", "MonkeybarrelMetadataBuilder", "MonkeybarrelAttentionImpl", "STATS"]

_log = logging.getLogger(__name__)

STATS = {"shared_steps": 0, "fallback_steps": 0, "graph_steps": 0, "reused_plans": 0, "plan_seconds": 0.0,
         "synced_block_tables": 0}
"""Per-process counters: decode steps served by the shared-prefix kernel (of which ``graph_steps`` had
a batch size vLLM replays from a CUDA graph), eager steps left to FlashAttention, steps that reused
the previous step's plan, CPU seconds spent planning, and steps that had to copy the block table back
from the GPU."""


class MonkeybarrelAttentionBackend(FlashAttentionBackend):
    """FlashAttention's backend with the shared-prefix decode path (see the module docstring)."""

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type["MonkeybarrelAttentionImpl"]:
        return MonkeybarrelAttentionImpl

    @staticmethod
    def get_builder_cls() -> type["MonkeybarrelMetadataBuilder"]:
        return MonkeybarrelMetadataBuilder


class MonkeybarrelMetadataBuilder(FlashAttentionMetadataBuilder):
    """FlashAttention's metadata plus, for pure-decode steps, a loaded :class:`PagedStep`."""

    _cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    supports_update_block_table = False

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec) -> AttentionCGSupport:
        return cls._cudagraph_support

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.workspace: PagedWorkspace | None = None
        if self.headdim in (64, 128) and device.type == "cuda":
            self.workspace = PagedWorkspace(vllm_config.scheduler_config.max_num_seqs, self.num_heads_q,
                                            self.num_heads_kv, self.headdim, device,
                                            prefix_waves=int(os.environ.get("MONKEYBARREL_PREFIX_WAVES", "1")))
            self.planner = PlanCache(functools.partial(self.workspace.plan, block_size=self.block_size),
                                     min_saved=float(os.environ.get("MONKEYBARREL_MIN_SAVED", "0.2")))
        # decode batches of up to this many requests are replayed from CUDA graphs: their step always runs
        self.graph_rows = (self.max_cudagraph_size or 0) if self.use_full_cuda_graph else 0
        self._capturing = False

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> FlashAttentionMetadata:
        metadata = super().build(common_prefix_len, common_attn_metadata, fast_build)
        metadata.shared_prefix_step = self._step(common_attn_metadata)
        return metadata

    def build_for_cudagraph_capture(self, common_attn_metadata: CommonAttentionMetadata) -> FlashAttentionMetadata:
        """Capture with an empty plan (the dummy batch's block table means nothing; replays load real ones)."""
        self._capturing = True
        try:
            return super().build_for_cudagraph_capture(common_attn_metadata)
        finally:
            self._capturing = False

    def _step(self, cm: CommonAttentionMetadata) -> PagedStep | None:
        """The step with this batch's plan loaded, or None to leave the step to FlashAttention."""
        T = cm.num_reqs
        ws = self.workspace
        if cm.max_query_len != 1 or T == 0 or ws is None or T > ws.max_rows:
            return None
        step = ws.step(T)
        if self._capturing:
            step.load(ws.plan(np.zeros((T, 1), np.int32), np.zeros(T, np.int32), self.block_size))
            return step
        started = time.perf_counter()
        table, lens = self._cpu_inputs(cm)
        in_graph = T <= self.graph_rows
        plan, reused = self.planner.plan(table, lens, always=in_graph)
        STATS["reused_plans"] += int(reused)
        STATS["shared_steps" if plan is not None else "fallback_steps"] += 1
        STATS["graph_steps"] += int(plan is not None and in_graph)
        if plan is not None:
            step.load(plan)
        STATS["plan_seconds"] += time.perf_counter() - started
        self._dump_stats()
        return step if plan is not None else None

    def _cpu_inputs(self, cm: CommonAttentionMetadata) -> tuple[np.ndarray, np.ndarray]:
        """``(block_table [T, W], seq_lens [T])`` on the CPU, padded rows zero: the V2 runner's mirror
        and sequence-length bound when there is one, else copies from the GPU (a synchronisation)."""
        T = cm.num_reqs
        lens = cm.seq_lens_cpu_upper_bound
        mirrored = None
        if lens is not None:
            lens = lens[:T].numpy().astype(np.int32)
            width = -(-int(lens.max(initial=1)) // self.block_size)
            mirrored = cpu_block_table(cm.block_table_tensor, T, width)
        if mirrored is None:
            STATS["synced_block_tables"] += 1
            return cm.block_table_tensor[:T].cpu().numpy(), cm.seq_lens[:T].cpu().numpy()
        table, n = mirrored
        lens[n:] = 0
        return table, lens

    def _dump_stats(self) -> None:
        """Write STATS to ``$MONKEYBARREL_ATTENTION_STATS`` (JSON) every 32 steps, for runs whose engine
        lives in another process."""
        path = os.environ.get("MONKEYBARREL_ATTENTION_STATS")
        if path and (STATS["shared_steps"] + STATS["fallback_steps"]) % 32 == 0:
            with open(path, "w") as fh:
                json.dump(STATS, fh)


class MonkeybarrelAttentionImpl(FlashAttentionImpl):
    """FlashAttention's implementation; steps with a :class:`PagedStep` run the paged kernel.

    FP8 KV cache (``kv_cache_dtype: fp8``): our kernel reads the e4m3 cache with the layer's scales and
    keeps the query in bf16/fp16. FlashAttention (FA3) wants the query in FP8 too, so this backend tells
    the layer not to quantise queries and quantises them itself (static, per tensor, as the layer would)
    only for the steps it leaves to FlashAttention.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fp8_cache = self.kv_cache_dtype in ("fp8", "fp8_e4m3")
        plain = (self.alibi_slopes is None and tuple(self.sliding_window) == (-1, -1)
                 and not self.logits_soft_cap and getattr(self, "sinks", None) is None
                 and self.kv_cache_dtype in ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3")
                 and self.attn_type == AttentionType.DECODER
                 and getattr(self, "dcp_world_size", 1) == 1
                 and self.head_size in (64, 128))
        self.shared_prefix_ok = plain
        # queries reach forward() unquantised; FlashAttention's steps get them quantised here (see the class docstring)
        self._fa_quant_query = bool(self.fp8_cache and self.supports_quant_query_input)
        self.supports_quant_query_input = False
        if not plain:
            _log.warning("monkeybarrel attention: this layer (alibi, sliding window, soft cap, sinks, a KV cache "
                         "dtype other than bf16/fp16/fp8 e4m3, or head size %d) runs FlashAttention only", self.head_size)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        step = getattr(attn_metadata, "shared_prefix_step", None) if attn_metadata is not None else None
        per_tensor = not self.fp8_cache or (layer._k_scale.numel() == 1 and layer._v_scale.numel() == 1)
        if (step is None or not self.shared_prefix_ok or not per_tensor or output_scale is not None
                or output_block_scale is not None):
            return self._flash_attention(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                         output_block_scale)
        # (blocks, Hkv, block_size, 2D) logical, NHD physical -> K, V: (blocks, block_size, Hkv, D) views
        key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
        k_scale = v_scale = 1.0
        if self.fp8_cache:
            key_cache, value_cache = key_cache.view(torch.float8_e4m3fn), value_cache.view(torch.float8_e4m3fn)
            k_scale, v_scale = layer._k_scale_float, layer._v_scale_float
        T = step.T
        out = output[:T].view(T, self.num_heads, self.head_size)
        step.run(query[:T], key_cache, value_cache, attn_metadata.block_table, attn_metadata.seq_lens, self.scale, out,
                 k_scale=k_scale, v_scale=v_scale)
        return output

    def _flash_attention(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                         output_block_scale):
        """vLLM's FlashAttention path, with the query quantised as vLLM's layer would have for an FP8 cache."""
        if not self._fa_quant_query:
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        fp8 = torch.float8_e4m3fn
        scale = layer._q_scale.float()
        if scale.numel() > 1:  # one scale per KV head, shared by its query heads
            scale = scale.repeat_interleave(self.num_heads // scale.numel()).view(1, -1, 1)
        limit = torch.finfo(fp8).max
        shaped = query.view(query.shape[0], self.num_heads, self.head_size).float()
        quantised = (shaped / scale).clamp(-limit, limit).to(fp8).view(query.shape)
        self.supports_quant_query_input = True
        try:
            return super().forward(layer, quantised, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        finally:
            self.supports_quant_query_input = False
