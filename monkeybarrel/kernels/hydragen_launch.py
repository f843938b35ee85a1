"""Launcher for the Triton shared-prefix decode-attention kernels (CUDA only; imports triton).

:func:`hydragen_decode_attention` validates the inputs, picks the tiling (:class:`HydragenConfig`),
allocates the float32 partial buffers and issues the two launches (prefix+suffix tiles, merge).
All shapes it depends on are Python ints, and the ragged suffix lengths are read on the device, so a
call can be captured in a CUDA graph and replayed while ``suffix_lens`` changes.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import triton

from .hydragen_triton import _hydragen_kernel, _merge_kernel

__all__ = ["HydragenConfig", "hydragen_decode_attention", "default_config", "candidate_configs", "plan"]

_LOG2E = 1.4426950408889634
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class HydragenConfig:
    """Tiling and scheduling of one decode step.

    block_m: query rows ``(sequence, group head)`` per prefix tile (128 = two warpgroups of wgmma).
    block_n: prefix keys per inner step; block_ns: suffix keys per inner step.
    prefix_splits / suffix_splits: chunks the prefix / suffix key range is cut into (0 = auto).
    mode: how prefix and suffix tiles share the GPU:
        ``"fused"``   one grid holds both kinds of tiles (prefix first), ``num_warps`` each;
        ``"streams"`` two launches on two streams (they overlap), each with its own warps/stages;
        ``"serial"``  the same two launches one after the other (a diagnostic).
    num_warps / num_stages / maxnreg: prefix tiles (and fused grid). maxnreg=128 lets two 8-warp
        programs share an SM.
    suffix_warps / suffix_stages: suffix launch in the two-launch modes.
    inline_merge: the last tile to finish a row merges it (no merge launch); else a merge launch.
    suffix_first: in the fused grid, give suffix tiles the low program ids.
    """

    block_m: int = 128
    block_n: int = 64
    block_ns: int = 64
    prefix_splits: int = 0
    suffix_splits: int = 0
    mode: str = "fused"
    num_warps: int = 8
    num_stages: int = 2
    maxnreg: int | None = 128
    suffix_warps: int = 4
    suffix_stages: int = 3
    inline_merge: bool = True
    suffix_first: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("fused", "streams", "serial"):
            raise ValueError(f"mode must be fused, streams or serial, got {self.mode!r}")


def default_config(D: int) -> HydragenConfig:
    """Default tiling for head dim D (docs/kernels.md records how it was chosen)."""
    return HydragenConfig(block_n=64 if D >= 128 else 128)


def candidate_configs(D: int) -> list[HydragenConfig]:
    """Small search space used by benchmarks/prefix_attention.py --tune."""
    base = default_config(D)
    return [
        base,
        dataclasses.replace(base, inline_merge=False),
        dataclasses.replace(base, maxnreg=None),
        dataclasses.replace(base, block_ns=128),
        dataclasses.replace(base, suffix_first=True),
        dataclasses.replace(base, mode="streams"),
        dataclasses.replace(base, mode="streams", inline_merge=False),
        dataclasses.replace(base, mode="serial", inline_merge=False),
    ]


def _interpreting() -> bool:
    """Triton's CPU interpreter (TRITON_INTERPRET=1) runs the kernels on CPU tensors (tests only)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def _num_sms(device_index: int) -> int:
    if not torch.cuda.is_available():
        return 132  # interpreter: plan as for an H100
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@dataclasses.dataclass(frozen=True)
class Plan:
    """Resolved launch geometry for one problem size."""

    n_m_tiles: int
    prefix_splits: int
    prefix_chunk: int
    suffix_splits: int
    suffix_chunk: int

    @property
    def n_prefix_tiles_per_head(self) -> int:
        return self.n_m_tiles * self.prefix_splits


