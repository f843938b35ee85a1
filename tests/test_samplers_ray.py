"""The ``ray`` backend: 2 local Ray workers running the embedded model; a worker killed mid-run.

One local Ray instance (4 logical CPUs and 2 logical GPUs, so workers are placed one per "GPU" as on a
GPU node; the embedded model itself runs on the CPU) is shared by the tests of this module.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from conftest import tiny_config  # noqa: E402
from monkeybarrel.core.config import ConfigError, ExperimentConfig, GeneratorSpec  # noqa: E402
from monkeybarrel.core.plugins import build_plugin  # noqa: E402
from monkeybarrel.core.records import Problem  # noqa: E402
from monkeybarrel.orchestrator.runner import run_experiment  # noqa: E402
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore  # noqa: E402
from monkeybarrel.samplers.base import SAMPLERS, SampleRequest  # noqa: E402
from monkeybarrel.samplers.ray_pool import RaySampler, share_gpus, start_figures  # noqa: E402
from monkeybarrel.samplers.vllm_engine import fits_one_gpu, shared_gpu_memory  # noqa: E402

PROBLEMS = [Problem(f"p{i}", "arithmetic", prompt=f"What is {i} + {i + 4}?") for i in range(8)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 2**20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pool(local_ray):
    sampler = RaySampler(GeneratorSpec(id="pool", max_tokens=10, temperature=0.8), backend_options={"num_threads": 1},
                         num_gpus_per_worker=1, requests_per_task=1)
    sampler.load()
    yield sampler
    sampler.close()


def _keys(batches) -> Counter:
    return Counter((c.problem_id, c.sample_index) for batch in batches for c in batch)


def test_one_worker_per_gpu_and_every_sample_exactly_once(pool: RaySampler):
    info = pool.worker_info()
    assert len(info) == 2 and len({w["pid"] for w in info}) == 2
    assert sorted(tuple(w["gpu_ids"]) for w in info) == [(0,), (1,)]
    # where the start went: each worker's own build + model load, inside the time it took to come up
    assert all(0 < w["init_s"] <= w["ready_s"] for w in info)
    t = pool.timings
    assert t["first_worker_ready_s"] <= t["workers_ready_s"] and 0 < t["worker_init_s"] <= t["workers_ready_s"]
    # Ray's part (placing the actor, starting its process) and the sampler's part add up to at most the whole
    assert 0 <= t["worker_actor_up_s"] and t["worker_actor_up_s"] + t["worker_init_s"] <= t["workers_ready_s"] + 0.5
    batches = list(pool.sample([SampleRequest(p, (0, 1, 2), i) for i, p in enumerate(PROBLEMS[:4])]))
    keys = _keys(batches)
    assert set(keys) == {(p.problem_id, j) for p in PROBLEMS[:4] for j in range(3)} and max(keys.values()) == 1
    assert all(c.text and c.finish_reason in ("stop", "length") and c.generator_id == "pool"
               for batch in batches for c in batch)
    assert pool.gpu_seconds > 0  # 1 GPU per worker x the workers' lifetime


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(pool: RaySampler):
    requests = [SampleRequest(p, (0, 1), 10 + i) for i, p in enumerate(PROBLEMS)]
    batches, killed = [], None
    for batch in pool.sample(requests):
        batches.append(batch)
        if killed is None:  # both workers hold queued tasks now: kill one's process
            killed = pool.worker_info()[0]["pid"]
            os.kill(killed, signal.SIGKILL)
    keys = _keys(batches)
    assert set(keys) == {(p.problem_id, j) for p in PROBLEMS for j in (0, 1)}
    assert max(keys.values()) == 1
    assert all(c.finish_reason != "error" for batch in batches for c in batch)
    assert pool.stats["worker_deaths"] == 1 and pool.stats["requeued_samples"] >= 2
    assert killed not in {w["pid"] for w in pool.worker_info()}  # replaced by a new worker


@pytest.mark.slow
def test_an_experiment_on_ray_streams_into_the_store_and_resumes(local_ray, tmp_path: Path):
    config = tiny_config(problems=3, samples=2, max_tokens=8)
    config["generators"][0].update(backend="ray", options={
        "backend_options": {"num_threads": 1}, "num_workers": 1, "requests_per_task": 1})
    config["verifiers"] = [{"name": "freq", "type": "answer_frequency"}]
    config["store"] = {"chunk_problems": 1}  # a chunk as each problem comes back
    out = tmp_path / "run"
    run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
    chunks = list((out / "candidates").glob("*.parquet"))
    assert len(chunks) == 3  # one chunk per problem, as the workers yielded them
    config["generators"][0]["num_samples"] = 3  # resume: only sample index 2 is missing
    experiment = run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
    table = ExperimentStore(out).candidates()
    keys = Counter(zip(table.column("problem_id").to_pylist(), table.column("sample_index").to_pylist()))
    assert len(keys) == 9 and max(keys.values()) == 1
    runs = experiment.manifest()["runs"]
    assert runs[-1]["sampled"]["smol"]["samples"] == 3 and runs[-1]["sampled"]["smol"]["gpu_s"] == 0.0
    assert "majority" in experiment.metrics()["selection"]
    # the report says where the workers' start went (Ray, the actor, the sampler's build inside it)
    sampled = runs[-1]["sampled"]["smol"]
    start = next(line for line in (out / "report.md").read_text().splitlines() if line.startswith("- smol: "))
    assert start.startswith(f"- smol: {sampled['workers_ready_s']:.1f} (Ray {sampled['ray_init_s']:.1f}, actor up ")


def test_engines_per_gpu_share_out_the_gpu_and_its_memory():
    options = {"max_model_len": 2048}
    assert share_gpus("vllm", options, 2, None) == 0.5 and options["gpu_memory_utilization"] == 0.43
    options = {"gpu_memory_utilization": 0.3}
    assert share_gpus("vllm", options, 3, None) == pytest.approx(1 / 3) and options["gpu_memory_utilization"] == 0.3
    sampler = RaySampler(GeneratorSpec(), backend="vllm", engines_per_gpu=4)
    # four engines: each leaves the others room for what it holds outside its share (the fourth of 0.225 each
    # found 17.1 of the 17.8 GiB it asked for free on an H100, and vLLM refused to start it)
    assert sampler.num_gpus_per_worker == 0.25 and sampler.inner_spec.options["gpu_memory_utilization"] == 0.195
    assert sampler.actor_options()["num_gpus"] == 0.25
    for backend, options, count, gpus, message in [
            ("embedded", {}, 2, None, "backend 'embedded'"),
            ("vllm", {"tensor_parallel_size": 2}, 2, None, "vllm workers of 2 GPUs"),
            ("vllm", {}, 2, 0.5, "not both"),
            ("vllm", {"gpu_memory_utilization": 0.6}, 2, None, r"gpu_memory_utilization 0.6 x engines_per_gpu 2"),
            ("vllm", {"gpu_memory_utilization": 0.25}, 4, None, r"at most 0\.22\b"),
            ("vllm", {}, 0, None, "integer >= 1"), ("vllm", {}, 1.5, None, "integer >= 1")]:
        with pytest.raises(ValueError, match=message):
            share_gpus(backend, dict(options), count, gpus)
    for count in range(1, 9):  # the largest share an error suggests does start
        assert fits_one_gpu(shared_gpu_memory(count, 1.0), count) and fits_one_gpu(shared_gpu_memory(count), count)
    with pytest.raises(ConfigError, match=r"generators\[0\].*engines_per_gpu"):
        build_plugin(SAMPLERS, "ray", "generators[0]", spec=GeneratorSpec(), backend="embedded", engines_per_gpu=2)


def test_bad_options_name_the_key():
    with pytest.raises(ConfigError, match=r"generators\[0\].*another sampler backend"):
        build_plugin(SAMPLERS, "ray", "generators[0]", spec=GeneratorSpec(), backend="ray")
    with pytest.raises(ConfigError, match="requests_per_task must be >= 1"):
        build_plugin(SAMPLERS, "ray", "generators[0]", spec=GeneratorSpec(), requests_per_task=0)


def test_work_is_sized_by_tokens_and_split_fairly_between_workers():
    from monkeybarrel.samplers.ray_pool import _Todo, next_task

    spec = GeneratorSpec(id="g", max_tokens=100, num_samples=8)
    sampler = RaySampler(spec, backend="vllm", backend_options={"engine_kwargs": {"max_num_seqs": 64}})
    assert sampler.num_gpus_per_worker == 1.0  # vLLM workers take a GPU each by default
    assert sampler.worker_tokens() == 2 * 64 * (100 + 256)
    requests = [SampleRequest(p, tuple(range(8)), i) for i, p in enumerate(PROBLEMS)]
    cost = sampler.request_tokens(requests[0])
    assert cost == pytest.approx(len(PROBLEMS[0].prompt) / 4 + 8 * 100)
    pairs = [(r, sampler.request_tokens(r)) for r in requests]
    # room for everything: the whole job in one task
    todo = _Todo(pairs)
    assert len(next_task(todo, sampler.worker_tokens(), None)) == len(PROBLEMS) and not todo
    # room for half of it: the task stops there
    todo = _Todo(pairs)
    first = next_task(todo, sum(t for _, t in pairs) / 2, None)
    assert len(first) == len(PROBLEMS) // 2 and len(todo) == len(PROBLEMS) - len(first)
    assert todo.tokens == pytest.approx(sum(t for _, t in pairs[len(first):]))  # the running total follows
    # no room left: one request at a time; a cap on problems holds
    assert len(next_task(_Todo(pairs), 0.0, None)) == 1
    assert len(next_task(_Todo(pairs), 10**9, 3)) == 3
    embedded = RaySampler(spec, backend_options={"max_batch": 16})
    assert embedded.num_gpus_per_worker == 0.0 and embedded.worker_tokens() == 2 * 16 * (100 + 256)


@pytest.mark.parametrize("workers,starting", [(1, 0), (2, 0), (4, 0), (3, 1), (1, 3)])
def test_every_worker_gets_its_share_of_the_job_and_late_workers_find_theirs(workers: int, starting: int):
    """The measured #32 job shape (128 problems x 256 samples x 64 tokens): N workers each hold 1/N of it (one
    worker: its engine's room), whether they are up or still starting (one up first does not take a late one's).
    Before, a worker's second task took a second share: 2 workers split 80/48 problems, 4 workers 64/64/0/0."""
    from monkeybarrel.samplers.ray_pool import _Handle, _Todo

    spec = GeneratorSpec(id="g", max_tokens=64, num_samples=256)
    sampler = RaySampler(spec, backend="vllm", backend_options={"engine_kwargs": {"max_num_seqs": 2048}})
    problems = [Problem(f"q{i}", "arithmetic", prompt="x" * (400 + 40 * (i % 7))) for i in range(128)]
    todo = _Todo((r, sampler.request_tokens(r)) for r in (SampleRequest(p, tuple(range(256)), i)
                                                          for i, p in enumerate(problems)))
    total = todo.tokens
    sampler.workers = [_Handle(None, 0.0) for _ in range(workers)] + [
        _Handle(None, 0.0, ready=object()) for _ in range(starting)]
    held = Counter()
    for handle, batch in sampler._hand_out(todo):
        held[id(handle)] += sum(t for _, t in batch)
    assert len(held) == workers  # only live workers get tasks
    share = min(total / (workers + starting), sampler.worker_tokens())  # one worker: its engine's room
    problem = max(sampler.request_tokens(r) for r, _ in todo) if todo else 16_600
    assert all(abs(tokens - share) < problem for tokens in held.values())  # within one problem's tokens
    assert todo.tokens == pytest.approx(total - sum(held.values()))
    # a worker that comes up late finds its share, and the others take no more than they hold
    for handle in sampler.workers:
        handle.ready = None
    late = [(h, b) for h, b in sampler._hand_out(todo)]
    assert {id(h) for h, _ in late} <= {id(h) for h in sampler.workers[workers:]}
    assert not todo or starting == 0


