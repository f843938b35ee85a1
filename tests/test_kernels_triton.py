"""Triton shared-prefix decode attention: GPU parity vs torch SDPA over replicated KV.

GPU tests skip without CUDA. One CPU test runs the kernels in Triton's interpreter when triton is
installed (it is not a core dependency; CI without it skips).
"""

from __future__ import annotations

import textwrap

import pytest
import torch
import torch.nn.functional as F

from monkeybarrel.kernels.reference import shared_prefix_attention_reference
from triton_interpreter import run_in_interpreter

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(B, Hq, Hkv, D, P, S, lens, dtype, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    mk = lambda *shape: torch.randn(*shape, generator=g, device=device, dtype=dtype)  # noqa: E731
    q, kp, vp = mk(B, Hq, D), mk(Hkv, P, D), mk(Hkv, P, D)
    ks, vs = mk(B, Hkv, S, D), mk(B, Hkv, S, D)
    return q, kp, vp, ks, vs, torch.as_tensor(lens, dtype=torch.int32, device=device)


def _sdpa_replicated(q, kp, vp, ks, vs, lens):
    """torch SDPA over per-sequence copies [prefix; suffix] with a padding mask: [B, Hq, D]."""
    B, P, S = q.shape[0], kp.shape[1], ks.shape[2]
    k = torch.cat([kp.unsqueeze(0).expand(B, -1, -1, -1), ks], 2)
    v = torch.cat([vp.unsqueeze(0).expand(B, -1, -1, -1), vs], 2)
    mask = (torch.arange(P + S, device=q.device)[None, :] < (P + lens.long())[:, None])[:, None, None, :]
    return F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True).squeeze(2)


def _ragged(B, S, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, S + 1, (B,), generator=g)
    lens[0] = S
    if B > 2:
        lens[1], lens[2] = 0, 1
    return lens.tolist()


