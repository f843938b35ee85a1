"""The greedy-parity benchmark's measures (benchmarks/greedy_parity.py, run on the GPU for FP8 KV and TP):
free-running and teacher-forced agreement, and, with real vLLM (the CPU build, slow), the logits processor
that feeds a reference's tokens while the model's own greedy choices are read from its raw logprobs.

    /work/venvs/vllm/bin/python -m pytest -m slow tests/test_benchmarks_greedy_parity.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

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
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the processor class is passed as an object
    from vllm import LLM, SamplingParams

    from greedy_parity import forced_choices, forced_tokens_processor
    from monkeybarrel.core.models import resolve_model

    prompts = ["Question: What is 17 + 25?\nAnswer:", "The capital of France is", "def add(a, b):\n    return"]
    llm = LLM(model=resolve_model("smollm2-135m-instruct"), seed=0, enforce_eager=True, dtype="float32",
              max_model_len=512, logits_processors=[forced_tokens_processor()])
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
