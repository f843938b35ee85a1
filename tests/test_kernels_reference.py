"""CPU checks of the shared-prefix attention math (monkeybarrel.kernels.reference); no GPU, no triton."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from monkeybarrel.kernels.reference import (
    attention_with_lse,
    merge_attention_states,
    replicated_attention_reference,
    roofline_bytes,
    shared_prefix_attention_reference,
)


def _inputs(B, Hq, Hkv, D, P, S, lens, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, D, generator=g, dtype=dtype)
    kp = torch.randn(Hkv, P, D, generator=g, dtype=dtype)
    vp = torch.randn(Hkv, P, D, generator=g, dtype=dtype)
    ks = torch.randn(B, Hkv, S, D, generator=g, dtype=dtype)
    vs = torch.randn(B, Hkv, S, D, generator=g, dtype=dtype)
    return q, kp, vp, ks, vs, torch.tensor(lens, dtype=torch.int32)


SHAPES = [
    # B, Hq, Hkv, D, P, S, suffix lens
    (4, 8, 2, 64, 37, 9, [9, 0, 1, 5]),
    (3, 32, 8, 128, 130, 64, [64, 64, 64]),
    (5, 28, 4, 128, 64, 33, [33, 2, 17, 0, 31]),  # G=7
    (2, 4, 4, 64, 1, 3, [3, 1]),  # G=1, one prefix token
    (6, 16, 2, 64, 200, 1, [1, 1, 0, 1, 1, 1]),  # G=8
]


@pytest.mark.parametrize("shape", SHAPES)
def test_decomposition_equals_one_softmax(shape):
    """Prefix/suffix split + LSE merge is exactly one softmax over [prefix; suffix[:len]]."""
    B, Hq, Hkv, D, P, S, lens = shape
    args = _inputs(B, Hq, Hkv, D, P, S, lens)
    out, lse = shared_prefix_attention_reference(*args, return_lse=True)
    ref = replicated_attention_reference(*args)
    assert out.shape == (B, Hq, D) and lse.shape == (B, Hq)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_matches_torch_sdpa_over_replicated_kv(shape):
    """Against torch SDPA on per-sequence KV copies with a padding mask (what a naive engine runs)."""
    B, Hq, Hkv, D, P, S, lens = shape
    q, kp, vp, ks, vs, sl = _inputs(B, Hq, Hkv, D, P, S, lens, dtype=torch.float32, seed=1)
    k = torch.cat([kp.expand(B, -1, -1, -1), ks], 2)
    v = torch.cat([vp.expand(B, -1, -1, -1), vs], 2)
    mask = (torch.arange(P + S)[None, :] < (P + sl)[:, None])[:, None, None, :]
    ref = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=mask, enable_gqa=True).squeeze(2)
    out = shared_prefix_attention_reference(q, kp, vp, ks, vs, sl)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_scale_and_lse():
    q, kp, vp, ks, vs, sl = _inputs(2, 4, 2, 64, 11, 5, [5, 3], seed=2)
    out, lse = shared_prefix_attention_reference(q, kp, vp, ks, vs, sl, scale=0.3, return_lse=True)
    k = torch.cat([kp.expand(2, -1, -1, -1), ks], 2).repeat_interleave(2, 1)  # [B, Hq, P+S, D]
    s = torch.einsum("bhd,bhnd->bhn", q, k) * 0.3
    s[1, :, 11 + 3:] = float("-inf")
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(out, replicated_attention_reference(q, kp, vp, ks, vs, sl, scale=0.3))


def test_merge_is_exact_and_empty_part_is_neutral():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 1, 16, generator=g, dtype=torch.float64)
    k = torch.randn(3, 10, 16, generator=g, dtype=torch.float64)
    v = torch.randn(3, 10, 16, generator=g, dtype=torch.float64)
    o_all, l_all = attention_with_lse(q, k, v, 0.25)
    o_a, l_a = attention_with_lse(q, k[:, :4], v[:, :4], 0.25)
    o_b, l_b = attention_with_lse(q, k[:, 4:], v[:, 4:], 0.25)
    o, lse = merge_attention_states(o_a, l_a, o_b, l_b)
    torch.testing.assert_close(o, o_all, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(lse, l_all, rtol=1e-10, atol=1e-10)
    none = torch.zeros(3, 1, 10, dtype=torch.bool)
    o_e, l_e = attention_with_lse(q, k, v, 0.25, kv_mask=none)
    assert torch.isinf(l_e).all() and (o_e == 0).all()
    o2, l2 = merge_attention_states(o_all, l_all, o_e, l_e)
    torch.testing.assert_close(o2, o_all)
    torch.testing.assert_close(l2, l_all)


def test_shape_errors():
    q, kp, vp, ks, vs, sl = _inputs(2, 4, 2, 64, 11, 5, [5, 3])
    with pytest.raises(ValueError):
        shared_prefix_attention_reference(q, kp, vp, ks[:1], vs[:1], sl)
    with pytest.raises(ValueError):
        shared_prefix_attention_reference(q, kp[:, :, :32], vp[:, :, :32], ks, vs, sl)


def test_dispatch_uses_reference_on_cpu():
    from monkeybarrel.kernels import shared_prefix_attention

    args = _inputs(3, 8, 2, 64, 20, 7, [7, 0, 4], dtype=torch.float32)
    torch.testing.assert_close(shared_prefix_attention(*args), shared_prefix_attention_reference(*args))


def test_roofline_bytes():
    # bf16, Hkv=8, D=128: prefix once + B suffixes, K and V
    assert roofline_bytes(256, 4096, 256, 8, 128) == 2 * (4096 + 256 * 256) * 8 * 128 * 2


def test_package_import_is_light():
    """Importing monkeybarrel.kernels (and its reference/dispatch) must not import triton or transformers."""
    code = ("import sys, monkeybarrel.kernels, monkeybarrel.kernels.reference, monkeybarrel.kernels.attention; "
            "print('triton' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
