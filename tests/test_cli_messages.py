"""Bad input gets one line on stderr naming the file (and line) and exit status 2: configs that are not
UTF-8 or not YAML, directories given as files, data paths, unreachable hubs, wrong recipe data."""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.orchestrator.cli.main import main


def exit_status(argv: list[str]) -> int:
    """``monkeybarrel ARGV`` in this process: its exit status (argparse's refusals exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def one_line_error(capsys, argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with exactly one line on stderr (returned)."""
    assert exit_status(argv) == 2
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


@pytest.mark.parametrize("task", ["gsm8k", "math"])
def test_a_hub_task_without_network_is_refused_at_once_with_the_local_option(monkeypatch, capsys, tmp_path, task):
    """`run` and `validate` of a task from the hub took 28.7 s and 11 retry lines, without naming `task.path`."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://192.0.2.1")  # TEST-NET-1: reserved, never routed
    path = config(tmp_path, {"task": {"name": task}})
    for argv in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out")]):
        began = time.perf_counter()
        err = one_line_error(capsys, argv)
        assert time.perf_counter() - began < 20
        assert "cannot be reached" in err and "set task.path to a local JSONL or Parquet file" in err
    assert not (tmp_path / "out").exists()


def test_a_hub_task_without_the_datasets_package_is_one_line(tmp_path):
    """Without `datasets` it was an ImportError traceback."""
    import os
    import subprocess
    import sys

    blocker = tmp_path / "site"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['datasets'] = None  # not installed\n")
    path = config(tmp_path, {"task": {"name": "gsm8k"}})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "validate", str(path)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "the `datasets` package is missing" in done.stderr
    assert "set task.path" in done.stderr


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


# ---- malformed inputs: every kind exits 2 with one line naming the file, key or point --------------------------

BASE = {"name": "m", "task": {"name": "arithmetic", "num_problems": 2},
        "generators": [{"id": "g", "num_samples": 2, "max_tokens": 8}]}
MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "vocab_size": 256}


def merged(base: dict, changes: dict) -> dict:
    """``base`` with ``changes`` merged in (mappings merge, other values replace; None deletes)."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def config(tmp: Path, changes: dict | None = None, name: str = "config.yaml", text: str | None = None) -> Path:
    path = tmp / name
    path.write_text(text if text is not None else yaml.safe_dump(merged(BASE, changes or {}), sort_keys=False))
    return path


def model_dir(tmp: Path, text: str | None) -> Path:
    path = tmp / "model"
    path.mkdir()
    if text is not None:
        (path / "config.json").write_text(text)
    return path


def validate(tmp: Path, changes: dict | None = None, **kwargs) -> list[str]:
    return ["validate", str(config(tmp, changes, **kwargs))]


def sweep(tmp: Path, data: dict | str, *extra: str) -> list[str]:
    path = tmp / "sweep.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return ["sweep", str(path), "--out", str(tmp / "out"), "--dry-run", *extra]


def data_file(tmp: Path, name: str, content: str | bytes | None) -> list[str]:
    path = tmp / name
    if content is None:
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return validate(tmp, {"task": {"name": "gsm8k", "path": str(path)}})


def weaver(**options) -> dict:
    return {"verifiers": [{"name": "len", "type": "length"}],
            "selectors": [{"name": "w", "type": "weaver", "options": options}]}


def written(tmp: Path, name: str, content: str | bytes) -> Path:
    path = tmp / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@functools.lru_cache(maxsize=1)
def _store() -> Path:
    from test_report_page import small_store

    return small_store(Path(tempfile.mkdtemp(prefix="mb-malformed-")) / "store", problems=3, samples=4)[0].directory


def store(tmp: Path, damage: dict[str, str] | None = None) -> Path:
    """A copy of a small reported store in ``tmp``, with ``damage`` (file -> new content) done to it."""
    path = tmp / "store"
    shutil.copytree(_store(), path)
    for name, text in (damage or {}).items():
        (path / name).write_text(text)
    return path


