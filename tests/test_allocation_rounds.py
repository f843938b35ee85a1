"""Sampling in rounds with the real embedded model: budgets, stopping, config errors, SIGKILL mid-round."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import tiny_config
from monkeybarrel.core.config import ConfigError, ExperimentConfig
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore


def _per_problem(directory: Path) -> dict[str, int]:
    table = ExperimentStore(directory).candidates()
    counts: dict[str, int] = {}
    for pid in table.column("problem_id").to_pylist():
        counts[pid] = counts.get(pid, 0) + 1
    return counts


def test_budget_is_shared_in_rounds_and_a_rerun_adds_nothing(tmp_path: Path):
    config = tiny_config(problems=3, samples=4, max_tokens=6, budget={"samples": 5},
                         allocation={"policy": "uniform", "options": {"round_size": 1}})
    out = tmp_path / "run"
    experiment = run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
    assert sorted(_per_problem(out).values()) == [1, 2, 2]
    ledger = pq.read_table(out / "allocation.parquet").to_pylist()
    assert [r["round"] for r in ledger] == [1, 1, 1, 2, 2] and max(r["target"] for r in ledger) == 2
    assert experiment.manifest()["runs"][-1]["sampled"]["smol"]["samples"] == 5
    assert "## Allocation at equal compute" in (out / "report.md").read_text()
    before = sorted(p.name for p in (out / "candidates").iterdir())
    run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
    assert sorted(p.name for p in (out / "candidates").iterdir()) == before
    # a larger budget continues where the store stands; the policy is not a result-changing key
    config["budget"] = {"samples": 7}
    run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
    assert sum(_per_problem(out).values()) == 7


def test_until_solved_stops_a_problem_once_the_checker_passes(tmp_path: Path):
    # `length` (prefer longer) scores the token count: every sample of >= 1 token passes threshold 1,
    # none passes threshold 10**6; the first stops every problem after one round, the second runs to the cap
    for threshold, expected in ((1.0, 2), (1e6, 4)):
        config = tiny_config(problems=2, samples=4, max_tokens=4,
                             verifiers=[{"name": "len", "type": "length", "options": {"prefer": "longer"}}],
                             allocation={"policy": "until_solved", "checker": "len", "checker_threshold": threshold,
                                         "options": {"round_size": 2}})
        out = tmp_path / f"t{threshold:g}"
        run_experiment(ExperimentConfig.from_dict(config), out, show_progress=False)
        assert set(_per_problem(out).values()) == {expected}, threshold


def test_policies_that_need_a_checker_refuse_a_config_without_one(tmp_path: Path):
    config = ExperimentConfig.from_dict(tiny_config(allocation={"policy": "until_solved"}))
    with pytest.raises(ConfigError, match="allocation.checker: policy 'until_solved'"):
        run_experiment(config, tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="allocation.checker: 'nope' is not a configured verifier"):
        ExperimentConfig.from_dict(tiny_config(allocation={"policy": "until_solved", "checker": "nope"}))
    with pytest.raises(ConfigError, match="budget: .*exactly one of samples or tokens"):
        ExperimentConfig.from_dict(tiny_config(budget={"samples": 3, "tokens": 9}))


def test_sigkill_mid_round_then_resume_loses_and_duplicates_nothing(tmp_path: Path):
    config = tiny_config(problems=4, samples=3, max_tokens=10, store={"chunk_problems": 1},
                         allocation={"policy": "uniform", "options": {"round_size": 1}})
    config["generators"][0]["options"]["max_batch"] = 1  # one sample per batch: chunks land one by one
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "run", str(config_path),
                                "--out", str(out), "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        if (out / "allocation.parquet").is_file() and 5 <= sum(_per_problem(out).values()) < 12:
            counts = _per_problem(out)
            if len(set(counts.values())) > 1 or len(counts) < 4:  # inside a round
                break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()[-2000:]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    partial = ExperimentStore(out).candidates()
    ledger_before = pq.read_table(out / "allocation.parquet").to_pylist()
    assert 5 <= partial.num_rows < 12

    run_experiment(ExperimentConfig.from_yaml(config_path), out, show_progress=False)
    table = ExperimentStore(out).candidates()  # raises on a duplicate key
    keys = set(zip(table.column("problem_id").to_pylist(), table.column("sample_index").to_pylist()))
    assert len(keys) == table.num_rows == 12
    old = set(zip(partial.column("problem_id").to_pylist(), partial.column("sample_index").to_pylist()))
    assert old <= keys
    ledger = pq.read_table(out / "allocation.parquet").to_pylist()
    assert ledger[: len(ledger_before)] == ledger_before  # the interrupted round was finished, not re-decided
    assert [r["round"] for r in ledger] == [1] * 4 + [2] * 4 + [3] * 4
