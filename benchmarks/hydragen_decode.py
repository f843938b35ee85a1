"""End-to-end: n samples of one prompt, HF ``generate`` vs decoding through the shared-prefix kernel.

A randomly initialised Llama (default: Llama-3.2-1B-like shapes, bf16) on the GPU. HF generate gets
the prompt replicated n times (its usual way to draw n samples: the prompt is prefilled n times and
its KV stored n times). Ours prefills the prompt once and decodes the n sequences through
``monkeybarrel.kernels`` (eager, and with the decode step replayed from a CUDA graph).

Decode throughput = n * (T - 1) tokens / decode time. For HF, decode time = time(generate T tokens)
- time(generate 1 token) (the second is prefill + one step). Greedy, no EOS (every sample runs T).

Run:  python benchmarks/hydragen_decode.py [--n 64] [--prompt 2048] [--new 64] [--out e2e.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monkeybarrel.kernels.shared_prefix_sampling import generate_shared_prefix, teacher_forced_logits  # noqa: E402

PRESETS = {
    # Llama-3.2-1B shapes (vocab cut to 32000): 16 layers, 32 q heads, 8 kv heads, head dim 64
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64, vocab_size=32000),
    # same attention shapes as the kernel benchmark (head dim 128), fewer layers
    "d128": dict(hidden_size=4096, intermediate_size=8192, num_hidden_layers=8, num_attention_heads=32,
                 num_key_value_heads=8, head_dim=128, vocab_size=32000),
}


def build_model(preset: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**PRESETS[preset], max_position_embeddings=8192, initializer_range=0.2,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    return model.to(dtype).eval()


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="1b", choices=list(PRESETS))
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n, P, T = args.n, args.prompt, args.new
    model = build_model(args.preset, torch.bfloat16)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (P,), generator=g).cuda()
    inp = prompt.expand(n, -1).contiguous()
    mask = torch.ones_like(inp)

    def hf(new, logits=False):
        return model.generate(inp, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                              pad_token_id=0, eos_token_id=None, output_logits=logits,
                              return_dict_in_generate=logits)

    print(f"{torch.cuda.get_device_name()} preset={args.preset} n={n} prompt={P} new={T}", flush=True)
    hf(2)  # warm-up
    hf_full, t_hf = timed(lambda: hf(T))
    _, t_hf1 = timed(lambda: hf(1))
    hf_tokens = hf_full[:, P:]
    hf_decode = t_hf - t_hf1
    res = {"device": torch.cuda.get_device_name(), "preset": args.preset, "n": n, "prompt": P, "new": T,
           "hf": {"total_s": t_hf, "prefill_plus_1_s": t_hf1, "decode_s": hf_decode,
                  "decode_tok_s": n * (T - 1) / hf_decode}}
    print(f"HF generate: total {t_hf:.3f}s, prefill+1 {t_hf1:.3f}s, decode {hf_decode:.3f}s "
          f"-> {res['hf']['decode_tok_s']:.0f} tok/s", flush=True)
    for name, graph in (("ours_eager", False), ("ours_graph", True)):
        generate_shared_prefix(model, prompt, n, 4, cuda_graph=graph)  # warm-up: kernels compiled
        tm: dict = {}
        ours, t_tot = timed(lambda: generate_shared_prefix(model, prompt, n, T, cuda_graph=graph, timings=tm))
        same = (ours == hf_tokens)
        r = {**tm, "total_s": t_tot, "decode_tok_s": n * (T - 1) / tm["decode_s"],
             "tokens_identical_to_hf": int(same.sum()), "tokens": same.numel(),
             "first_mismatch_step": int((~same.all(0)).nonzero()[0]) if not same.all() else None}
        r["decode_speedup_vs_hf"] = r["decode_tok_s"] / res["hf"]["decode_tok_s"]
        r["end_to_end_speedup_vs_hf"] = t_hf / (tm["prefill_s"] + tm["decode_s"])
        res[name] = r
        print(f"{name}: prefill {tm['prefill_s']:.3f}s (once), capture {tm['capture_s']:.3f}s, decode "
              f"{tm['decode_s']:.3f}s -> {r['decode_tok_s']:.0f} tok/s; decode x{r['decode_speedup_vs_hf']:.2f} vs HF, "
              f"end-to-end (prefill+decode, capture excluded) x{r['end_to_end_speedup_vs_hf']:.2f}; "
              f"greedy tokens identical to HF {r['tokens_identical_to_hf']}/{r['tokens']}"
              + (f" (first mismatch at step {r['first_mismatch_step']})" if r["first_mismatch_step"] is not None
                 else ""), flush=True)
    # teacher-forced parity: our logits along HF's own greedy tokens (one sequence: all n are identical)
    out = hf(T, logits=True)
    hf_logits = torch.stack(out.logits, 1)[:1].float()  # [1, T, V]: logits[:, t] chose token t
    toks = out.sequences[:1, P:]
    ours_l = teacher_forced_logits(model, prompt, toks)  # [1, T, V]
    agree = ours_l.argmax(-1) == toks
    top2 = hf_logits.topk(2, -1).values
    margin = top2[..., 0] - top2[..., 1]
    # control: HF itself, one batch-1 forward over prompt + tokens, vs HF generate's incremental logits
    seq = out.sequences[:1, :P + T - 1]
    ctrl = model(input_ids=seq, logits_to_keep=T).logits.float()  # [1, T, V]
    ctrl_agree = ctrl.argmax(-1) == toks
    res["teacher_forced"] = {"argmax_agree": int(agree.sum()), "steps": agree.numel(),
                             "max_abs_logit_diff": float((ours_l - hf_logits).abs().max()),
                             "logit_std": float(hf_logits.std()),
                             "hf_margin_at_disagreements": [round(float(x), 4) for x in margin[~agree]],
                             "control_hf_forward_argmax_agree": int(ctrl_agree.sum()),
                             "control_hf_forward_max_abs_logit_diff": float((ctrl - hf_logits).abs().max())}
    tf = res["teacher_forced"]
    print(f"teacher-forced along HF's greedy tokens: ours argmax agrees {tf['argmax_agree']}/{agree.numel()} steps, "
          f"max |logit diff| {tf['max_abs_logit_diff']:.3f} (logit std {tf['logit_std']:.2f}), HF top1-top2 "
          f"margin where they disagree {tf['hf_margin_at_disagreements']}; control (HF batch-1 forward vs HF "
          f"generate, both SDPA): argmax agrees {tf['control_hf_forward_argmax_agree']}/{agree.numel()}, "
          f"max |logit diff| {tf['control_hf_forward_max_abs_logit_diff']:.3f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