def plan(B: int, Hkv: int, G: int, P: int, S: int, cfg: HydragenConfig, num_sms: int) -> Plan:
    """Choose the prefix/suffix splits.

    Prefix: aim for about one prefix tile per SM (the suffix tiles of the same grid fill the rest),
    but keep at least 1024 keys per chunk so the partial outputs stay small next to the KV read.
    Suffix: split only when ``B*Hkv`` tiles would leave the machine idle (small batches).
    """
    n_m = triton.cdiv(B * G, cfg.block_m)
    if cfg.prefix_splits:
        nsp = cfg.prefix_splits
    else:
        nsp = 1
        while Hkv * n_m * nsp * 2 <= num_sms and P // (nsp * 2) >= 1024:
            nsp *= 2
    prefix_chunk = triton.cdiv(triton.cdiv(max(P, 1), nsp), cfg.block_n) * cfg.block_n
    nsp = max(1, triton.cdiv(P, prefix_chunk)) if P > 0 else 1
    if cfg.suffix_splits:
        nss = cfg.suffix_splits
    else:
        nss = 1
        while B * Hkv * nss < 4 * num_sms and S // (nss * 2) >= 256:
            nss *= 2
    suffix_chunk = triton.cdiv(triton.cdiv(max(S, 1), nss), cfg.block_ns) * cfg.block_ns
    nss = max(1, triton.cdiv(S, suffix_chunk)) if S > 0 else 1
    return Plan(n_m, nsp, prefix_chunk, nss, suffix_chunk)


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}


def _arrival_counters(device: torch.device, n: int) -> torch.Tensor:
    """Zeroed int32 arrival counters for the inline merge, one buffer per device.

    Every launch leaves them zeroed again (the last arriver of a row resets its counter), so the
    buffer is reused across calls and CUDA-graph replays. Calls are expected to run one after the
    other on a device (as decode steps do); two inline-merge calls running concurrently on two
    streams would share the counters, so give such calls ``inline_merge=False``. Allocate it
    (first call) outside graph capture, as the Triton compile must be anyway.
    """
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1 << 16), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


