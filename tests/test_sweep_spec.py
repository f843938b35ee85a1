"""Sweep files: axes over any key (product, zip, labels), point names and ids, validation, foreign directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from monkeybarrel.core.config import ConfigError
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.sweep.manifest import ForeignSweepError, claim, write_manifest
from monkeybarrel.orchestrator.sweep.spec import load_sweep, sweep_from_dict

BASE = {"name": "b", "task": {"name": "arithmetic", "num_problems": 2, "options": {"difficulty": 1}},
        "generators": [{"id": "smol", "num_samples": 2, "max_tokens": 8, "options": {"num_threads": 1}}]}
GSM8K, MATH = "../shared/data/gsm8k/test.jsonl", "../shared/data/math500/test.jsonl"


def test_product_and_zip_groups_give_every_combination_with_readable_unique_names():
    sweep = sweep_from_dict({"base": BASE, "axes": [
        {"generators[0].temperature": [0.3, 1.0]},
        {"zip": {"task.name": ["gsm8k", "math"], "task.path": [GSM8K, MATH]}},
        {"product": {"generators[0].num_samples": [4, 16], "generators[0].options.max_batch": [8]}}]})
    assert len(sweep.points) == 2 * 2 * 2
    names = [p.name for p in sweep.points]
    assert names[0] == "temperature=0.3,task=gsm8k,num_samples=4" and len(set(names)) == 8
    assert len({p.id for p in sweep.points}) == 8
    point = sweep.points[-1]  # the last combination: every key set, the rest of the base kept
    assert point.config.task.path == MATH and point.config.generators[0].temperature == 1.0
    assert point.config.generators[0].options == {"num_threads": 1, "max_batch": 8}
    assert point.config.generators[0].max_tokens == 8 and point.config.name == f"sweep/{point.name}"


def test_labels_paths_and_mappings_name_points_and_mapping_values_merge_into_the_base():
    sweep = sweep_from_dict({"base": BASE, "axes": {
        "generators[0].model": ["/models/a/llama-8b", "/models/b/llama-8b", "meta-llama/Qwen 2 & co"],
        "task": {"easy": {"options": {"difficulty": 1}}, "hard": {"options": {"difficulty": 4}, "num_problems": 3}}}})
    names = [p.name for p in sweep.points]
    assert names[:2] == ["model=a-llama-8b,task=easy", "model=a-llama-8b,task=hard"]  # shortest distinct path tail
    assert names[4] == "model=meta-llama-Qwen-2-co,task=easy"  # only letters, digits and ._+@=- in names
    hard = sweep.points[1].config.task
    assert (hard.name, hard.num_problems, hard.options) == ("arithmetic", 3, {"difficulty": 4})


def test_ids_are_stable_and_follow_result_changing_keys_only():
    first = sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [0.3, 1.0]}})
    again = sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [0.3, 1.0, 2.0]}})
    assert [p.id for p in first.points] == [p.id for p in again.points[:2]]
    more = {**BASE, "generators": [{**BASE["generators"][0], "num_samples": 64, "options": {"num_threads": 4}}],
            "selectors": [{"name": "maj", "type": "majority"}]}  # more samples, runtime options, selectors: same ids
    assert [p.id for p in sweep_from_dict({"base": more, "axes": {"generators[0].temperature": [0.3, 1.0]}}).points] \
        == [p.id for p in first.points]
    other = {**BASE, "generators": [{**BASE["generators"][0], "max_tokens": 9}]}
    assert not {p.id for p in sweep_from_dict({"base": other, "axes": {"generators[0].temperature": [0.3, 1.0]}}).points} \
        & {p.id for p in first.points}


@pytest.mark.parametrize("axes, message", [
    ({"generators[1].temperature": [1.0]}, r"axes\[0\]\.generators\[1\]\.temperature: index 1 out of range"),
    ({"generators[0].temperature": [0.5, -1]}, r"(?s)point temperature=-1 .*generators\[0\]\.temperature: Input should be"),
    ({"task.nme": ["x"]}, r"task\.nme: unknown key"),
    ({"tsk.name": ["x"]}, r"axes\[0\]\.tsk\.name: unknown key \(did you mean 'task'\?\); expected one of name, seed, task"),
    ([{"zip": {"seed": [1, 2], "task.num_problems": [1]}}], r"axes\[0\]\.zip: zipped keys need equally many values"),
    ({"seed": []}, r"axes\[0\]\.seed: expected a non-empty list"),
    ({"generators[0].temperature!": [1]}, r"not a config key"),
])
def test_bad_axes_and_points_name_the_key(axes, message):
    with pytest.raises(ConfigError, match=message):
        sweep_from_dict({"base": BASE, "axes": axes})


def test_base_from_a_file_next_to_the_sweep_and_bad_files_exit_2(tmp_path: Path, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "configs" / "sweep.yaml").write_text(yaml.safe_dump(
        {"base": "base.yaml", "axes": {"generators[0].temperature": [0.3]}, "retry": {"attempts": 1}}))
    sweep = load_sweep(tmp_path / "configs" / "sweep.yaml")
    assert sweep.name == "sweep" and sweep.points[0].config.generators[0].max_tokens == 8
    assert sweep.spec.retry.attempts == 1
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({"base": BASE, "axes": {"generators[0].temperature": [-2]}}))
    out = tmp_path / "never"
    assert main(["sweep", str(tmp_path / "bad.yaml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "point temperature=-2 (generators[0].temperature=-2)" in err and "greater than or equal to 0" in err
    assert not out.exists()  # nothing was created


def test_a_directory_of_another_sweep_or_of_other_files_is_refused(tmp_path: Path):
    sweep = sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [0.3, 1.0]}})
    directory = tmp_path / "sweep"
    manifest = claim(directory, sweep)  # a new directory: every point pending
    assert [r["state"] for r in manifest["points"]] == ["pending", "pending"]
    (directory / sweep.points[0].name).mkdir(parents=True)  # the first point has started
    (directory / sweep.points[0].name / "config.yaml").write_text(sweep.points[0].config.to_yaml())
    write_manifest(directory, manifest)
    grown = sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [0.3, 1.0, 1.5]}})
    assert len(claim(directory, grown)["points"]) == 3  # adding a value keeps the started point
    other = {**BASE, "generators": [{**BASE["generators"][0], "max_tokens": 16}]}
    with pytest.raises(ForeignSweepError, match=r"another sweep's results: point\(s\) \['temperature=0.3'\]"):
        claim(directory, sweep_from_dict({"base": other, "axes": {"generators[0].temperature": [0.3, 1.0]}}))
    dropped = sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [1.0]}})
    with pytest.raises(ForeignSweepError, match="temperature=0.3"):
        claim(directory, dropped)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "config.yaml").write_text("name: x\n")
    with pytest.raises(ForeignSweepError, match="not a sweep directory"):
        claim(tmp_path / "store", sweep)
    starting = tmp_path / "starting"  # another shard's files on their way in: its sweep.yaml, a temporary file
    (starting / "shards").mkdir(parents=True)
    for name in ("sweep.yaml", ".sweep.yaml.4242.tmp", "shards/.2-of-2.json.4242.tmp"):
        (starting / name).write_text("")
    assert len(claim(starting, sweep)["points"]) == 2
    (starting / "notes.txt").write_text("mine")
    with pytest.raises(ForeignSweepError, match=r"not a sweep directory \(no sweep.json; holds \['notes.txt'\]\)"):
        claim(starting, sweep)
    assert json.loads((directory / "sweep.json").read_text())["points"][0]["name"] == "temperature=0.3"


def test_every_invalid_point_is_named_at_once_one_line_each():
    """Sweep validation named only the first invalid point (the docs say: all together)."""
    axes = [{"generators[0].temperature": [-1, 0.5, -2]}, {"generators[0].top_p": [0.5, 7]}]
    with pytest.raises(ConfigError) as refused:
        sweep_from_dict({"base": BASE, "axes": axes})
    lines = str(refused.value).splitlines()
    assert lines[0] == "sweep: 5 of 6 points are invalid; nothing was run:"
    named = [line.split(" (")[0].strip() for line in lines[1:] if line.startswith("  point ")]
    assert named == ["point temperature=-1,top_p=0.5", "point temperature=-1,top_p=7", "point temperature=0.5,top_p=7",
                     "point temperature=-2,top_p=0.5", "point temperature=-2,top_p=7"]
    assert sum("generators[0].top_p: Input should be less than or equal to 1 (got 7)" in line for line in lines) == 3
    with pytest.raises(ConfigError) as single:
        sweep_from_dict({"base": BASE, "axes": {"generators[0].temperature": [0.5, -1]}})
    assert "\n" not in str(single.value)  # one invalid point: one line


def test_a_runtime_only_change_keeps_finished_points_done():
    """``options: {max_batch: 8}`` re-ran every finished point; more samples or another selector still do."""
    from monkeybarrel.orchestrator.sweep.manifest import config_hash, is_done

    axes = {"generators[0].temperature": [0.3, 1.0]}
    done = [{"state": "done", "config_hash": config_hash(p)} for p in sweep_from_dict({"base": BASE, "axes": axes}).points]

    def changed(generator: dict | None = None, **top) -> list:
        base = {**BASE, **top, "generators": [{**BASE["generators"][0], **(generator or {})}]}
        return sweep_from_dict({"base": base, "axes": axes}).points

    runtime = changed({"options": {"num_threads": 1, "max_batch": 8}}, store={"chunk_rows": 500})
    assert all(is_done(record, point) for record, point in zip(done, runtime))
    for points in (changed({"num_samples": 4}), changed(selectors=[{"name": "w", "type": "weaver"}]),
                   changed({"options": {"num_threads": 1, "dtype": "bfloat16"}})):
        assert not any(is_done(record, point) for record, point in zip(done, points))


def test_a_failing_points_error_keeps_its_cause():
    """The last error was the exception's first line: ``…field 'hidden_size':``, the cause cut."""
    from monkeybarrel.orchestrator.sweep.driver import one_line

    error = ValueError("Validation error for field 'hidden_size':\n    TypeError: Field 'hidden_size' expected int")
    assert one_line(error) == "ValueError: Validation error for field 'hidden_size': TypeError: Field 'hidden_size' " \
                              "expected int"


def test_engine_starts_of_a_run_killed_with_sigkill_are_counted(tmp_path: Path):
    """Starts were counted when a group's engines closed, which a SIGKILL never lets happen."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from monkeybarrel.orchestrator.sweep.status import sweep_status

    base = {**BASE, "task": {**BASE["task"], "num_problems": 4},
            "generators": [{**BASE["generators"][0], "num_samples": 8, "max_tokens": 64}]}
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump({"base": base, "axes": {"generators[0].temperature": [0.3, 1.0]}}))
    out = tmp_path / "out"
    driver = subprocess.Popen([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "sweep", str(path), "--out",
                               str(out), "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and driver.poll() is None:
            manifest = json.loads((out / "sweep.json").read_text()) if (out / "sweep.json").is_file() else {}
            if manifest.get("engines"):
                break
            time.sleep(0.2)
        assert driver.poll() is None, "the sweep ended before it could be killed"
        os.kill(driver.pid, signal.SIGKILL)
    finally:
        driver.wait()
    status = sweep_status(out)
    assert status["engines"] == {"smollm2-135m-instruct (embedded)": {"starts": 1, "points": ["temperature=0.3"]}}
    assert status["states"].get("pending") == 2  # the killed point shows pending: its driver is gone
