"""The embedded sampler with the real SmolLM2-135M-Instruct model."""

from __future__ import annotations

import pytest
import torch

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.core.records import Problem
from monkeybarrel.samplers.base import SampleRequest, Sampler, request_seed
from monkeybarrel.samplers.decoding import sample_next
from monkeybarrel.samplers.embedded import EmbeddedSampler

PROBLEMS = [
    Problem("short", "arithmetic", prompt="What is 2 + 3?"),
    Problem("long", "arithmetic", prompt="Tom has 12 apples and buys 30 more. Then he eats 2. How many apples now?"),
]


@pytest.fixture(scope="module")
def greedy() -> EmbeddedSampler:
    sampler = EmbeddedSampler(GeneratorSpec(temperature=0.0, max_tokens=20), num_threads=1, max_batch=8)
    sampler.load()
    return sampler


def test_batched_decoding_matches_one_request_at_a_time(greedy: EmbeddedSampler):
    together = {c[0].problem_id: c for c in greedy.sample([SampleRequest(p, (0, 1), 7) for p in PROBLEMS])}
    for problem in PROBLEMS:
        alone = next(iter(greedy.sample([SampleRequest(problem, (0,), 7)])))
        assert together[problem.problem_id][0].text == alone[0].text
        assert together[problem.problem_id][1].text == alone[0].text  # greedy: every sample is the same


def test_candidates_record_tokens_finish_and_match_hf_generate(greedy: EmbeddedSampler):
    (candidate,) = next(iter(greedy.sample([SampleRequest(PROBLEMS[1], (5,), 1)])))
    assert candidate.sample_index == 5 and candidate.generator_id == "default"
    prompt = greedy.encode(SampleRequest(PROBLEMS[1], (5,), 1))
    assert candidate.prompt_tokens == prompt.shape[0]
    reference = greedy.model.generate(prompt[None], max_new_tokens=20, do_sample=False)[0, prompt.shape[0]:]
    eos = set(greedy._eos.tolist())
    expected = [t for t in reference.tolist() if t not in eos]
    assert candidate.completion_tokens == len(expected) <= 20
    assert candidate.text == greedy.tokenizer.decode(expected, skip_special_tokens=True)
    assert candidate.finish_reason == ("length" if len(expected) == 20 else "stop")


def test_sampling_is_reproducible_by_seed_and_varies_across_samples():
    sampler = EmbeddedSampler(GeneratorSpec(temperature=1.0, top_p=0.95, max_tokens=12), num_threads=1)
    first = [c.text for c in next(iter(sampler.sample([SampleRequest(PROBLEMS[1], tuple(range(4)), 11)])))]
    again = [c.text for c in next(iter(sampler.sample([SampleRequest(PROBLEMS[1], tuple(range(4)), 11)])))]
    other = [c.text for c in next(iter(sampler.sample([SampleRequest(PROBLEMS[1], tuple(range(4)), 12)])))]
    assert first == again
    assert first != other
    assert len(set(first)) > 1


def test_requests_larger_than_the_batch_are_split():
    sampler = EmbeddedSampler(GeneratorSpec(max_tokens=4), num_threads=1, max_batch=3)
    out = [c for batch in sampler.sample([SampleRequest(PROBLEMS[0], tuple(range(7)), 3)]) for c in batch]
    assert sorted(c.sample_index for c in out) == list(range(7))


def test_sample_next_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    generator = torch.Generator().manual_seed(0)
    draws = {int(sample_next(logits, 1.0, 0.7, generator)) for _ in range(300)}
    assert draws == {0, 1}
    assert int(sample_next(logits, 0.0, 1.0)) == 0


def test_a_crashing_request_becomes_error_candidates():
    class Flaky(Sampler):
        def _sample(self, request):
            raise RuntimeError(f"backend fell over on {request.problem.problem_id}")

    (failed,) = list(Flaky(GeneratorSpec(id="flaky")).sample([SampleRequest(PROBLEMS[0], (0, 1), 5)]))
    assert [c.finish_reason for c in failed] == ["error", "error"]
    assert "backend fell over on short" in failed[0].error and failed[0].generator_id == "flaky"


def test_request_seed_depends_only_on_what_is_sampled():
    assert request_seed(0, "g", "p", 0) == request_seed(0, "g", "p", 0)
    assert len({request_seed(0, "g", "p", 0), request_seed(1, "g", "p", 0), request_seed(0, "h", "p", 0),
                request_seed(0, "g", "q", 0), request_seed(0, "g", "p", 4)}) == 5
