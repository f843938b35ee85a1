"""Bad input gets one line on stderr naming the file (and line) and exit status 2: configs that are not
UTF-8 or not YAML, directories given as files, data paths, unreachable hubs, wrong recipe data."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.orchestrator.cli.main import main


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr (returned)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("content", [
    "name: caf\xe9\n".encode("latin-1"),                      # Latin-1 text
    "\ufeffname: demo\n".encode("utf-16"),                     # UTF-16 with its BOM
    b"name: demo\nseed: 0\n\x80\x81\x82binary\n",             # stray bytes on line 3
])
def test_non_utf8_config_names_file_and_line(tmp_path, capsys, content):
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    err = one_line_error(capsys, ["validate", str(path)])
    assert f"{path}:" in err and "not UTF-8" in err
    if b"binary" in content:
        assert f"{path}:3:" in err


@pytest.mark.parametrize("text,line", [
    ("name: x\ntask: [unclosed\n", 3),                         # flow sequence never closed
    ("name: x\n  task: 1\n", 2),                               # bad indentation
    ("name: x\ntask:\n  name: \"open\n", 4),                   # unterminated quote
    ("name: x\n\tseed: 1\n", 2),                               # a tab
    ("generators:\n  - id: a\n - id: b\n", 3),                 # list items out of line
    ("name: x\n{bad\n", 3),                                    # unclosed mapping
])
def test_yaml_errors_are_one_line_with_file_and_line(tmp_path, capsys, text, line):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    err = one_line_error(capsys, ["validate", str(path)])
    assert f"{path}:{line}:" in err and "not valid YAML" in err and "<unicode string>" not in err


def test_directory_given_as_a_file(tmp_path, capsys):
    err = one_line_error(capsys, ["validate", str(tmp_path)])
    assert f"{tmp_path}: is a directory" in err
    err = one_line_error(capsys, ["run", str(tmp_path), "--out", str(tmp_path / "out")])
    assert "is a directory" in err
    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    config = tmp_path / "gsm.yaml"
    config.write_text(yaml.safe_dump({"task": {"name": "gsm8k", "path": str(folder)}, "generators": [{"id": "g"}]}))
    err = one_line_error(capsys, ["validate", str(config)])
    assert f"{folder}: is a directory, expected a .jsonl or .parquet file" in err


def test_data_paths_in_a_config_are_relative_to_its_folder(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "test.jsonl").write_text('{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\\n#### 5"}\n')
    (project / "configs").mkdir()
    config = project / "configs" / "gsm.yaml"
    config.write_text(yaml.safe_dump({"task": {"name": "gsm8k", "path": "../data/test.jsonl", "num_problems": 1},
                                      "generators": [{"id": "g"}]}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = ExperimentConfig.from_yaml(Path("../project/configs/gsm.yaml"))  # the config given relative to the cwd
    assert Path(loaded.task.path).resolve() == (project / "data" / "test.jsonl").resolve()
    assert main(["validate", "../project/configs/gsm.yaml"]) == 0
    assert "# ok: 1 problems" in capsys.readouterr().out
    absolute = ExperimentConfig.from_dict({"task": {"name": "gsm8k", "path": "data/test.jsonl"}})
    assert absolute.task.path == "data/test.jsonl"  # a dict (the Python API) is taken as given: the cwd
    missing = project / "configs" / "missing.yaml"
    missing.write_text(yaml.safe_dump({"task": {"name": "gsm8k", "path": "nowhere.jsonl"}, "generators": [{"id": "g"}]}))
    err = one_line_error(capsys, ["validate", str(missing)])
    assert str(project / "configs" / "nowhere.jsonl") in err  # the message shows where it looked


def test_offline_hub_is_refused_at_once(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://192.0.2.1")  # TEST-NET-1: reserved, never routed
    for recipe, dataset in (("weaver-gpqa-8b", "hazyresearch/GPQA"), ("llmonk-codecontests", "monkey_business"),
                            ("smoothie-alpaca", "alpaca")):
        began = time.perf_counter()
        err = one_line_error(capsys, ["reproduce", recipe, "--out", str(tmp_path / recipe)])
        assert time.perf_counter() - began < 20  # one connection attempt, not the libraries' retries
        assert dataset in err and "cannot be reached" in err and "--data" in err and "HF_HUB_OFFLINE" in err


def test_codemonkeys_data_must_be_a_directory(tmp_path, capsys):
    for name in ("all_preds.jsonl", "results.json", "experiments.tar.gz"):
        path = tmp_path / name
        path.write_text("{}\n")
        err = one_line_error(capsys, ["reproduce", "codemonkeys-barrel", "--data", str(path)])
        assert f"--data {path}: is a file" in err and "takes a directory" in err


def test_swebench_parquet_with_wrong_columns_is_refused_from_its_schema(tmp_path, capsys):
    """Millions of rows: refused from the footer, no row read (a full read took minutes)."""
    cases = {
        "ids_only.parquet": pa.table({"instance_id": pa.array(np.arange(3_000_000).astype(str))}),
        "renamed.parquet": pa.table({"id": ["a"] * 1000, "repository": ["r"] * 1000, "commit": ["c"] * 1000}),
        "outcomes.parquet": pa.table({"Problem Idx": np.zeros(2_000_000, np.int32), "Score": np.ones(2_000_000)}),
    }
    for name, table in cases.items():
        path = tmp_path / name
        pq.write_table(table, path, row_group_size=1_000_000)
        err = one_line_error(capsys, ["reproduce", "swebench-verified", "--data", str(path)])
        assert f"{path}: no column(s)" in err and "'problem_statement'" in err and "rows not read" in err
    not_parquet = tmp_path / "fake.parquet"
    not_parquet.write_text("instance_id,repo\n")
    err = one_line_error(capsys, ["reproduce", "swebench-verified", "--data", str(not_parquet)])
    assert f"{not_parquet}: not a readable Parquet file" in err


def test_normal_output_has_no_dependency_warnings_or_bars(tmp_path):
    """A real run on the embedded model (transformers, torch): stderr stays empty, even with warnings on."""
    import os
    import subprocess
    import sys

    from conftest import tiny_config

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config(problems=1, samples=2, max_tokens=8,
                                                 verifiers=[{"name": "len", "type": "length"}])))
    env = {**os.environ, "PYTHONWARNINGS": "default"}  # every warning would show, once per place
    done = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "run", str(config), "--out",
                           str(tmp_path / "out"), "--no-progress"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    assert "accuracy (%) against k" in done.stdout
