"""The benchmark sets themselves: SWE-bench Verified and MATH500 load through our tasks as released.

* ``swebench-verified``: the 500 instances through the ``swebench`` task (schema checks, JSON-encoded
  test lists), and every gold patch through the kit's diff normaliser.
* ``math500``: the official 500 through the ``math`` task (reference answers from ``answer`` or the
  last ``\\boxed{}`` of ``solution``), then a small real run of the embedded SmolLM2-135M-Instruct on
  the first ``SANITY_PROBLEMS`` problems (no paper number: a sanity check that the whole pipeline runs
  on the real set, with coverage, majority and the scaling-law fit in its report).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from ...core.config import ExperimentConfig
from ...kits.swebench.diffs import MalformedPatch, normalize_patch
from ...kits.swebench.schema import HUB_DATASETS as SWE_HUB
from ...tasks.math_dataset import HUB_DATASET as MATH500_HUB
from ...tasks.math_dataset import MathTask
from ...kits.swebench.schema import full_instance
from ...core.hub import load_hub_dataset
from .base import Comparison, Published, Row

VERIFIED = Published(500, "OpenAI, Introducing SWE-bench Verified (Aug 2024); CodeMonkeys (arXiv 2501.14723) reports on the same 500")
MATH500 = Published(500, "Lightman et al., Let's Verify Step by Step, arXiv 2305.20050 (the 500-problem MATH test subset)")
SANITY_PROBLEMS = 8
SANITY_SAMPLES = 4
SANITY_MAX_TOKENS = 256


def run_swebench_verified(data: str | None, out: Path) -> Comparison:
    from ...tasks.swebench import SWEBenchTask  # containers, retrieval: when the recipe runs

    began = time.perf_counter()
    if data is None:
        load_hub_dataset(SWE_HUB["verified"], split="test", local_hint="--data FILE (the split as parquet/jsonl)")
    problems = SWEBenchTask(path=data, dataset="verified", retrieval_top_k=0).load()
    loaded = time.perf_counter()
    instances = [full_instance(p) for p in problems]
    parsed = 0
    for instance in instances:
        try:
            normalize_patch(instance.patch)
            parsed += 1
        except MalformedPatch:
            pass
    repos = Counter(i.repo for i in instances)
    group = "SWE-bench Verified"
    result = Comparison("swebench-verified", "SWE-bench Verified through the swebench task",
                        data or f"hub {SWE_HUB['verified']}")
    result.rows += [
        Row(group, "instances", len(instances), VERIFIED, unit="", digits=0),
        Row(group, "repositories", len(repos), unit="", digits=0),
        Row(group, "gold patches our diff normaliser parses", 100 * parsed / max(len(instances), 1)),
        Row(group, "instances with FAIL_TO_PASS tests", 100 * sum(bool(i.FAIL_TO_PASS) for i in instances)
            / max(len(instances), 1)),
        Row(group, "mean FAIL_TO_PASS tests per instance", sum(len(i.FAIL_TO_PASS) for i in instances)
            / max(len(instances), 1), unit="", digits=2),
    ]
    result.notes.append("instances per repository: " + ", ".join(f"{r} {n}" for r, n in repos.most_common()) + ".")
    result.notes.append("Labels need containers (the swebench harness or the local evaluator); this recipe checks "
                        "the released instances load and their gold patches parse, which runs anywhere.")
    result.timings = {"load": loaded - began, "checks": time.perf_counter() - loaded}
    return result


def sanity_config(data: str | None) -> ExperimentConfig:
    """The embedded-model run on the first ``SANITY_PROBLEMS`` MATH500 problems."""
    return ExperimentConfig.from_dict({
        "name": "math500-sanity", "seed": 0,
        "task": {"name": "math", "path": data, "num_problems": SANITY_PROBLEMS},
        "generators": [{"id": "smollm2", "backend": "embedded", "model": "smollm2-135m-instruct",
                        "num_samples": SANITY_SAMPLES, "temperature": 0.7, "top_p": 0.95,
                        "max_tokens": SANITY_MAX_TOKENS}],
        "verifiers": [{"name": "answer_frequency", "type": "answer_frequency"}],
        "selectors": [{"name": "majority", "type": "majority"}],
    }, source="math500 recipe")


def run_math500(data: str | None, out: Path) -> Comparison:
    from ...orchestrator.runner import run_experiment

    began = time.perf_counter()
    if data is None:
        load_hub_dataset(MATH500_HUB, split="test", local_hint="--data FILE (test.jsonl with problem, answer/solution)")
    problems = MathTask(path=data).load()
    loaded = time.perf_counter()
    subjects = Counter(p.metadata.get("subject") or p.metadata.get("type") for p in problems)
    levels = Counter(p.metadata.get("level") for p in problems)
    group = "MATH500"
    result = Comparison("math500", "MATH500 through the math task, and a small embedded-model sanity run",
                        data or f"hub {MATH500_HUB}")
    result.rows += [
        Row(group, "problems", len(problems), MATH500, unit="", digits=0),
        Row(group, "with a reference answer", 100 * sum(bool(p.reference_answer) for p in problems)
            / max(len(problems), 1)),
        Row(group, "subjects", len(subjects), unit="", digits=0),
    ]
    # resumable: a re-run keeps the stored samples and only completes what is missing
    experiment = run_experiment(sanity_config(data), out / "store", show_progress=False)
    metrics = experiment.metrics()
    sanity = f"SmolLM2-135M x {SANITY_PROBLEMS} problems"
    k = max(metrics["ks"])
    result.rows += [
        Row(sanity, "sample accuracy", 100 * metrics["sample_accuracy"]),
        Row(sanity, f"coverage@{k}", 100 * metrics["coverage"][str(k)]),
        Row(sanity, "majority", 100 * metrics["selection"]["majority"]["accuracy"]),
    ]
    result.notes += [
        "problems per subject: " + ", ".join(f"{s} {n}" for s, n in subjects.most_common()) + "; levels: "
        + ", ".join(f"{lv} {n}" for lv, n in sorted(levels.items(), key=lambda kv: str(kv[0]))) + ".",
        f"sanity run: {SANITY_SAMPLES} samples per problem, max {SANITY_MAX_TOKENS} tokens, on CPU; no paper "
        f"number (a 135M model is not expected to solve MATH); report: {out / 'store' / 'report.md'}.",
    ]
    result.timings = {"load": loaded - began, "sanity run": time.perf_counter() - loaded}
    return result

