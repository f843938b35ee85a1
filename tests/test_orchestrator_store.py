"""The store and the runner with the real embedded model: resume, SIGKILL, refusals."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from conftest import tiny_config
from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import CANDIDATE_SCHEMA
from monkeybarrel.orchestrator.config_guard import ConfigConflictError
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store import ExperimentStore, StoreError
from monkeybarrel.core.files import TaskDataError


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.parquet"))}


def _keys(directory: Path) -> list[tuple[str, str, int]]:
    table = ExperimentStore(directory).candidates()
    return list(zip(table.column("problem_id").to_pylist(), table.column("generator_id").to_pylist(),
                    table.column("sample_index").to_pylist()))


def test_chunks_are_atomic_and_temporaries_are_cleaned(tmp_path: Path):
    store = ExperimentStore(tmp_path)
    row = {"problem_id": "p", "generator_id": "g", "sample_index": 0, "text": "t", "prompt_tokens": 1,
           "completion_tokens": 1, "finish_reason": "stop", "wall_time_s": 0.1, "seed": 1, "error": None}
    store.append_chunk("candidates", pa.Table.from_pylist([row], schema=CANDIDATE_SCHEMA))
    (tmp_path / "candidates" / ".tmp-deadbeef-part-x.parquet").write_bytes(b"half a parquet file")
    reopened = ExperimentStore(tmp_path)
    assert not list((tmp_path / "candidates").glob(".tmp-*"))
    assert reopened.candidates().num_rows == 1
    store.append_chunk("candidates", pa.Table.from_pylist([row], schema=CANDIDATE_SCHEMA))
    with pytest.raises(StoreError, match="1 duplicate key"):
        reopened.candidates()


def test_sigkill_mid_run_then_resume_has_no_missing_or_duplicate_candidates(tmp_path: Path):
    config = tiny_config(problems=4, samples=3, max_tokens=12)
    config["generators"][0]["options"]["max_batch"] = 3  # one problem per batch: chunks land one by one
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "monkeybarrel.orchestrator.cli", "run", str(config_path),
                                "--out", str(out), "--no-progress"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if list((out / "candidates").glob("part-*.parquet")) if (out / "candidates").is_dir() else []:
            break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()[-2000:]
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    partial = _keys(out)
    assert 0 < len(partial) < 12 and len(set(partial)) == len(partial)

    experiment = run_experiment(ExperimentConfig.from_yaml(config_path), out, show_progress=False)
    keys = _keys(out)
    assert len(keys) == len(set(keys)) == 12
    assert set(partial) <= set(keys)
    assert {(p, i) for p, _, i in keys} == {(f"arithmetic-d1-{p:05d}", i) for p in range(4) for i in range(3)}
    assert experiment.metrics()["n_candidates"] == 12
    assert len(experiment.manifest()["runs"]) == 2


def test_resume_adds_only_missing_and_refuses_result_changing_edits(tmp_path: Path):
    out = tmp_path / "run"
    base = tiny_config(problems=2, samples=2, max_tokens=8)
    run_experiment(ExperimentConfig.from_dict(base), out, show_progress=False)
    before = _digest(out / "candidates")

    # Same config again: nothing new is sampled.
    run_experiment(ExperimentConfig.from_dict(base), out, show_progress=False)
    assert _digest(out / "candidates") == before

    # A change that would alter stored results is refused; nothing stored is touched.
    changed = tiny_config(problems=2, samples=2, max_tokens=8)
    changed["generators"][0]["temperature"] = 0.3
    with pytest.raises(ConfigConflictError, match=r"generators\[id=smol\]\.temperature: 0\.8 -> 0\.3"):
        run_experiment(ExperimentConfig.from_dict(changed), out, show_progress=False)
    assert _digest(out / "candidates") == before

    # A config whose task data is broken fails before the store is touched.
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    with pytest.raises(TaskDataError, match="broken.jsonl:1"):
        run_experiment(ExperimentConfig.from_dict(tiny_config(task={"name": "gsm8k", "path": str(broken)})), out,
                       show_progress=False)
    assert _digest(out / "candidates") == before

    # More samples and more problems only add the missing pairs.
    grown = tiny_config(problems=3, samples=3, max_tokens=8)
    run_experiment(ExperimentConfig.from_dict(grown), out, show_progress=False)
    keys = _keys(out)
    assert len(keys) == len(set(keys)) == 9
    assert all(path in _digest(out / "candidates") for path in before)

    # --force discards the old results and starts over with the new config.
    experiment = run_experiment(ExperimentConfig.from_dict(changed), out, force=True, show_progress=False)
    assert experiment.config.generators[0].temperature == 0.3
    assert len(_keys(out)) == 4


def test_a_model_that_cannot_load_stops_the_run_and_records_nothing(tmp_path: Path):
    config = tiny_config(problems=2, samples=2)
    config["generators"][0]["model"] = str(tmp_path / "no-such-model-dir")
    with pytest.raises(OSError):
        run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    assert ExperimentStore(tmp_path / "run").candidates().num_rows == 0


def test_new_samples_rescore_whole_problem_verifiers_and_the_newest_scores_win(tmp_path: Path):
    from monkeybarrel.core.records import Problem
    from monkeybarrel.orchestrator.verify_stage import run_verify_stage

    store = ExperimentStore(tmp_path / "run")
    config = ExperimentConfig.from_dict(tiny_config(verifiers=[{"name": "freq", "type": "answer_frequency"},
                                                               {"name": "has", "type": "has_answer"}]))
    problems = [Problem("p0", "arithmetic", prompt="What is 2 + 3?")]

    def add(indices, answers):
        rows = [{"problem_id": "p0", "generator_id": "smol", "sample_index": i, "text": f"The answer is {a}.",
                 "prompt_tokens": 5, "completion_tokens": 5, "finish_reason": "stop", "wall_time_s": 0.1,
                 "seed": 0, "error": None} for i, a in zip(indices, answers)]
        store.append_chunk("candidates", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))

    def scores(verifier):
        table = store.scores(verifier)
        return dict(zip(table.column("sample_index").to_pylist(), table.column("score").to_pylist()))

    add([0, 1], [5, 5])
    run_verify_stage(store, config, problems, show_progress=False)
    assert scores("freq") == {0: 1.0, 1: 1.0}
    add([2, 3], [4, 7])                       # two more samples: 5 is now the answer of half of them
    costs = run_verify_stage(store, config, problems, show_progress=False)
    assert costs["freq"]["scored"] == 4 and costs["has"]["scored"] == 2   # only freq re-scores the old ones
    assert scores("freq") == {0: 0.5, 1: 0.5, 2: 0.25, 3: 0.25}
    assert store.scores("freq").num_rows == 4 and store.scores("has").num_rows == 4
    assert run_verify_stage(store, config, problems, show_progress=False) == {}   # nothing left to do
