"""``attention: auto`` against vLLM's default attention, whole jobs (prefill included), one run (issue #27).

For each model shape (``--presets``: Llama-3-8B and Llama-3.2-1B shapes, or Llama-3-70B with ``--tp 4``;
random weights, vLLM's ``load_format="dummy"``, so no weights are written or read; benchmarks/model_shapes.py)
and each job (prompts x samples, prompt tokens, new tokens; ``--jobs`` may name any, e.g. ``32x64x1024x128``):

- ``vllm``: an engine with vLLM's default attention and vLLM's default engine arguments;
- ``auto``: what the ``vllm`` sampler does with ``attention: auto`` (the default): the job's prompts and
  sample counts go through :func:`~monkeybarrel.samplers.vllm_offline.prompt_sharing` and
  :func:`~monkeybarrel.samplers.vllm_offline.choose_attention`, and the engine is built with
  :func:`~monkeybarrel.samplers.vllm_offline.engine_arguments` for the choice. Jobs whose choice gives
  the same engine arguments share one engine: a job that shares nothing runs on the very engine
  ``vllm`` runs on (auto builds that engine: identical arguments), timed twice for vLLM, then twice for auto.

Each job is timed as ``LLM.generate`` from its token prompts to its last token (T=0.8, ``ignore_eos``),
the prefix cache reset before each, twice per engine (the faster of the two counts: the first also
warms kernels for new batch sizes; ``--once`` times it once, after the engine's warm-up); output tok/s =
generated tokens / seconds. Ratios are auto / vllm. ``--tp N`` runs every engine with tensor parallel N.
Engines start as the ``vllm`` sampler's do by default, without torch.compile (``--torch-compile``: with it).
Each engine runs in its own subprocess (its memory never meets the other's).

Run on the GPU machine (vLLM 0.26 importable, docs/gpu.md):
    python benchmarks/vllm_attention_auto.py --presets 8b --out benchmarks/vllm_attention_auto_h100.json
``--profile DIR`` writes the torch profiler's kernel table of each auto engine's jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from child_result import emit, parse  # noqa: E402
from model_shapes import PRESETS, shape_dir  # noqa: E402,F401  (PRESETS: the shapes this script knows)

JOBS = {  # preset -> [(prompts, samples per prompt, prompt tokens, new tokens)]: the issues' tables
    "8b": [(8, 128, 2048, 128), (4, 64, 7900, 128), (512, 1, 2048, 128)],
    "1b": [(8, 128, 2048, 256), (4, 64, 7900, 256), (512, 1, 2048, 256)],
    "70b": [(8, 128, 2048, 128), (128, 64, 1024, 128), (512, 1, 2048, 128)],
}
BASE_ARGS = dict(dtype="bfloat16", max_model_len=8448, enable_prefix_caching=True, gpu_memory_utilization=0.85)


def model_dir(preset: str) -> str:
    """A directory with only the shape's ``config.json`` (weights are vLLM's dummy initialisation)."""
    return str(shape_dir(preset, Path(tempfile.gettempdir()) / f"monkeybarrel_{preset}_shape"))


def job_prompts(job: tuple[int, int, int, int]) -> list[list[int]]:
    import numpy as np

    prompts, _, length, _ = job
    rng = np.random.default_rng(length * 1000 + prompts)
    return [rng.integers(100, 120000, size=length).tolist() for _ in range(prompts)]


def auto_choice(job: tuple[int, int, int, int]) -> tuple[str, str]:
    """What ``attention: auto`` picks for the job (prompts as text: one character per token id)."""
    from monkeybarrel.samplers.vllm_offline import choose_attention, prompt_sharing

    texts = ["".join(chr(0x100 + t % 60000) for t in p) for p in job_prompts(job)]
    return choose_attention("auto", prompt_sharing(texts, [job[1]] * job[0]), prefix_caching=True)


def run_engine(preset: str, args: dict, jobs: list[tuple[int, int, int, int]], profile: str,
               unseeded: bool = False, repeats: int = 2) -> dict:
    """Start one engine with ``args`` and time every job twice (and twice more without seeds if ``unseeded``)."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    from vllm import LLM, SamplingParams

    from monkeybarrel.kernels import vllm_plugin

    if args.get("attention_backend") == "CUSTOM":
        vllm_plugin.register()
    kwargs = dict(model=model_dir(preset), skip_tokenizer_init=True, load_format="dummy", seed=0, **args)
    if profile:
        kwargs["profiler_config"] = dict(profiler="torch", torch_profiler_dir=profile, torch_profiler_with_stack=False,
                                         torch_profiler_use_gzip=False, ignore_frontend=True)
    started = time.perf_counter()
    llm = LLM(**kwargs)
    out = {"engine_start_s": round(time.perf_counter() - started, 1), "jobs": []}
    llm.generate([{"prompt_token_ids": list(range(100, 700))}] * 2,  # warm-up: kernels compile at first use
                 SamplingParams(n=4, max_tokens=16, ignore_eos=True, detokenize=False), use_tqdm=False)
    for job in jobs:
        prompts, n, length, new = job
        params = SamplingParams(n=n, max_tokens=new, temperature=0.8, seed=0, ignore_eos=True, detokenize=False)
        times = []
        for _ in range(repeats):
            llm.reset_prefix_cache()
            t0 = time.perf_counter()
            outs = llm.generate([{"prompt_token_ids": p} for p in job_prompts(job)], params, use_tqdm=False)
            times.append(time.perf_counter() - t0)
        tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
        if profile:
            llm.reset_prefix_cache()
            llm.start_profile()
            llm.generate([{"prompt_token_ids": p} for p in job_prompts(job)], params, use_tqdm=False)
            llm.stop_profile()
            table = Path(profile) / "profiler_out_0.txt"
            if table.exists():
                table.rename(Path(profile) / f"{preset}_{prompts}x{n}x{length}.txt")
        out["jobs"].append({"job": list(job), "generated_tokens": tokens, "seconds": [round(t, 3) for t in times],
                            "output_tok_s": round(tokens / min(times), 1)})
        if unseeded:
            free = SamplingParams(n=n, max_tokens=new, temperature=0.8, ignore_eos=True, detokenize=False)
            free_times = []
            for _ in range(2):
                llm.reset_prefix_cache()
                t0 = time.perf_counter()
                llm.generate([{"prompt_token_ids": p} for p in job_prompts(job)], free, use_tqdm=False)
                free_times.append(time.perf_counter() - t0)
            out["jobs"][-1]["unseeded_output_tok_s"] = round(tokens / min(free_times), 1)
        print(json.dumps(out["jobs"][-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="8b,1b")
    ap.add_argument("--out", help="JSON file (rewritten after every engine)")
    ap.add_argument("--torch-compile", action="store_true",
                    help="engines with torch.compile (vLLM's default); without it, as the vllm sampler's default: an "
                         "eager model, a full CUDA graph per decode step")
    ap.add_argument("--profile", default="", help="directory for the auto engines' kernel tables")
    ap.add_argument("--jobs", default="", help="subset of the preset's jobs, e.g. '8x128x2048x128'")
    ap.add_argument("--auto-only", action="store_true", help="skip vLLM's default engine (profiling runs)")
    ap.add_argument("--unseeded", action="store_true",
                    help="also time each auto job without per-request seeds (vLLM samples seeded requests one by one)")
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size of every engine")
    ap.add_argument("--same-engine", action="store_true",
                    help="vLLM's attention gets our engine settings (sequences a step, batched tokens, graph sizes)")
    ap.add_argument("--once", action="store_true", help="time each job once (after the engine's warm-up)")
    ap.add_argument("--engine", help=argparse.SUPPRESS)  # internal: PRESET:JSON_ARGS:JOBS, run in a subprocess
    args = ap.parse_args()
    if args.tp > 1:
        BASE_ARGS["tensor_parallel_size"] = args.tp
    if args.engine:
        preset, engine_args, jobs, profile, unseeded, repeats = json.loads(args.engine)
        emit(run_engine(preset, engine_args, [tuple(j) for j in jobs], profile, unseeded, repeats))
        return
    from monkeybarrel.samplers.vllm_offline import engine_arguments

    report: dict = {"base_args": BASE_ARGS, "presets": {}}
    for preset in args.presets.split(","):
        jobs = ([tuple(map(int, j.split("x"))) for j in args.jobs.split(",")] if args.jobs else JOBS[preset])
        compiled = {"torch_compile": args.torch_compile}
        default_args = engine_arguments("vllm", BASE_ARGS, **compiled)
        if args.same_engine:  # vLLM's attention on our engine settings: only the attention differs
            ours = engine_arguments("monkeybarrel", BASE_ARGS, **compiled)
            default_args |= {k: ours[k] for k in ("max_num_seqs", "max_num_batched_tokens", "compilation_config")}
        engines: dict[str, dict] = {"vllm": {"args": default_args, "jobs": list(jobs)}}
        choices = {}
        for job in jobs:
            choice = auto_choice(job)
            choices[job] = choice
            auto_args = default_args if choice[0] == "vllm" else engine_arguments(choice[0], BASE_ARGS, **compiled)
            name = "vllm" if auto_args == default_args else f"auto-{choice[0]}"
            engines.setdefault(name, {"args": auto_args, "jobs": []})
            engines[name]["jobs"].append(job)  # on the vllm engine: the job runs again, as auto's
        results = {}
        for name, engine in engines.items():
            if args.auto_only and name == "vllm":
                continue
            profile = str(Path(args.profile) / f"{preset}_{name}") if args.profile and name != "vllm" else ""
            unseeded = args.unseeded and name != "vllm"
            cmd = [sys.executable, __file__, "--engine", json.dumps([preset, engine["args"], engine["jobs"], profile,
                                                                     unseeded, 1 if args.once else 2])]
            print(f"== {preset} {name}: {engine['args']}", flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True)
            result = parse(proc.stdout)
            if proc.returncode != 0 or result is None:
                sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-6000:])
                print(f"{preset} {name} failed (exit {proc.returncode})", flush=True)
                continue
            results[name] = result | {"args": engine["args"]}
            if args.out:  # after every engine, so a cut-off run keeps what it measured
                report["presets"][preset] = {"engines": results, "table": [], "no_sharing_ratio": None}
                Path(args.out).write_text(json.dumps(report, indent=1))
        rows = []
        for job in jobs:
            engine = "vllm" if choices[job][0] == "vllm" else f"auto-{choices[job][0]}"
            ref_runs = [j for j in results.get("vllm", {}).get("jobs", []) if tuple(j["job"]) == job]
            our_runs = [j for j in results.get(engine, {}).get("jobs", []) if tuple(j["job"]) == job]
            if not ref_runs or not our_runs:
                continue
            ref, ours = ref_runs[0], our_runs[-1]  # on one engine: the job's first two timings, then auto's two
            row = {"job": "{} x {}, {}, {}".format(*job), "auto_attention": choices[job][0],
                   "auto_reason": choices[job][1], "vllm_tok_s": ref["output_tok_s"], "auto_tok_s": ours["output_tok_s"],
                   "ratio": round(ours["output_tok_s"] / ref["output_tok_s"], 3)}
            rows.append(row)
            print(f"{preset} {row['job']:>22} | vLLM {row['vllm_tok_s']:>9,.0f} | auto ({row['auto_attention']}) "
                  f"{row['auto_tok_s']:>9,.0f} | {row['ratio']:.2f}x", flush=True)
        no_sharing = [r["ratio"] for r in rows if r["auto_attention"] == "vllm"]
        report["presets"][preset] = {"engines": results, "table": rows,
                                     "no_sharing_ratio": min(no_sharing) if no_sharing else None}
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps({p: {"table": v["table"], "no_sharing_ratio": v["no_sharing_ratio"],
                          "engine_start_s": {k: e["engine_start_s"] for k, e in v["engines"].items()}}
                      for p, v in report["presets"].items()}, indent=1))


if __name__ == "__main__":
    main()
