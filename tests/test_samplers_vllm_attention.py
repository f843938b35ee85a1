"""``attention: auto`` for the vllm backend: the sharing measure, the choice, and the engine arguments.

These run without vLLM (the choice falls back to vLLM's backend, saying why); the GPU choice and its speed
are measured by benchmarks/vllm_attention_auto.py on the GPU machine.
"""

from __future__ import annotations

import random
import string

import pytest

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.samplers import vllm_offline
from monkeybarrel.samplers.vllm_offline import (MIN_SHARING, VLLMSampler, choose_attention, engine_arguments,
                                                prompt_sharing)


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
    monkeypatch.setattr(vllm_offline, "_on_cpu", lambda: False)
    monkeypatch.setattr(vllm_offline.vllm_plugin, "check_vllm_version", lambda version=None: "0.26.0")
    choice, reason = choose_attention("auto", sharing, prefix_caching=True)
    assert choice == ("monkeybarrel" if ours else "vllm") and reason.startswith("auto:")
    assert choose_attention("auto", 64, prefix_caching=False)[0] == "vllm"
    assert choose_attention("vllm", 64, prefix_caching=True) == ("vllm", "asked for")


def test_auto_falls_back_to_vllm_and_says_why_without_a_supported_vllm_or_on_cpu(monkeypatch):
    def unsupported(version=None):
        raise RuntimeError("attention: monkeybarrel supports vLLM >=0.26.0,<0.27, but vLLM 0.30.1 is installed")

    monkeypatch.setattr(vllm_offline, "_on_cpu", lambda: False)
    monkeypatch.setattr(vllm_offline.vllm_plugin, "check_vllm_version", unsupported)
    choice, reason = choose_attention("auto", 64, prefix_caching=True)
    assert choice == "vllm" and "0.30.1" in reason
    with pytest.raises(RuntimeError, match="0.30.1"):  # asked for by name: an error, not a silent fallback
        choose_attention("monkeybarrel", 64, prefix_caching=True)
    monkeypatch.setattr(vllm_offline, "_on_cpu", lambda: True)
    assert choose_attention("auto", 64, prefix_caching=True) == ("vllm", "auto: vLLM's CPU backend (our kernel needs a GPU)")


def test_engine_arguments_add_our_graph_sizes_without_overriding_the_user():
    base = {"dtype": "bfloat16", "max_model_len": None, "enable_prefix_caching": True}
    assert engine_arguments("vllm", base) == {"dtype": "bfloat16", "enable_prefix_caching": True}
    ours = engine_arguments("monkeybarrel", base)
    assert ours["attention_backend"] == "CUSTOM"
    assert ours["compilation_config"] == {"max_cudagraph_capture_size": 1024}
    capped = engine_arguments("monkeybarrel", {**base, "max_num_seqs": 256})
    assert capped["compilation_config"]["max_cudagraph_capture_size"] == 256
    user = engine_arguments("monkeybarrel", {**base, "compilation_config": {"max_cudagraph_capture_size": 64,
                                                                              "cudagraph_mode": "FULL"}})
    assert user["compilation_config"] == {"max_cudagraph_capture_size": 64, "cudagraph_mode": "FULL"}
    assert engine_arguments("monkeybarrel", {**base, "compilation_config": 3})["compilation_config"] == 3


def test_the_sampler_defaults_to_auto_and_rejects_unknown_choices():
    assert VLLMSampler(GeneratorSpec(backend="vllm")).attention == "auto"
    with pytest.raises(ValueError, match="auto, monkeybarrel, vllm"):
        VLLMSampler(GeneratorSpec(backend="vllm"), attention="flash")
    with pytest.raises(ValueError, match="prefix caching|enable_prefix_caching"):
        VLLMSampler(GeneratorSpec(backend="vllm"), attention="monkeybarrel", enable_prefix_caching=False)
