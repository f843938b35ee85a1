"""``sweep --shard I/N``: shards running at once into one sweep directory, as Slurm array tasks on shared storage,
and the Slurm array script itself run with bash (``SLURM_ARRAY_*`` set by hand: no Slurm here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, tiny_config
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.sweep.manifest import read_manifest
from monkeybarrel.orchestrator.sweep.shards import ShardLock
from monkeybarrel.orchestrator.sweep.status import sweep_status

SCRIPT = REPO / "deploy" / "slurm" / "sweep_array.sbatch"


def write_sweep(path: Path) -> Path:
    base = tiny_config(name="base", problems=2, samples=2, max_tokens=8)
    path.write_text(yaml.safe_dump({"name": "sharded", "base": base, "retry": {"attempts": 1},
                                    "axes": [{"generators[0].options.max_batch": [16, 32]}]}, sort_keys=False))
    return path


def test_two_shards_at_once_write_one_directory_and_status_and_report_merge_them(tmp_path, capsys):
    sweep_file, out = write_sweep(tmp_path / "grid.yaml"), tmp_path / "shared-storage" / "grid"
    env = {**os.environ, "SLURM_ARRAY_TASK_COUNT": "2", "MONKEYBARREL_SWEEP": str(sweep_file), "SHARED": str(tmp_path),
           "MONKEYBARREL_SWEEP_OUT": str(out), "MONKEYBARREL_PYTHON": sys.executable}
    tasks = [subprocess.Popen(["bash", str(SCRIPT)], env={**env, "SLURM_ARRAY_TASK_ID": str(i)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in (1, 2)]
    logs = [task.communicate(timeout=600)[0] for task in tasks]
    assert [task.returncode for task in tasks] == [0, 0], "\n".join(logs)
    assert "shard 1/2: 1 of 2 points" in logs[0] and "shard 2/2: 1 of 2 points" in logs[1]
    assert not (out / "sweep.json").exists() and sorted(p.name for p in (out / "shards").glob("*.json")) == [
        "1-of-2.json", "2-of-2.json"]
    files = [json.loads((out / "shards" / f"{i}-of-2.json").read_text()) for i in (1, 2)]
    ran = [set(f["shard"]["points"]) for f in files]
    assert not ran[0] & ran[1] and len(ran[0] | ran[1]) == 2
    for own in files:  # each shard ran one engine group, and started its engine once
        assert len(own["engines"]) == 1 and next(iter(own["engines"].values()))["starts"] == 1
        assert {r["name"]: r["state"] for r in own["points"] if r["name"] in own["shard"]["points"]} == \
            {name: "done" for name in own["shard"]["points"]}
    status = sweep_status(out)
    assert [r["state"] for r in status["points"]] == ["done"] * 2 and status["runs"] == 2
    assert sorted(e["starts"] for e in status["engines"].values()) == [1, 1]
    assert main(["sweep", "report", str(out)]) == 0
    assert len(json.loads((out / "report.json").read_text())["tasks"][0]["points"]) == 2
    for record in status["points"]:
        assert ExperimentStore(out / record["name"]).candidates().num_rows == 4

    capsys.readouterr()  # a shard again, then the whole sweep: nothing left to run, nothing counted twice
    assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", "2/2", "--no-progress"]) == 0
    assert "1 done, 0 to run" in capsys.readouterr().out
    assert main(["sweep", str(sweep_file), "--out", str(out), "--no-progress"]) == 0
    assert "2 done, 0 to run" in capsys.readouterr().out
    merged = read_manifest(out)
    assert sorted(e["starts"] for e in merged["engines"].values()) == [1, 1] and len(merged["runs"]) == 4


def test_the_same_shard_twice_at_once_is_refused(tmp_path, capsys):
    sweep_file, out = write_sweep(tmp_path / "grid.yaml"), tmp_path / "grid"
    with ShardLock(out, (1, 2)):
        assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", "1/2", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "another monkeybarrel process is writing" in err and "sweep shard 1/2" in err
    assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", "3/2"]) == 2
    assert "expected I/N with 1 <= I <= N" in capsys.readouterr().err


def test_an_invalid_shard_creates_nothing(tmp_path, capsys):
    sweep_file, out = write_sweep(tmp_path / "grid.yaml"), tmp_path / "new"
    data = yaml.safe_load(sweep_file.read_text())
    data["base"]["generators"][0]["model"] = str(tmp_path / "no-such-model")
    sweep_file.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", "1/2", "--no-progress"]) == 2
    assert "no-such-model" in capsys.readouterr().err and not out.exists()


def test_a_dry_run_of_a_shard_lists_its_points_as_a_table(tmp_path, capsys):
    sweep_file, out = write_sweep(tmp_path / "grid.yaml"), tmp_path / "grid"
    shown = []
    for index in (1, 2):
        assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", f"{index}/2", "--dry-run"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[-1] == f"# ok: 1 points (shard {index}/2); every point validates (nothing was run)"
        header = next(i for i, line in enumerate(lines) if line.startswith("point "))
        assert lines[header].split() == ["point", "state", "engines"]
        shown += [line.split()[0] for line in lines[header + 1:-1]]
    assert sorted(shown) == ["max_batch=16", "max_batch=32"] and not out.exists()


def test_every_shard_names_the_invalid_points_of_every_shard(tmp_path, capsys):
    """A shard validated only its own points: shard 1 ran while shard 2's points could never run."""
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ not a model config")  # preflight refuses it
    base = tiny_config(name="base", problems=2, samples=2, max_tokens=8)
    sweep_file = tmp_path / "grid.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "sharded", "base": base, "axes": [
        {"generators[0].model": {"smol": "smollm2-135m-instruct", "broken": str(broken)}},
        {"generators[0].temperature": [0.3, 1.0]}]}, sort_keys=False))
    for index in (1, 2):
        out = tmp_path / f"out-{index}"
        assert main(["sweep", str(sweep_file), "--out", str(out), "--shard", f"{index}/2", "--no-progress"]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert lines[0].endswith("2 of 4 points are invalid; nothing was run:"), lines
        assert [line.split(" (")[0] for line in lines[1:]] == ["  point model=broken,temperature=0.3",
                                                              "  point model=broken,temperature=1.0"]
        assert all("config.json: not valid JSON" in line for line in lines[1:]) and not out.exists()