def _check(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens):
    if not q.is_cuda and not _interpreting():
        raise ValueError("hydragen_decode_attention needs CUDA tensors; use the reference on CPU")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"q dtype {q.dtype} not supported (bf16, fp16)")
    for name, t in (("k_prefix", k_prefix), ("v_prefix", v_prefix), ("k_suffix", k_suffix), ("v_suffix", v_suffix)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} dtype {t.dtype} != q dtype {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} on {t.device}, q on {q.device}")
    for name, t in (("q", q), ("k_prefix", k_prefix), ("v_prefix", v_prefix), ("k_suffix", k_suffix),
                    ("v_suffix", v_suffix)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must have a contiguous last (head) dimension")
    if q.dim() != 3 or k_prefix.dim() != 3 or k_suffix.dim() != 4:
        raise ValueError("expected q [B, Hq, D], k/v_prefix [Hkv, P, D], k/v_suffix [B, Hkv, S, D]")
    B, Hq, D = q.shape
    Hkv, P, _ = k_prefix.shape
    if v_prefix.shape != k_prefix.shape or k_suffix.shape != v_suffix.shape:
        raise ValueError("k and v shapes differ")
    if k_prefix.shape[2] != D or k_suffix.shape[3] != D or k_suffix.shape[0] != B or k_suffix.shape[1] != Hkv:
        raise ValueError(f"shape mismatch: q {tuple(q.shape)} prefix {tuple(k_prefix.shape)} suffix {tuple(k_suffix.shape)}")
    if Hq % Hkv:
        raise ValueError(f"Hq={Hq} is not a multiple of Hkv={Hkv}")
    if D not in (16, 32, 64, 128, 256):
        raise ValueError(f"head dim {D} not supported (power of two, 16..256; tested 64 and 128)")
    if suffix_lens.shape != (B,) or suffix_lens.dtype != torch.int32 or suffix_lens.device != q.device:
        raise ValueError("suffix_lens must be an int32 [B] tensor on q's device")
    return B, Hq, Hkv, D, P, k_suffix.shape[2]


def hydragen_decode_attention(
    q: torch.Tensor,
    k_prefix: torch.Tensor,
    v_prefix: torch.Tensor,
    k_suffix: torch.Tensor,
    v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor,
    scale: float | None = None,
    *,
    config: HydragenConfig | None = None,
    out: torch.Tensor | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Shared-prefix decode attention on the GPU (Triton).

    Args:
        q: ``[B, Hq, D]`` bf16/fp16, one query per sequence (head dim contiguous; other strides free).
        k_prefix, v_prefix: ``[Hkv, P, D]`` shared prefix KV, stored once.
        k_suffix, v_suffix: ``[B, Hkv, S, D]`` per-sequence suffix buffers (capacity S).
        suffix_lens: ``[B]`` int32 on the device: rows of each suffix that count (ragged).
        scale: softmax scale (default ``D ** -0.5``).
        config: tiling; default :func:`default_config`.
        out: optional ``[B, Hq, D]`` output buffer (q's dtype).
        return_lse: also return the natural-log LSE ``[B, Hq]`` float32.

    Returns:
        ``out [B, Hq, D]`` in q's dtype (and ``lse [B, Hq]`` if ``return_lse``).
    """
    B, Hq, Hkv, D, P, S = _check(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens)
    G = Hq // Hkv
    cfg = config or default_config(D)
    scale = D ** -0.5 if scale is None else float(scale)
    pl = plan(B, Hkv, G, P, S, cfg, _num_sms(q.device.index or 0))
    dev = q.device
    n_rows = B * G
    op = torch.empty((Hkv, pl.prefix_splits, n_rows, D), device=dev, dtype=torch.float32)
    lp = torch.empty((Hkv, pl.prefix_splits, n_rows), device=dev, dtype=torch.float32)
    os_ = torch.empty((B, Hkv, pl.suffix_splits, G, D), device=dev, dtype=torch.float32)
    ls = torch.empty((B, Hkv, pl.suffix_splits, G), device=dev, dtype=torch.float32)
    if out is None:
        out = torch.empty((B, Hq, D), device=dev, dtype=q.dtype)
    lse = torch.empty((B, Hq), device=dev, dtype=torch.float32) if return_lse else lp  # dummy when unused
    cnt = _arrival_counters(dev, B * Hq) if cfg.inline_merge else ls  # dummy when unused
    n_prefix = Hkv * pl.n_prefix_tiles_per_head
    n_suffix = B * Hkv * pl.suffix_splits
    block_g = max(16, triton.next_power_of_2(G))
    args = (q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, op, lp, os_, ls, cnt, out, lse,
            n_rows, P, pl.prefix_chunk, pl.suffix_chunk, scale * _LOG2E, n_prefix, n_suffix,
            q.stride(0), q.stride(1),
            k_prefix.stride(0), k_prefix.stride(1), v_prefix.stride(0), v_prefix.stride(1),
            k_suffix.stride(0), k_suffix.stride(1), k_suffix.stride(2),
            v_suffix.stride(0), v_suffix.stride(1), v_suffix.stride(2),
            out.stride(0), out.stride(1),
            Hkv, pl.n_m_tiles, pl.prefix_splits, pl.suffix_splits)
    meta = dict(G=G, D=D, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_G=block_g, BLOCK_NS=cfg.block_ns,
                SUFFIX_FIRST=cfg.suffix_first, INLINE_MERGE=cfg.inline_merge, WRITE_LSE=return_lse,
                MERGE_ROWS=min(32, cfg.block_m))
    prefix_opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if cfg.maxnreg:
        prefix_opts["maxnreg"] = cfg.maxnreg
    suffix_opts = dict(num_warps=cfg.suffix_warps, num_stages=cfg.suffix_stages)
    if cfg.mode == "fused":
        _hydragen_kernel[(n_prefix + n_suffix,)](*args, **meta, PHASE=0, **prefix_opts)
    elif cfg.mode == "serial":
        _hydragen_kernel[(n_prefix,)](*args, **meta, PHASE=1, **prefix_opts)
        _hydragen_kernel[(n_suffix,)](*args, **meta, PHASE=2, **suffix_opts)
    else:  # streams: the prefix launch runs on a side stream, overlapping the suffix launch
        main = torch.cuda.current_stream(dev)
        side = _side_stream(dev)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            _hydragen_kernel[(n_prefix,)](*args, **meta, PHASE=1, **prefix_opts)
        _hydragen_kernel[(n_suffix,)](*args, **meta, PHASE=2, **suffix_opts)
        main.wait_stream(side)
        for t in (q, k_prefix, v_prefix, op, lp, os_, ls, out, lse):
            t.record_stream(side)
    if not cfg.inline_merge:
        _merge_kernel[(B * Hkv,)](op, lp, os_, ls, out, lse, n_rows, out.stride(0), out.stride(1),
                                  Hkv, pl.prefix_splits, pl.suffix_splits,
                                  G=G, D=D, BLOCK_G=triton.next_power_of_2(G), WRITE_LSE=return_lse,
                                  num_warps=4 if D >= 128 else 2)
    return (out, lse) if return_lse else out


def flops_and_bytes(B: int, Hq: int, Hkv: int, D: int, P: int, S: int, elem_bytes: int = 2) -> tuple[float, float]:
    """FLOPs of one step (QK^T and PV over prefix and suffix) and the fewest KV bytes it must read."""
    flops = 4.0 * B * Hq * D * (P + S)
    return flops, 2.0 * (P + B * S) * Hkv * D * elem_bytes

