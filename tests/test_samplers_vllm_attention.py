"""``attention: auto`` for the vllm backend: the sharing measure, the choice, and the engine arguments.

These run without vLLM (the choice falls back to vLLM's backend, saying why); the GPU choice and its speed
are measured by benchmarks/vllm_attention_auto.py on the GPU machine.
"""

from __future__ import annotations

import gc
import logging
import random
import string

import pytest

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.samplers import vllm_engine
from monkeybarrel.samplers.vllm_engine import (MIN_SHARING, OURS_ENGINE_DEFAULTS, capture_sizes, choose_attention,
                                               collector_paused, engine_arguments, prompt_sharing, start_phases,
                                               use_engine_cache)
from monkeybarrel.samplers.vllm_offline import VLLMSampler


def test_prompt_sharing_counts_samples_and_shared_headers():
    rng = random.Random(0)
    distinct = ["".join(rng.choice(string.ascii_lowercase + " ") for _ in range(rng.randint(80, 400)))
                for _ in range(50)]
    assert prompt_sharing(distinct, [1] * 50) == pytest.approx(1.0, abs=0.02)
    assert prompt_sharing(distinct, [16] * 50) == pytest.approx(16 * prompt_sharing(distinct, [1] * 50))
    header = "Solve step by step. " * 200  # a 4,000-character few-shot header before short questions
    shots = [header + q for q in distinct]
    # every sequence reads the header; the header is stored once (the questions start with distinct letters
    # or not: the trie counts whatever they share once too, so the ratio is at least this)
    assert prompt_sharing(shots, [1] * 50) >= sum(map(len, shots)) / (len(header) + sum(map(len, distinct))) - 1e-9 > 10
    assert prompt_sharing(["same"] * 8, [1] * 8) == pytest.approx(8.0)
    assert prompt_sharing([], []) == 1.0


@pytest.mark.parametrize("sharing, ours", [(1.0, False), (MIN_SHARING - 0.01, False), (MIN_SHARING, True), (64, True)])
def test_auto_takes_ours_only_with_sharing_on_a_gpu_with_a_supported_vllm(monkeypatch, sharing, ours):
    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)
    monkeypatch.setattr(vllm_engine.vllm_plugin, "check_vllm_version", lambda version=None: "0.26.0")
    choice, reason = choose_attention("auto", sharing, prefix_caching=True)
    assert choice == ("monkeybarrel" if ours else "vllm") and reason.startswith("auto:")
    assert choose_attention("auto", 64, prefix_caching=False)[0] == "vllm"
    assert choose_attention("vllm", 64, prefix_caching=True) == ("vllm", "asked for")


def test_auto_falls_back_to_vllm_and_says_why_without_a_supported_vllm_or_on_cpu(monkeypatch):
    def unsupported(version=None):
        raise RuntimeError("attention: monkeybarrel supports vLLM >=0.26.0,<0.27, but vLLM 0.30.1 is installed")

    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: False)
    monkeypatch.setattr(vllm_engine.vllm_plugin, "check_vllm_version", unsupported)
    choice, reason = choose_attention("auto", 64, prefix_caching=True)
    assert choice == "vllm" and "0.30.1" in reason
    with pytest.raises(RuntimeError, match="0.30.1"):  # asked for by name: an error, not a silent fallback
        choose_attention("monkeybarrel", 64, prefix_caching=True)
    monkeypatch.setattr(vllm_engine, "on_cpu", lambda: True)
    assert choose_attention("auto", 64, prefix_caching=True) == ("vllm", "auto: vLLM's CPU backend (our kernel needs a GPU)")


