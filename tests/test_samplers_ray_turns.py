"""Workers sharing a GPU take turns to start (:func:`~monkeybarrel.samplers.gpu_sharing.gpu_turn`), on a real local
Ray with two (CPU-backed) GPU resources of its own: the module-wide pool of tests/test_samplers_ray.py holds its GPUs."""

from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from monkeybarrel.samplers.gpu_sharing import gpu_turn  # noqa: E402


@pytest.fixture(scope="module")
def two_gpus():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    yield
    ray.shutdown()


def test_workers_sharing_a_gpu_take_turns_to_start(two_gpus):
    """Ray's own GPU assignment: actors of half a GPU land two to a GPU id; with the turn, the two on one GPU never
    start at once (vLLM sizes its KV from the memory in use), those on different GPUs do not wait for each other."""
    @ray.remote(num_gpus=0.5, num_cpus=0)
    def start(alone: bool) -> tuple[tuple[int, ...], float, float]:
        with gpu_turn(alone):
            began = time.time()
            time.sleep(1.0)
            return tuple(ray.get_gpu_ids()), began, time.time()

    for alone in (True, False):
        spans = ray.get([start.remote(alone) for _ in range(4)])
        by_gpu: dict = {}
        for gpus, began, ended in spans:
            by_gpu.setdefault(gpus, []).append((began, ended))
        assert sorted(len(v) for v in by_gpu.values()) == [2, 2]
        overlaps = [min(a[1], b[1]) - max(a[0], b[0]) for a, b in by_gpu.values()]
        if alone:
            assert all(o <= 0.05 for o in overlaps), overlaps
        else:
            assert all(o > 0.5 for o in overlaps), overlaps


def test_a_pool_of_half_gpu_workers_starts_them_in_turn_and_samples_everything_once(two_gpus):
    from collections import Counter

    from monkeybarrel.core.config import GeneratorSpec
    from monkeybarrel.core.records import Problem
    from monkeybarrel.samplers.base import SampleRequest
    from monkeybarrel.samplers.ray_pool import RaySampler

    sampler = RaySampler(GeneratorSpec(id="half", max_tokens=6, temperature=0.8), backend_options={"num_threads": 1},
                         num_gpus_per_worker=0.5, num_cpus_per_worker=0.5)
    try:
        info = sampler.worker_info()
        assert len(info) == 4 and sorted(len(w["gpu_ids"]) for w in info) == [1, 1, 1, 1]
        by_gpu: dict = {}
        for w in info:
            by_gpu.setdefault(tuple(w["gpu_ids"]), []).append(w)
        assert sorted(len(v) for v in by_gpu.values()) == [2, 2]
        for pair in by_gpu.values():  # the second of a GPU's workers waited for the first one's start (its turn)
            held = min(w["init_s"] - w["turn_wait_s"] - w["before_turn_s"] for w in pair)
            assert max(w["turn_wait_s"] for w in pair) >= 0.5 * held
        assert sampler.timings["worker_turn_wait_s"] >= 0
        problems = [Problem(f"q{i}", "arithmetic", prompt=f"What is {i} + 2?") for i in range(6)]
        keys = Counter((c.problem_id, c.sample_index) for batch in sampler.sample(
            [SampleRequest(p, (0, 1), i) for i, p in enumerate(problems)]) for c in batch)
        assert set(keys) == {(p.problem_id, j) for p in problems for j in range(2)} and max(keys.values()) == 1
    finally:
        sampler.close()


@pytest.mark.slow
def test_two_vllm_engines_share_a_gpu_through_the_ray_backend(two_gpus):
    """The product's path to several engines per GPU, with real vLLM (the CPU build) in each worker: the pool
    shares out the GPU and its memory, the two workers import vLLM at once, the first sizes its KV cache alone and
    publishes the size as soon as it has it, the second starts with that size (no sizing of its own) before the
    first's start is over, and every candidate comes back once.

    The CPU build sizes a cache it is not given from the memory the process already uses (``gpu_memory_utilization``
    of the machine's memory less its resident set): two engines sizing their own would differ by some bytes, so the
    second's size equal to the byte to the first's shows it took the first's. What only a GPU shows: vLLM's memory
    profiling skipped and the time that saves (docs/gpu.md)."""
    pytest.importorskip("vllm")
    from collections import Counter

    import psutil

    from monkeybarrel.core.config import GeneratorSpec
    from monkeybarrel.core.records import Problem
    from monkeybarrel.samplers.base import SampleRequest
    from monkeybarrel.samplers.ray_pool import RaySampler

    # each engine may take ~4 GiB of the machine (its process's ~2 GiB + the KV cache), at most the pool's limit
    memory = min(0.45, round(4 * 2**30 / psutil.virtual_memory().total, 3))
    sampler = RaySampler(GeneratorSpec(id="shared", max_tokens=8, temperature=0.8), backend="vllm",
                         backend_options={"dtype": "float32", "max_model_len": 1024, "gpu_memory_utilization": memory},
                         num_workers=2, engines_per_gpu=2, num_cpus_per_worker=1)
    try:
        info = sampler.worker_info()
        assert len(info) == 2 and all(len(w["gpu_ids"]) == 1 and w["engine_start_s"] > 0 for w in info)
        assert info[0]["gpu_ids"] == info[1]["gpu_ids"]
        first, second = sorted(info, key=lambda w: w["kv_cache_shared_bytes"] is not None)
        # the first measured its KV cache alone and published the size while its engine was still starting
        assert first["kv_cache_shared_bytes"] is None and first["kv_cache_bytes"] > 0
        published_at = first["turn_at"] + first["kv_cache_published_s"]
        assert published_at < first["up_at"]
        # the second started with that size, to the byte, and got the same cache
        assert second["kv_cache_shared_bytes"] == first["kv_cache_bytes"] == second["kv_cache_bytes"]
        assert second["kv_cache_blocks"] == first["kv_cache_blocks"] > 0
        assert second["kv_cache_published_s"] is None
        # it waited for the size, not for the first's whole start: its own began when the size came (vLLM's import
        # side by side: the second was waiting by then)
        if second["turn_wait_s"] > 0.05:
            assert published_at - 0.05 <= second["turn_at"] < first["up_at"]
        assert min(w["import_s"] for w in info) > 1.0  # vLLM's import, counted though done before the turn
        assert sampler.timings["kv_shared_workers"] == 1
        problems = [Problem(f"q{i}", "arithmetic", prompt=f"What is {i} + 2?") for i in range(4)]
        candidates = [c for batch in sampler.sample([SampleRequest(p, (0, 1), i) for i, p in enumerate(problems)])
                      for c in batch]
        keys = Counter((c.problem_id, c.sample_index) for c in candidates)
        assert set(keys) == {(p.problem_id, j) for p in problems for j in range(2)} and max(keys.values()) == 1
        assert all(c.error is None and c.text for c in candidates)
        assert "worker_turn_wait_s" in sampler.timings
    finally:
        sampler.close()
