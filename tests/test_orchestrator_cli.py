"""The CLI end to end with the real embedded model, and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from conftest import tiny_config
from monkeybarrel.orchestrator.cli.main import demo_config_path, main
from monkeybarrel.orchestrator.experiment import Experiment


def test_run_then_report_rebuilds_from_the_store(tmp_path: Path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(name="cli", problems=3, samples=4, max_tokens=16)))
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "accuracy (%) against k" in printed and "coverage" in printed and "majority" in printed
    for name in ("config.yaml", "manifest.json", "problems.parquet", "answers.parquet", "labels.parquet",
                 "selections.parquet", "metrics.json", "report.md", "coverage.png"):
        assert (out / name).is_file(), name
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_problems"] == 3 and metrics["n_candidates"] == 12 and metrics["ks"] == [1, 2, 4]
    assert metrics["coverage"]["4"] >= metrics["coverage"]["1"]
    assert metrics["selection"]["oracle (coverage)"]["accuracy"] == metrics["coverage"]["4"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["costs"]["generators"]["smol"]["completion_tokens"] > 0
    # sampling wall time is the stage's, not a sum of per-candidate shares of batch time
    assert manifest["costs"]["generators"]["smol"]["sample_wall_s"] == manifest["runs"][-1]["sampled"]["smol"]["wall_s"]
    assert {"config_hash", "package_versions", "seeds", "runs"} <= set(manifest)

    (out / "report.md").unlink()
    (out / "coverage.png").unlink()
    assert main(["report", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert "| 4 |" in report and "majority" in report and "coverage.png" in report
    assert (out / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    experiment = Experiment(out)
    assert experiment.selection_data().n_candidates == 12
    assert experiment.labels_array().shape == (12,)


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path: Path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"task": {"name": "arithmetic", "num_problems": "many"}, "generators": [{"id": "g"}]}))
    assert main(["validate", str(bad)]) == 2
    assert "task.num_problems" in capsys.readouterr().err

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(yaml.safe_dump({"task": {"name": "no-such-task"}, "generators": [{"id": "g"}]}))
    assert main(["run", str(unknown), "--out", str(tmp_path / "x")]) == 2
    assert "unknown task 'no-such-task'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing is created for a config that cannot run

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "1+1?", "answer": "#### 2"}\n{oops\n')
    data = tiny_config(task={"name": "gsm8k", "path": str(broken)})
    config = tmp_path / "gsm.yaml"
    config.write_text(yaml.safe_dump(data))
    assert main(["run", str(config), "--out", str(tmp_path / "y")]) == 2
    assert "broken.jsonl:2: invalid JSON" in capsys.readouterr().err
    assert not (tmp_path / "y").exists()

    assert main(["report", str(tmp_path)]) == 2
    assert "not an experiment directory" in capsys.readouterr().err


def test_version(capsys):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("monkeybarrel ")


def test_demo_config_is_valid_and_packaged():
    assert main(["validate", str(demo_config_path())]) == 0