def test_engine_arguments_size_our_engine_for_throughput_without_overriding_the_user():
    base = {"dtype": "bfloat16", "max_model_len": None, "enable_prefix_caching": True}
    assert engine_arguments("vllm", base) == {"dtype": "bfloat16", "enable_prefix_caching": True}  # vLLM's defaults
    ours = engine_arguments("monkeybarrel", base)
    assert ours["attention_backend"] == "CUSTOM"
    assert ours["max_num_seqs"] == OURS_ENGINE_DEFAULTS["max_num_seqs"] == 2048
    assert ours["compilation_config"] == {"cudagraph_capture_sizes": capture_sizes(2048)}
    capped = engine_arguments("monkeybarrel", {**base, "max_num_seqs": 256})
    assert capped["max_num_seqs"] == 256 and capped["compilation_config"]["cudagraph_capture_sizes"][-1] == 256
    # a job of 64 problems x 8 samples never runs more than 512 sequences: no graph beyond that
    job = engine_arguments("monkeybarrel", base, job_sequences=512)
    assert job["max_num_seqs"] == 2048 and job["compilation_config"]["cudagraph_capture_sizes"][-1] == 512
    user = engine_arguments("monkeybarrel", {**base, "compilation_config": {"max_cudagraph_capture_size": 64,
                                                                              "cudagraph_mode": "FULL"}})
    assert user["compilation_config"] == {"max_cudagraph_capture_size": 64, "cudagraph_mode": "FULL"}
    assert engine_arguments("monkeybarrel", {**base, "compilation_config": 3})["compilation_config"] == 3


@pytest.mark.parametrize("attention", ["monkeybarrel", "vllm"])
def test_an_engine_without_torch_compile_runs_eagerly_with_full_decode_graphs(attention):
    base = {"dtype": "bfloat16", "enable_prefix_caching": True}
    eager = engine_arguments(attention, base, job_sequences=512, torch_compile=False)["compilation_config"]
    assert eager["mode"] == 0 and eager["cudagraph_mode"] == "FULL_DECODE_ONLY"
    if attention == "monkeybarrel":  # still only the job's graph sizes
        assert eager["cudagraph_capture_sizes"] == capture_sizes(512)
    assert "mode" not in engine_arguments(attention, base).get("compilation_config", {})  # vLLM's default: compile
    # the user's own keys win; an optimisation level given as an int is kept as given
    user = engine_arguments(attention, {**base, "compilation_config": {"cudagraph_mode": "NONE"}}, torch_compile=False)
    assert user["compilation_config"]["cudagraph_mode"] == "NONE" and user["compilation_config"]["mode"] == 0
    assert engine_arguments(attention, {**base, "compilation_config": 0}, torch_compile=False)["compilation_config"] == 0


@pytest.mark.parametrize("largest", [1, 2, 3, 7, 64, 100, 512, 513, 1000, 1024, 2048, 4096])
def test_capture_sizes_cover_every_batch_up_to_the_largest_with_little_padding(largest):
    sizes = capture_sizes(largest)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] == largest
    for rows in range(1, largest + 1):  # each batch pads to the next graph: < 2x up to 64, then < 64 / < 128 rows
        graph = next(s for s in sizes if s >= rows)
        assert graph - rows < (rows if rows <= 64 else 64 if rows <= 512 else 128)
    assert len(capture_sizes(2048)) == 26
    with pytest.raises(ValueError):
        capture_sizes(0)


def test_engine_cache_points_every_start_up_cache_into_one_directory(tmp_path, monkeypatch):
    for var in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "VLLM_ENABLE_STARTUP_PLAN",
                "MONKEYBARREL_ENGINE_CACHE"):
        monkeypatch.delenv(var, raising=False)
    assert use_engine_cache(None) is None and "VLLM_CACHE_ROOT" not in __import__("os").environ
    monkeypatch.setenv("MONKEYBARREL_ENGINE_CACHE", str(tmp_path / "shared"))
    root = use_engine_cache(None)
    import os
    assert root == tmp_path / "shared"
    assert {os.environ[v] for v in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")} == {
        str(root / "vllm"), str(root / "inductor"), str(root / "triton")}
    assert all((root / d).is_dir() for d in ("vllm", "inductor", "triton"))
    assert os.environ["VLLM_ENABLE_STARTUP_PLAN"] == "1"
    assert use_engine_cache(tmp_path / "option") == tmp_path / "option"  # the option wins over the variable


def test_the_collector_is_paused_for_the_block_and_left_as_it_was():
    assert gc.isenabled()
    with pytest.raises(ImportError):
        with collector_paused():
            assert not gc.isenabled()
            import monkeybarrel_no_such_module  # noqa: F401  (an import that fails still turns it back on)
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # off before: stays off
    finally:
        gc.enable()


