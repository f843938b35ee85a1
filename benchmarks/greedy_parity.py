"""Greedy tokens of a real model through our attention: FP8 against bf16 KV, tensor parallel 2 against 1 (#31, #32).

The model is the embedded SmolLM2-135M-Instruct (its GGUF, converted once by ``core.models.resolve_model``).
Prompts: ``--prompts`` GSM8K questions behind one shared 4-shot header (so decode steps run the kernel's
shared-prefix path: every sequence's header blocks are one group), one greedy sample each (vLLM refuses
greedy n > 1), ``--max-tokens`` new tokens,
``attention: monkeybarrel`` forced, ``dtype`` bfloat16, no torch.compile (the ``vllm`` sampler's default).

- ``--mode fp8``: ``kv_cache_dtype: auto`` (bf16) against ``fp8`` (e4m3, scale 1.0) and against ``fp8`` with
  ``calculate_kv_scales`` (vLLM sets each layer's k/v scale from its first forward's amax), each a fresh
  engine, with our attention and, as the control, vLLM's own (is a divergence FP8's or our kernel's?); also
  our kernel's speed on an FP8 cache against a bf16 cache (CUDA-graph replay of one decode step at the 8B
  shape's attention, 1,024 sequences in 16 groups). Engines run side by side, one per visible GPU.
- ``--mode tp``: tensor parallel 1 against 2, with vLLM's own attention across the same change as the
  control (greedy bf16 decoding is not invariant to TP's different reduction order: a near-tie flips and
  the sequence diverges from there), and ours against vLLM's at each TP. SmolLM2-135M has 9 query and 3 KV
  heads, which two GPUs cannot split, so both runs use the same function-preserving widening of its
  attention: 12 query and 4 KV heads, the added heads' q/k/v rows and o_proj columns zero (their output is
  multiplied by zero), the original weights untouched. ``--attention vllm`` runs the control alone, which
  vLLM's CPU build also runs (two ranks, each bound to half of the cores).

Figures, free-running: positions where the two runs' tokens are identical / all positions (a sequence
that diverges once counts its remaining positions as different), sequences identical to the end, and the
first divergence of each sequence that diverges. Both modes also run every engine **teacher-forced** on the
reference run's tokens (same attention backend; the reference: bf16 KV, TP 1): each step feeds the reference
token whatever the model chose (``forced_tokens.ForcedTokens``, a vLLM logits processor) and records the
model's own greedy choice (the top token of its raw logprobs), so each position is compared on the same
prefix: the fraction of positions where the engine's choice is the reference token is the per-position
agreement, free of the cascade one flipped near-tie starts. The reference engines run forced on their own
tokens too (the floor: a batch's different composition alone).

    python benchmarks/greedy_parity.py --mode fp8 --gguf /tmp/smol.gguf --gsm8k FILE --out parity_fp8.json
    python benchmarks/greedy_parity.py --mode tp --attention vllm --out parity_tp_cpu.json   # vLLM's CPU build
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

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from child_result import emit, parse  # noqa: E402


def widen_heads(model_dir: Path, out: Path, q_heads: int, kv_heads: int) -> Path:
    """``model_dir`` with its attention widened to ``q_heads``/``kv_heads`` by zero heads (same function)."""
    import torch
    from safetensors.torch import load_file, save_file

    config = json.loads((model_dir / "config.json").read_text())
    d = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    hq, hkv = config["num_attention_heads"], config["num_key_value_heads"]
    if q_heads % kv_heads or q_heads // kv_heads != hq // hkv:
        raise ValueError(f"keep the group size {hq // hkv}: {q_heads}/{kv_heads} heads do not")
    out.mkdir(parents=True, exist_ok=True)
    weights = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    widened = {}
    for name, w in weights.items():
        if name.endswith("self_attn.q_proj.weight"):
            w = torch.cat([w, w.new_zeros((q_heads - hq) * d, w.shape[1])])
        elif name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            w = torch.cat([w, w.new_zeros((kv_heads - hkv) * d, w.shape[1])])
        elif name.endswith("self_attn.o_proj.weight"):
            w = torch.cat([w, w.new_zeros(w.shape[0], (q_heads - hq) * d)], dim=1)
        widened[name] = w.contiguous()
    save_file(widened, str(out / "model.safetensors"))
    for f in model_dir.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name != "config.json":
            (out / f.name).write_bytes(f.read_bytes())
    config.update(num_attention_heads=q_heads, num_key_value_heads=kv_heads, head_dim=d)
    (out / "config.json").write_text(json.dumps(config))
    return out


def prompts(gsm8k: Path, count: int) -> list[str]:
    rows = [json.loads(x) for x in gsm8k.read_text().splitlines() if x.strip()]
    header = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows[-4:])
    return [header + f"Question: {r['question']}\nAnswer:" for r in rows[:count]]


FP8_ENGINES = {"bf16": {}, "fp8": {"kv_cache_dtype": "fp8"},
               "fp8_calibrated": {"kv_cache_dtype": "fp8", "calculate_kv_scales": True}}
"""The KV caches ``--mode fp8`` compares: bf16, e4m3 at scale 1.0, e4m3 at scales vLLM computes on the first forward."""


def forced_choices(llm, prompts: list[str], reference: list[list[int]]) -> list[list[int]]:
    """The model's greedy choice at each step of each prompt while it is fed ``reference`` (its tokens, one
    list per prompt): [prompt][step] token ids. Raises if a fed token is not the reference's."""
    from forced_tokens import FORCED_KEY
    from vllm import SamplingParams

    todo = [i for i, ref in enumerate(reference) if ref]
    params = [SamplingParams(n=1, temperature=0.0, max_tokens=len(reference[i]), ignore_eos=True, logprobs=1,
                             detokenize=False, extra_args={FORCED_KEY: list(reference[i])}) for i in todo]
    llm.reset_prefix_cache()  # as the free run: every prompt prefilled afresh
    outs = llm.generate([prompts[i] for i in todo], params, use_tqdm=False)
    choices: list[list[int]] = [[] for _ in reference]
    for i, out in zip(todo, outs):
        sample = out.outputs[0]
        if list(sample.token_ids) != list(reference[i]):
            raise RuntimeError(f"prompt {i}: the forced run was not fed the reference tokens")
        choices[i] = [next(t for t, lp in step.items() if lp.rank == 1) for step in sample.logprobs]
    return choices