def test_a_worker_holds_no_more_than_its_engine_room_of_a_large_job():
    from monkeybarrel.samplers.ray_pool import _Handle, _Todo

    spec = GeneratorSpec(id="g", max_tokens=100, num_samples=8)
    sampler = RaySampler(spec, backend="vllm", backend_options={"engine_kwargs": {"max_num_seqs": 16}})
    todo = _Todo((SampleRequest(Problem(f"q{i}", "arithmetic", prompt="y" * 40), tuple(range(8)), i), 810.0)
                 for i in range(1000))
    sampler.workers = [_Handle(None, 0.0) for _ in range(2)]
    tasks = sampler._hand_out(todo)
    room = sampler.worker_tokens()  # 2 x 16 x (100 + 256) = 11,392 tokens: 14 problems of 810, + 1 queued behind
    for handle in sampler.workers:
        assert room < handle.tokens <= room + 810 and handle.busy == 2
    per_worker = room // 810 + 1
    assert sum(len(b) for _, b in tasks) == 2 * per_worker and len(todo) == 1000 - 2 * per_worker
    sampler.workers[0].tokens, sampler.workers[0].busy = 0.0, 0  # its task came back: it is served again, alone
    assert {id(h) for h, _ in sampler._hand_out(todo)} == {id(sampler.workers[0])}


