"""A sweep of several models x 2 temperatures on N GPUs (lanes) against the same sweep on one GPU (issue #32).

The sweep: ``--models`` engines x temperatures 0.6 and 1.0, each point ``--problems`` x ``--samples`` x
``--max-tokens`` (T as the axis says). On GPUs (``--backend vllm``) the models are random-weight Llama
shapes of four sizes built here (``config.json`` + SmolLM2's tokenizer, ``load_format: dummy``: nothing
is read or written but the shape). On a CPU (``--backend embedded``) the models are the embedded
SmolLM2 with different ``max_batch`` (each its own engine), and the "GPUs" are CPU slots.

Parts (each one ``monkeybarrel sweep`` process, timed from the outside; run them in separate calls where
one call's time is limited, with the same ``--out``):

- ``build``: the model directories (vLLM only) and the sweep file;
- ``warm``: the sweep with 1 problem x 1 sample x 8 tokens on the N GPUs, untimed: every model's compile
  caches (torch.compile, Triton) are then warm for both timed parts, whichever runs first;
- ``many``: ``--gpus 0,..,N-1``: the models' engines side by side, one lane per GPU;
- ``one``: ``--gpus 1``: one engine after another in the driver (the first GPU).

Per part: process wall seconds, each point's sample-stage seconds and GPU-seconds (engine starts shared,
``sweep status --json``), engine starts, and for ``many`` each lane's devices and span. The JSON
(``OUT/sweep_gpus.json``) gets ``sweep_scaling_N`` = one's wall / many's wall once both parts ran, and
``ideal_scaling_N`` = the sum of the one-GPU run's per-model times / the largest (what perfect lanes
would give with these model sizes).

    python benchmarks/sweep_gpus.py --tokenizer /tmp/tokenizer --out /tmp/sweep_gpus --part build,warm
    python benchmarks/sweep_gpus.py --tokenizer /tmp/tokenizer --out /tmp/sweep_gpus --part many
    python benchmarks/sweep_gpus.py --tokenizer /tmp/tokenizer --out /tmp/sweep_gpus --part one
    python benchmarks/sweep_gpus.py --backend embedded --gpus 2 --out /tmp/sweep_cpu --part build,many,one  # CPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SIZES = {  # Llama-style shapes of four sizes (parameters ~ the name); vocabulary: the tokenizer's
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, head_dim=64),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, head_dim=64),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, head_dim=128),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8, head_dim=128),
}
PARAMS = {"0.5b": 0.5e9, "1b": 1.2e9, "1.5b": 1.5e9, "3b": 3.2e9}


def model_dir(size: str, tokenizer: Path, out: Path) -> Path:
    """A model directory: the size's shape with the tokenizer's vocabulary, plus the tokenizer's files."""
    out.mkdir(parents=True, exist_ok=True)
    vocab = len(json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"])
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "bfloat16",
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "bos_token_id": 1,
              "eos_token_id": 2, "hidden_act": "silu", "tie_word_embeddings": False, "vocab_size": vocab,
              **SIZES[size]}
    for f in tokenizer.iterdir():
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "generation_config")):
            shutil.copyfile(f, out / f.name)
    (out / "config.json").write_text(json.dumps(config))
    return out


def sweep_file(args: argparse.Namespace, problems: int, samples: int, max_tokens: int, path: Path) -> Path:
    """The sweep: models x temperatures (0.6, 1.0)."""
    task = {"name": "gsm8k", "path": str(args.gsm8k.resolve()), "num_problems": problems} if args.gsm8k else \
        {"name": "arithmetic", "num_problems": problems, "options": {"difficulty": 3}}
    if args.backend == "vllm":
        models = {size: str(args.out / "models" / size) for size in args.models.split(",")}
        engine = {"engine_kwargs": {"load_format": "dummy"}, "gpu_memory_utilization": 0.85,
                  "max_model_len": 4096, "dtype": "bfloat16"}
        generator = {"id": "g", "backend": "vllm", "model": next(iter(models.values())), "options": engine}
        axes = [{"generators[0].model": models}]
        params = {path: PARAMS[size] for size, path in models.items()}
    else:
        batches = [16 + i for i in range(len(args.models.split(",")))]
        generator = {"id": "g", "options": {"num_threads": 1, "max_batch": batches[0]}}
        axes = [{"generators[0].options.max_batch": batches}]
        params = {}
    generator.update(num_samples=samples, max_tokens=max_tokens, temperature=0.8)
    base = {"name": "base", "seed": 0, "task": task, "generators": [generator],
            "selectors": [{"name": "majority", "type": "majority"}]}
    path.write_text(yaml.safe_dump({"name": "sweep-gpus", "base": base,
                                    "axes": axes + [{"generators[0].temperature": [0.6, 1.0]}],
                                    "retry": {"attempts": 1}, "model_params": params}, sort_keys=False))
    return path