SWEEP = {"base": BASE, "axes": {"generators[0].temperature": [0.5, 1.0]}}
MALFORMED = {
    # kind: (argv built in tmp, what the one line must say)
    "config file missing": (lambda t: ["validate", str(t / "nope.yaml")], ["nope.yaml: config file not found"]),
    "config is a directory": (lambda t: ["run", str(t)], [": is a directory, expected a YAML config file"]),
    "config not UTF-8": (lambda t: ["validate", str(written(t, "c.yaml", b"name: caf\xe9\n"))], ["c.yaml:1: not UTF-8"]),
    "YAML syntax": (lambda t: validate(t, text="task: {name: x\ngenerators: []\n"),
                    ["config.yaml:2:11: not valid YAML: expected ',' or '}'"]),
    "empty config": (lambda t: validate(t, text="# nothing\n"), ["config.yaml: the config file is empty"]),
    "top level not a mapping": (lambda t: validate(t, text="- a\n- b\n"), ["expected a mapping at the top level"]),
    "required key missing": (lambda t: validate(t, {"generators": None}), ["required key(s) missing: generators"]),
    "unknown top-level key": (lambda t: validate(t, {"evaluation": {}}), ["evaluation: unknown key (did you mean 'evaluate'?)"]),
    "unknown nested key": (lambda t: validate(t, {"generators": [{"id": "g", "temprature": 1}]}),
                           ["generators[0].temprature: unknown key (did you mean 'temperature'?); expected one of id"]),
    "wrong type": (lambda t: validate(t, {"task": {"num_problems": "many"}}), ["task.num_problems: Input should be a valid integer", "'many'"]),
    "negative temperature": (lambda t: validate(t, {"generators": [{"id": "g", "temperature": -1}]}),
                             ["generators[0].temperature: Input should be greater than or equal to 0 (got -1)"]),
    "prompt template without {prompt}": (lambda t: validate(t, {"generators": [{"id": "g", "prompt_template": "Q:"}]}),
                                         ["generators[0].prompt_template: must contain the placeholder {prompt}"]),
    "duplicate generator ids": (lambda t: validate(t, {"generators": [{"id": "g"}, {"id": "g"}]}), ["generators: duplicate id ['g']"]),
    "k below 1": (lambda t: validate(t, {"evaluate": {"ks": [0, 2]}}), ["evaluate.ks[0]: Input should be greater than or equal to 1 (got 0)"]),
    "curve of an unknown selector": (lambda t: validate(t, {"evaluate": {"selector_curves": ["wever"]}}),
                                     ["evaluate.selector_curves: ['wever'] are not configured selectors"]),
    "checker not a verifier": (lambda t: validate(t, {"allocation": {"policy": "until_solved", "checker": "tests"}}),
                               ["allocation.checker: 'tests' is not a configured verifier"]),
    "budget of both kinds": (lambda t: validate(t, {"budget": {"samples": 4, "tokens": 100}}), ["budget: give exactly one of samples or tokens"]),
    "unknown task": (lambda t: validate(t, {"task": {"name": "gsm9k"}}), ["task: unknown task 'gsm9k'; expected one of"]),
    "unknown sampler backend": (lambda t: validate(t, {"generators": [{"id": "g", "backend": "vlm"}]}),
                                ["generators[0]: unknown sampler 'vlm'; expected one of"]),
    "unknown verifier type": (lambda t: validate(t, {"verifiers": [{"name": "v", "type": "lenght"}]}),
                              ["verifiers[0]: unknown verifier 'lenght'"]),
    "unknown selector type": (lambda t: validate(t, {"selectors": [{"name": "s", "type": "wever"}]}),
                              ["selectors[0]: unknown selector 'wever'"]),
    "selector option out of range": (lambda t: validate(t, weaver(train_fraction=3)),
                                     ["selectors[0].options.train_fraction: train_fraction must be in (0, 1], got 3"]),
    "nested selector option out of range": (lambda t: validate(t, weaver(model__threshold=2)),
                                            ["selectors[0].options.model__threshold: threshold must be None, in (0, 1] or 'search', got 2"]),
    "unknown selector option": (lambda t: validate(t, weaver(trainfraction=1)),
                                ["selectors[0].options: unknown option(s) ['trainfraction'] for selector 'weaver'"]),
    "selector option of the wrong type": (lambda t: validate(t, weaver(verifiers="len")),
                                          ["selectors[0].options.verifiers: Input should be a valid list (got 'len'"]),
    "selector names an unconfigured verifier": (lambda t: validate(t, weaver(verifiers=["lenght"])),
                                                ["selectors[0].options.verifiers: ['lenght'] is not a configured verifier"]),
    "helper estimator option": (lambda t: validate(t, {"verifiers": [{"name": "len", "type": "length"}], "selectors": [
        {"name": "n", "type": "naive_ensemble", "options": {"normalize": "zscore"}}]}),
                                ["selectors[0].options.normalize: normalize must be one of"]),
    "sampler option out of range": (lambda t: validate(t, {"generators": [{"id": "g", "options": {"max_batch": 0}}]}),
                                    ["generators[0].options.max_batch: max_batch must be >= 1, got 0"]),
    "verifier option not allowed": (lambda t: validate(t, {"verifiers": [{"name": "l", "type": "length", "options": {"prefer": "middle"}}]}),
                                    ["verifiers[0].options.prefer: prefer must be 'shorter' or 'longer', got 'middle'"]),
    "verifier option missing": (lambda t: validate(t, {"verifiers": [{"name": "rm", "type": "reward_model"}]}),
                                ["verifiers[0].options: verifier 'reward_model' needs the option(s) ['model']"]),
    "option repeating a config key": (lambda t: validate(t, {"verifiers": [{"name": "l", "type": "length", "options": {"name": "x"}}]}),
                                      ["verifiers[0].options.name: set by the config itself"]),
    "unknown allocation policy": (lambda t: validate(t, {"allocation": {"policy": "greedy"}}), ["allocation", "greedy"]),
    "model path missing": (lambda t: validate(t, {"generators": [{"id": "g", "model": str(t / "llama")}]}),
                           ["generators[0].model:", "llama: no such model directory or file"]),
    "model directory without config.json": (lambda t: validate(t, {"generators": [{"id": "g", "model": str(model_dir(t, None))}]}),
                                            ["generators[0].model:", "model: no config.json in it"]),
    "model config.json not JSON": (lambda t: validate(t, {"generators": [{"id": "g", "model": str(model_dir(t, '{"model_type": '))}]}),
                                   ["generators[0].model:", "config.json: not valid JSON"]),
    "model config.json with a wrong field": (lambda t: validate(t, {"generators": [{"id": "g", "model": str(model_dir(
        t, json.dumps({**MODEL, "hidden_size": "big"})))}]}), ["config.json:", "hidden_size", "expected int, got str"]),
    "data file missing": (lambda t: validate(t, {"task": {"name": "gsm8k", "path": "missing.jsonl"}}), ["missing.jsonl"]),
    "data path is a directory": (lambda t: data_file(t, "data.jsonl", None), ["data.jsonl: is a directory"]),
    "data line not JSON": (lambda t: data_file(t, "d.jsonl", '{"question": "1+1?", "answer": "#### 2"}\n{oops\n'),
                           ["d.jsonl:2: invalid JSON"]),
    "data field missing": (lambda t: data_file(t, "d.jsonl", '{"q": "1+1?", "answer": "#### 2"}\n'), ["d.jsonl:1", "question"]),
    "data answer without final answer": (lambda t: data_file(t, "d.jsonl", '{"question": "1+1?", "answer": "two"}\n'),
                                         ["d.jsonl:1: 'answer' has no final answer after '####'"]),
    "data file empty": (lambda t: data_file(t, "d.jsonl", ""), ["no problems"]),
    "parquet that is not Parquet": (lambda t: data_file(t, "d.parquet", "question,answer\n"), ["d.parquet"]),
    "sweep file missing": (lambda t: ["sweep", str(t / "nope.yaml"), "--dry-run"], ["nope.yaml: sweep file not found"]),
    "sweep YAML syntax": (lambda t: sweep(t, "base: {task: [\naxes: {}\n"), ["sweep.yaml:3:1: not valid YAML"]),
    "sweep unknown top-level key": (lambda t: sweep(t, {**SWEEP, "axis": {}}), ["sweep.yaml: axis: unknown key (did you mean 'axes'?)"]),
    "sweep base missing": (lambda t: sweep(t, {**SWEEP, "base": "base.yaml"}), ["sweep.yaml: base:", "base.yaml: config file not found"]),
    "sweep axis key unknown": (lambda t: sweep(t, {**SWEEP, "axes": {"tsk.name": ["a"]}}),
                               ["sweep.yaml: axes[0].tsk.name: unknown key (did you mean 'task'?)"]),
    "sweep axis leaf unknown": (lambda t: sweep(t, {**SWEEP, "axes": {"generators[0].temprature": [1]}}),
                                ["axes[0].generators[0].temprature: unknown key (did you mean 'temperature'?)"]),
    "sweep axis index out of range": (lambda t: sweep(t, {**SWEEP, "axes": {"generators[1].temperature": [1]}}),
                                      ["axes[0].generators[1].temperature: index 1 out of range"]),
    "sweep zip of unequal lengths": (lambda t: sweep(t, {**SWEEP, "axes": [{"zip": {"seed": [1, 2], "task.num_problems": [1]}}]}),
                                     ["axes[0].zip: zipped keys need equally many values"]),
    "sweep axis without values": (lambda t: sweep(t, {**SWEEP, "axes": {"seed": []}}), ["axes[0].seed: expected a non-empty list"]),
    "sweep point invalid": (lambda t: sweep(t, {**SWEEP, "axes": {"generators[0].temperature": [0.5, -1]}}),
                            ["sweep.yaml: point temperature=-1", "generators[0].temperature: Input should be greater than or equal to 0"]),
    "sweep point with a bad selector option": (lambda t: sweep(t, {**SWEEP, "axes": {"selectors": [
        [{"name": "w", "type": "weaver", "options": {"train_fraction": 3}}]]}}),
                                               ["sweep.yaml: point", "selectors[0].options.train_fraction: train_fraction must be in (0, 1]"]),
    "sweep retry flag": (lambda t: sweep(t, SWEEP, "--attempts", "0"), ["--attempts must be >= 1"]),
    "report on a directory that is no store": (lambda t: ["report", str(t)], ["not an experiment directory"]),
    "sweep status on a directory that is no sweep": (lambda t: ["sweep", "status", str(t)], ["not a sweep directory (no sweep.json)"]),
    "sweep status on a damaged manifest": (lambda t: ["sweep", "status", str(written(t, "sweep.json", "{").parent)],
                                           ["sweep.json: damaged sweep manifest"]),
    "compare a missing store": (lambda t: ["compare", str(t / "a"), str(t / "b")], ["a: not an experiment directory"]),
    "store config not YAML": (lambda t: ["report", str(store(t, {"config.yaml": "{"}))], ["store/config.yaml:1:2: not valid YAML"]),
    "store manifest damaged": (lambda t: ["report", str(store(t, {"manifest.json": "{"}))], ["store/manifest.json: damaged manifest"]),
    "store metrics damaged": (lambda t: ["show", str(store(t, {"metrics.json": "[1,"}))],
                              ["store/metrics.json: damaged", "writes it again"]),
    "show an unknown problem": (lambda t: ["show", str(store(t)), "--problem", "q99"], ["no problem 'q99' with candidates"]),
    "argument out of range": (lambda t: ["show", str(t), "--limit", "0"],
                              ["monkeybarrel show: argument --limit: expected an integer >= 1, got 0"]),
    "unknown command": (lambda t: ["valdate", "x.yaml"], ["monkeybarrel: argument COMMAND: invalid choice: 'valdate'"]),
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_malformed_input_exits_2_with_one_line_naming_where(kind, tmp_path, capsys):
    make, expected = MALFORMED[kind]
    argv = make(tmp_path)
    err = one_line_error(capsys, argv)
    for part in expected:
        assert part in err, (kind, err)


def test_there_are_at_least_30_kinds_of_malformed_input():
    assert len(MALFORMED) >= 30


if __name__ == "__main__":  # the table of the closing note: kind, input, the line printed, exit status
    import contextlib
    import io
    import sys

    print("| kind | command | the one line printed (tmp dir as …) | exit |\n|---|---|---|---|")
    for kind, (make, _) in MALFORMED.items():
        with tempfile.TemporaryDirectory() as folder:
            argv = make(Path(folder))
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                status = exit_status(argv)
            shown = " ".join(a.replace(folder, "…") for a in argv)
            line = err.getvalue().strip().replace(folder, "…").replace("|", "\\|")
            print(f"| {kind} | `{shown}` | {line} | {status} |")
    sys.exit(0)