def test_a_rebound_pool_samples_with_the_new_settings(pool: RaySampler):
    spec = pool.spec
    try:
        pool.rebind(spec.model_copy(update={"id": "other", "max_tokens": 3}))
        batches = list(pool.sample([SampleRequest(PROBLEMS[0], (0, 1), 5)]))
        assert {c.generator_id for b in batches for c in b} == {"other"}
        assert all(c.completion_tokens <= 3 for b in batches for c in b)
    finally:
        pool.rebind(spec)


def test_a_model_that_cannot_load_fails_the_run_with_its_own_error(local_ray, tmp_path: Path):
    """No worker can start: the first start error is raised (not "no workers left"), as before sampling began."""
    missing = tmp_path / "no-such-model.gguf"
    sampler = RaySampler(GeneratorSpec(id="bad", model=str(missing), max_tokens=4), backend_options={"num_threads": 1},
                         num_workers=2, num_gpus_per_worker=0)  # the pool's workers hold both "GPUs"
    try:
        with pytest.raises(Exception, match="no-such-model"):
            list(sampler.sample([SampleRequest(PROBLEMS[0], (0,), 0)]))
        assert sampler.stats["start_failures"] == 2 and not sampler.workers
    finally:
        sampler.close()


def test_the_start_split_is_the_last_worker_ups_own():
    """Figures of one worker (the last up), not maxima of different workers that would not add up."""
    fast = {"ready_s": 40.0, "actor_up_s": 9.0, "init_s": 30.0, "import_s": 12.0, "engine_start_s": 17.0,
            "engine_phases": {"cuda_graphs_s": 3.0}}
    slow = {"ready_s": 60.0, "actor_up_s": 4.0, "init_s": 55.0, "import_s": 20.0, "engine_start_s": 34.0,
            "engine_phases": {"cuda_graphs_s": 9.0, "compile_s": 6.5}}
    figures = start_figures([fast, slow])
    assert figures == {"workers_ready_s": 60.0, "first_worker_ready_s": 40.0, "worker_actor_up_s": 4.0,
                       "worker_init_s": 55.0, "worker_import_s": 20.0, "worker_engine_start_s": 34.0,
                       "worker_cuda_graphs_s": 9.0, "worker_compile_s": 6.5}
    # a backend without an engine (or an older worker): only what it reported
    assert start_figures([{"ready_s": 5.0, "init_s": 2.0}]) == {"workers_ready_s": 5.0, "first_worker_ready_s": 5.0,
                                                               "worker_init_s": 2.0}


