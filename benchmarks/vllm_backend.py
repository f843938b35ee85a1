"""vLLM 0.26 with its default attention vs vLLM with monkeybarrel's shared-prefix backend, one run.

Same model (a randomly initialised Llama-3.2-1B-shaped model, bf16, built once into ``--model-dir``),
same token prompts and seeds, one engine per backend (each in its own subprocess, so one engine's
memory never meets the other's), prefix caching on for both. For every shape (prompts x n samples,
prompt length): the time of ``LLM.generate`` with ``max_tokens=1`` (prefill + one step) and with
``max_tokens=256`` (T=0.8, ``ignore_eos``), the prefix cache reset before each; output tok/s =
all generated tokens / the second time; decode tok/s = ``prompts*n*255`` / the difference.

Also greedy parity: 4 prompts x 8 requests that share each prompt and differ in one forced last
token, 48 greedy tokens with top-2 logprobs, under both backends: identical tokens, and the
default backend's top-1/top-2 margin where they first differ.

Run on a GPU machine with vLLM 0.26 importable:
    python benchmarks/vllm_backend.py --model-dir /tmp/llama1b --out benchmarks/vllm_backend_h100.json
(``--backend NAME`` runs one engine and prints its JSON; the default runs ``--variants``: vLLM's default
and ours, both on vLLM's default (V2) model runner with its default CUDA-graph mode; ``monkeybarrel-v1``
is ours on the V1 runner, whose block table is copied back from the GPU every step.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from child_result import emit, parse  # noqa: E402

SHAPES = [  # (prompts, n, prompt_len); 256 x 1 shares nothing; 4 x 64 x 32 has next to no KV to read: the
    # engine's floor (its step time without attention traffic: CPU per step, or the rest of the model)
    (1, 256, 2048), (4, 64, 2048), (16, 16, 2048), (1, 256, 7900), (4, 64, 7900), (256, 1, 2048), (4, 64, 32)]
NEW_TOKENS = 256
PRESET = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
              num_key_value_heads=8, head_dim=64, vocab_size=32000, max_position_embeddings=8192)


def build_model(path: Path) -> None:
    """Save a random Llama-3.2-1B-shaped model (bf16) to ``path`` once (no tokenizer: prompts are token ids)."""
    if (path / "config.json").exists():
        return
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**PRESET, initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(path)
    del model
    torch.cuda.empty_cache()


def prompts_for(n_prompts: int, length: int, seed: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.integers(100, PRESET["vocab_size"] - 100, size=length).tolist() for _ in range(n_prompts)]


def run_backend(backend: str, model_dir: str, shapes: list[tuple[int, int, int]], profile: str = "",
                profile_shapes: tuple = ()) -> dict:
    """One engine, every shape and the parity run; returns the figures (and the backend's counters).

    With ``profile`` (a directory), each shape in ``profile_shapes`` has its decode run repeated under the
    torch profiler and the engine's kernel table (self CUDA time per kernel, summed over the run) is copied to
    ``profile/<backend>_<prompts>x<n>x<len>.txt``."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    stats_file = Path(f"/tmp/monkeybarrel_attention_stats_{backend}.json")
    stats_file.unlink(missing_ok=True)
    os.environ["MONKEYBARREL_ATTENTION_STATS"] = str(stats_file)  # the engine core runs in its own process
    from vllm import LLM, SamplingParams

    kwargs = dict(model=model_dir, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=8192,
                  enable_prefix_caching=True, gpu_memory_utilization=0.85, max_num_seqs=256, seed=0)
    if backend.startswith("monkeybarrel"):
        from monkeybarrel.kernels import vllm_plugin

        vllm_plugin.check_vllm_version()
        vllm_plugin.register()
        if backend.endswith("-v1"):
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "0"
        kwargs["attention_backend"] = "CUSTOM"
    if profile:
        trace_dir = Path(f"/tmp/vllm_profile_{backend}")
        kwargs["profiler_config"] = dict(profiler="torch", torch_profiler_dir=str(trace_dir),
                                         torch_profiler_with_stack=False, torch_profiler_use_gzip=False,
                                         ignore_frontend=True)
    t0 = time.perf_counter()
    llm = LLM(**kwargs)
    result = {"backend": backend, "engine_start_s": round(time.perf_counter() - t0, 1), "shapes": []}

    def generate(prompts, params):
        llm.reset_prefix_cache()
        started = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        return outs, time.perf_counter() - started

    # warm-up: the first requests after start-up (the kernels compile while vLLM captures its CUDA graphs)
    generate(prompts_for(2, 600, 99), SamplingParams(n=4, max_tokens=32, ignore_eos=True, seed=1, detokenize=False))
    for n_prompts, n, length in shapes:
        prompts = prompts_for(n_prompts, length, seed=length + n_prompts)
        one = SamplingParams(n=n, max_tokens=1, temperature=0.8, seed=0, ignore_eos=True, detokenize=False)
        full = SamplingParams(n=n, max_tokens=NEW_TOKENS, temperature=0.8, seed=0, ignore_eos=True, detokenize=False)
        _, t_one = generate(prompts, one)
        outs, t_full = generate(prompts, full)
        tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
        seqs = n_prompts * n
        result["shapes"].append({
            "prompts": n_prompts, "n": n, "prompt_len": length, "generated_tokens": tokens,
            "t_prefill_plus_1_s": round(t_one, 4), "t_total_s": round(t_full, 4),
            "output_tok_s": round(tokens / t_full, 1),
            "decode_step_ms": round(1000 * (t_full - t_one) / (NEW_TOKENS - 1), 3),
            "decode_tok_s": round(seqs * (NEW_TOKENS - 1) / max(t_full - t_one, 1e-9), 1)})
        print(json.dumps(result["shapes"][-1]), flush=True)
        if profile and (n_prompts, n, length) in profile_shapes:
            llm.start_profile()
            generate(prompts, full)
            llm.stop_profile()
            Path(profile).mkdir(parents=True, exist_ok=True)
            table = trace_dir / "profiler_out_0.txt"
            if table.exists():
                (Path(profile) / f"{backend}_{n_prompts}x{n}x{length}.txt").write_text(table.read_text())
    # greedy parity: 4 prompts x 8 requests sharing the prompt, one forced distinct last token each
    base = prompts_for(4, 1000, seed=7)
    reqs = [p + [500 + 37 * j] for p in base for j in range(8)]
    greedy = SamplingParams(n=1, max_tokens=48, temperature=0.0, logprobs=2, ignore_eos=True, detokenize=False)
    outs, _ = generate(reqs, greedy)
    result["greedy"] = [{"tokens": list(o.outputs[0].token_ids),
                         "top2": [sorted((lp.logprob for lp in step.values()), reverse=True)[:2]
                                  for step in o.outputs[0].logprobs]} for o in outs]
    if stats_file.exists():
        result["backend_stats"] = json.loads(stats_file.read_text())
    return result


def parity(ref: list[dict], ours: list[dict]) -> dict:
    """Identical tokens, and the reference's top-1/top-2 logprob margin where the two first differ."""
    same_seqs, same_tokens, total, margins = 0, 0, 0, []
    for a, b in zip(ref, ours):
        ta, tb = a["tokens"], b["tokens"]
        total += len(ta)
        diverge = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
        if diverge is None:
            same_seqs += 1
            same_tokens += len(ta)
        else:
            same_tokens += diverge
            top = a["top2"][diverge]
            margins.append(round(top[0] - top[1], 4) if len(top) == 2 else None)
    return {"sequences": len(ref), "identical_sequences": same_seqs, "tokens": total,
            "tokens_before_first_divergence": same_tokens, "first_divergence_margins": margins}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="/tmp/llama1b")
    ap.add_argument("--backend", choices=["vllm", "monkeybarrel", "monkeybarrel-v1"])
    ap.add_argument("--variants", default="vllm,monkeybarrel")
    ap.add_argument("--shapes", default="", help="subset, e.g. '4x64x2048,256x1x2048'")
    ap.add_argument("--out")
    ap.add_argument("--profile", default="", help="directory for per-shape kernel tables (torch profiler)")
    ap.add_argument("--profile-shapes", default="4x64x2048,4x64x7900")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s] or SHAPES
    profile_shapes = tuple(tuple(int(x) for x in s.split("x")) for s in args.profile_shapes.split(",") if s)
    if args.backend:
        result = run_backend(args.backend, args.model_dir, shapes, args.profile, profile_shapes)
        emit(result)
        return
    build_model(Path(args.model_dir))
    runs = {}
    for variant in args.variants.split(","):  # NAME or NAME:ENV=VALUE (e.g. monkeybarrel:MONKEYBARREL_PREFIX_WAVES=4)
        backend, _, setting = variant.partition(":")
        env = dict(os.environ, **dict([setting.split("=", 1)])) if setting else None
        cmd = [sys.executable, __file__, "--backend", backend, "--model-dir", args.model_dir, "--shapes",
               ",".join("x".join(map(str, s)) for s in shapes),
               "--profile-shapes", args.profile_shapes,
               "--profile",
               str(Path(args.profile) / variant.replace(":", "_").replace("=", "_")) if args.profile else ""]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        result = parse(proc.stdout)
        if proc.returncode != 0 or result is None:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
            print(f"{variant} run failed (exit {proc.returncode})", flush=True)
            continue
        runs[variant] = result | {"backend": variant}
        if args.out:  # after every engine, so a cut-off run keeps what it measured
            Path(args.out).write_text(json.dumps({"runs": runs}, indent=1))
    report = {"runs": {k: {kk: vv for kk, vv in v.items() if kk != "greedy"} for k, v in runs.items()},
              "tables": {}, "parity": {}}
    for ours in [k for k in runs if k != "vllm"]:
        if "vllm" in runs:
            report["tables"][ours] = table(runs["vllm"], runs[ours])
            report["parity"][ours] = parity(runs["vllm"]["greedy"], runs[ours]["greedy"])
    print(json.dumps({"parity": report["parity"],
                      "backend_stats": {k: v.get("backend_stats") for k, v in runs.items()},
                      "engine_start_s": {k: v["engine_start_s"] for k, v in runs.items()}}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


def table(ref: dict, ours: dict) -> list[dict]:
    """Rows of the comparison (ratios ours / vLLM default, same run), printed as they are built."""
    print(f"{ours['backend']}: {'shape':>18} | {'vLLM out tok/s':>14} {'(decode)':>10} | {'ours out tok/s':>14} "
          f"{'(decode)':>10} | {'out x':>6} {'decode x':>8}")
    rows = []
    for a, b in zip(ref["shapes"], ours["shapes"]):
        row = {"shape": f"{a['prompts']} x {a['n']}, {a['prompt_len']}",
               "vllm_output_tok_s": a["output_tok_s"], "vllm_decode_tok_s": a["decode_tok_s"],
               "ours_output_tok_s": b["output_tok_s"], "ours_decode_tok_s": b["decode_tok_s"],
               "output_ratio": round(b["output_tok_s"] / a["output_tok_s"], 3),
               "decode_ratio": round(b["decode_tok_s"] / a["decode_tok_s"], 3)}
        rows.append(row)
        print(f"{row['shape']:>18} | {a['output_tok_s']:>14,.0f} {a['decode_tok_s']:>10,.0f} | "
              f"{b['output_tok_s']:>14,.0f} {b['decode_tok_s']:>10,.0f} | {row['output_ratio']:>6.2f} "
              f"{row['decode_ratio']:>8.2f}", flush=True)
    return rows


if __name__ == "__main__":
    main()
