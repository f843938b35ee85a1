"""Launcher for the Triton shared-prefix decode-attention kernels (CUDA only; imports triton).

:func:`hydragen_decode_attention` validates the inputs, picks the tiling (:class:`HydragenConfig`,
:func:`plan`), allocates the float32 partial buffers and issues the launches (prefix+suffix tiles,
then the merge unless it is inline). Every size it depends on is a Python int and the ragged suffix
lengths are read on the device, so a call can be captured in a CUDA graph and replayed while
``suffix_lens`` changes.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import triton

from .hydragen_triton import _hydragen_kernel, _merge_kernel

__all__ = ["HydragenConfig", "Plan", "hydragen_decode_attention", "prepare", "auto_config", "default_config",
           "streams_config", "candidate_configs", "plan", "flops_and_bytes"]

_LOG2E = 1.4426950408889634
_MERGE_ROWS = 32  # output rows per merge program
SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)


@dataclasses.dataclass(frozen=True)
class HydragenConfig:
    """Tiling and scheduling of one decode step.

    block_m: query rows ``(sequence, group head)`` per prefix tile (128 = two warpgroups of wgmma).
    block_n: prefix keys per inner step.
    block_ns: suffix keys per inner step (0 = auto: 128 for long suffixes and large batches, else 64).
    prefix_splits / suffix_splits: chunks the prefix / suffix key range is cut into (0 = auto).
    mode: how prefix and suffix tiles share the GPU:
        ``"fused"``   one grid holds both kinds of tiles (prefix first), ``num_warps`` each;
        ``"streams"`` two launches on two streams (they overlap), each with its own warps/stages;
        ``"serial"``  the same two launches one after the other (a diagnostic).
    num_warps / num_stages / maxnreg: prefix tiles (and the fused grid). maxnreg=128 lets two
        8-warp programs share an SM.
    suffix_warps / suffix_stages: suffix launch in the two-launch modes.
    inline_merge: the last tile to finish a row merges it (no merge launch); else a merge launch.
    suffix_first: in the fused grid, give suffix tiles the low program ids.
    """

    block_m: int = 128
    block_n: int = 64
    block_ns: int = 0
    prefix_splits: int = 0
    suffix_splits: int = 0
    mode: str = "fused"
    num_warps: int = 8
    num_stages: int = 2
    maxnreg: int | None = 128
    suffix_warps: int = 4
    suffix_stages: int = 2
    inline_merge: bool = False
    suffix_first: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("fused", "streams", "serial"):
            raise ValueError(f"mode must be fused, streams or serial, got {self.mode!r}")


def default_config(D: int) -> HydragenConfig:
    """The fused tiling for head dim D (docs/kernels.md records the measurements behind it)."""
    return HydragenConfig(block_n=64 if D >= 128 else 128)


def streams_config(D: int) -> HydragenConfig:
    """Prefix and suffix as two overlapping launches; the prefix launch gets all the registers it
    wants (one 8-warp program per SM, 3 pipeline stages), which pays when the prefix is compute-bound."""
    return dataclasses.replace(default_config(D), mode="streams", maxnreg=None, num_stages=3)


# Rates used only to classify a problem as prefix-compute-heavy or suffix-memory-heavy (H100-like).
_PREFIX_TFLOPS = 400e12
_SUFFIX_BYTES_PER_S = 2.5e12


def auto_config(B: int, Hq: int, Hkv: int, D: int, P: int, S: int, elem_bytes: int = 2) -> HydragenConfig:
    """Pick the tiling for one problem size.

    When the prefix matrix products take about as long as streaming the suffixes (estimated time
    ratio >= 0.6), the two-stream schedule with a register-rich prefix kernel wins on an H100
    (up to 1.4x); otherwise the fused grid does (and its schedule is deterministic).
    """
    prefix_s = 4.0 * B * Hq * P * D / _PREFIX_TFLOPS
    suffix_s = 2.0 * B * S * Hkv * D * elem_bytes / _SUFFIX_BYTES_PER_S
    return streams_config(D) if prefix_s >= 0.6 * suffix_s else default_config(D)


def candidate_configs(D: int) -> list[HydragenConfig]:
    """Small search space for benchmarks/prefix_attention.py's sweep."""
    base = default_config(D)
    rep = dataclasses.replace
    return [
        base,
        rep(base, inline_merge=True),
        rep(base, block_ns=64),
        rep(base, block_ns=128),
        rep(base, block_m=64, num_warps=4, maxnreg=168),
        rep(base, mode="streams"),
        rep(base, mode="streams", maxnreg=None, num_stages=3),
        rep(base, mode="serial"),
        rep(base, mode="streams", maxnreg=None, block_n=128),
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
    block_ns: int

    @property
    def n_prefix_tiles_per_head(self) -> int:
        return self.n_m_tiles * self.prefix_splits


def plan(B: int, Hkv: int, G: int, P: int, S: int, cfg: HydragenConfig, num_sms: int) -> Plan:
    """Choose the prefix/suffix splits and the suffix block.

    Prefix: the prefix tiles set the critical path (the suffix tiles of the same grid fill the
    machine around them), so split the prefix until there are about as many prefix tiles as SMs,
    keeping at least 512 keys per chunk. Suffix: split only when ``B*Hkv`` tiles would leave the
    machine idle (small batches). On an H100 these rules picked the best or near-best of the
    measured splits (docs/kernels.md).
    """
    n_m = triton.cdiv(B * G, cfg.block_m)
    if cfg.prefix_splits:
        nsp = cfg.prefix_splits
    else:
        nsp = 1
        while Hkv * n_m * nsp * 2 <= num_sms and P // (nsp * 2) >= 512:
            nsp *= 2
    prefix_chunk = triton.cdiv(triton.cdiv(max(P, 1), nsp), cfg.block_n) * cfg.block_n
    nsp = max(1, triton.cdiv(P, prefix_chunk)) if P > 0 else 1
    block_ns = cfg.block_ns or (128 if S >= 256 and B * Hkv >= 12 * num_sms else 64)
    if cfg.suffix_splits:
        nss = cfg.suffix_splits
    else:
        nss = 1
        while B * Hkv * nss < 4 * num_sms and S // (nss * 2) >= 256:
            nss *= 2
    suffix_chunk = triton.cdiv(triton.cdiv(max(S, 1), nss), block_ns) * block_ns
    nss = max(1, triton.cdiv(S, suffix_chunk)) if S > 0 else 1
    return Plan(n_m, nsp, prefix_chunk, nss, suffix_chunk, block_ns)


_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}
_COUNTERS: dict[torch.device, torch.Tensor] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """One extra stream per device for the prefix launch in ``mode="streams"``."""
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device=device)
    return _SIDE_STREAMS[device]


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