def generate(spec: dict) -> dict:
    """One engine (in this process): greedy tokens of every prompt (one sample each); with ``spec["forced"]``
    (the reference's tokens, or ``"self"``: this run's own) also the teacher-forced choices."""
    os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    # the forced-tokens processor is named, and resolved by every process that samples (engine core, TP workers)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    import torch
    from forced_tokens import NAME as FORCED_PROCESSOR
    from vllm import LLM, SamplingParams

    from monkeybarrel.samplers.vllm_engine import engine_arguments

    ranks = spec["engine"].get("tensor_parallel_size", 1)
    if ranks > 1 and not torch.cuda.is_available():  # vLLM's CPU build binds a rank's threads to a NUMA node else
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(ranks))

    args = engine_arguments(spec.get("attention", "monkeybarrel"),
                            {"dtype": "bfloat16", "max_model_len": 2048, "enable_prefix_caching": True,
                             "gpu_memory_utilization": spec.get("memory", 0.3), "max_num_seqs": 512, **spec["engine"]},
                            torch_compile=False)  # the vllm sampler's default
    stats = Path(tempfile.mkdtemp()) / "attention_stats.json"
    os.environ["MONKEYBARREL_ATTENTION_STATS"] = str(stats)  # the engine process writes its counters there
    started = time.perf_counter()
    if spec.get("forced"):
        args["logits_processors"] = [FORCED_PROCESSOR]
    llm = LLM(model=spec["model"], seed=0, **args)
    start_s = time.perf_counter() - started
    params = SamplingParams(n=1, temperature=0.0, max_tokens=spec["max_tokens"], detokenize=False)
    outs = llm.generate(spec["prompts"], params, use_tqdm=False)
    tokens = [[list(c.token_ids) for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]
    result = {"tokens": tokens, "engine_start_s": round(start_s, 1)}
    if spec.get("forced"):
        reference = [r[0] for r in tokens] if spec["forced"] == "self" else spec["forced"]
        result["forced_reference"] = reference
        result["forced_choices"] = forced_choices(llm, spec["prompts"], reference)
    result["attention_stats"] = json.loads(stats.read_text()) if stats.exists() else {}
    return result


def compare_forced(reference: list[list[int]], choices: list[list[int]]) -> dict:
    """Teacher-forced agreement: at each step of each prompt, is the engine's greedy choice (on the reference's
    prefix) the reference token? The first step is decided by the prefill, the others by decode steps."""
    same = total = first_same = 0
    flips = []
    for ref, got in zip(reference, choices):
        agree = [a == b for a, b in zip(ref, got)]
        same, total = same + sum(agree), total + len(ref)
        if ref:
            first_same += agree[0] if agree else 0
        flips.append(len(ref) - sum(agree))
    prompts = sum(1 for r in reference if r)
    decode_total = total - prompts
    return {"positions_agree": round(same / max(total, 1), 5), "positions": total,
            "decode_positions_agree": round((same - first_same) / max(decode_total, 1), 5),
            "first_token_agree": first_same, "prompts": prompts,
            "prompts_without_a_flip": sum(f == 0 for f in flips), "most_flips_in_a_prompt": max(flips, default=0)}


def compare(a: list[list[list[int]]], b: list[list[list[int]]]) -> dict:
    """Position-wise agreement of two runs' greedy tokens (first sample of each prompt; all samples too)."""
    same = total = whole = 0
    first = []
    for ra, rb in zip(a, b):
        for sa, sb in zip(ra, rb):
            length = max(len(sa), len(sb))
            agree = sum(x == y for x, y in zip(sa, sb))
            same, total = same + agree, total + length
            if sa == sb:
                whole += 1
            else:
                first.append(next((i for i, (x, y) in enumerate(zip(sa, sb)) if x != y), min(len(sa), len(sb))))
    sequences = sum(len(r) for r in a)
    return {"positions_identical": round(same / max(total, 1), 5), "positions": total,
            "sequences_identical": whole, "sequences": sequences,
            "diverged_at_first_token": sum(f == 0 for f in first),  # decided by the prefill, not the decode kernel
            "first_divergence": sorted(first)}


def kernel_speed() -> dict:
    """One decode step of our kernel at the 8B attention shape (32/8 heads, D 128), 16 groups x 64 sequences on
    1,024-token prompts with 128-token suffixes: bf16 cache against FP8, CUDA-graph replay, median of 50."""
    import numpy as np
    import torch

    from monkeybarrel.kernels.paged_launch import PagedWorkspace

    T, Hq, Hkv, D, bs, P, S = 1024, 32, 8, 128, 16, 1024, 128
    rng = np.random.default_rng(0)
    blocks_p, blocks_s = P // bs, S // bs
    table = np.zeros((T, blocks_p + blocks_s), np.int32)
    ids = iter(rng.permutation(np.arange(1, 16 * blocks_p + T * blocks_s + 1)))
    for g in range(16):
        prompt = [next(ids) for _ in range(blocks_p)]
        for m in range(64):
            table[g * 64 + m] = prompt + [next(ids) for _ in range(blocks_s)]
    lens = np.full(T, P + S, np.int32)
    n_blocks = int(table.max()) + 1
    q = torch.randn(T, Hq, D, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(n_blocks, bs, Hkv, 2 * D, device="cuda", dtype=torch.bfloat16)
    bt, sl = torch.as_tensor(table, device="cuda"), torch.as_tensor(lens, device="cuda")
    result = {"shape": {"T": T, "Hq": Hq, "Hkv": Hkv, "D": D, "prompt": P, "suffix": S, "groups": 16}}
    for name, cache in (("bf16", kv), ("fp8", kv.to(torch.float8_e4m3fn))):
        k, v = cache[..., :D], cache[..., D:]
        ws = PagedWorkspace(T, Hq, Hkv, D, q.device)
        step = ws.step(T)
        step.load(ws.plan(table, lens, bs))
        out = torch.empty_like(q)
        for _ in range(3):
            step.run(q, k, v, bt, sl, D ** -0.5, out)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step.run(q, k, v, bt, sl, D ** -0.5, out)
        times = []
        for _ in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000)
        result[f"{name}_us"] = round(float(np.median(times)), 1)
    result["fp8_speed_vs_bf16"] = round(result["bf16_us"] / result["fp8_us"], 3)
    return result


def spawn_side_by_side(runs: dict[str, tuple[dict, str | None]]) -> dict[str, dict]:
    """Each ``name: (spec, devices)`` as its own engine process at once (``devices``: its CUDA_VISIBLE_DEVICES,
    None = this process's); their results by name."""
    procs, spec_files = {}, {}
    for name, (spec, devices) in runs.items():
        env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": devices} if devices is not None else {}))
        spec_files[name] = Path(tempfile.mkstemp(suffix=".json")[1])  # a spec outgrows one argument (128 KiB)
        spec_files[name].write_text(json.dumps(spec))
        procs[name] = subprocess.Popen([sys.executable, __file__, "--engine", str(spec_files[name])], env=env,
                                       text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate()
        spec_files[name].unlink()
        result = parse(out)
        if proc.returncode or result is None:
            sys.stderr.write(err[-6000:])
            raise SystemExit(f"engine {name} ({runs[name][0]['engine']}) failed (exit {proc.returncode})")
        results[name] = result
    return results


def run_in_waves(specs: dict[str, dict], devices: list[str | None]) -> dict[str, dict]:
    """``specs`` as engines, one per device at a time (None: this process's devices); their results by name."""
    names, results = list(specs), {}
    for start in range(0, len(names), len(devices)):
        results.update(spawn_side_by_side({name: (specs[name], device) for name, device
                                           in zip(names[start:start + len(devices)], devices)}))
    return results


def tp_waves(devices: list[str], attentions: tuple[str, ...] = ("monkeybarrel", "vllm")) -> list[dict[str, str | None]]:
    """Which TP-parity engines run together on ``devices``: with 4 or more and two backends, both TP 1 engines side
    by side, then both TP 2 engines (fed the TP 1 engines' tokens); else one at a time (None: every visible device,
    or the CPU)."""
    names = [f"{attention}_tp{tp}" for tp in (1, 2) for attention in attentions]
    if len(devices) < 4 or len(attentions) != 2:
        return [{name: None} for name in names]
    pairs = [",".join(devices[0:2]), ",".join(devices[2:4])]
    return [{names[0]: devices[0], names[1]: devices[2]}, {names[2]: pairs[0], names[3]: pairs[1]}]


def cpu_binding(ranks: int, cores: int | None = None) -> str:
    """vLLM's CPU build's ``VLLM_CPU_OMP_THREADS_BIND`` for ``ranks`` tensor-parallel ranks on one NUMA node: the
    cores split into ``ranks`` ranges (``0-3|4-7``; a single core is named alone)."""
    cores = cores or os.cpu_count() or 1
    if cores < ranks:
        raise SystemExit(f"{ranks} tensor-parallel ranks need {ranks} cores; this machine has {cores}")
    share = cores // ranks
    return "|".join(str(i * share) if share == 1 else f"{i * share}-{(i + 1) * share - 1}" for i in range(ranks))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("fp8", "tp"), default="fp8")
    ap.add_argument("--gguf", default="smollm2-135m-instruct", help="the embedded model (a .gguf path on the GPU machine)")
    ap.add_argument("--gsm8k", type=Path, default=ROOT.parent / "shared/data/gsm8k/test.jsonl")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--attention", default="monkeybarrel,vllm",
                    help="--mode tp: the attention backends to run, comma-separated (vllm alone runs on vLLM's CPU build)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine:
        emit(generate(json.loads(Path(args.engine).read_text())))
        return
    from monkeybarrel.core.models import resolve_model

    model = Path(resolve_model(args.gguf))
    base = {"prompts": prompts(args.gsm8k, args.prompts), "max_tokens": args.max_tokens}
    attentions = tuple(a for a in ("monkeybarrel", "vllm") if a in args.attention.split(","))
    if not attentions or set(args.attention.split(",")) - set(attentions):
        ap.error(f"--attention {args.attention!r}: expected monkeybarrel, vllm or both, comma-separated")
    if args.mode == "fp8":
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()] or [None]
        specs = {f"{attention}_{kv}": {**base, "model": str(model), "attention": attention, "engine": engine}
                 for attention in ("monkeybarrel", "vllm") for kv, engine in FP8_ENGINES.items()}
        runs = run_in_waves({name: {**spec, "forced": "self"} for name, spec in specs.items()
                             if name.endswith("_bf16")}, visible)
        # the FP8 engines, fed their own backend's bf16 tokens
        fp8 = {name: {**spec, "forced": runs[f"{spec['attention']}_bf16"]["forced_reference"]}
               for name, spec in specs.items() if not name.endswith("_bf16")}
        runs.update(run_in_waves(fp8, visible))
        tokens = {k: v["tokens"] for k, v in runs.items()}
        forced = {k: compare_forced(v["forced_reference"], v["forced_choices"]) for k, v in runs.items()
                  if "forced_choices" in v}
        report = {"mode": "fp8", **compare(tokens["monkeybarrel_bf16"], tokens["monkeybarrel_fp8"]),
                  "ours_fp8_calibrated": compare(tokens["monkeybarrel_bf16"], tokens["monkeybarrel_fp8_calibrated"]),
                  # the control: vLLM's own attention across the same KV change
                  "vllm_attention_fp8": compare(tokens["vllm_bf16"], tokens["vllm_fp8"]),
                  "vllm_attention_fp8_calibrated": compare(tokens["vllm_bf16"], tokens["vllm_fp8_calibrated"]),
                  "ours_vs_vllm_bf16": compare(tokens["monkeybarrel_bf16"], tokens["vllm_bf16"]),
                  "teacher_forced": forced,
                  "kernel": kernel_speed()}
    else:
        wide = str(widen_heads(model, Path("/tmp/smollm2_wide"), 12, 4))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        runs = {}
        for wave in tp_waves([d for d in visible.split(",") if d.strip()], attentions):
            specs = {}
            for name, devices in wave.items():
                attention, tp = name.rsplit("_tp", 1)
                # TP 1 fed its own tokens (the floor), TP 2 fed its backend's TP 1 tokens
                forced = "self" if tp == "1" else runs[f"{attention}_tp1"]["forced_reference"]
                specs[name] = ({**base, "model": wide, "attention": attention, "forced": forced,
                                "engine": {"tensor_parallel_size": int(tp)} if tp != "1" else {}}, devices)
            runs.update(spawn_side_by_side(specs))
        tokens = {k: v["tokens"] for k, v in runs.items()}
        report = {"mode": "tp", "attention": list(attentions)}
        if "monkeybarrel" in attentions:
            report.update(compare(tokens["monkeybarrel_tp1"], tokens["monkeybarrel_tp2"]))
        if "vllm" in attentions:  # the control: vLLM's own attention across the same TP change
            report["vllm_attention_tp1_vs_tp2"] = compare(tokens["vllm_tp1"], tokens["vllm_tp2"])
        if len(attentions) == 2:  # ours against vLLM's at each TP
            report.update({f"ours_vs_vllm_tp{tp}": compare(tokens[f"monkeybarrel_tp{tp}"], tokens[f"vllm_tp{tp}"])
                           for tp in (1, 2)})
        report["teacher_forced"] = {k: compare_forced(v["forced_reference"], v["forced_choices"])
                                    for k, v in runs.items()}
    report["runs"] = {k: {"engine_start_s": v["engine_start_s"], "attention_stats": v["attention_stats"]}
                      for k, v in runs.items()}
    report.update(prompts=args.prompts, max_tokens=args.max_tokens, model=args.gguf)
    print(json.dumps({k: v for k, v in report.items() if k != "first_divergence"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
