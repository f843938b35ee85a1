"""Verifiers that read earlier verifiers and keep per-problem records (SWE votes -> state machine), without a model."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from monkeybarrel.core.config import ConfigError, ExperimentConfig
from monkeybarrel.core.records import Candidate, Problem, candidates_to_table
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.stages.verify import run_verify_stage
from monkeybarrel.verifiers.base import VERIFIERS, Verifier


@VERIFIERS.register("_test_doubler")
class Doubler(Verifier):
    """Twice an earlier verifier's score; records what it was given."""

    def __init__(self, name: str, source: str = "length") -> None:
        super().__init__(name)
        self.source = source

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.source,)

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        earlier, record = self.provided(problem.problem_id, self.source)
        self.keep_record(problem.problem_id, {"given": earlier.tolist(), "earlier_record": record})
        return 2 * earlier


def _store(tmp_path: Path) -> tuple[ExperimentStore, list[Problem]]:
    problems = [Problem(problem_id=pid, task="t", prompt="q") for pid in ("a/1", "b")]
    candidates = [Candidate(problem_id=p.problem_id, generator_id="g", sample_index=i, text=" ".join(["w"] * (i + 1)))
                  for p in problems for i in range(3)]
    store = ExperimentStore(tmp_path / "run")
    store.append_chunk("candidates", candidates_to_table(candidates))
    return store, problems


def _config(verifiers: list[dict]) -> ExperimentConfig:
    return ExperimentConfig.from_dict({"name": "records", "task": {"name": "arithmetic"}, "verifiers": verifiers})


def test_a_verifier_reads_earlier_scores_and_its_records_land_in_the_store(tmp_path: Path):
    store, problems = _store(tmp_path)
    config = _config([{"name": "length", "type": "length", "options": {"unit": "words"}},
                      {"name": "double", "type": "_test_doubler", "options": {"source": "length"}}])
    run_verify_stage(store, config, problems, show_progress=False)
    length = dict(zip(store.scores("length").column("sample_index").to_pylist(),
                      store.scores("length").column("score").to_pylist()))
    doubled = store.scores("double")
    assert doubled.num_rows == 6
    for index, score in zip(doubled.column("sample_index").to_pylist(), doubled.column("score").to_pylist()):
        assert score == pytest.approx(2 * length[index])
    record = store.read_artifact("double", "a/1")  # a problem id with a slash is a safe file name
    assert record["given"] == pytest.approx([length[i] for i in range(3)]) and record["earlier_record"] is None
    assert store.artifact_path("double", "a/1").parent == tmp_path / "run" / "artifacts" / "double"
    assert store.read_artifact("double", "missing") is None


def test_reading_a_verifier_that_is_not_listed_before_is_a_config_error(tmp_path: Path):
    store, problems = _store(tmp_path)
    config = _config([{"name": "double", "type": "_test_doubler", "options": {"source": "length"}},
                      {"name": "length", "type": "length"}])
    with pytest.raises(ConfigError, match=r"verifiers\[0\] \(double\) reads \['length'\]"):
        run_verify_stage(store, config, problems, show_progress=False)