class Launch:
    """One decode step, prepared: buffers allocated, arguments bound. ``run()`` issues it.

    The parts (``prefix()``, ``suffix()``, ``merge()``) can be launched alone for diagnostics.
    """

    def __init__(self, q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, scale, cfg, out, return_lse):
        B, Hq, Hkv, D, P, S = _check(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens)
        G = Hq // Hkv
        self.cfg = cfg
        self.plan = pl = plan(B, Hkv, G, P, S, cfg, _num_sms(q.device.index or 0))
        dev = q.device
        n_rows = B * G
        f32 = dict(device=dev, dtype=torch.float32)
        self.op = torch.empty((Hkv, pl.prefix_splits, n_rows, D), **f32)
        self.lp = torch.empty((Hkv, pl.prefix_splits, n_rows), **f32)
        self.os = torch.empty((B, Hkv, pl.suffix_splits, G, D), **f32)
        self.ls = torch.empty((B, Hkv, pl.suffix_splits, G), **f32)
        self.out = out if out is not None else torch.empty((B, Hq, D), device=dev, dtype=q.dtype)
        self.lse = torch.empty((B, Hq), **f32) if return_lse else None
        lse = self.lse if return_lse else self.lp  # dummy pointer when unused
        cnt = _arrival_counters(dev, B * Hq) if cfg.inline_merge else self.ls  # dummy when unused
        self.n_prefix = Hkv * pl.n_prefix_tiles_per_head
        self.n_suffix = B * Hkv * pl.suffix_splits
        self.device = dev
        self._keep = (q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens)
        self.args = (q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, self.op, self.lp, self.os, self.ls,
                     cnt, self.out, lse,
                     n_rows, P, pl.prefix_chunk, pl.suffix_chunk, scale * _LOG2E, self.n_prefix, self.n_suffix,
                     q.stride(0), q.stride(1),
                     k_prefix.stride(0), k_prefix.stride(1), v_prefix.stride(0), v_prefix.stride(1),
                     k_suffix.stride(0), k_suffix.stride(1), k_suffix.stride(2),
                     v_suffix.stride(0), v_suffix.stride(1), v_suffix.stride(2),
                     self.out.stride(0), self.out.stride(1),
                     Hkv, pl.n_m_tiles, pl.prefix_splits, pl.suffix_splits)
        self.meta = dict(G=G, D=D, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_G=max(16, triton.next_power_of_2(G)),
                         BLOCK_NS=pl.block_ns, SUFFIX_FIRST=cfg.suffix_first, INLINE_MERGE=cfg.inline_merge,
                         WRITE_LSE=return_lse, MERGE_ROWS=min(32, cfg.block_m))
        self.prefix_opts = dict(num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        if cfg.maxnreg:
            self.prefix_opts["maxnreg"] = cfg.maxnreg
        self.suffix_opts = dict(num_warps=cfg.suffix_warps, num_stages=cfg.suffix_stages)
        self.merge_args = (self.op, self.lp, self.os, self.ls, self.out, lse, n_rows, B * Hq, self.out.stride(0),
                           self.out.stride(1), Hkv, pl.prefix_splits, pl.suffix_splits)
        self.merge_meta = dict(G=G, D=D, BLOCK_R=_MERGE_ROWS, WRITE_LSE=return_lse, num_warps=4)
        self.n_merge = triton.cdiv(B * Hq, _MERGE_ROWS)

    def fused(self) -> None:
        _hydragen_kernel[(self.n_prefix + self.n_suffix,)](*self.args, **self.meta, PHASE=0, **self.prefix_opts)

    def prefix(self) -> None:
        _hydragen_kernel[(self.n_prefix,)](*self.args, **self.meta, PHASE=1, **self.prefix_opts)

    def suffix(self) -> None:
        _hydragen_kernel[(self.n_suffix,)](*self.args, **self.meta, PHASE=2, **self.suffix_opts)

    def merge(self) -> None:
        _merge_kernel[(self.n_merge,)](*self.merge_args, **self.merge_meta)

    def run(self) -> None:
        mode = self.cfg.mode
        if mode == "fused":
            self.fused()
        elif mode == "serial":
            self.prefix()
            self.suffix()
        else:  # streams: the prefix launch runs on a side stream, overlapping the suffix launch
            main = torch.cuda.current_stream(self.device)
            side = _side_stream(self.device)
            side.wait_stream(main)
            with torch.cuda.stream(side):
                self.prefix()
            self.suffix()
            main.wait_stream(side)
            if not torch.cuda.is_current_stream_capturing():  # a graph's pool outlives its replays anyway
                for t in (*self._keep, self.op, self.lp, self.os, self.ls, self.out):
                    t.record_stream(side)
        if not self.cfg.inline_merge:
            self.merge()


def prepare(
    q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor, v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor, scale: float | None = None, *,
    config: HydragenConfig | None = None, out: torch.Tensor | None = None, return_lse: bool = False,
) -> Launch:
    """Validate, plan and bind one decode step (arguments as :func:`hydragen_decode_attention`)."""
    D = q.shape[-1]
    cfg = config or auto_config(q.shape[0], q.shape[1], k_prefix.shape[0], D, k_prefix.shape[1], k_suffix.shape[2],
                                q.element_size())
    scale = D ** -0.5 if scale is None else float(scale)
    return Launch(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, scale, cfg, out, return_lse)


def hydragen_decode_attention(
    q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor, v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor, scale: float | None = None, *,
    config: HydragenConfig | None = None, out: torch.Tensor | None = None, return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Shared-prefix decode attention on the GPU (Triton).

    Args:
        q: ``[B, Hq, D]`` bf16/fp16, one query per sequence (head dim contiguous; other strides free).
        k_prefix, v_prefix: ``[Hkv, P, D]`` shared prefix KV, stored once.
        k_suffix, v_suffix: ``[B, Hkv, S, D]`` per-sequence suffix buffers (capacity S).
        suffix_lens: ``[B]`` int32 on the device: rows of each suffix that count (ragged).
        scale: softmax scale (default ``D ** -0.5``).
        config: tiling; default :func:`auto_config` for the problem size.
        out: optional ``[B, Hq, D]`` output buffer (q's dtype).
        return_lse: also return the natural-log LSE ``[B, Hq]`` float32.

    Returns:
        ``out [B, Hq, D]`` in q's dtype (and ``lse [B, Hq]`` if ``return_lse``).
    """
    launch = prepare(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, scale, config=config, out=out,
                     return_lse=return_lse)
    launch.run()
    return (launch.out, launch.lse) if return_lse else launch.out


def flops_and_bytes(B: int, Hq: int, Hkv: int, D: int, P: int, S: int, elem_bytes: int = 2) -> tuple[float, float]:
    """FLOPs of one step (QK^T and PV over prefix and suffix) and the fewest KV bytes it must read."""
    flops = 4.0 * B * Hq * D * (P + S)
    return flops, 2.0 * (P + B * S) * Hkv * D * elem_bytes