def run_part(name: str, sweep: Path, out: Path, gpus: str) -> dict:
    """One ``monkeybarrel sweep`` process on ``gpus``: its wall seconds and what its directory says."""
    shutil.rmtree(out, ignore_errors=True)
    cli = [sys.executable, "-m", "monkeybarrel.orchestrator.cli.main"]
    load = os.getloadavg()[0]
    began = time.perf_counter()
    done = subprocess.run([*cli, "sweep", str(sweep), "--out", str(out), "--gpus", gpus, "--no-progress"],
                          capture_output=True, text=True)
    wall = round(time.perf_counter() - began, 2)
    log = out.parent / f"{name}.log"
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"part {name}: monkeybarrel sweep exited {done.returncode} (log: {log})")
    status = json.loads(subprocess.run([*cli, "sweep", "status", str(out), "--json"], capture_output=True,
                                       text=True, check=True).stdout)
    manifest = json.loads((out / "sweep.json").read_text())
    points = {}
    for record in manifest["points"]:
        stages = json.loads((out / record["name"] / "manifest.json").read_text())["runs"][-1]["sampled"]
        row = next(r for r in status["points"] if r["name"] == record["name"])
        points[record["name"]] = {
            "sample_stage_s": round(sum(s.get("wall_s", 0.0) for s in stages.values()), 2),
            "engine_start_s": next((s.get("engine_start_s") for s in stages.values() if s.get("engine_start_s")), None),
            "gpu_s_recorded": round(sum(s.get("gpu_s") or 0.0 for s in stages.values()), 2),
            "gpu_s_shared": row.get("gpu_s"), "devices": record.get("devices"), "lane": record.get("lane"),
            "started": record.get("started"), "finished": record.get("finished")}
    lanes: dict[str, list[float]] = {}
    for point in points.values():
        if point["lane"] is not None:
            span = lanes.setdefault(str(point["lane"]), [float("inf"), 0.0])
            span[0] = min(span[0], datetime.fromisoformat(point["started"]).timestamp())
            span[1] = max(span[1], datetime.fromisoformat(point["finished"]).timestamp())
    return {"gpus": gpus, "wall_s": wall, "load_average_1min_before": round(load, 1),
            "engine_starts": manifest["runs"][-1].get("engine_starts", {}), "points": points,
            "lane_spans_s": {k: round(v[1] - v[0], 1) for k, v in lanes.items()},
            "engines": {label: {k: v for k, v in info.items() if k != "points"} for label, info in status["engines"].items()}}


def device(backend: str) -> str:
    if backend == "vllm":
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
            return "; ".join(line.split(" (UUID")[0] for line in listed.splitlines() if line.startswith("GPU "))
        except (OSError, subprocess.SubprocessError):
            return "GPU (nvidia-smi unavailable)"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="working directory (kept across parts)")
    parser.add_argument("--part", default="build,warm,many,one", help="comma list of build, warm, many, one")
    parser.add_argument("--backend", choices=["vllm", "embedded"], default="vllm")
    parser.add_argument("--tokenizer", type=Path, default=Path("/tmp/tokenizer"),
                        help="SmolLM2's tokenizer files (deploy/gpu_bundle.sh deps; vLLM only)")
    parser.add_argument("--models", default="0.5b,1b,1.5b,3b", help=f"sizes, of {', '.join(SIZES)}")
    parser.add_argument("--gpus", type=int, default=4, help="devices of the `many` part (N)")
    parser.add_argument("--gsm8k", type=Path, default=None, help="GSM8K test JSONL (default: the arithmetic task)")
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    result_path = args.out / "sweep_gpus.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    many = ",".join(str(i) for i in range(args.gpus))
    for part in args.part.split(","):
        if part == "build":
            if args.backend == "vllm":
                for size in args.models.split(","):
                    model_dir(size, args.tokenizer, args.out / "models" / size)
            sweep_file(args, args.problems, args.samples, args.max_tokens, args.out / "sweep.yaml")
            sweep_file(args, 1, 1, 8, args.out / "warm.yaml")
            result = {"device": device(args.backend), "backend": args.backend, "models": args.models,
                      "job": {"problems": args.problems, "samples": args.samples, "max_tokens": args.max_tokens,
                              "task": "gsm8k" if args.gsm8k else "arithmetic", "temperatures": [0.6, 1.0]}}
        elif part == "warm":
            result["warm"] = {"wall_s": run_part("warm", args.out / "warm.yaml", args.out / "warm", many)["wall_s"]}
        elif part in ("many", "one"):
            result[part] = run_part(part, args.out / "sweep.yaml", args.out / part, many if part == "many" else "1")
            print(f"{part}: {result[part]['wall_s']} s on {result[part]['gpus']}", flush=True)
        else:
            raise SystemExit(f"--part {part}: expected build, warm, many or one")
        result_path.write_text(json.dumps(result, indent=1))
    if "many" in result and "one" in result:
        key = f"sweep_scaling_{len(result['many']['gpus'].split(','))}"
        result[key] = round(result["one"]["wall_s"] / result["many"]["wall_s"], 2)
        per_model: dict[str, float] = {}
        for name, point in result["one"]["points"].items():
            model = name.rsplit(",temperature=", 1)[0]
            per_model[model] = per_model.get(model, 0.0) + point["sample_stage_s"]
        result[key.replace("sweep", "ideal")] = round(sum(per_model.values()) / max(per_model.values()), 2)
        print(f"{key}: {result[key]} (one {result['one']['wall_s']} s / many {result['many']['wall_s']} s); "
              f"ideal for these sizes {result[key.replace('sweep', 'ideal')]}", flush=True)
        result_path.write_text(json.dumps(result, indent=1))
    print(result_path.read_text())


if __name__ == "__main__":
    main()
