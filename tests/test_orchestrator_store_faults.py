"""Damaged stores: `store check` names every damaged file, `report` names it, `store repair` leaves a clean
store whose re-run completes. The full 100-offset campaign is ``benchmarks/store_faults.py``."""

from __future__ import annotations

import importlib.util
import random
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monkeybarrel.core.records import CANDIDATE_KEY, CANDIDATE_SCHEMA
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.stages.preflight import build_task
from monkeybarrel.orchestrator.store.maintenance import check

_spec = importlib.util.spec_from_file_location("store_faults", Path(__file__).parents[1] / "benchmarks" / "store_faults.py")
faults = sys.modules["store_faults"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(faults)

CONFIG = faults.experiment_config(problems=4, samples=3)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """A real store as a run writes it (``chunked``) and ``compacted``."""
    return faults.bases(tmp_path_factory.mktemp("bases"), CONFIG)


def _keys(table: pa.Table) -> set:
    return set(_rows(table))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_byte_damage_is_named_repaired_and_redone(stores, tmp_path: Path, seed: int):
    rng = random.Random(seed)
    variant = ["chunked", "compacted"][seed % 2]
    trial = faults.run_trial(stores[variant], tmp_path / "store", CONFIG, rng, files=3)
    assert trial.found == sorted(trial.damaged), trial      # each damaged file, and only those
    assert trial.clean_after_repair and trial.complete_after_rerun, trial


def test_damage_inside_a_compacted_chunk_is_named_by_check_report_and_repair(stores, tmp_path: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["compacted"], work)
    chunk = next((work / "candidates").glob("part-*.parquet"))
    rel = chunk.relative_to(work).as_posix()
    _damage_column(chunk, row_group=0)                    # in the text column's pages; the footer is intact

    assert main(["store", "check", str(work)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith(rel + ": ")] and not [l for l in out if "part-" in l and rel not in l]
    assert main(["report", str(work)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {chunk}: ") and err.count("\n") == 1 and "store repair" in err
    assert main(["store", "repair", str(work)]) == 0
    assert f"{rel}: " in capsys.readouterr().out and (work / "damaged" / rel).is_file()
    assert main(["store", "check", str(work)]) == 0
    assert not faults.complete(work, CONFIG)             # set aside: the next run redoes it
    run_experiment(CONFIG, work, show_progress=False)
    assert faults.complete(work, CONFIG)


def test_damage_where_the_file_still_parses_is_found_by_its_bytes_and_rewritten(stores, tmp_path: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    labels = work / "labels.parquet"
    before = pq.read_table(labels)
    data = bytearray(labels.read_bytes())
    at = data.rindex(b"parquet-cpp-arrow")            # the footer's created_by string: the table still reads
    data[at] ^= 0x20
    labels.write_bytes(bytes(data))
    assert pq.read_table(labels).equals(before)
    assert main(["store", "check", str(work)]) == 1
    assert "labels.parquet: bytes differ from what the store wrote" in capsys.readouterr().out
    assert main(["store", "repair", str(work)]) == 0
    assert "labels.parquet: bytes differ" in capsys.readouterr().out
    assert not check(work).problems and pq.read_table(labels).equals(before)


def test_repair_keeps_the_row_groups_that_still_read(tmp_path: Path):
    from monkeybarrel.orchestrator.store.integrity import ROW_GROUP_ROWS
    from monkeybarrel.orchestrator.store.maintenance import repair

    store = ExperimentStore(tmp_path)
    store.write_text("config.yaml", "name: x\n")
    n = 3 * ROW_GROUP_ROWS
    chunk = store.append_chunk("candidates", pa.table({
        "problem_id": [f"p{i // 10}" for i in range(n)], "generator_id": ["g"] * n,
        "sample_index": pa.array(np.arange(n) % 10, pa.int32()), "text": [f"The answer is {i}." for i in range(n)],
        "prompt_tokens": [1] * n, "completion_tokens": [1] * n, "finish_reason": ["stop"] * n,
        "wall_time_s": [0.1] * n, "seed": [0] * n, "error": [None] * n}, schema=CANDIDATE_SCHEMA))
    _damage_column(chunk, row_group=1)
    assert list(check(tmp_path).damaged) == [chunk.relative_to(tmp_path).as_posix()]
    assert any(f"{2 * ROW_GROUP_ROWS} row(s) that still read kept" in line for line in repair(tmp_path))
    kept = store.candidates()
    assert kept.num_rows == 2 * ROW_GROUP_ROWS and not check(tmp_path).problems
    assert _keys(kept) == {(f"p{i // 10}", "g", i % 10) for i in [*range(ROW_GROUP_ROWS), *range(2 * ROW_GROUP_ROWS, n)]}


def test_repair_drops_every_row_whose_candidate_is_gone_so_a_rerun_answers_it_afresh(stores, tmp_path: Path, capsys):
    work = tmp_path / "store"
    shutil.copytree(stores["chunked"], work)
    store = ExperimentStore(work)
    gone = store.chunk_paths("candidates")[0]            # one problem's candidates, removed by hand
    lost = _keys(pq.read_table(gone))
    gone.unlink()
    assert main(["store", "check", str(work)]) == 1
    out = capsys.readouterr().out
    for table in ("scores/has", "scores/freq", "answers", "labels"):
        assert f"{table}: {len(lost)} row(s) of candidates that are not stored" in out
    assert main(["store", "repair", str(work)]) == 0
    assert main(["store", "check", str(work)]) == 0
    for table in (store.scores("has"), store.scores("freq"), store.read_table("answers"), store.read_table("labels")):
        assert not _keys(table) & lost
    selections = store.read_table("selections")
    assert not _keys(selections.filter(pa.compute.is_valid(selections.column("sample_index")))) & lost

    run_experiment(CONFIG, work, show_progress=False)   # the model samples them again; they are answered afresh
    assert faults.complete(work, CONFIG)
    candidates = store.candidates()
    new_text = {key: (text if reason == "stop" else None) for key, text, reason in zip(
        _rows(candidates), candidates.column("text").to_pylist(), candidates.column("finish_reason").to_pylist())}
    answers = store.read_table("answers")
    task = build_task(CONFIG)
    for key, answer in zip(_rows(answers), answers.column("answer").to_pylist()):
        if key in lost:                                  # not the answer of the text that was lost
            assert answer == task.extract_answers([new_text[key]])[0]


def _rows(table: pa.Table) -> list[tuple]:
    return list(zip(*(table.column(k).to_pylist() for k in CANDIDATE_KEY)))


def _damage_column(chunk: Path, row_group: int, column: str = "text") -> None:
    """Flip the bytes in the middle of one column chunk's pages (the footer stays intact)."""
    meta = pq.read_metadata(chunk).row_group(row_group).column(CANDIDATE_SCHEMA.get_field_index(column))
    start = meta.dictionary_page_offset if meta.has_dictionary_page else meta.data_page_offset
    data = bytearray(chunk.read_bytes())
    data[start + meta.total_compressed_size // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
