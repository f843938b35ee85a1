"""The ``ray`` backend on GPUs: vLLM workers, one killed mid-run (marked gpu, slow).

On one GPU two workers share the card; with ``$MONKEYBARREL_RAY_WORKERS`` = N and N GPUs visible, N
workers take one GPU each (the data-parallel layout).

Needs a CUDA GPU, vLLM and Ray, and a model directory in ``$MONKEYBARREL_GPU_MODEL`` (on the GPU machine:
``benchmarks/ray_gpu.py`` writes a Llama shape with SmolLM2's tokenizer; weights are vLLM's dummy ones).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
ray = pytest.importorskip("ray")
pytest.importorskip("vllm")

from monkeybarrel.core.config import GeneratorSpec  # noqa: E402
from monkeybarrel.core.records import Problem  # noqa: E402
from monkeybarrel.samplers.base import SampleRequest  # noqa: E402
from monkeybarrel.samplers.ray_pool import RaySampler  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(not os.environ.get("MONKEYBARREL_GPU_MODEL"), reason="set MONKEYBARREL_GPU_MODEL")]


def test_vllm_workers_survive_a_kill_with_every_sample_once():
    spec = GeneratorSpec(id="gpu", backend="ray", model=os.environ["MONKEYBARREL_GPU_MODEL"], max_tokens=64,
                         temperature=0.8, num_samples=16)
    workers_wanted = int(os.environ.get("MONKEYBARREL_RAY_WORKERS", "2"))
    own_gpu = torch.cuda.device_count() >= workers_wanted  # one GPU each, else two share the one card
    engine = {"engine_kwargs": {"load_format": "dummy"}, "max_model_len": 2048, "enforce_eager": True,
              **({"gpu_memory_utilization": 0.85} if own_gpu else {})}  # sharing: shared_gpu_memory each (engines_per_gpu)
    placement = {"num_gpus_per_worker": 1} if own_gpu else {"engines_per_gpu": 2}
    sampler = RaySampler(spec, backend="vllm", backend_options=engine, num_workers=workers_wanted if own_gpu else 2,
                         tokens_in_flight=16 * 64 * 8, max_worker_restarts=0, **placement)
    problems = [Problem(f"p{i}", "arithmetic", prompt=f"What is {i} + {3 * i}? Think step by step.")
                for i in range(64 * max(workers_wanted // 2, 1))]
    requests = [SampleRequest(p, tuple(range(16)), i) for i, p in enumerate(problems)]
    try:
        sampler.load()
        workers = sampler.worker_info()
        assert len(workers) == sampler.num_workers and len({w["pid"] for w in workers}) == len(workers)
        batches, killed, started = [], None, time.perf_counter()
        for batch in sampler.sample(requests):
            batches.append(batch)
            if killed is None and len(batches) >= 2 * len(workers):  # every worker holds tasks now: kill one
                killed = workers[1]["pid"]
                os.kill(killed, signal.SIGKILL)
        keys = Counter((c.problem_id, c.sample_index) for b in batches for c in b)
        assert set(keys) == {(p.problem_id, j) for p in problems for j in range(16)} and max(keys.values()) == 1
        assert not [c.error for b in batches for c in b if c.finish_reason == "error"]
        assert sampler.stats["worker_deaths"] == 1 and sampler.stats["requeued_samples"] > 0
        tokens = sum(c.completion_tokens for b in batches for c in b)
        print(f"ray kill test ({len(workers)} workers, own GPU {own_gpu}): {len(keys)} candidates, {tokens} tokens in {time.perf_counter() - started:.1f} s, "
              f"requeued {sampler.stats['requeued_samples']}, gpu_s {sampler.gpu_seconds:.1f}, "
              f"timings {sampler.timings}")
    finally:
        sampler.close()
