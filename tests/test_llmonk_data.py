import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monkeybarrel.core.hub import DataUnavailableError
from monkeybarrel.experiments.llmonk_data import (OutcomeDataError, read_monkey_business, read_outcomes_parquet,
                                                  stack_counts)

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "llmonk" / "pythia_math_individual_outcomes.parquet"


def write_outcomes(path, blocks, score_type=pa.float16()):
    """The processed layout: one row per sample, rows shuffled like the released file."""
    rows = {"Problem Idx": [], "Attempt Idx": [], "Score": [], "Benchmark": [], "Model": []}
    for (benchmark, model), matrix in blocks.items():
        for p, problem in enumerate(sorted(matrix)):
            for a, ok in enumerate(matrix[problem]):
                rows["Problem Idx"].append(problem)
                rows["Attempt Idx"].append(a + 1)
                rows["Score"].append(float(ok))
                rows["Benchmark"].append(benchmark)
                rows["Model"].append(model)
    order = np.random.default_rng(0).permutation(len(rows["Score"]))
    table = pa.table({k: [v[i] for i in order] for k, v in rows.items()})
    table = table.set_column(2, "Score", table["Score"].cast(score_type))
    pq.write_table(table, path)
    return path


def test_parquet_layout_loads_into_dense_blocks_in_attempt_order(tmp_path):
    blocks = {("MATH", "Pythia 70M"): {82: [0, 0, 1, 0], 7: [1, 1, 0, 0]},
              ("MATH", "Pythia 12B"): {82: [1, 0, 1, 1], 7: [0, 0, 0, 0], 9: [0, 1, 0, 0]}}
    out = read_outcomes_parquet(write_outcomes(tmp_path / "o.parquet", blocks))
    assert [b.model for b in out] == ["Pythia 70M", "Pythia 12B"] or [b.model for b in out] == ["Pythia 12B", "Pythia 70M"]
    by_model = {b.model: b for b in out}
    small = by_model["Pythia 70M"]
    assert small.problem_ids.tolist() == [7, 82]
    assert small.correct.tolist() == [[True, True, False, False], [False, False, True, False]]
    assert small.n_samples.tolist() == [4, 4]
    n, c, ids = stack_counts(out)
    assert ids.tolist() == [7, 9, 82]
    assert n[[b.model for b in out].index("Pythia 70M")].tolist() == [4, 0, 4]
    assert c[[b.model for b in out].index("Pythia 12B")].tolist() == [0, 1, 3]
    only = read_outcomes_parquet(tmp_path / "o.parquet", models=["Pythia-12B"])
    assert [b.model for b in only] == ["Pythia 12B"]


def test_parquet_errors_name_the_file_and_what_was_expected(tmp_path):
    pq.write_table(pa.table({"Problem Idx": [1], "Score": [1.0]}), tmp_path / "bad.parquet")
    with pytest.raises(OutcomeDataError, match=r"bad.parquet: missing column\(s\) \['Attempt Idx', 'Benchmark', 'Model'\]"):
        read_outcomes_parquet(tmp_path / "bad.parquet")
    write_outcomes(tmp_path / "half.parquet", {("MATH", "m"): {1: [0.5, 1]}}, score_type=pa.float64())
    with pytest.raises(OutcomeDataError, match="'Score' is 0.5; expected 0 or 1"):
        read_outcomes_parquet(tmp_path / "half.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with pytest.raises(OutcomeDataError, match="text.parquet: not a readable parquet file"):
        read_outcomes_parquet(tmp_path / "text.parquet")
    with pytest.raises(OutcomeDataError, match="no rows"):
        read_outcomes_parquet(write_outcomes(tmp_path / "o.parquet", {("MATH", "m"): {1: [1]}}), models=["other"])


def test_monkey_business_local_copy_reads_is_corrects_lists(tmp_path):
    rows = [{"question": "q0", "samples": ["a", "b", "c"], "is_corrects": [False, True, True], "gt_answer": "1",
             "orig_dset_idx": 11},
            {"question": "q1", "samples": ["a", "b", "c"], "is_corrects": [False, False, False], "gt_answer": "2",
             "orig_dset_idx": 3}]
    (tmp_path / "CodeContests_Gemma-2B.json").write_text(json.dumps(rows))
    (tmp_path / "CodeContests_Gemma-7B.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    blocks = read_monkey_business("CodeContests", ["Gemma-2B", "Gemma-7B"], tmp_path)
    assert [b.model for b in blocks] == ["Gemma 2B", "Gemma 7B"]
    assert blocks[0].problem_ids.tolist() == [3, 11]
    assert blocks[0].n_correct.tolist() == [0, 2]
    with pytest.raises(OutcomeDataError, match="no CodeContests_Llama-3-8B.json"):
        read_monkey_business("CodeContests", ["Llama-3-8B"], tmp_path)


def test_hub_offline_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match=r"ScalingIntelligence/monkey_business \(config 'MATH_Pythia-160M'\)"
                                                   r"[\s\S]*--data"):
        read_monkey_business("MATH", ["Pythia-160M"])


@pytest.mark.skipif(not REAL.is_file(), reason=f"{REAL} (shared data) not present")
def test_real_pythia_file_has_the_released_shape():
    blocks = read_outcomes_parquet(REAL)
    assert [b.model for b in blocks] == ["Pythia 70M", "Pythia 160M", "Pythia 410M", "Pythia 1B", "Pythia 2.8B",
                                         "Pythia 6.9B", "Pythia 12B"]
    assert all(b.correct.shape == (128, 10_000) and b.benchmark == "MATH" for b in blocks)
    assert sum(int(b.n_correct.sum()) for b in blocks) == 102_318
