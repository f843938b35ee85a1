"""End to end, CI-sized: the local SWE task set through the runner (real model, real containers)."""

from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.experiments.swe_taskset.build_repos import HERE as TASKSET
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.report.show import show

pytestmark = pytest.mark.docker  # CI-sized: 2 tasks, the embedded model in every stage, about 3 minutes on 2 cores


def ci_config(tmp_path, problems: int = 2) -> dict:
    tasks = str(TASKSET / "tasks.jsonl")
    llm = {"max_tokens": 64, "sampler_options": {"num_threads": 1}}
    return {
        "name": "swe_ci", "seed": 0,
        "task": {"name": "swebench", "path": tasks, "num_problems": problems,
                 "options": {"retrieval_top_k": 1, "max_context_chars": 1500, "cache_dir": str(tmp_path / "cache")}},
        "generators": [
            {"id": "gold", "backend": "swe_predictions", "num_samples": 2,
             "options": {"path": str(TASKSET / "predictions" / "gold.jsonl")}},
            {"id": "mutants", "backend": "swe_predictions", "num_samples": 2,
             "options": {"path": str(TASKSET / "predictions" / "mutants.jsonl")}},
            {"id": "smollm2", "backend": "embedded", "num_samples": 2, "max_tokens": 64, "options": {"num_threads": 1}},
        ],
        "verifiers": [
            {"name": "test_votes", "type": "swe_test_votes",
             "options": {"num_tests": 2, "timeout_s": 20, "cache_dir": str(tmp_path / "cache"), **llm}},
            {"name": "state_machine", "type": "swe_state_machine",
             "options": {"votes": "test_votes", "max_attempts": 2, "cache_dir": str(tmp_path / "cache"), **llm}},
            {"name": "barrel_of_monkeys", "type": "swe_state_machine",
             "options": {"ensemble": True, "max_attempts": 2, "cache_dir": str(tmp_path / "cache"), **llm}},
        ],
        "selectors": [
            {"name": "test voting", "type": "swe_votes", "options": {"column": "test_votes"}},
            {"name": "state machine", "type": "best_single", "options": {"verifier": "state_machine"}},
            {"name": "barrel of monkeys", "type": "best_single", "options": {"verifier": "barrel_of_monkeys"}},
        ],
        "evaluate": {"ks": [1, 2, 4]},
    }


def test_swe_taskset_end_to_end(instances, tmp_path):
    torch.set_num_threads(1)
    config = ExperimentConfig.from_dict(ci_config(tmp_path))
    experiment = run_experiment(config, tmp_path / "run", show_progress=False)
    candidates = experiment.candidates().to_pylist()
    labels = dict(zip([(c["problem_id"], c["generator_id"], c["sample_index"]) for c in candidates],
                      experiment.labels_array().tolist()))
    gold = [k for k in labels if k[1] == "gold"]
    assert len(gold) == 4 and all(labels[k] for k in gold), "gold patches resolve"
    assert sum(1 for c in candidates if c["generator_id"] == "smollm2") == 4, "model patches are stored, even malformed"
    metrics = experiment.metrics()
    # 6 candidates per problem, at least the 2 gold ones correct: pass@4 >= 1 - C(4,4)/C(6,4) = 14/15
    assert metrics["coverage"]["4"] >= 14 / 15 - 1e-9
    selection = metrics["selection"]
    for name in ("test voting", "state machine", "barrel of monkeys", "random (pass@1)", "oracle (coverage)"):
        assert name in selection and selection[name]["abstained"] == 0
    assert selection["oracle (coverage)"]["accuracy"] == 1.0
    artifacts = tmp_path / "run" / "artifacts"  # the verifiers' records live in the store, next to their scores
    transcripts = [json.loads(p.read_text()) for p in sorted((artifacts / "state_machine").glob("*.json"))]
    assert len(transcripts) == 2
    ran = [r for r in transcripts if r["attempts"]]  # a problem with one patch shown needs no model
    assert len(ran) == 2 and all(1 <= r["attempts"] <= 2 and r["messages"][0]["role"] == "system" for r in ran)
    assert all(len(r["candidates"]) <= 3 for r in transcripts)
    vote_files = sorted((artifacts / "test_votes").glob("*.json"))
    assert len(vote_files) == 2
    for path in vote_files:  # the 135M model may write no valid test; where it wrote some, they ran in containers
        votes = json.loads(path.read_text())
        assert len(votes["base_codes"]) == len(votes["tests"])
        assert votes["pool"]["containers"] >= (1 if votes["tests"] else 0)
    assert (tmp_path / "run" / "report.md").is_file()
    console = Console(record=True, width=200)
    show(tmp_path / "run", transcripts[0]["problem_id"], console=console)  # `monkeybarrel show DIR --problem ID`
    printed = console.export_text()
    assert "state_machine record:" in printed and "test_votes record:" in printed
