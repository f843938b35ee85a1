"""Smoothie and the routing baselines inside a multi-generator experiment (runner, store, report)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import Candidate, candidates_to_table
from monkeybarrel.orchestrator.experiment import Experiment
from monkeybarrel.orchestrator.runner import build_task, run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore

SELECTORS = [
    {"name": "smoothie-global", "type": "smoothie", "options": {"variant": "global"}},
    {"name": "smoothie-local", "type": "smoothie", "options": {"variant": "local", "n_neighbors": 3}},
    {"name": "smoothie-candidates", "type": "smoothie", "options": {"voters": "candidate"}},
    {"name": "random routing", "type": "random_routing"},
    {"name": "best generator", "type": "best_generator"},
    {"name": "oracle routing", "type": "oracle_routing"},
]


def config(generators: list[dict], problems: int = 12) -> ExperimentConfig:
    return ExperimentConfig.from_dict({
        "name": "smoothie-test", "seed": 0,
        "task": {"name": "arithmetic", "num_problems": problems, "options": {"difficulty": 1}},
        "generators": generators, "selectors": SELECTORS,
    })


def test_routing_rows_of_an_experiment_with_prewritten_candidates(tmp_path: Path):
    """Two generators answer correctly in their own words, one guesses: Smoothie routes to the former."""
    cfg = config([{"id": g, "num_samples": 3} for g in ("careful", "guesser", "methodical")])
    problems = build_task(cfg).load()
    rng = random.Random(0)
    candidates = []
    for problem in problems:
        for generator in ("careful", "guesser", "methodical"):
            for sample in range(3):
                if generator == "careful":
                    text = f"Adding it up carefully gives {problem.reference_answer}. The answer is {problem.reference_answer}."
                elif generator == "methodical":
                    text = f"Step by step, the total is {problem.reference_answer}. The answer is {problem.reference_answer}."
                else:
                    guess = rng.randint(1, 200)
                    text = f"Probably {guess}, I think. The answer is {guess}."
                candidates.append(Candidate(problem_id=problem.problem_id, generator_id=generator,
                                            sample_index=sample, text=text, finish_reason="stop"))
    ExperimentStore(tmp_path).append_chunk("candidates", candidates_to_table(candidates))
    experiment = run_experiment(cfg, tmp_path, show_progress=False)   # nothing is missing: no sampling

    selection = experiment.metrics()["selection"]
    for name in ("smoothie-global", "smoothie-local", "smoothie-candidates", "best generator", "oracle routing"):
        assert selection[name]["accuracy"] == 1.0, name
    assert selection["random routing"]["accuracy"] < 1.0
    assert selection["best generator"]["uses_labels"] and selection["oracle routing"]["uses_labels"]
    assert not selection["smoothie-global"]["uses_labels"]
    rows = [r for r in experiment.selections().to_pylist() if r["method"] == "smoothie-global"]
    assert len({r["generator_id"] for r in rows}) == 1 and {r["sample_index"] for r in rows} == {0}
    assert set(experiment.metrics()["per_generator"]) == {"careful", "guesser", "methodical"}
    report = (tmp_path / "report.md").read_text()
    assert "| smoothie-local | 100.0 [100.0, 100.0] | no |" in report
    assert "| oracle routing | 100.0 [100.0, 100.0] | yes |" in report
    assert list(experiment.selection_data().problem_texts) == [p.prompt for p in problems]


@pytest.mark.slow
def test_real_sampling_with_three_generators_records_each_generator(tmp_path: Path):
    """Real SmolLM2 samples from three prompt/temperature settings; every router picks a first sample."""
    common = {"num_samples": 2, "max_tokens": 12, "options": {"num_threads": 1}}
    cfg = config([{"id": "t0.3", "temperature": 0.3, **common},
                  {"id": "t1.0-terse", "temperature": 1.0, "system_prompt": "Reply with the number only.", **common},
                  {"id": "t0.7-steps", "temperature": 0.7, "prompt_template": "{prompt}\nThink step by step.", **common}],
                 problems=3)
    experiment = run_experiment(cfg, tmp_path, show_progress=False)
    candidates = experiment.candidates()
    assert sorted(set(candidates.column("generator_id").to_pylist())) == ["t0.3", "t0.7-steps", "t1.0-terse"]
    assert candidates.num_rows == 3 * 3 * 2
    metrics = experiment.metrics()
    assert set(metrics["selection"]) >= {s["name"] for s in SELECTORS}
    for row in experiment.selections().to_pylist():
        if row["method"] in ("smoothie-global", "smoothie-local", "random routing", "best generator"):
            assert row["sample_index"] == 0
    assert np.isfinite(metrics["selection"]["smoothie-local"]["accuracy"])
