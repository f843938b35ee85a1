"""The CLI end to end with the real embedded model, and its error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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


# ---- `validate` refuses what `run` would die on (issue 36) ---------------------------------------------------

def _refused(capsys, argv: list[str]) -> str:
    """Exit 2 with ``error: ...`` on stderr: one line, or a heading and one indented line per error."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    lines = err.splitlines()
    assert lines[0].startswith("error: ") and all(line.startswith("  ") for line in lines[1:]), err
    assert "Traceback" not in err
    return err


def _gap(tmp_path: Path, capsys, config: dict, expected: list[str]) -> None:
    """``validate`` refuses the config naming the key; ``run`` refuses it the same way before it samples."""
    path = tmp_path / "gap.yaml"
    path.write_text(yaml.safe_dump(config))
    for argv in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out"), "--no-progress"]):
        err = _refused(capsys, argv)
        assert all(part in err for part in expected), (argv[0], err)
        assert str(path) in err
    assert not (tmp_path / "out").exists()  # nothing sampled, nothing created


def test_a_selector_option_its_fit_refuses_is_refused_before_sampling(tmp_path, capsys):
    """Weaver checks ``train_fraction`` in ``fit``: a run sampled everything, then died in a traceback."""
    config = tiny_config(verifiers=[{"name": "len", "type": "length"}],
                         selectors=[{"name": "weaver", "type": "weaver", "options": {"train_fraction": 3}}])
    _gap(tmp_path, capsys, config, ["selectors[0].options.train_fraction", "must be in (0, 1], got 3"])


def test_values_of_k_below_1_are_refused(tmp_path, capsys):
    """``evaluate.ks: [0, -4]`` validated, and the run's table was empty."""
    _gap(tmp_path, capsys, tiny_config(evaluate={"ks": [0, -4]}),
         ["2 invalid keys", "evaluate.ks[0]: Input should be greater than or equal to 1 (got 0)"])


@pytest.mark.parametrize("content, expected", [
    ('{"model_type": "llama", "hidden_size": "big"}', "Field 'hidden_size' expected int, got str"),
    ('{"model_type": "llama", ', "not valid JSON"),
    ('["llama"]', "expected a JSON object of model settings, got list"),
    ('{"hidden_size": 64}', "Should have a `model_type` key"),
])
def test_a_model_directory_whose_config_json_a_loader_refuses(tmp_path, capsys, content, expected):
    """Validation (and a sweep's) passed any directory with a config.json; the run died loading it."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(content)
    config = tiny_config()
    config["generators"][0]["model"] = str(model)
    _gap(tmp_path, capsys, config, ["generators[0].model", f"{model / 'config.json'}: ", expected])
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": config, "axes": {"generators[0].temperature": [0.5, 1.0]}}))
    err = _refused(capsys, ["sweep", str(sweep), "--out", str(tmp_path / "s"), "--dry-run"])
    assert "2 of 2 points are invalid; nothing was run" in err  # every point at once, one line each
    for point in ("temperature=0.5", "temperature=1.0"):
        assert any(line.startswith(f"  point {point} ") and expected in line for line in err.splitlines()), err
