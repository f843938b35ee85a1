"""Lost files: `store check` names every listed file that is missing or cannot be read and every file a store
must have; `report` and `run` refuse such a store by name (exit 2, one line); `store repair` never stops
half-way and leaves a store the next run completes. The full matrix (5 losses x 11 kinds of file x 2 stores,
before -> after) is ``benchmarks/store_faults.py --faults gone``."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.store.maintenance import check, repair

_spec = importlib.util.spec_from_file_location("store_faults", Path(__file__).parents[1] / "benchmarks" / "store_faults.py")
faults = sys.modules["store_faults"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)

CONFIG = faults.experiment_config(problems=3, samples=2)
PROBLEMS_X_SAMPLES = 6
KINDS = sorted(faults.LOST_FILES)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    return faults.bases(tmp_path_factory.mktemp("bases"), CONFIG)


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("config") / "config.yaml"
    path.write_text(CONFIG.to_yaml())
    return path


def _trial(stores, tmp_path: Path, config_file: Path, loss: str, kind: str, variant: str = "chunked"):
    base = stores[variant]
    rel = faults._relative(base, faults.LOST_FILES[kind])[-1]
    return faults.run_loss_trial(faults.LossTrial(loss, kind, variant, rel), base, tmp_path / "store", CONFIG, config_file)


@pytest.mark.parametrize("kind", KINDS)
def test_a_deleted_file_is_named_refused_repaired_and_redone(stores, tmp_path: Path, config_file: Path, kind: str):
    trial = _trial(stores, tmp_path, config_file, "deleted", kind, variant=["chunked", "compacted"][KINDS.index(kind) % 2])
    assert trial.named and trial.report_refused and trial.repair_finished and trial.complete_after_rerun, trial
    # config.yaml is the one file repair cannot rebuild: the next run writes it (`run` does not refuse its loss)
    assert trial.clean_after_repair == (kind != "config.yaml"), trial


@pytest.mark.parametrize("loss", ["a directory in its place", "a symlink loop"])
@pytest.mark.parametrize("kind", ["candidates chunk", "scores chunk", "manifest.json", "written.jsonl"])
def test_a_file_replaced_by_what_cannot_be_read_is_named_set_aside_and_redone(stores, tmp_path: Path,
                                                                               config_file: Path, loss: str, kind: str):
    trial = _trial(stores, tmp_path, config_file, loss, kind)
    assert trial.named and trial.report_refused and trial.repair_finished, trial
    assert trial.clean_after_repair and trial.complete_after_rerun, trial


def test_check_says_what_is_gone_and_report_and_run_refuse_in_one_line(stores, tmp_path: Path, config_file: Path,
                                                                       capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    chunk = ExperimentStore(work).chunk_paths("candidates")[1]
    chunk.unlink()
    (work / "problems.parquet").unlink()
    assert main(["store", "check", str(work)]) == 1
    out = capsys.readouterr().out
    rel = chunk.relative_to(work).as_posix()
    assert f"{rel}: missing (listed in written.jsonl: the store wrote it and never deleted it)" in out
    assert "problems.parquet: missing" in out and "no problems found" not in out
    for command in (["report", str(work)], ["run", str(config_file), "--out", str(work), "--no-progress"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: {chunk}: missing"), err
        assert ("1 more file(s)" in err) == (command[0] == "report")  # a run writes problems.parquet itself
    assert chunk.parent.is_dir() and not chunk.exists()       # refused: nothing was written
    assert main(["run", str(config_file), "--out", str(work), "--no-progress", "--force"]) == 0   # --force discards
    assert faults.complete(work, CONFIG)


def test_run_goes_ahead_without_the_files_it_writes_itself(stores, tmp_path: Path, config_file: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    (work / "config.yaml").unlink()
    (work / "problems.parquet").unlink()
    assert main(["report", str(work)]) == 2
    assert main(["run", str(config_file), "--out", str(work), "--no-progress"]) == 0
    assert faults.complete(work, CONFIG)


def test_report_writes_again_the_outputs_it_derives_and_refuses_one_it_cannot_replace(stores, tmp_path: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["compacted"], work)
    for name in ("metrics.json", "selections.parquet", "report.md", "coverage.png"):
        (work / name).unlink()
    assert main(["store", "check", str(work)]) == 1
    assert main(["report", str(work)]) == 0
    assert main(["store", "check", str(work)]) == 0 and (work / "selections.parquet").is_file()
    (work / "metrics.json").unlink()
    (work / "metrics.json").mkdir()                                       # not missing: in the way
    capsys.readouterr()
    assert main(["report", str(work)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {work / 'metrics.json'}: not a file (a directory)")


def test_a_store_that_lost_its_file_list_names_the_files_every_store_has(stores, tmp_path: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    for name in ("written.jsonl", "problems.parquet", "labels.parquet"):
        (work / name).unlink()
    damaged = check(work).damaged
    assert set(damaged) == {"written.jsonl", "problems.parquet", "labels.parquet"}, damaged
    assert all("every store has one" in damaged[name] for name in ("problems.parquet", "labels.parquet"))
    manifest = json.loads((work / "manifest.json").read_text())          # an older store: no list, ever
    del manifest["files_listed_in"]
    (work / "manifest.json").write_text(json.dumps(manifest))
    assert set(check(work).damaged) == {"problems.parquet", "labels.parquet"}


def test_what_the_store_deletes_itself_is_not_lost_and_a_deletion_cut_short_is_finished(stores, tmp_path: Path):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    assert main(["store", "compact", str(work)]) == 0                    # old chunks deleted by the store
    assert not check(work).problems
    changed = CONFIG.to_dict()                                            # a changed verifier's scores are discarded
    changed["verifiers"][0]["options"] = {"finished_only": False}
    run_experiment(ExperimentConfig.from_dict(changed), work, show_progress=False)
    assert not check(work).problems
    store = ExperimentStore(work)
    chunk = store.chunk_paths("scores/has")[0]
    store.written.forget([chunk])                                         # killed between noting and deleting
    assert "deletion cut short" in check(work).damaged[chunk.relative_to(work).as_posix()]
    assert any("deleted" in line for line in repair(work)) and not chunk.exists()
    assert not check(work).problems


def test_repair_does_not_stop_at_a_file_it_cannot_read_or_move(stores, tmp_path: Path):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    store = ExperimentStore(work)
    candidates, scores = store.chunk_paths("candidates"), store.chunk_paths("scores/has")
    candidates[0].unlink()                                                # missing
    scores[0].unlink()
    scores[0].mkdir()                                                     # a directory in its place
    (work / "labels.parquet").write_bytes(b"PAR1 not parquet")            # damaged
    (work / "metrics.json").unlink()
    (work / "metrics.json").symlink_to("metrics.json.gone")               # a dangling link
    actions = repair(work)
    for path in (candidates[0], scores[0], work / "labels.parquet", work / "metrics.json"):
        assert any(line.startswith(path.relative_to(work).as_posix() + ": ") for line in actions), actions
    assert not check(work).problems
    run_experiment(CONFIG, work, show_progress=False)
    assert faults.complete(work, CONFIG)


# ---- unreadable by permissions (a process that cannot read a chmod 000 file) ---------------------------
def _unprivileged(*args: str) -> list[str]:
    """The command run as a process that a chmod 000 file refuses (root loses the capabilities that read any file)."""
    if os.geteuid() != 0:
        return list(args)
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv is not installed: a chmod 000 file would still read")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", *args]


def _cli(*args: str) -> subprocess.CompletedProcess:
    command = _unprivileged(sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", *args)
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("target", ["candidates chunk", pytest.param("written.jsonl", marks=pytest.mark.slow),
                                    pytest.param("manifest.json", marks=pytest.mark.slow),
                                    pytest.param("answers.parquet", marks=pytest.mark.slow)])
def test_a_file_made_unreadable_is_named_refused_set_aside_and_redone(stores, tmp_path: Path, config_file: Path,
                                                                      target: str):
    work = tmp_path / "store"
    shutil.copytree(stores["compacted"], work)
    path = ExperimentStore(work).chunk_paths("candidates")[0] if target == "candidates chunk" else work / target
    rel = path.relative_to(work).as_posix()
    path.chmod(0)
    try:
        checked = _cli("store", "check", str(work))
        assert checked.returncode == 1 and f"{rel}: unreadable (Permission denied)" in checked.stdout, checked
        reported = _cli("report", str(work))
        assert reported.returncode == 2 and reported.stderr.startswith(f"error: {path}: unreadable"), reported.stderr
        assert reported.stderr.count("\n") == 1 and "Traceback" not in reported.stderr
        repaired = _cli("store", "repair", str(work))
        assert repaired.returncode == 0 and f"{rel}: unreadable (Permission denied); moved to damaged/" in repaired.stdout
        assert main(["store", "check", str(work)]) == 0          # (the file set aside stays unreadable)
        assert main(["run", str(config_file), "--out", str(work), "--no-progress"]) == 0
        assert faults.complete(work, CONFIG)
    finally:
        faults._writable(work)


def test_a_folder_made_unreadable_is_named_and_left_to_its_owner_and_repair_goes_on(stores, tmp_path: Path,
                                                                                     config_file: Path):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    store = ExperimentStore(work)
    chunks = [p.relative_to(work).as_posix() for p in store.chunk_paths("scores/freq")]
    (work / "labels.parquet").unlink()                                     # and a loss repair can fix
    (work / "scores" / "freq").chmod(0)
    try:
        checked = _cli("store", "check", str(work))
        assert checked.returncode == 1 and all(f"{rel}: unreadable (Permission denied)" in checked.stdout
                                               for rel in chunks), checked.stdout
        repaired = _cli("store", "repair", str(work))
        assert repaired.returncode == 0, repaired
        assert repaired.stdout.count("scores/freq/: cannot be read") == 1 and "labels.parquet: missing" in repaired.stdout
        refused = _cli("run", str(config_file), "--out", str(work), "--no-progress")
        assert refused.returncode == 2 and refused.stderr.startswith(f"error: {work / chunks[0]}: unreadable")
        (work / "scores" / "freq").chmod(0o755)                            # its owner gives it back
        assert main(["store", "repair", str(work)]) == 0
        assert main(["store", "check", str(work)]) == 0
        assert len(ExperimentStore(work).scores("freq")) == PROBLEMS_X_SAMPLES   # its scores were kept
        assert main(["run", str(config_file), "--out", str(work), "--no-progress"]) == 0
        assert faults.complete(work, CONFIG)
    finally:
        faults._writable(work)


def test_several_losses_at_once_are_all_named_and_repaired_in_one_pass(stores, tmp_path: Path, config_file: Path):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    store = ExperimentStore(work)
    unreadable = [work / "written.jsonl", store.chunk_paths("candidates")[0]]     # the list itself among them
    deleted, replaced = work / "problems.parquet", work / "labels.parquet"   # (files every store has: named
    # without the list, whereas a chunk deleted with the list unreadable could not be)
    for path in unreadable:
        path.chmod(0)
    deleted.unlink()
    replaced.unlink()
    replaced.mkdir()
    try:
        checked = _cli("store", "check", str(work))
        lost = [*unreadable, deleted, replaced]
        assert checked.returncode == 1 and all(f"{p.relative_to(work).as_posix()}: " in checked.stdout for p in lost)
        repaired = _cli("store", "repair", str(work))
        assert repaired.returncode == 0 and "could not be fixed" not in repaired.stdout, repaired
        assert all(f"{p.relative_to(work).as_posix()}: " in repaired.stdout for p in lost), repaired.stdout
        assert main(["store", "check", str(work)]) == 0
        assert main(["run", str(config_file), "--out", str(work), "--no-progress"]) == 0
        assert faults.complete(work, CONFIG)
    finally:
        faults._writable(work)
