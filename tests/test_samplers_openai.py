"""The ``openai`` backend against a real OpenAI-compatible server on 127.0.0.1.

The server is ``monkeybarrel.samplers.chat_server.ChatServer`` serving the embedded SmolLM2-135M-Instruct
(real model outputs); it injects 429/500/stalls to exercise retries. ``vllm serve`` is in the slow
suite (tests/test_samplers_vllm.py).
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("httpx")

from conftest import tiny_config  # noqa: E402
from monkeybarrel.core.config import ConfigError, ExperimentConfig, GeneratorSpec  # noqa: E402
from monkeybarrel.core.plugins import build_plugin  # noqa: E402
from monkeybarrel.core.records import Problem  # noqa: E402
from monkeybarrel.orchestrator.runner import run_experiment  # noqa: E402
from monkeybarrel.samplers.base import SAMPLERS, SampleRequest  # noqa: E402
from monkeybarrel.samplers.openai_client import OpenAISampler, split_tokens, sub_seed  # noqa: E402
from monkeybarrel.samplers.chat_server import ChatServer  # noqa: E402

PROBLEMS = [Problem(f"p{i}", "arithmetic", prompt=f"What is {i} + {2 * i + 1}?") for i in range(3)]


@pytest.fixture(scope="module")
def server():
    with ChatServer(sampler_options={"num_threads": 1}) as running:
        yield running


def _sampler(server: ChatServer, **options) -> OpenAISampler:
    spec = GeneratorSpec(id="http", max_tokens=12, temperature=0.8)
    return OpenAISampler(spec, base_url=server.url, backoff_s=0.01, **options)


def _draw(sampler: OpenAISampler, samples: int = 2, problems=PROBLEMS) -> dict[str, list]:
    out = {}
    for candidates in sampler.sample([SampleRequest(p, tuple(range(samples)), 100 + i) for i, p in enumerate(problems)]):
        assert len({c.problem_id for c in candidates}) == 1
        out[candidates[0].problem_id] = candidates
    return out


def test_candidates_carry_real_text_tokens_finish_reasons_and_seeds(server: ChatServer):
    before = server.status_counts[200]
    sampler = _sampler(server)
    got = _draw(sampler, samples=3)
    assert sorted(got) == ["p0", "p1", "p2"]
    for i, candidates in enumerate(got[p.problem_id] for p in PROBLEMS):
        assert [c.sample_index for c in candidates] == [0, 1, 2]
        assert all(c.generator_id == "http" and c.seed == 100 + i and c.error is None for c in candidates)
        assert all(c.text and c.prompt_tokens > 10 and 0 < c.completion_tokens <= 12 for c in candidates)
        assert all(c.finish_reason in ("stop", "length") for c in candidates)
        assert all(c.completion_tokens == 12 for c in candidates if c.finish_reason == "length")
    assert server.status_counts[200] - before == 3  # one request with n=3 per problem
    assert sampler.http_stats == {"requests": 3, "retries": 0}
    again = _draw(_sampler(server), samples=3)  # the server's sampler is seeded: same seed, same texts
    assert {k: [c.text for c in v] for k, v in again.items()} == {k: [c.text for c in v] for k, v in got.items()}


def test_requests_run_concurrently_and_the_server_batches_them(server: ChatServer):
    server.batches.clear()
    _draw(_sampler(server, max_concurrency=3), samples=2)
    assert max(server.batches) >= 2, server.batches  # several requests were in flight at once


def test_429_500_and_a_stalled_connection_are_retried(server: ChatServer):
    # 4 tokens decode well inside the 3 s time-out; the stall outlasts it
    sampler = OpenAISampler(GeneratorSpec(id="http", max_tokens=4), base_url=server.url, backoff_s=0.01,
                            max_concurrency=1, timeout_s=3.0)
    server.inject(429, 500, "stall:4")
    (candidates,) = list(sampler.sample([SampleRequest(PROBLEMS[0], (0, 1), 1)]))
    assert all(c.finish_reason in ("stop", "length") for c in candidates), candidates[0].error
    assert sampler.http_stats == {"requests": 4, "retries": 3}


def test_exhausted_retries_become_error_candidates_and_the_rest_goes_on(server: ChatServer):
    sampler = _sampler(server, max_concurrency=1, max_retries=1)
    server.inject(503, 503)
    got = _draw(sampler, samples=2)
    failed = [p for p, cands in got.items() if all(c.finish_reason == "error" for c in cands)]
    assert len(failed) == 1
    assert "gave up after 2 attempts" in got[failed[0]][0].error and "503" in got[failed[0]][0].error
    assert all(c.text for p, cands in got.items() if p not in failed for c in cands)


def test_client_errors_are_not_retried(server: ChatServer):
    spec = GeneratorSpec(id="http", model="no-such-model", max_tokens=8)
    sampler = OpenAISampler(spec, base_url=server.url, backoff_s=0.01)
    (candidates,) = list(sampler.sample([SampleRequest(PROBLEMS[0], (0, 1), 1)]))
    assert [c.finish_reason for c in candidates] == ["error", "error"]
    assert "HTTP 404" in candidates[0].error and "does not exist" in candidates[0].error
    assert sampler.http_stats["retries"] == 0


def test_a_server_without_n_gets_one_request_per_sample(server: ChatServer):
    server.max_n = 1
    refused = server.status_counts[400]
    try:
        sampler = _sampler(server, max_concurrency=4)
        got = _draw(sampler, samples=3, problems=PROBLEMS[:2])
    finally:
        server.max_n = None
    assert sampler.use_n is False
    refused = server.status_counts[400] - refused
    assert 1 <= refused <= 2  # the n=3 requests sent before the sampler learnt that n is refused
    assert sampler.http_stats["requests"] == refused + 6  # then one request per sample
    seeds = [c.seed for c in got["p0"]]
    assert len(set(seeds)) == 3 and seeds[0] == 100
    assert all(c.text for cands in got.values() for c in cands)


def test_an_unreachable_server_is_a_recorded_failure():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sampler = OpenAISampler(GeneratorSpec(max_tokens=4), base_url=f"http://127.0.0.1:{port}/v1",
                            max_retries=2, backoff_s=0.01)
    (candidates,) = list(sampler.sample([SampleRequest(PROBLEMS[0], (0,), 1)]))
    assert candidates[0].finish_reason == "error" and "ConnectError" in candidates[0].error
    assert sampler.http_stats == {"requests": 3, "retries": 2}


def test_token_split_and_seeds():
    assert split_tokens(60, ["a" * 10, "b" * 30, "c" * 5], [True, True, False], 16) == [16, 16, 28]
    assert split_tokens(10, ["a", "bbb"], [False, False], 16) == [3, 7]
    assert sum(split_tokens(7, ["x", "y", "z"], [True, True, True], 16)) == 7  # inconsistent: split by length
    assert sub_seed(5, 0) == 5 and sub_seed(5, 1) != sub_seed(5, 2)


def test_bad_options_name_the_key():
    with pytest.raises(ConfigError, match=r"generators\[0\].*max_concurrency must be >= 1"):
        build_plugin(SAMPLERS, "openai", "generators[0]", spec=GeneratorSpec(), max_concurrency=0)
    with pytest.raises(ConfigError, match="unknown option.*'concurrency'"):
        build_plugin(SAMPLERS, "openai", "generators[0]", spec=GeneratorSpec(), concurrency=4)


def test_an_experiment_through_the_server_verifies_selects_and_reports(server: ChatServer, tmp_path: Path):
    config = tiny_config(problems=3, samples=3, max_tokens=24)
    config["generators"][0].update(backend="openai", options={"base_url": server.url, "max_concurrency": 3})
    config["verifiers"] = [{"name": "freq", "type": "answer_frequency"}, {"name": "has", "type": "has_answer"}]
    config["selectors"] = [{"name": "majority", "type": "majority"},
                           {"name": "ensemble", "type": "naive_ensemble"}]
    experiment = run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    candidates = experiment.candidates()
    assert candidates.num_rows == 9
    assert set(candidates.column("finish_reason").to_pylist()) <= {"stop", "length"}
    matrix, names, failures = experiment.scores()
    assert names == ("freq", "has") and matrix.shape == (9, 2) and failures is None
    assert not np.isnan(matrix).any()
    metrics = experiment.metrics()
    assert {"majority", "ensemble"} <= set(metrics["selection"])
    costs = experiment.manifest()["costs"]["generators"]["smol"]
    assert costs["candidates"] == 9 and costs["completion_tokens"] == sum(candidates.column("completion_tokens").to_pylist())
    stage_s = experiment.manifest()["runs"][-1]["sampled"]["smol"]["wall_s"]   # 3 requests in flight at once:
    assert sum(candidates.column("wall_time_s").to_pylist()) <= stage_s       # their seconds are counted once
    assert "## Cost" in (tmp_path / "run" / "report.md").read_text()


def test_swebench_chat_llm_talks_to_an_openai_endpoint_through_this_backend(server: ChatServer):
    from monkeybarrel.kits.chat import ChatLLM

    llm = ChatLLM(backend="openai_compat", model="smollm2-135m-instruct", max_tokens=8, base_url=server.url)
    try:
        replies = llm.complete([[{"role": "user", "content": "Say hi."}],
                                [{"role": "user", "content": "What is 2 + 2?"}]], n=2, seed=3)
    finally:
        llm.close()
    assert [len(r) for r in replies] == [2, 2] and all(text for pair in replies for text in pair)
    assert llm.calls == 2 and 0 < llm.completion_tokens <= 4 * 8
    with pytest.raises(ValueError, match="base_url"):
        ChatLLM(backend="openai")