def test_one_gpu_vllm_workers_keep_the_engine_core_in_the_actor_unless_told_otherwise():
    from monkeybarrel.samplers.ray_pool import ENGINE_IN_ACTOR

    spec = GeneratorSpec(id="g")
    inside = {"env_vars": ENGINE_IN_ACTOR}
    assert RaySampler(spec, backend="vllm").actor_options()["runtime_env"] == inside
    assert RaySampler(spec, backend="vllm").actor_options()["num_gpus"] == 1.0
    for sampler in (RaySampler(spec, backend="vllm", engine_in_actor=False),  # vLLM's own engine-core process
                    RaySampler(spec, backend="vllm", backend_options={"tensor_parallel_size": 2}),  # its GPU workers
                    RaySampler(spec, backend="embedded"),
                    RaySampler(spec, backend="vllm", runtime_env={"env_vars": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}})):
        assert "runtime_env" not in sampler.actor_options()



MERGE_DRIVER = """
import json, os, sys, ray
from monkeybarrel.samplers.ray_pool import ENGINE_IN_ACTOR
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
         runtime_env={"working_dir": sys.argv[1], "env_vars": {"JOB_MARK": "job"}})

@ray.remote(num_cpus=0)
def read():
    import job_module  # only in the job's working_dir
    return {"module": job_module.VALUE, **{k: os.environ.get(k) for k in ("JOB_MARK", *ENGINE_IN_ACTOR)}}

print("RESULT " + json.dumps(ray.get(read.options(runtime_env={"env_vars": ENGINE_IN_ACTOR}).remote())))
ray.shutdown()
"""


def test_a_workers_own_environment_adds_to_the_jobs_working_dir_and_variables(tmp_path: Path):
    """``engine_in_actor`` gives vLLM workers their own ``env_vars``: Ray merges them with the job's runtime
    environment (``ray job submit --working-dir .`` keeps its code and variables), checked on a real Ray."""
    import json
    import subprocess
    import sys

    work = tmp_path / "work"
    work.mkdir()
    (work / "job_module.py").write_text("VALUE = 42\n")
    proc = subprocess.run([sys.executable, "-c", MERGE_DRIVER, str(work)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    assert json.loads(line[7:]) == {"module": 42, "JOB_MARK": "job", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_a_job_done_before_every_worker_is_up_still_records_its_start(pool: RaySampler):
    """One worker fits beside the pool (2 of the 4 CPUs free, 2 a worker): it does the whole job while the
    other waits for CPUs; the start figures cover the worker that ran and count the one that never came up."""
    sampler = RaySampler(GeneratorSpec(id="late", max_tokens=4), backend_options={"num_threads": 1}, num_workers=2,
                         num_gpus_per_worker=0, num_cpus_per_worker=2)
    try:
        batches = list(sampler.sample([SampleRequest(PROBLEMS[0], (0, 1), 0)]))
        assert sorted(c.sample_index for batch in batches for c in batch) == [0, 1]
        t = sampler.timings
        assert t["workers_not_up"] == 1 and 0 < t["first_worker_ready_s"] == t["workers_ready_s"]
    finally:
        sampler.close()