# B, Hq, Hkv, D, P, S, lens ("full" = every suffix at capacity)
GPU_SHAPES = [
    (1, 32, 8, 128, 2048, 256, "full"),
    (7, 32, 8, 128, 1000, 130, "ragged"),
    (64, 32, 8, 128, 4096, 256, "ragged"),
    (256, 32, 8, 128, 4096, 256, "full"),
    (33, 8, 8, 64, 513, 64, "ragged"),  # G=1
    (16, 16, 2, 64, 300, 17, "ragged"),  # G=8
    (9, 28, 4, 128, 77, 5, "ragged"),  # G=7
    (96, 32, 4, 64, 2048, 128, "ragged"),  # G=8, D=64
]
GPU_MAX_ABS_ERR = 2e-2


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("mode", ["fused", "streams"])
def test_parity_vs_sdpa_replicated(shape, dtype, mode):
    from monkeybarrel.kernels.hydragen_launch import default_config, hydragen_decode_attention, streams_config

    B, Hq, Hkv, D, P, S, kind = shape
    lens = [S] * B if kind == "full" else _ragged(B, S, seed=B + S)
    q, kp, vp, ks, vs, sl = _inputs(B, Hq, Hkv, D, P, S, lens, dtype, "cuda", seed=P)
    out = torch.full((B, Hq, D), float("nan"), device="cuda", dtype=dtype)  # poisoned: every row must be written
    cfg = default_config(D) if mode == "fused" else streams_config(D)
    _, lse = hydragen_decode_attention(q, kp, vp, ks, vs, sl, config=cfg, out=out, return_lse=True)
    ref = _sdpa_replicated(q, kp, vp, ks, vs, sl)
    ref32, lse32 = shared_prefix_attention_reference(q, kp, vp, ks, vs, sl, return_lse=True)
    assert torch.isfinite(out).all()
    err = (out.float() - ref.float()).abs().max().item()
    err32 = (out.float() - ref32.float()).abs().max().item()
    print(f"parity {mode} {str(dtype)[6:]} B={B} Hq={Hq} Hkv={Hkv} D={D} P={P} S={S} {kind}: "
          f"max|err| vs SDPA {err:.2e}, vs fp32 ref {err32:.2e}, lse {(lse - lse32).abs().max().item():.1e}")
    assert err <= GPU_MAX_ABS_ERR
    assert err32 <= GPU_MAX_ABS_ERR
    torch.testing.assert_close(lse, lse32, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("splits", [(1, 1), (3, 2), (8, 4)])
def test_forced_splits_and_strided_inputs(splits):
    """Explicit prefix/suffix splits; prefix given as a [P, Hkv, D] layout viewed as [Hkv, P, D]."""
    from monkeybarrel.kernels.hydragen_launch import HydragenConfig, hydragen_decode_attention

    B, Hq, Hkv, D, P, S = 12, 32, 8, 128, 1500, 200
    lens = _ragged(B, S, seed=5)
    q, kp, vp, ks, vs, sl = _inputs(B, Hq, Hkv, D, P, S, lens, torch.bfloat16, "cuda", seed=7)
    kp_t, vp_t = kp.transpose(0, 1).contiguous().transpose(0, 1), vp.transpose(0, 1).contiguous().transpose(0, 1)
    cfg = HydragenConfig(prefix_splits=splits[0], suffix_splits=splits[1])
    out = hydragen_decode_attention(q, kp_t, vp_t, ks, vs, sl, config=cfg)
    ref = shared_prefix_attention_reference(q, kp, vp, ks, vs, sl)
    assert (out.float() - ref.float()).abs().max().item() <= GPU_MAX_ABS_ERR


@pytest.mark.gpu
@needs_cuda
def test_cuda_graph_replay_follows_device_lengths():
    """Captured once; replays with new suffix lengths (device tensor) give fresh, correct results."""
    from monkeybarrel.kernels.hydragen_launch import hydragen_decode_attention

    B, Hq, Hkv, D, P, S = 32, 32, 8, 128, 777, 64
    q, kp, vp, ks, vs, sl = _inputs(B, Hq, Hkv, D, P, S, [1] * B, torch.bfloat16, "cuda", seed=11)
    out = torch.empty(B, Hq, D, device="cuda", dtype=torch.bfloat16)
    hydragen_decode_attention(q, kp, vp, ks, vs, sl, out=out)  # compile outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        hydragen_decode_attention(q, kp, vp, ks, vs, sl, out=out)
    for step in range(3):
        sl.copy_(torch.as_tensor(_ragged(B, S, seed=step), dtype=torch.int32))
        g.replay()
        ref = shared_prefix_attention_reference(q, kp, vp, ks, vs, sl)
        assert (out.float() - ref.float()).abs().max().item() <= GPU_MAX_ABS_ERR


@pytest.mark.gpu
@needs_cuda
def test_rejects_bad_inputs():
    from monkeybarrel.kernels.hydragen_launch import hydragen_decode_attention

    q, kp, vp, ks, vs, sl = _inputs(2, 8, 2, 64, 16, 4, [4, 4], torch.bfloat16, "cuda")
    with pytest.raises(TypeError):
        hydragen_decode_attention(q.float(), kp, vp, ks, vs, sl)
    with pytest.raises(ValueError):
        hydragen_decode_attention(q, kp, vp, ks, vs, sl.long())
    with pytest.raises(ValueError):
        hydragen_decode_attention(q, kp.transpose(1, 2).contiguous().transpose(1, 2), vp, ks, vs, sl)


def test_auto_config_picks_schedule_by_balance():
    """Prefix-compute-heavy problems get the two-stream schedule, suffix-memory-heavy ones the fused grid."""
    pytest.importorskip("triton")
    from monkeybarrel.kernels.hydragen_launch import auto_config

    assert auto_config(512, 32, 8, 128, 8192, 128).mode == "streams"
    assert auto_config(256, 32, 8, 128, 4096, 256).mode == "fused"
    assert auto_config(64, 32, 8, 128, 2048, 256).mode == "fused"


_INTERPRETER_SCRIPT = textwrap.dedent("""
    import numpy as np, torch
    from monkeybarrel.kernels.hydragen_launch import HydragenConfig, hydragen_decode_attention
    from monkeybarrel.kernels.reference import replicated_attention_reference
    torch.manual_seed(0)
    cases = [  # B, Hq, Hkv, D, P, S, lens, config
        (5, 8, 2, 64, 100, 70, [70, 0, 1, 33, 64], HydragenConfig(block_m=32, block_n=32, block_ns=32,
                                                                 prefix_splits=2, suffix_splits=2, maxnreg=None)),
        (3, 4, 4, 128, 64, 40, [5, 40, 17], HydragenConfig(block_m=16, block_n=16, block_ns=16, mode="serial")),
        (4, 28, 4, 64, 37, 16, [16, 3, 0, 9], HydragenConfig(block_m=16, block_n=16, block_ns=16)),
        (4, 28, 4, 64, 37, 16, [16, 3, 0, 9], HydragenConfig(block_m=32, block_n=16, block_ns=16, prefix_splits=2,
                                                             suffix_first=True)),
        (4, 8, 2, 64, 37, 16, [16, 3, 0, 9], HydragenConfig(block_m=16, block_n=16, block_ns=16, inline_merge=False)),
    ]
    for B, Hq, Hkv, D, P, S, lens, cfg in cases:
        # fp16 only: the interpreter's bf16 dot is wrong with this numpy
        q = torch.randn(B, Hq, D, dtype=torch.float16)
        kp, vp = torch.randn(Hkv, P, D, dtype=torch.float16), torch.randn(Hkv, P, D, dtype=torch.float16)
        ks, vs = torch.randn(B, Hkv, S, D, dtype=torch.float16), torch.randn(B, Hkv, S, D, dtype=torch.float16)
        sl = torch.tensor(lens, dtype=torch.int32)
        out = hydragen_decode_attention(q, kp, vp, ks, vs, sl, config=cfg)
        err = (out.float() - replicated_attention_reference(q, kp, vp, ks, vs, sl).float()).abs().max().item()
        print(B, Hq, Hkv, D, P, S, err)
        assert err < 2e-3, err
    from monkeybarrel.kernels import hydragen_launch as L
    assert all(int(c.abs().sum()) == 0 for c in L._COUNTERS.values())  # inline merge left counters zeroed
    print("OK")
""")


def test_triton_interpreter_on_cpu():
    """The kernels' indexing, ragged masking, splits and merge, executed by Triton's CPU interpreter."""
    pytest.importorskip("triton")
    res = run_in_interpreter(_INTERPRETER_SCRIPT)
    assert res.returncode == 0 and res.stdout.strip().endswith("OK"), res.stdout + res.stderr
