"""Sweeps across devices: engine groups side by side in lanes (worker processes), on 2 CPU slots (``--gpus 2``).

The embedded model stands in for vLLM: two ``max_batch`` values are two engines (an engine option),
so a grid of them x temperatures is two engine groups. Real processes, real concurrency, real kills.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from conftest import tiny_config
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.sweep.spec import load_sweep
from monkeybarrel.orchestrator.sweep.status import sweep_status


def write_sweep(path: Path, axes, problems: int = 2, samples: int = 2, max_tokens: int = 8, attempts: int = 1,
                chunk_problems: int | None = None) -> Path:
    base = tiny_config(name="base", problems=problems, samples=samples, max_tokens=max_tokens)
    if chunk_problems:
        base["store"] = {"chunk_problems": chunk_problems}
    path.write_text(yaml.safe_dump({"base": base, "axes": axes, "retry": {"attempts": attempts, "wait_s": 0}},
                                   sort_keys=False))
    return path


def manifest(out: Path) -> dict:
    return json.loads((out / "sweep.json").read_text())


def when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def unique_keys(store: Path) -> Counter:
    table = ExperimentStore(store).candidates()
    return Counter(zip(table.column("problem_id").to_pylist(), table.column("sample_index").to_pylist()))


def test_two_engine_groups_run_side_by_side_on_two_slots_one_engine_start_each(tmp_path, capsys):
    sweep_file = write_sweep(tmp_path / "grid.yaml", [{"generators[0].options.max_batch": [16, 32]},
                                                      {"generators[0].temperature": [0.3, 1.0]}],
                             problems=2, max_tokens=12)
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "lane 1:" in printed and "lane 2:" in printed and "on CPU slot 0" in printed and "on CPU slot 1" in printed
    records = {r["name"]: r for r in manifest(out)["points"]}
    assert all(r["state"] == "done" for r in records.values())
    by_model = {}
    for name, r in records.items():
        by_model.setdefault(name.split(",")[0], set()).add(r["devices"])
    assert sorted(by_model.values(), key=sorted) == [{"0"}, {"1"}]  # a group stays on its slot
    assert len({r["pid"] for r in records.values()}) == 2 and os.getpid() not in {r["pid"] for r in records.values()}
    lanes: dict[int, list[float]] = {}
    for r in records.values():
        span = lanes.setdefault(r["lane"], [float("inf"), 0.0])
        span[0], span[1] = min(span[0], when(r["started"])), max(span[1], when(r["finished"]))
    (a_start, a_end), (b_start, b_end) = lanes.values()
    assert max(a_start, b_start) < min(a_end, b_end)  # the two lanes ran at the same time
    engines = manifest(out)["engines"]
    assert len(engines) == 2 and all(e["starts"] == 1 and len(e["points"]) == 2 for e in engines.values())
    point = load_sweep(sweep_file).points[3]  # a lane samples what the same point run alone samples
    alone = run_experiment(point.config, tmp_path / "alone", show_progress=False).candidates()
    laned = ExperimentStore(out / point.name).candidates().sort_by([("problem_id", "ascending"),
                                                                    ("sample_index", "ascending")])
    assert laned.column("text").to_pylist() == alone.column("text").to_pylist()
    assert [r["state"] for r in sweep_status(out)["points"]] == ["done"] * 4


def test_a_failing_point_and_a_killed_lane_never_stop_the_other_points(tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"}')  # a valid config (preflight passes), no weights: cannot load
    sweep_file = write_sweep(tmp_path / "grid.yaml", [
        {"zip": {"generators[0].model": {"smol": "smollm2-135m-instruct", "broken": str(broken)},
                 "generators[0].options.max_batch": [2, 64]}},
        {"generators[0].temperature": [0.3, 1.0]}], problems=3, max_tokens=12, chunk_problems=1)
    out = tmp_path / "sweep"
    first = out / "model=smol,temperature=0.3" / "candidates"
    killed: list[int] = []

    def kill_the_lane_of_the_first_point_once_it_stored_a_chunk():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (first.is_dir() and any(first.glob("part-*.parquet"))):
            time.sleep(0.05)
        record = next(r for r in manifest(out)["points"] if r["name"] == first.parent.name)
        killed.append(record["pid"])
        os.kill(record["pid"], signal.SIGKILL)

    watcher = threading.Thread(target=kill_the_lane_of_the_first_point_once_it_stored_a_chunk, daemon=True)
    watcher.start()
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--no-progress"]) == 1
    watcher.join()
    records = {r["name"]: r for r in manifest(out)["points"]}
    victim = records.pop(first.parent.name)
    assert victim["state"] == "failed" and "LaneDied" in victim["error"] and "exit code -9" in victim["error"]
    assert victim["pid"] == killed[0]
    for name, record in records.items():
        if name.startswith("model=broken"):  # its lane goes on after each failure
            assert record["state"] == "failed" and str(broken) in record["error"]
        else:  # the killed lane's group goes on in another lane
            assert record["state"] == "done" and record["pid"] != killed[0]
    kept = sum(unique_keys(first.parent).values())
    assert 1 <= kept < 6  # what the killed lane stored before it died is kept
    smol = manifest(out)["engines"]["smollm2-135m-instruct (embedded)"]
    assert smol["starts"] == 2  # the killed lane's start is counted too (sent as it happened: it never closed)
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--no-progress"]) == 1  # broken again
    records = {r["name"]: r for r in manifest(out)["points"]}
    assert records[first.parent.name]["state"] == "done"
    assert [r["state"] for n, r in records.items() if n.startswith("model=broken")] == ["failed"] * 2
    counted = unique_keys(first.parent)
    assert len(counted) == 3 * 2 and max(counted.values()) == 1  # resumed: every candidate once


def test_a_dry_run_on_two_slots_shows_the_devices_each_point_needs_as_a_table(tmp_path, capsys):
    sweep_file = write_sweep(tmp_path / "grid.yaml", [{"generators[0].options.max_batch": [16, 32]},
                                                      {"generators[0].temperature": [0.3, 1.0]}])
    out = tmp_path / "sweep"
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("point "))
    assert lines[header].split() == ["point", "state", "engines", "needs"]
    rows = [line for line in lines[header + 1:] if line.startswith("max_batch=")]
    assert len(rows) == 4 and all("pending" in row and row.endswith("1 of CPU slots 0,1") for row in rows)
    assert lines[-2:] == ["# lanes: engine groups side by side on CPU slots 0,1",
                          "# ok: 4 points; every point validates (nothing was run)"]
    assert not out.exists()


@pytest.mark.slow
def test_ctrl_c_stops_every_lane_and_the_next_run_resumes(tmp_path):
    sweep_file = write_sweep(tmp_path / "grid.yaml", [{"generators[0].options.max_batch": [2, 3]}],
                             problems=3, max_tokens=12, chunk_problems=1)
    out = tmp_path / "sweep"
    stores = [out / "max_batch=2" / "candidates", out / "max_batch=3" / "candidates"]

    def interrupt_once_both_lanes_stored_a_chunk():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not all(s.is_dir() and any(s.glob("part-*.parquet")) for s in stores):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=interrupt_once_both_lanes_stored_a_chunk, daemon=True)
    watcher.start()
    began = time.monotonic()
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--no-progress"]) == 130
    watcher.join()
    assert time.monotonic() - began < 300
    data = manifest(out)
    assert data["runs"][-1]["outcome"] == "interrupted"
    assert [r["state"] for r in data["points"]] == ["pending", "pending"]
    for record in data["points"]:
        with pytest.raises(ProcessLookupError):
            os.kill(record["pid"], 0)  # no lane outlives the driver
    assert main(["sweep", str(sweep_file), "--out", str(out), "--gpus", "2", "--no-progress"]) == 0
    for store in stores:
        counted = unique_keys(store.parent)
        assert len(counted) == 3 * 2 and max(counted.values()) == 1
