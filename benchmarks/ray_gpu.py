"""Whole ``monkeybarrel run`` jobs on GPUs: direct vLLM, our attention against vLLM's, Ray data parallel (#27, #31, #32).

Job: GSM8K, ``--problems`` problems x ``--samples`` samples x ``--max-tokens`` tokens, T=0.8, on a
random-weight Llama shape (``--preset``, vLLM's dummy weights) with SmolLM2's tokenizer extended to the
shape's vocabulary (benchmarks/model_shapes.py); ``--shots K`` puts K worked GSM8K examples in the system
prompt (a few-shot header every problem shares: 16 shots are ~2.6k tokens). Variants, each a fresh
``monkeybarrel run`` process:

- ``direct``: ``backend: vllm`` (``attention: auto``);
- ``direct-vllm``: the same with ``attention: vllm`` (vLLM's own attention);
- ``ray-1``: ``backend: ray`` with one vLLM worker holding the GPU;
- ``ray-2``: two vLLM workers sharing the GPU (``engines_per_gpu: 2``, each 0.43 of its memory);
- ``ray-Ng`` (N = 2, 4, 8, ...): N vLLM workers of one GPU each (data parallel); ``ray-Ng-xK``: K workers on
  each of the N GPUs (``engines_per_gpu: K``; ``ray-1g-x2`` = ``ray-2``);
- ``...-nc`` (any variant, e.g. ``direct-nc``, ``ray-4g-nc``): the engine without torch.compile
  (``torch_compile: false``: eager model, a full CUDA graph per decode step; the default since 2026-11-27,
  so ``-nc`` only says so); ``...-tc``: with torch.compile (``torch_compile: true``, the default before);
- ``...-spawn`` (e.g. ``ray-1-spawn``, ``ray-4g-spawn``): the same with ``engine_in_actor: false``, vLLM's engine
  core in its own process, which vLLM spawns inside an actor (importing torch and vLLM again); the default
  keeps it in the actor (rows named ``...-inproc`` in the JSON files of 2026-11-27 are that default).

``--engine-cache DIR`` gives every engine the same start-up cache directory (``engine_cache``).

For each: the process's wall time, the sample stage's wall time, its start figures (``engine_start_s``;
``ray_init_s`` and ``workers_ready_s`` for Ray, counted from before the task's data load; ``kv_shared_workers``:
workers that started with the KV cache size their GPU's first engine measured), generated
tokens, generation tok/s (tokens / (stage wall - the part of the start inside the stage); where workers came up
one after another, also ``generation_tok_s_from_first_ready``, counted from the first worker up: the two bound
the rate), GPU-seconds.

Run on the GPU machine (docs/gpu.md): ``python benchmarks/ray_gpu.py --gsm8k FILE --tokenizer DIR --out F.json``
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from model_shapes import PRESETS, shape_dir  # noqa: E402


def shape_with_tokenizer(preset: str, tokenizer: Path, out: Path) -> Path:
    """A model directory: the preset's Llama shape plus the tokenizer, extended to the shape's vocabulary."""
    return shape_dir(preset, out, tokenizer)


def variant(name: str, engine: dict) -> dict:
    """The generator's backend and options for variant ``name`` (module docstring)."""
    if name.endswith(("-nc", "-tc")):
        name, engine = name[:-3], {**engine, "torch_compile": name.endswith("-tc")}
    if name == "direct":
        return {"backend": "vllm", "options": engine}
    if name == "direct-vllm":
        return {"backend": "vllm", "options": {**engine, "attention": "vllm"}}
    match = re.fullmatch(r"ray-(\d+)(g?)(?:-x(\d+))?(-spawn)?", name)
    if match is None:
        raise SystemExit(f"unknown variant {name!r} (direct, direct-vllm, ray-N, ray-Ng, ray-Ng-xK; suffixes -spawn, "
                         "-nc, -tc)")
    workers, gpus, per_gpu, spawn = int(match[1]), match[2], int(match[3] or 1), match[4]
    if name == "ray-2":  # two workers sharing the one GPU
        workers, per_gpu = 2, 2
    if per_gpu > 1:  # engines sharing a GPU: the pool shares out its memory
        engine = {k: v for k, v in engine.items() if k != "gpu_memory_utilization"}
    options = {"backend": "vllm", "backend_options": engine, "num_workers": workers * (per_gpu if gpus else 1),
               "engine_in_actor": not spawn}
    options.update({"engines_per_gpu": per_gpu} if per_gpu > 1 else {"num_gpus_per_worker": 1})
    return {"backend": "ray", "options": options}


def few_shot_header(gsm8k: Path, shots: int) -> str | None:
    """A system prompt of ``shots`` worked GSM8K examples (the file's last ones), or None."""
    if not shots:
        return None
    rows = [json.loads(x) for x in gsm8k.read_text().splitlines() if x.strip()][-shots:]
    return "Solve the problem as in these examples.\n\n" + "".join(
        f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows)


