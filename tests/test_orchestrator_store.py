"""The store and the runner with the real embedded model: resume, SIGKILL, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from conftest import tiny_config
from monkeybarrel.core.config import ConfigError, ExperimentConfig
from monkeybarrel.core.records import CANDIDATE_SCHEMA
from monkeybarrel.orchestrator.store.config_guard import ConfigConflictError
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore, StoreError
from monkeybarrel.core.files import TaskDataError
from monkeybarrel.verifiers.base import VERIFIERS, Verifier


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*.parquet"))}


def _keys(directory: Path) -> list[tuple[str, str, int]]:
    table = ExperimentStore(directory).candidates()
    return list(zip(table.column("problem_id").to_pylist(), table.column("generator_id").to_pylist(),
                    table.column("sample_index").to_pylist()))


def _candidate_rows(indices, problem="p", answer="42"):
    return pa.Table.from_pylist([{"problem_id": problem, "generator_id": "g", "sample_index": i,
                                  "text": f"The answer is {answer}.", "prompt_tokens": 1, "completion_tokens": 1,
                                  "finish_reason": "stop", "wall_time_s": 0.1, "seed": 1, "error": None}
                                 for i in indices], schema=CANDIDATE_SCHEMA)


def test_temporaries_belong_to_their_writer_and_only_dead_writers_are_cleaned(tmp_path: Path):
    store = ExperimentStore(tmp_path)
    store.append_chunk("candidates", _candidate_rows([0]))
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        in_flight = tmp_path / "candidates" / f".tmp-{live.pid}-abc-part-x.parquet"   # a live writer's chunk
        in_flight.write_bytes(b"half a parquet file")
        dead = tmp_path / "candidates" / ".tmp-999999999-abc-part-y.parquet"            # a killed writer's
        dead.write_bytes(b"half a parquet file")
        reopened = ExperimentStore(tmp_path)              # opening (reading) deletes nothing
        assert in_flight.exists() and dead.exists()
        assert reopened.candidates().num_rows == 1        # and never reads temporaries
        assert reopened.remove_stale_temporaries() == [dead]
        assert in_flight.exists() and not dead.exists()
    finally:
        live.kill()
        live.wait()
    store.append_chunk("candidates", _candidate_rows([0]))
    with pytest.raises(StoreError, match="1 duplicate key.*problem_id='p', generator_id='g', sample_index=0.*store repair"):
        reopened.candidates()


def test_second_writer_is_refused_naming_the_holder(tmp_path: Path):
    from monkeybarrel.orchestrator.store.lock import RunLock, StoreLockedError

    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from monkeybarrel.orchestrator.store.lock import RunLock; "
                               f"lock = RunLock({str(tmp_path)!r}).acquire(); print('locked', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(StoreLockedError, match=f"pid {holder.pid}"):
            RunLock(tmp_path).acquire()
        with pytest.raises(StoreLockedError, match=f"pid {holder.pid}"):
            run_experiment(ExperimentConfig.from_dict(tiny_config(problems=1, samples=1)), tmp_path, show_progress=False)
    finally:
        holder.kill()
        holder.wait()
    with RunLock(tmp_path):            # a killed holder's lock is free at once (the kernel drops it)
        pass


def test_runs_refuse_a_directory_that_is_not_a_store_and_touch_nothing_in_it(tmp_path: Path, capsys):
    from monkeybarrel.orchestrator.cli.main import main

    user_dir = tmp_path / "papers"
    user_dir.mkdir()
    (user_dir / "draft.tex").write_text("precious")
    (user_dir / "config.yaml").write_text(yaml.safe_dump(tiny_config(problems=1, samples=1)))  # a config is no store
    for force in ([], ["--force"]):
        assert main(["run", str(user_dir / "config.yaml"), "--out", str(user_dir), "--no-progress", *force]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {user_dir}: not an experiment store and not empty") and err.count("\n") == 1
    assert sorted(p.name for p in user_dir.iterdir()) == ["config.yaml", "draft.tex"]   # not even a lock file
    with pytest.raises(StoreError, match="not an experiment store"):
        ExperimentStore(user_dir).discard()


def _with_user_files(root: Path) -> list[str]:
    """A user's files in a store directory, named like the store's (by type, folder, or both)."""
    chunk = next((root / "candidates").glob("part-*.parquet"))
    user = {"fig.png": b"\x89PNG mine", "notes.parquet": chunk.read_bytes(), "candidates/mine.parquet": chunk.read_bytes(),
            "scores/has/README": b"mine", "artifacts/notes.json": b"{}", "drafts/.tmp-1-ab-x": b"mine"}
    for name, data in user.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return sorted(user)


def test_force_deletes_exactly_the_files_the_store_wrote(tmp_path: Path):
    out = tmp_path / "run"
    _prestored(out, problems=2, samples=2)
    config = ExperimentConfig.from_dict(tiny_config(problems=2, samples=2, verifiers=[{"name": "has", "type": "has_answer"}]))
    run_experiment(config, out, show_progress=False)
    mine = _with_user_files(out)
    store = ExperimentStore(out)
    written = store.written.paths()
    assert {"config.yaml", "manifest.json", "problems.parquet", "answers.parquet", "labels.parquet", "selections.parquet",
            "metrics.json", "report.md", "report.html", "coverage.png"} <= set(written)
    assert sum(p.startswith("candidates/part-") for p in written) == 2 and not set(mine) & set(written)

    kept = store.discard()
    assert [p.relative_to(out).as_posix() for p in kept] == mine
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != ".lock") == mine


def test_an_older_store_without_a_file_list_is_resumed_listed_and_discarded_by_its_names(tmp_path: Path, capsys):
    from monkeybarrel.orchestrator.cli.main import main

    out = tmp_path / "run"
    _prestored(out, problems=2, samples=2)
    config = ExperimentConfig.from_dict(tiny_config(problems=2, samples=2))
    run_experiment(config, out, show_progress=False)
    _as_older_store(out)                                    # as an older monkeybarrel left it
    mine = _with_user_files(out)
    assert main(["store", "check", str(out)]) == 0
    assert "no written.jsonl" in capsys.readouterr().out
    run_experiment(config, out, show_progress=False)        # its first write lists the older files too
    assert main(["store", "check", str(out)]) == 0
    assert [p.relative_to(out).as_posix() for p in ExperimentStore(out).discard()] == mine

    _prestored(out, problems=1, samples=1)
    (out / "manifest.json").write_text(json.dumps({"config_hash": "x"}))
    (out / "written.jsonl").unlink()
    assert [p.relative_to(out).as_posix() for p in ExperimentStore(out).discard()] == mine   # names alone, no list


def _as_older_store(out: Path) -> None:
    """No ``written.jsonl``, and a manifest that does not name one (as monkeybarrel wrote before the list)."""
    (out / "written.jsonl").unlink()
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["files_listed_in"]
    (out / "manifest.json").write_text(json.dumps(manifest))


def test_store_check_repair_compact(tmp_path: Path, capsys):
    from monkeybarrel.orchestrator.cli.main import main
    from monkeybarrel.orchestrator.store.maintenance import check

    store = ExperimentStore(tmp_path)
    store.write_text("config.yaml", "name: x\n")
    for i in range(5):
        store.append_chunk("candidates", _candidate_rows([i]))
    store.append_chunk("candidates", _candidate_rows([3, 4], answer="7"))      # a second writer's duplicates
    (store.root / "candidates" / "part-99999999999999999999-bad.parquet").write_bytes(b"not parquet")
    health = check(tmp_path)
    assert health.duplicates["candidates"] == 2 and len(health.damaged) == 1 and health.chunks["candidates"] == 7
    assert main(["store", "check", str(tmp_path)]) == 1
    assert "2 duplicate key(s)" in capsys.readouterr().out
    with pytest.raises(StoreError, match="bad.parquet: Parquet magic bytes not found.*store repair"):
        store.candidates()
    assert main(["store", "repair", str(tmp_path)]) == 0
    assert "candidates/part-99999999999999999999-bad.parquet: Parquet magic bytes not found" in capsys.readouterr().out
    table = store.candidates()
    assert sorted(table.column("sample_index").to_pylist()) == [0, 1, 2, 3, 4]
    texts = dict(zip(table.column("sample_index").to_pylist(), table.column("text").to_pylist()))
    assert texts[3] == texts[4] == "The answer is 7." and texts[0] == "The answer is 42."   # newest kept
    assert len(store.chunk_paths("candidates")) == 1 and (tmp_path / "damaged" / "candidates").is_dir()
    assert main(["store", "check", str(tmp_path)]) == 0
    for i in range(5, 8):
        store.append_chunk("candidates", _candidate_rows([i]))
    assert main(["store", "compact", str(tmp_path)]) == 0
    assert len(store.chunk_paths("candidates")) == 1 and store.candidates().num_rows == 8


def test_sigkill_mid_run_then_resume_has_no_missing_or_duplicate_candidates(tmp_path: Path):
    config = tiny_config(problems=4, samples=3, max_tokens=12)
    config["generators"][0]["options"]["max_batch"] = 3  # one problem per batch: chunks land one by one
    config["store"] = {"chunk_problems": 1}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "run", str(config_path),
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
    with pytest.raises(ConfigError, match=r"generators\[0\]\.model: .*no-such-model-dir: no such model"):
        run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    assert not (tmp_path / "run").exists()


def test_new_samples_rescore_whole_problem_verifiers_and_the_newest_scores_win(tmp_path: Path):
    from monkeybarrel.core.records import Problem
    from monkeybarrel.orchestrator.stages.verify import run_verify_stage

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


@VERIFIERS.register("test_interrupting")
class _InterruptingVerifier(Verifier):
    """Scores 1.0 and, on its ``after``-th problem, behaves as if the user pressed Ctrl-C."""

    def __init__(self, name: str, after: int = 2) -> None:
        super().__init__(name)
        self.after, self.calls = after, 0

    def score(self, problem, candidates):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return np.ones(len(candidates))


def _prestored(directory: Path, problems: int, samples: int) -> None:
    """Candidates under tiny_config's keys, so a run samples nothing (no model needed)."""
    store = ExperimentStore(directory)
    for p in range(problems):
        store.append_chunk("candidates", pa.Table.from_pylist([
            {"problem_id": f"arithmetic-d1-{p:05d}", "generator_id": "smol", "sample_index": i,
             "text": f"The answer is {i}.", "prompt_tokens": 3, "completion_tokens": 5, "finish_reason": "stop",
             "wall_time_s": 0.1, "seed": 0, "error": None} for i in range(samples)], schema=CANDIDATE_SCHEMA))


