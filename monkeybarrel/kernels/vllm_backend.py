"""A vLLM attention backend whose decode steps run the paged shared-prefix kernel (vLLM 0.26; imports vllm).

Loaded by vLLM itself (``attention_backend="CUSTOM"``, registered by :mod:`.vllm_plugin`). It is
vLLM's FlashAttention backend (same KV-cache layout, same cache writes, same prefill, chunked prefill
and mixed batches) with one change: when a step is all one-token decodes and prefix caching has
given requests the same physical blocks, the metadata builder groups the requests by the blocks
they share (:func:`~monkeybarrel.kernels.prefix_groups.plan_paged_decode`, once per step on the
CPU copy of the block table) and every layer's attention runs
:class:`~monkeybarrel.kernels.paged_launch.PagedStep`: each group's shared blocks are read once per
step for all its members, each request's own blocks through its own block-table row. Any other
batch, or one where grouping saves less than ``MONKEYBARREL_MIN_SAVED`` (default 0.2) of the KV
reads, runs FlashAttention unchanged.

The decode attention runs outside CUDA graphs (the builder declares no full-graph support, so
vLLM captures the rest of the model piecewise): the work list changes from step to step.
"""

from __future__ import annotations

import json
import logging
import os
import time


from vllm.v1.attention.backend import AttentionCGSupport, AttentionType, CommonAttentionMetadata
from vllm.v1.attention.backends.flash_attn import (
    FlashAttentionBackend,
    FlashAttentionImpl,
    FlashAttentionMetadata,
    FlashAttentionMetadataBuilder,
)

from .hydragen_launch import _num_sms
from .paged_launch import PagedStep
from .prefix_groups import PlanCache
from .vllm_plugin import cpu_block_table

__all__ = ["MonkeybarrelAttentionBackend", "MonkeybarrelMetadataBuilder", "MonkeybarrelAttentionImpl", "STATS"]

_log = logging.getLogger(__name__)

STATS = {"shared_steps": 0, "fallback_steps": 0, "reused_plans": 0, "plan_seconds": 0.0, "synced_block_tables": 0}
"""Per-process counters: decode steps served by the shared-prefix kernel, steps left to FlashAttention,
steps that reused the previous step's plan, CPU seconds spent planning, and steps that had to copy the
block table back from the GPU."""


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
    """FlashAttention's metadata plus, for pure-decode steps with shared blocks, a planned :class:`PagedStep`."""

    _cudagraph_support = AttentionCGSupport.NEVER
    supports_update_block_table = False

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        num_sms = _num_sms(device.index or 0) if device.type == "cuda" else 132
        self.planner = PlanCache(self.block_size, self.num_heads_q // self.num_heads_kv, self.num_heads_kv,
                                 num_sms=num_sms, min_saved=float(os.environ.get("MONKEYBARREL_MIN_SAVED", "0.2")))
        self._step: PagedStep | None = None

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> FlashAttentionMetadata:
        metadata = super().build(common_prefix_len, common_attn_metadata, fast_build)
        metadata.shared_prefix_step = self._plan(common_attn_metadata)
        return metadata

    def _plan(self, cm: CommonAttentionMetadata) -> PagedStep | None:
        """The step's work list, or None to leave the step to FlashAttention (see :class:`PlanCache`:
        a steady decode reuses the last plan and its device buffers)."""
        if cm.max_query_len != 1 or cm.num_reqs == 0 or self.headdim not in (64, 128):
            return None
        started = time.perf_counter()
        T = cm.num_reqs
        table = cpu_block_table(cm.block_table_tensor)
        if table is None:  # not the V1 runner's table: copy it back (waits for the GPU)
            table = cm.block_table_tensor[:T].cpu().numpy()
            STATS["synced_block_tables"] += 1
        lens = cm._seq_lens_cpu if cm._seq_lens_cpu is not None else cm.seq_lens_cpu_upper_bound
        lens = (lens if lens is not None else cm.seq_lens.cpu())[:T].numpy()
        plan, reused = self.planner.plan(table[:T], lens)
        if plan is None:
            self._step = None
        elif not reused or self._step is None:
            self._step = PagedStep(plan, self.num_heads_q, self.num_heads_kv, self.headdim, self.device)
        STATS["reused_plans"] += int(reused)
        STATS["shared_steps" if plan is not None else "fallback_steps"] += 1
        STATS["plan_seconds"] += time.perf_counter() - started
        self._dump_stats()
        return self._step

    def _dump_stats(self) -> None:
        """Write STATS to ``$MONKEYBARREL_ATTENTION_STATS`` (JSON) every 32 steps, for runs whose engine
        lives in another process."""
        path = os.environ.get("MONKEYBARREL_ATTENTION_STATS")
        if path and (STATS["shared_steps"] + STATS["fallback_steps"]) % 32 == 0:
            with open(path, "w") as fh:
                json.dump(STATS, fh)


class MonkeybarrelAttentionImpl(FlashAttentionImpl):
    """FlashAttention's implementation; steps with a planned :class:`PagedStep` run the paged kernel."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        plain = (self.alibi_slopes is None and tuple(self.sliding_window) == (-1, -1)
                 and not self.logits_soft_cap and getattr(self, "sinks", None) is None
                 and self.kv_cache_dtype in ("auto", "bfloat16", "float16") and self.attn_type == AttentionType.DECODER
                 and getattr(self, "dcp_world_size", 1) == 1
                 and self.head_size in (64, 128))
        self.shared_prefix_ok = plain
        if not plain:
            _log.warning("monkeybarrel attention: this layer (alibi, sliding window, soft cap, sinks, quantised "
                         "KV or head size %d) runs FlashAttention only", self.head_size)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output, output_scale=None,
                output_block_scale=None):
        step = getattr(attn_metadata, "shared_prefix_step", None) if attn_metadata is not None else None
        if step is None or not self.shared_prefix_ok or output_scale is not None or output_block_scale is not None:
            return super().forward(layer, query, key, value, kv_cache, attn_metadata, output, output_scale,
                                   output_block_scale)
        # (blocks, Hkv, block_size, 2D) logical, NHD physical -> K, V: (blocks, block_size, Hkv, D) views
        key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
        T = step.T
        out = output[:T].view(T, self.num_heads, self.head_size)
        step.run(query[:T], key_cache, value_cache, attn_metadata.block_table, attn_metadata.seq_lens, self.scale, out)
        return output