def run_variant(name: str, model: Path, args, workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    engine = {"engine_kwargs": {"load_format": "dummy"}, "gpu_memory_utilization": 0.85, "max_model_len": 4096,
              "dtype": "bfloat16", **({"engine_cache": str(args.engine_cache)} if args.engine_cache else {})}
    generator = {"id": "g", "model": str(model), "num_samples": args.samples, "max_tokens": args.max_tokens,
                 "temperature": 0.8, "system_prompt": few_shot_header(args.gsm8k, args.shots), **variant(name, engine)}
    config = {"name": f"ray-gpu-{name}", "seed": 0,  # an absolute data path: a config's paths are read from its folder
              "task": {"name": "gsm8k", "path": str(args.gsm8k.resolve()), "num_problems": args.problems},
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
    before_stage = manifest["costs"]["stage_wall_s"].get("load", 0.0)
    inside = sampled.get("engine_start_s", 0.0)
    if "workers_ready_s" in sampled:
        inside = max(sampled["workers_ready_s"] - before_stage, 0.0)
    generation_s = sampled["wall_s"] - inside
    extra = {}
    if sampled.get("first_worker_ready_s", sampled.get("workers_ready_s")) != sampled.get("workers_ready_s"):
        # workers up one after another (engines sharing a GPU start in turn): tokens of the early workers fell
        # before the last was up, so tokens / generation_s overstates; from the first worker up, it understates
        first_inside = max(sampled["first_worker_ready_s"] - before_stage, 0.0)
        extra["generation_tok_s_from_first_ready"] = round(tokens / (sampled["wall_s"] - first_inside), 1)
    result = {"variant": name, "process_wall_s": round(wall, 1), "sample_stage_s": sampled["wall_s"],
              "start_inside_stage_s": round(inside, 1), "generation_s": round(generation_s, 2),
              "completion_tokens": tokens, "generation_tok_s": round(tokens / generation_s, 1),
              "gpu_s": sampled.get("gpu_s"), "errors": sampled.get("errors"), **extra,
              **{k: v for k, v in sampled.items() if k in ("import_s", "ray_init_s", "workers_ready_s",
                                                           "first_worker_ready_s", "kv_shared_workers")
                 or k.startswith(("worker_", "engine_"))}}
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
    ap.add_argument("--baseline", help="variant the others are compared with (default: the first)")
    ap.add_argument("--shots", type=int, default=0, help="worked examples in a shared system prompt")
    ap.add_argument("--engine-cache", type=Path, help="one start-up cache directory for every engine")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/ray_gpu"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--warmup", action="store_true",
                    help="first run the first variant on 8 problems x 16 tokens, untimed: the compile caches "
                         "(torch.compile, Triton) are then warm for every timed variant with the same engine "
                         "(8 x the samples should reach max_num_seqs, 2,048: the graph sizes are part of the key)")
    ap.add_argument("--only-warmup", action="store_true", help="the warm-up alone (fill --engine-cache, then stop)")
    args = ap.parse_args()
    model = shape_with_tokenizer(args.preset, args.tokenizer, args.workdir / f"{args.preset}_model")
    if args.warmup or args.only_warmup:
        first = args.variants.split(",")[0]
        run_variant(first, model, argparse.Namespace(**{**vars(args), "problems": 8, "max_tokens": 16}),
                    args.workdir / "warmup")
        if args.only_warmup:
            return
    results = {}
    for name in args.variants.split(","):
        results[name] = run_variant(name, model, args, args.workdir)
        if args.out:  # after every variant, so a cut-off run keeps what it measured
            args.out.write_text(json.dumps({"job": vars(args), "results": results}, indent=1, default=str))
    base_name = args.baseline or next(iter(results))
    base = results.get(base_name, {})
    for name, r in results.items():
        if "generation_s" not in r:
            continue
        r["stage_tok_s"] = round(r["completion_tokens"] / r["sample_stage_s"], 1)
        r["process_tok_s"] = round(r["completion_tokens"] / r["process_wall_s"], 1)
        if name != base_name and "generation_s" in base:
            r[f"vs_{base_name}"] = {"generation": round(base["generation_s"] / r["generation_s"], 3),
                                    "sample_stage": round(base["sample_stage_s"] / r["sample_stage_s"], 3),
                                    "process": round(base["process_wall_s"] / r["process_wall_s"], 3)}
            print(f"{name} vs {base_name}: speed-up generation {r[f'vs_{base_name}']['generation']}x, sample stage "
                  f"{r[f'vs_{base_name}']['sample_stage']}x, process {r[f'vs_{base_name}']['process']}x "
                  f"({r['sample_stage_s']} vs {base['sample_stage_s']} s)", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"job": vars(args), "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
