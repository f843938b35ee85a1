"""The ``vllm`` sampler on a GPU: ``attention: auto`` and continuous batching (marked gpu, slow).

Needs a CUDA GPU, vLLM and a model directory in ``$MONKEYBARREL_GPU_MODEL`` (see tests/test_samplers_ray_gpu.py).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from monkeybarrel.core.config import GeneratorSpec  # noqa: E402
from monkeybarrel.core.records import Problem  # noqa: E402
from monkeybarrel.samplers.base import SampleRequest  # noqa: E402
from monkeybarrel.samplers.vllm_offline import VLLMSampler  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(not os.environ.get("MONKEYBARREL_GPU_MODEL"), reason="set MONKEYBARREL_GPU_MODEL")]


@pytest.mark.parametrize("samples, expected", [(8, "monkeybarrel"), (1, "vllm")])
def test_auto_takes_ours_for_sampled_prompts_and_vllms_for_distinct_ones(samples, expected):
    spec = GeneratorSpec(id="g", backend="vllm", model=os.environ["MONKEYBARREL_GPU_MODEL"], num_samples=samples,
                         max_tokens=24, temperature=0.8)
    sampler = VLLMSampler(spec, engine_kwargs={"load_format": "dummy"}, gpu_memory_utilization=0.3,
                          max_model_len=1024, chunk_requests=7)
    problems = [Problem(f"p{i}", "arithmetic", prompt=f"Problem {i}: add {i} and {7 * i}, then explain.")
                for i in range(40)]
    try:
        batches = list(sampler.sample([SampleRequest(p, tuple(range(samples)), i) for i, p in enumerate(problems)]))
    finally:
        sampler.close()
    assert sampler.attention_choice[0] == expected, sampler.attention_choice
    keys = Counter((c.problem_id, c.sample_index) for b in batches for c in b)
    assert len(keys) == 40 * samples and max(keys.values()) == 1
    assert all(len({c.problem_id for c in b}) == 1 for b in batches)  # one problem per yielded batch
    assert all(c.finish_reason in ("stop", "length") and 0 < c.completion_tokens <= 24 for b in batches for c in b)
    assert sampler.engine_start_s > 0 and sampler.gpu_seconds > 0
