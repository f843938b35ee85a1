"""The ``ray`` backend on a GPU: two vLLM workers sharing one card, one killed mid-run (marked gpu, slow).

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


def test_two_vllm_workers_on_one_gpu_survive_a_kill_with_every_sample_once():
    spec = GeneratorSpec(id="gpu", backend="ray", model=os.environ["MONKEYBARREL_GPU_MODEL"], max_tokens=64,
                         temperature=0.8, num_samples=16)
    engine = {"engine_kwargs": {"load_format": "dummy"}, "gpu_memory_utilization": 0.4, "max_model_len": 2048,
              "enforce_eager": True}
    sampler = RaySampler(spec, backend="vllm", backend_options=engine, num_workers=2, num_gpus_per_worker=0.5,
                         tokens_in_flight=16 * 64 * 8, max_worker_restarts=0)
    problems = [Problem(f"p{i}", "arithmetic", prompt=f"What is {i} + {3 * i}? Think step by step.") for i in range(64)]
    requests = [SampleRequest(p, tuple(range(16)), i) for i, p in enumerate(problems)]
    try:
        sampler.load()
        workers = sampler.worker_info()
        assert len(workers) == 2 and len({w["pid"] for w in workers}) == 2
        batches, killed, started = [], None, time.perf_counter()
        for batch in sampler.sample(requests):
            batches.append(batch)
            if killed is None and len(batches) >= 4:  # both workers hold tasks now: kill one
                killed = workers[1]["pid"]
                os.kill(killed, signal.SIGKILL)
        keys = Counter((c.problem_id, c.sample_index) for b in batches for c in b)
        assert set(keys) == {(p.problem_id, j) for p in problems for j in range(16)} and max(keys.values()) == 1
        assert not [c.error for b in batches for c in b if c.finish_reason == "error"]
        assert sampler.stats["worker_deaths"] == 1 and sampler.stats["requeued_samples"] > 0
        tokens = sum(c.completion_tokens for b in batches for c in b)
        print(f"ray kill test: {len(keys)} candidates, {tokens} tokens in {time.perf_counter() - started:.1f} s, "
              f"requeued {sampler.stats['requeued_samples']}, gpu_s {sampler.gpu_seconds:.1f}, "
              f"timings {sampler.timings}")
    finally:
        sampler.close()
