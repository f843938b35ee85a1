"""The greedy-parity benchmark's measures (benchmarks/greedy_parity.py, run on the GPU for FP8 KV and TP):
free-running and teacher-forced agreement, and, with real vLLM (the CPU build, slow), the logits processor
that feeds a reference's tokens while the model's own greedy choices are read from its raw logprobs.

    /work/venvs/vllm/bin/python -m pytest -m slow tests/test_benchmarks_greedy_parity.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from greedy_parity import compare, compare_forced  # noqa: E402


def test_free_running_agreement_counts_every_position_after_a_divergence_as_different():
    a = [[[1, 2, 3, 4]], [[5, 6]], [[7, 8, 9]]]
    b = [[[1, 2, 9, 9]], [[5, 6]], [[0, 8, 9, 10]]]
    out = compare(a, b)
    assert out["positions"] == 4 + 2 + 4 and out["positions_identical"] == round((2 + 2 + 2) / 10, 5)
    assert out["sequences_identical"] == 1 and out["first_divergence"] == [0, 2]
    assert out["diverged_at_first_token"] == 1


def test_teacher_forced_agreement_is_per_position_and_splits_the_prefill_step():
    reference = [[1, 2, 3, 4], [5, 6, 7], [], [8]]
    choices = [[1, 2, 0, 4], [9, 6, 7], [], [8]]  # one decode flip, one prefill flip
    out = compare_forced(reference, choices)
    assert out["positions"] == 8 and out["positions_agree"] == round(6 / 8, 5)
    assert out["prompts"] == 3 and out["first_token_agree"] == 2
    assert out["decode_positions_agree"] == round(4 / 5, 5)  # decode steps: 3 + 2 of which one differs
    assert out["prompts_without_a_flip"] == 2 and out["most_flips_in_a_prompt"] == 1  # the empty one has none
    assert compare_forced(reference, reference)["positions_agree"] == 1.0


@pytest.mark.slow
def test_forced_tokens_feed_the_reference_and_report_the_models_own_choices(monkeypatch):
    """A real engine (SmolLM2 on CPU): fed its own greedy tokens it chooses them again at every step; fed a
    reference with one token changed, the model's choice at that step is still its own token (the fed token
    is not what it would pick), the steps before agree, and the run is fed every reference token."""
    pytest.importorskip("vllm")
    # named, the processor is resolved in the engine core's own process (and in TP workers): this folder on its path
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(BENCHMARKS), os.environ.get("PYTHONPATH")])))
    from vllm import LLM, SamplingParams

    from forced_tokens import NAME
    from greedy_parity import forced_choices
    from monkeybarrel.core.models import resolve_model

    prompts = ["Question: What is 17 + 25?\nAnswer:", "The capital of France is", "def add(a, b):\n    return"]
    llm = LLM(model=resolve_model("smollm2-135m-instruct"), seed=0, enforce_eager=True, dtype="float32",
              gpu_memory_utilization=0.25,  # on the CPU build: the share of host memory it reserves
              max_model_len=512, logits_processors=[NAME])
    try:
        free = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, detokenize=False),
                            use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in free]
        assert forced_choices(llm, prompts, tokens) == tokens
        changed = [list(t) for t in tokens]
        step = min(3, len(changed[0]) - 1)
        changed[0][step] = tokens[0][step] + 1
        choices = forced_choices(llm, prompts, changed)
        assert choices[0][:step + 1] == tokens[0][:step + 1]  # the changed step: the model still picks its own
        assert choices[1:] == tokens[1:]
        out = compare_forced(changed, choices)
        assert out["positions_agree"] < 1.0 and out["prompts_without_a_flip"] == 2
        plain = llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=12, detokenize=False),
                             use_tqdm=False)  # requests without the key are untouched
        assert list(plain[0].outputs[0].token_ids) == tokens[0]
    finally:
        del llm


@pytest.mark.slow
def test_teacher_forced_tp_parity_runs_the_named_processor_in_tensor_parallel_workers(monkeypatch, tmp_path):
    """The benchmark's TP mode on real vLLM (CPU build, its own attention, 2 ranks): the TP 2 engine's workers
    resolve the forced-tokens processor by name and are fed the TP 1 tokens (``forced_choices`` raises
    otherwise); each position is compared on the same prefix, so the per-position agreement is at least the
    free-running one, where a flip counts the rest of the sequence as different."""
    pytest.importorskip("vllm")
    import torch

    from greedy_parity import compare, generate, widen_heads
    from monkeybarrel.core.models import resolve_model

    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # generate() prepends this folder
    if not torch.cuda.is_available():
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core a rank (vLLM binds by NUMA node otherwise)
    wide = str(widen_heads(Path(resolve_model("smollm2-135m-instruct")), tmp_path / "wide", 12, 4))
    base = {"model": wide, "attention": "vllm", "max_tokens": 16, "memory": 0.25,
            "prompts": ["Question: What is 17 + 25?\nAnswer:", "The capital of France is", "def add(a, b):\n    return",
                        "Question: A farmer has 3 cows and buys 4 more. How many cows?\nAnswer:"]}
    tp1 = generate({**base, "engine": {}, "forced": "self"})
    assert tp1["forced_choices"] == tp1["forced_reference"] == [t[0] for t in tp1["tokens"]]
    tp2 = generate({**base, "engine": {"tensor_parallel_size": 2}, "forced": tp1["forced_reference"]})
    forced = compare_forced(tp1["forced_reference"], tp2["forced_choices"])
    free = compare(tp1["tokens"], tp2["tokens"])
    assert forced["positions"] == sum(map(len, tp1["forced_reference"])) <= free["positions"]
    assert forced["positions_agree"] >= free["positions_identical"] and forced["positions_agree"] >= 0.9


def test_tp_waves_and_the_cpu_binding_of_tensor_parallel_ranks():
    from greedy_parity import cpu_binding, tp_waves

    assert tp_waves(["0", "1", "2", "3"]) == [{"monkeybarrel_tp1": "0", "vllm_tp1": "2"},
                                              {"monkeybarrel_tp2": "0,1", "vllm_tp2": "2,3"}]
    assert tp_waves([], ("vllm",)) == [{"vllm_tp1": None}, {"vllm_tp2": None}]  # TP 1 first: TP 2 is fed its tokens
    assert tp_waves(["0", "1", "2", "3"], ("vllm",)) == [{"vllm_tp1": None}, {"vllm_tp2": None}]
    assert cpu_binding(2, 2) == "0|1" and cpu_binding(2, 16) == "0-7|8-15" and cpu_binding(4, 10) == "0-1|2-3|4-5|6-7"
    with pytest.raises(SystemExit, match="need 2 cores"):
        cpu_binding(2, 1)
