"""The ``ray`` backend against direct vLLM on one GPU, whole ``monkeybarrel run`` jobs, one run (issue #27).

Job: GSM8K, ``--problems`` problems x ``--samples`` samples x ``--max-tokens`` tokens, T=0.8, on a
random-weight Llama shape (``--preset``, vLLM's dummy weights) with SmolLM2's tokenizer, ``attention:
auto``. Variants, each a fresh ``monkeybarrel run`` process:

- ``direct``: ``backend: vllm``;
- ``ray-1``: ``backend: ray`` with one vLLM worker holding the GPU;
- ``ray-2``: two vLLM workers sharing the GPU (``num_gpus_per_worker: 0.5``, each 0.42 of its memory).

For each: the process's wall time, the sample stage's wall time, its start figures (``engine_start_s``;
``ray_init_s`` and ``workers_ready_s`` for Ray, counted from before the task's data load), generated
tokens, generation tok/s (tokens / (stage wall - the part of the start inside the stage)), GPU-seconds.

Run on the GPU machine (docs/gpu.md): ``python benchmarks/ray_gpu.py --gsm8k FILE --tokenizer DIR --out F.json``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from vllm_attention_auto import PRESETS  # noqa: E402


def shape_with_tokenizer(preset: str, tokenizer: Path, out: Path) -> Path:
    """A model directory: the preset's Llama shape (vocabulary of the tokenizer) plus the tokenizer's files."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = len(json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
    shape = {**PRESETS[preset], "vocab_size": vocab}
    generation = json.loads((tokenizer / "generation_config.json").read_text()) \
        if (tokenizer / "generation_config.json").exists() else {}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
              "bos_token_id": generation.get("bos_token_id", 1), "eos_token_id": generation.get("eos_token_id", 2),
              "hidden_act": "silu", "tie_word_embeddings": False, **shape}
    for f in tokenizer.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            (out / f.name).write_bytes(f.read_bytes())
    (out / "config.json").write_text(json.dumps(config))
    return out


VARIANTS = {
    "direct": lambda engine: {"backend": "vllm", "options": engine},
    "ray-1": lambda engine: {"backend": "ray", "options": {"backend": "vllm", "backend_options": engine,
                                                            "num_workers": 1}},
    "ray-2": lambda engine: {"backend": "ray", "options": {
        "backend": "vllm", "backend_options": {**engine, "gpu_memory_utilization": 0.42},
        "num_workers": 2, "num_gpus_per_worker": 0.5}},
}


def run_variant(name: str, model: Path, args, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    engine = {"engine_kwargs": {"load_format": "dummy"}, "gpu_memory_utilization": 0.85, "max_model_len": 4096,
              "dtype": "bfloat16"}
    generator = {"id": "g", "model": str(model), "num_samples": args.samples, "max_tokens": args.max_tokens,
                 "temperature": 0.8, **VARIANTS[name](engine)}
    config = {"name": f"ray-gpu-{name}", "seed": 0,
              "task": {"name": "gsm8k", "path": str(args.gsm8k), "num_problems": args.problems},
              "generators": [generator], "selectors": [{"name": "majority", "type": "majority"}]}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    out = workdir / name
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "run", str(path), "--out",
                           str(out), "--no-progress", "--force"], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
        return {"variant": name, "failed": proc.returncode}
    manifest = json.loads((out / "manifest.json").read_text())
    sampled = manifest["runs"][-1]["sampled"]["g"]
    tokens = manifest["costs"]["generators"]["g"]["completion_tokens"]
    # the part of the start that fell inside the sample stage: vLLM's engine start; Ray's workers started before
    # the data load, so only what was left of their start when the stage began
    inside = sampled.get("engine_start_s", 0.0)
    if "workers_ready_s" in sampled:
        before_stage = manifest["costs"]["stage_wall_s"].get("load", 0.0)
        inside = max(sampled["workers_ready_s"] - before_stage, 0.0)
    generation_s = sampled["wall_s"] - inside
    result = {"variant": name, "process_wall_s": round(wall, 1), "sample_stage_s": sampled["wall_s"],
              "start_inside_stage_s": round(inside, 1), "generation_s": round(generation_s, 2),
              "completion_tokens": tokens, "generation_tok_s": round(tokens / generation_s, 1),
              "gpu_s": sampled.get("gpu_s"), "errors": sampled.get("errors"),
              **{k: sampled[k] for k in ("engine_start_s", "ray_init_s", "workers_ready_s") if k in sampled}}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gsm8k", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True, help="SmolLM2's tokenizer files (deploy/gpu_bundle.sh deps)")
    ap.add_argument("--preset", default="1b", choices=sorted(PRESETS))
    ap.add_argument("--problems", type=int, default=64)
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--variants", default="direct,ray-1,ray-2")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ray_gpu"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--warmup", action="store_true",
                    help="first run the direct variant on 4 problems, untimed: the compile caches (torch.compile, "
                         "Triton) are then warm for every timed variant, whichever runs first")
    args = ap.parse_args()
    model = shape_with_tokenizer(args.preset, args.tokenizer, args.workdir / f"{args.preset}_model")
    if args.warmup:
        run_variant("direct", model, argparse.Namespace(**{**vars(args), "problems": 4}), args.workdir / "warmup")
    results = {}
    for name in args.variants.split(","):
        results[name] = run_variant(name, model, args, args.workdir)
        if args.out:  # after every variant, so a cut-off run keeps what it measured
            args.out.write_text(json.dumps({"job": vars(args), "results": results}, indent=1, default=str))
    direct = results.get("direct", {})
    for name, r in results.items():
        if name != "direct" and "generation_s" in r and "generation_s" in direct:
            r["generation_ratio_vs_direct"] = round(r["generation_s"] / direct["generation_s"], 3)
            r["stage_ratio_vs_direct"] = round(r["sample_stage_s"] / direct["sample_stage_s"], 3)
            print(f"{name}: generation {r['generation_s']} s vs direct {direct['generation_s']} s "
                  f"({r['generation_ratio_vs_direct']}x); stage {r['stage_ratio_vs_direct']}x; "
                  f"process {r['process_wall_s']} vs {direct['process_wall_s']} s", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"job": vars(args), "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
