"""Running sweeps on the embedded model: one engine per model, resume, failures, Ctrl-C, status and report."""

from __future__ import annotations

import io
import json
import os
import signal
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from rich.console import Console

from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.sweep.spec import load_sweep
from monkeybarrel.orchestrator.sweep.status import print_status, sweep_status
from monkeybarrel.samplers.embedded import EmbeddedSampler
from monkeybarrel.samplers.engine_pool import active_pool

from conftest import tiny_config


def write_sweep(path: Path, axes, samples: int = 2, problems: int = 2, max_tokens: int = 8, **extra) -> Path:
    base = tiny_config(name="base", problems=problems, samples=samples, max_tokens=max_tokens)
    base["verifiers"] = [{"name": "freq", "type": "answer_frequency"}]
    path.write_text(yaml.safe_dump({"base": base, "axes": axes, "retry": {"attempts": 2, "wait_s": 0}, **extra},
                                   sort_keys=False))
    return path


@pytest.fixture
def loads(monkeypatch):
    """Model loads of the embedded sampler (an engine start each), by model."""
    seen: list[str] = []
    original = EmbeddedSampler._load

    def counting(self):
        seen.append(self.spec.model)
        original(self)

    monkeypatch.setattr(EmbeddedSampler, "_load", counting)
    return seen


def keys(directory: Path) -> Counter:
    table = ExperimentStore(directory).candidates()
    return Counter(zip(table.column("problem_id").to_pylist(), table.column("sample_index").to_pylist()))


def test_two_points_start_one_engine_match_separate_runs_and_resume_only_what_is_missing(tmp_path, loads, capsys):
    sweep_file = write_sweep(tmp_path / "temps.yaml", {"generators[0].temperature": [0.3, 1.2]})
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 0
    assert len(loads) == 1  # one engine start for both points
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["engines"] == {"smollm2-135m-instruct (embedded)": {
        "starts": 1, "points": ["temperature=0.3", "temperature=1.2"]}}
    status = sweep_status(out)
    assert [(r["name"], r["state"], r["candidates"], r["errors"]) for r in status["points"]] == [
        ("temperature=0.3", "done", 4, 0), ("temperature=1.2", "done", 4, 0)]
    printed = capsys.readouterr().out
    assert "engine smollm2-135m-instruct (embedded): 1 start for 2 points" in printed

    sweep = load_sweep(sweep_file)  # the same points as separate runs: the same candidates
    for point in sweep.points:
        alone = run_experiment(point.config, tmp_path / "alone" / point.name, show_progress=False)
        shared = ExperimentStore(out / point.name).candidates().sort_by([("problem_id", "ascending"),
                                                                        ("sample_index", "ascending")])
        assert shared.column("text").to_pylist() == alone.candidates().column("text").to_pylist()
    assert len(loads) == 3

    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 0  # all done: nothing runs
    assert len(loads) == 3 and json.loads((out / "sweep.json").read_text())["runs"][-1]["points"] == 0
    write_sweep(sweep_file, {"generators[0].temperature": [0.3, 1.2]}, samples=3)  # more samples: only those
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 0
    assert len(loads) == 4
    for point in sweep.points:
        counted = keys(out / point.name)
        assert len(counted) == 2 * 3 and max(counted.values()) == 1

    capsys.readouterr()
    assert main(["sweep", "status", str(out), "--json"]) == 0
    assert [r["candidates"] for r in json.loads(capsys.readouterr().out)["points"]] == [6, 6]
    assert main(["sweep", "report", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert {"report.md", "report.html", "report.png"} <= {p.name for p in out.iterdir()}
    task = report["tasks"][0]
    assert [p["point"] for p in task["points"]] == ["temperature=0.3", "temperature=1.2"]
    assert report["budget"] == "flops" and task["metrics"][0] == "coverage"
    assert task["frontier"]["coverage"]["table"][-1]["best"]["k"] in (1, 2, 3)


def test_a_failing_point_is_retried_recorded_and_never_stops_the_others(tmp_path, loads):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}')  # a valid config (preflight passes), no weights: cannot load
    sweep_file = write_sweep(tmp_path / "models.yaml", {"generators[0].model": {"smol": "smollm2-135m-instruct",
                                                                                "broken": str(broken)}})
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 1
    status = {r["name"]: r for r in sweep_status(out)["points"]}
    assert status["model=smol"]["state"] == "done" and status["model=smol"]["candidates"] == 4
    failed = status["model=broken"]
    assert failed["state"] == "failed" and failed["tries"] == 2 and failed["attempts"] == 2
    assert str(broken) in failed["error"] and "\n" not in failed["error"]
    assert json.loads((out / "sweep.json").read_text())["points"][1]["traceback"]
    table = io.StringIO()
    print_status(sweep_status(out), Console(file=table, width=80))
    lines = table.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80 and any("failed" in line and "broken" in line for line in lines)
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 1  # only the failed point again
    assert loads.count("smollm2-135m-instruct") == 1
    assert {r["name"]: r["attempts"] for r in sweep_status(out)["points"]} == {"model=smol": 1, "model=broken": 4}


def test_ctrl_c_stops_cleanly_and_the_next_run_resumes(tmp_path, monkeypatch):
    sweep_file = write_sweep(tmp_path / "temps.yaml", {"generators[0].temperature": [0.3, 1.2]}, problems=3,
                             max_tokens=12)
    data = yaml.safe_load(sweep_file.read_text())
    data["base"]["store"] = {"chunk_problems": 1}  # a chunk per problem
    data["base"]["generators"][0]["options"]["max_batch"] = 2  # one problem at a time
    sweep_file.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sweep"
    second = out / "temperature=1.2" / "candidates"
    append_chunk = ExperimentStore.append_chunk
    interrupted = []

    def ctrl_c_after_the_second_points_first_chunk(store, kind, table):
        """Ctrl-C the moment the second point has stored its first chunk (not polled: a fast machine
        finishes the point between two polls)."""
        written = append_chunk(store, kind, table)
        if kind == "candidates" and store.root.name == "temperature=1.2" and not interrupted:
            interrupted.append(written)
            os.kill(os.getpid(), signal.SIGINT)
        return written

    monkeypatch.setattr(ExperimentStore, "append_chunk", ctrl_c_after_the_second_points_first_chunk)
    # Python's own Ctrl-C handler, also when the suite was started with SIGINT ignored (`cmd &` in a script)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert len(interrupted) == 1
    monkeypatch.setattr(ExperimentStore, "append_chunk", append_chunk)
    assert active_pool() is None  # the engines were closed
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["runs"][-1]["outcome"] == "interrupted"
    assert [r["state"] for r in manifest["points"]] == ["done", "pending"]
    kept = sum(pq.read_metadata(p).num_rows for p in second.glob("part-*.parquet"))
    assert 2 <= kept < 6  # what was finished before Ctrl-C is stored
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 0
    counted = keys(out / "temperature=1.2")
    assert len(counted) == 6 and max(counted.values()) == 1
    assert [r["state"] for r in sweep_status(out)["points"]] == ["done", "done"]