def test_ctrl_c_during_verify_keeps_every_finished_score(tmp_path: Path, capsys):
    from monkeybarrel.orchestrator.cli.main import main

    out = tmp_path / "run"
    _prestored(out, problems=5, samples=2)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(problems=5, samples=2, verifiers=[
        {"name": "has", "type": "has_answer"}, {"name": "stop", "type": "test_interrupting", "options": {"after": 3}}])))
    assert main(["run", str(config), "--out", str(out), "--no-progress"]) == 130
    assert "every finished candidate and score is stored" in capsys.readouterr().err
    store = ExperimentStore(out)
    assert store.scores("has").num_rows == 10                  # the verifier before finished and is kept
    assert store.scores("stop").num_rows == 6                  # 3 finished problems x 2, written on Ctrl-C
    assert store.candidates().num_rows == 10 and not store.temporaries()


def test_runtime_options_never_block_and_a_changed_verifier_rescores_alone(tmp_path: Path):
    out = tmp_path / "run"
    _prestored(out, problems=2, samples=2)
    verifiers = [{"name": "has", "type": "has_answer"}, {"name": "len", "type": "length", "options": {"prefer": "shorter"}}]
    run_experiment(ExperimentConfig.from_dict(tiny_config(problems=2, samples=2, verifiers=verifiers)), out,
                   show_progress=False)
    candidates, has = _digest(out / "candidates"), _digest(out / "scores" / "has")

    faster = tiny_config(problems=2, samples=2, verifiers=verifiers)
    faster["generators"][0]["options"] = {"num_threads": 2, "max_batch": 7}    # runtime-only: no conflict
    faster["store"] = {"chunk_rows": 5, "flush_seconds": 1}
    run_experiment(ExperimentConfig.from_dict(faster), out, show_progress=False)

    longer = [verifiers[0], {"name": "len", "type": "length", "options": {"prefer": "longer"}}]
    before = ExperimentStore(out).scores("len").column("score").to_pylist()
    run_experiment(ExperimentConfig.from_dict(tiny_config(problems=2, samples=2, verifiers=longer)), out,
                   show_progress=False)
    after = ExperimentStore(out).scores("len").column("score").to_pylist()
    assert after != before and len(after) == 4                 # re-scored with the new options
    assert _digest(out / "candidates") == candidates and _digest(out / "scores" / "has") == has

    manifest = json.loads((out / "manifest.json").read_text())  # a verifier that never stored anything
    manifest["result_inputs"]["verifiers[name=judge]"] = {"name": "judge", "type": "weavr", "options": {}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    fixed = [*longer, {"name": "judge", "type": "has_answer"}]
    run_experiment(ExperimentConfig.from_dict(tiny_config(problems=2, samples=2, verifiers=fixed)), out,
                   show_progress=False)
    assert ExperimentStore(out).scores("judge").num_rows == 4


def test_wall_time_s_is_each_candidates_share_of_the_sampling_wall_time(tmp_path: Path):
    config = tiny_config(problems=4, samples=3, max_tokens=12)
    config["generators"][0]["options"]["max_batch"] = 12   # four problems in one decode batch, finishing apart
    experiment = run_experiment(ExperimentConfig.from_dict(config), tmp_path / "run", show_progress=False)
    stage_s = experiment.manifest()["runs"][-1]["sampled"]["smol"]["wall_s"]
    shares = experiment.candidates().column("wall_time_s").to_numpy()
    assert (shares > 0).all()
    assert 0.9 * stage_s - 0.05 <= shares.sum() <= stage_s   # the stage's seconds, each counted once


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "name: x\nseed: 1\n",
                                  "task: {name: arithmetic}\n", "generators: [{id: g}]\n"])
def test_a_config_file_without_task_and_generators_is_refused(tmp_path: Path, capsys, text: str):
    from monkeybarrel.orchestrator.cli.main import main

    path = tmp_path / "c.yaml"
    path.write_text(text)
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "out")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {path}: ") and "task" in err and "generators" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
