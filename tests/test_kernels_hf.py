"""Generation through the shared-prefix attention path vs transformers' own generate.

CPU tests (CI) run the PyTorch reference attention in float32; GPU tests run the Triton kernel in
fp16 and bf16, eager and from a CUDA graph. The model is a small randomly initialised Llama.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from monkeybarrel.kernels.hf_attention import (  # noqa: E402
    ATTN_NAME,
    SharedPrefixKV,
    hydragen_attention_enabled,
    register_hydragen_attention,
)
from monkeybarrel.kernels.shared_prefix_sampling import SampleConfig, generate_shared_prefix  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (heads, kv heads, head dim): GQA group 4 at D=64, group 2 at D=128
CONFIGS = {"g4d64": (8, 2, 64), "g2d128": (8, 4, 128)}


def tiny_llama(kind: str = "g4d64", dtype=torch.float32, device="cpu", seed: int = 0):
    """Random Llama whose greedy continuations vary (initializer_range 0.2 gives non-degenerate logits)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    heads, kv_heads, head_dim = CONFIGS[kind]
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim,
                      max_position_embeddings=1024, initializer_range=0.2, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def hf_greedy(model, prompt, first, new_tokens):
    """HF generate on n copies of prompt + each sample's first token: [n, new_tokens] (first token included)."""
    inp = torch.cat([prompt.expand(first.shape[0], -1), first[:, None]], 1)
    out = model.generate(inp, attention_mask=torch.ones_like(inp), max_new_tokens=new_tokens - 1, do_sample=False,
                         pad_token_id=0, eos_token_id=None)
    return out[:, prompt.shape[0]:]


def _case(model, P=77, n=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    dev = next(model.parameters()).device
    vocab = model.config.vocab_size
    return torch.randint(0, vocab, (P,), generator=g).to(dev), torch.randint(0, vocab, (n,), generator=g).to(dev)


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_greedy_matches_hf_generate_cpu(kind):
    model = tiny_llama(kind)
    prompt, first = _case(model)
    ours = generate_shared_prefix(model, prompt, first.shape[0], 16, first_tokens=first)
    ref = hf_greedy(model, prompt, first, 16)
    assert ours.shape == (6, 16)
    assert len(set(ours[:, 1:].flatten().tolist())) > 8  # continuations are not degenerate
    assert torch.equal(ours, ref)
    assert model.config._attn_implementation == "sdpa"  # switched back after generation


def test_shared_prefix_kv_holds_prompt_once():
    model = tiny_llama()
    prompt, _ = _case(model, P=40)
    kv = SharedPrefixKV.for_model(model, n=5, capacity=8)
    with hydragen_attention_enabled(model), torch.no_grad():
        model(prompt[None], position_ids=torch.arange(40)[None], use_cache=False, shared_prefix_kv=kv)
    assert len(kv.prefix_k) == model.config.num_hidden_layers
    assert kv.prefix_k[0].shape == (2, 40, 64)  # [Hkv, P, D]: one copy for all 5 sequences
    assert kv.suffix_k[0].shape == (5, 2, 8, 64)
    assert kv.positions().flatten().tolist() == [40] * 5


def test_without_state_falls_back_to_sdpa():
    """With the hydragen implementation active but no shared_prefix_kv, logits equal the SDPA model's."""
    model = tiny_llama()
    ids = torch.randint(0, 512, (2, 9))
    with torch.no_grad():
        ref = model(ids).logits
        register_hydragen_attention()
        with hydragen_attention_enabled(model):
            assert model.config._attn_implementation == ATTN_NAME
            out = model(ids).logits
    torch.testing.assert_close(out, ref)


def test_sampling_is_seeded_and_samples_differ():
    model = tiny_llama()
    prompt, _ = _case(model)
    cfg = SampleConfig(temperature=1.0, top_k=50, seed=123)
    a = generate_shared_prefix(model, prompt, 8, 10, sample=cfg)
    b = generate_shared_prefix(model, prompt, 8, 10, sample=cfg)
    assert torch.equal(a, b)
    assert len({tuple(r) for r in a.tolist()}) > 1
    assert int(a.max()) < model.config.vocab_size


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("cuda_graph", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_greedy_matches_hf_generate_gpu(kind, dtype, cuda_graph):
    """Greedy tokens through the Triton kernel equal HF generate (SDPA, replicated KV) on the GPU."""
    model = tiny_llama(kind, dtype=dtype, device="cuda")
    prompt, first = _case(model, P=333, n=8, seed=2)
    T = 24
    ours = generate_shared_prefix(model, prompt, 8, T, first_tokens=first, cuda_graph=cuda_graph)
    ref = hf_greedy(model, prompt, first, T)
    same = (ours == ref).all(dim=1)
    print(f"greedy parity {kind} {str(dtype)[6:]} graph={cuda_graph}: {int(same.sum())}/8 sequences identical, "
          f"{int((ours == ref).sum())}/{ours.numel()} tokens")
    assert torch.equal(ours, ref)