def test_the_sampler_defaults_to_auto_and_rejects_unknown_choices():
    assert VLLMSampler(GeneratorSpec(backend="vllm")).attention == "auto"
    with pytest.raises(ValueError, match="auto, monkeybarrel, vllm"):
        VLLMSampler(GeneratorSpec(backend="vllm"), attention="flash")
    with pytest.raises(ValueError, match="prefix caching|enable_prefix_caching"):
        VLLMSampler(GeneratorSpec(backend="vllm"), attention="monkeybarrel", enable_prefix_caching=False)


def test_start_phases_read_the_seconds_vllm_logs_while_an_engine_starts():
    """vLLM 0.26's own start-up messages (format strings and arguments as it logs them), from any vllm logger,
    whatever handlers vLLM configures meanwhile; other loggers and other messages are not read."""
    runner, compile_log, other = (logging.getLogger(n) for n in ("vllm.v1.worker.gpu.model_runner",
                                                                    "vllm.compilation.backends", "myapp"))
    runner.setLevel(logging.INFO), compile_log.setLevel(logging.INFO), other.setLevel(logging.INFO)
    before = logging.getLogRecordFactory()
    with start_phases() as phases:
        runner.info("Model loading took %s GiB and %.6f seconds", "14.96", 2.75)
        compile_log.info("Directly load the compiled graph(s) for compile range %s from the cache, took %.3f s",
                         "(1, 16384)", 1.5)
        compile_log.info("Directly load the compiled graph(s) for compile range %s from the cache, took %.3f s",
                         "(16385, 32768)", 0.5)
        runner.info("Graph capturing finished in %.0f secs, took %.2f GiB", 11.0, 0.84)
        logging.getLogger("vllm.v1.engine.core").warning("init engine (profile, create kv cache, warmup model) "
                                                         "took %.2f s", 19.25)
        other.info("Graph capturing finished in %.0f secs, took %.2f GiB", 99.0, 1.0)  # not vLLM's
        runner.info("Graph capturing finished in %s", "a while")  # not a number: ignored
    runner.info("Graph capturing finished in %.0f secs, took %.2f GiB", 50.0, 0.1)  # after the block
    assert phases == {"weights_s": 2.75, "compiled_graphs_from_cache_s": 2.0, "cuda_graphs_s": 11.0,
                      "kv_cache_and_warmup_s": 19.25}
    assert logging.getLogRecordFactory() is before


def test_a_factory_installed_over_ours_does_not_count_a_later_start_twice():
    """vLLM installs its own log-record factory over the current one while an engine starts, so ours stays in the
    chain after the block; the next engine's start must still read each message once."""
    log = logging.getLogger("vllm.v1.worker.gpu.model_runner")
    log.setLevel(logging.INFO)
    before = logging.getLogRecordFactory()
    try:
        with start_phases() as first:
            inner = logging.getLogRecordFactory()
            logging.setLogRecordFactory(lambda *a, **k: inner(*a, **k))  # another library wraps ours
            log.info("Graph capturing finished in %.0f secs, took %.2f GiB", 2.0, 0.5)
        with start_phases() as second:
            log.info("Graph capturing finished in %.0f secs, took %.2f GiB", 5.0, 0.5)
        assert first == {"cuda_graphs_s": 2.0} and second == {"cuda_graphs_s": 5.0}
    finally:
        logging.setLogRecordFactory(before)


def test_engines_starting_side_by_side_keep_their_own_start_phases():
    import threading

    log = logging.getLogger("vllm.v1.worker.gpu.model_runner")
    log.setLevel(logging.INFO)
    before, results, barrier = logging.getLogRecordFactory(), {}, threading.Barrier(2)

    def start(seconds: float) -> None:
        with start_phases() as phases:
            barrier.wait()  # both collect at once
            log.info("Graph capturing finished in %.0f secs, took %.2f GiB", seconds, 0.5)
            barrier.wait()
        results[seconds] = phases

    threads = [threading.Thread(target=start, args=(s,)) for s in (3.0, 7.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {3.0: {"cuda_graphs_s": 3.0}, 7.0: {"cuda_graphs_s": 7.0}}
    assert logging.getLogRecordFactory() is before
