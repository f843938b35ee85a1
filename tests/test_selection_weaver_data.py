"""The loader of Weaver's released datasets, on small local files in the same schema (parquet, jsonl, hub layout)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monkeybarrel.experiments.weaver_data import load_weaver_dataset, main, verifier_columns
from monkeybarrel.orchestrator.runner import evaluate_and_report
from monkeybarrel.orchestrator.store.experiment_store import StoreError

K = 5


def weaver_rows(problems: int = 8, seed: int = 0) -> list[dict]:
    """Rows in the released schema: RM logits, a nested judge verdict column with None, PRM aggregates, step scores."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(problems):
        correct = (rng.random(K) < 0.4).tolist()
        answers = ["42" if c else f"{rng.integers(1, 4)}" for c in correct]
        answers[-1] = "NO_ANSWER" if i % 3 == 0 else answers[-1]
        quality = np.array(correct, dtype=float)
        rows.append({
            "instruction": f"Problem {i}: what is 6 x 7?",
            "answer": "42",
            "samples": [f"Reasoning {i}.{k}. The answer is {a}." for k, a in enumerate(answers)],
            "extracted_answers": answers,
            "answer_correct": correct,
            "GRM_scores": (5 * (quality + rng.normal(0, 0.5, K))).tolist(),
            "Skywork_scores": (3 * (quality + rng.normal(0, 0.8, K)) - 10).tolist(),
            "Qwen72B_verdicts": [[float(q)] if k != 1 else None for k, q in enumerate(quality)],
            "PRM_avg_scores": np.clip(0.5 + 0.3 * quality + rng.normal(0, 0.1, K), 0, 1).tolist(),
            "PRM_step_scores": [[0.1, 0.2]] * K,
            "weaver_scores": (0.2 + 0.6 * quality).tolist(),
            "type": "diamond" if i % 2 == 0 else "main",
            "subject": "arithmetic",
        })
    return rows


@pytest.fixture()
def parquet_file(tmp_path: Path) -> Path:
    path = tmp_path / "weaver.parquet"
    pq.write_table(pa.Table.from_pylist(weaver_rows()), path)
    return path


def test_loader_writes_problems_candidates_scores_answers_and_labels(parquet_file: Path, tmp_path: Path):
    experiment = load_weaver_dataset(str(parquet_file), tmp_path / "exp")
    data, labels = experiment.selection_data(), experiment.labels_array()
    assert data.n_problems == 8 and data.n_candidates == 8 * K
    assert data.verifiers == ("GRM_scores", "Skywork_scores", "Qwen72B_verdicts", "PRM_avg_scores")
    rows = weaver_rows()
    assert labels.tolist() == [c for r in rows for c in r["answer_correct"]]
    assert np.allclose(data.verifier_scores("GRM_scores"), [s for r in rows for s in r["GRM_scores"]])
    verdicts = data.verifier_scores("Qwen72B_verdicts").reshape(8, K)
    assert np.isnan(verdicts[:, 1]).all() and np.isfinite(np.delete(verdicts, 1, axis=1)).all()
    answers = experiment.answers().column("answer").to_pylist()
    assert answers[K - 1] is None and answers[0] in ("42", "1", "2", "3")  # NO_ANSWER -> no answer
    problem = experiment.problems()[0]
    assert problem.prompt == "Problem 0: what is 6 x 7?" and problem.reference_answer == "42"
    assert problem.metadata["type"] == "diamond" and problem.metadata["row"] == 0
    _, _, failures = experiment.scores()
    assert failures.num_rows == 8 and set(failures.column("error").to_pylist()) == {"missing in the released data"}


def test_selection_runs_on_the_loaded_data_and_keeps_weaver_scores_out_of_the_ensembles(parquet_file: Path, tmp_path: Path):
    experiment = load_weaver_dataset(str(parquet_file), tmp_path / "exp", include_weaver_scores=True)
    config = experiment.config
    ensembles = {s.name: s.options for s in config.selectors if s.type in ("weaver", "naive_ensemble", "supervised")}
    assert all("weaver_scores" not in o["verifiers"] for o in ensembles.values())
    metrics = evaluate_and_report(experiment)
    selection = metrics["selection"]
    assert {"majority", "weaver", "naive ensemble", "supervised (5-fold LR)", "best single (label-free pick)",
            "best single (oracle pick)", "weaver (1% dev labels)", "weaver (released scores)",
            "oracle (coverage)"} <= set(selection)
    assert selection["weaver (released scores)"]["accuracy"] == selection["oracle (coverage)"]["accuracy"]
    assert selection["weaver"]["uses_labels"] is False and selection["weaver (1% dev labels)"]["uses_labels"] is True
    report = (experiment.directory / "report.md").read_text()
    assert "| weaver |" in report and "8 problems, 40 candidates" in report


def test_jsonl_and_hub_layout_directories_load_the_same(parquet_file: Path, tmp_path: Path):
    jsonl = tmp_path / "weaver.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in weaver_rows()) + "\n")
    hub = tmp_path / "hub"  # the released sets have one split called "data", declared in the README
    (hub / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(weaver_rows()), hub / "data" / "data-00000-of-00001.parquet")
    (hub / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: data\n"
                                   "    path: data/*.parquet\n---\n")
    reference = load_weaver_dataset(str(parquet_file), tmp_path / "a").selection_data()
    for source, out in ((jsonl, "b"), (hub, "c")):
        data = load_weaver_dataset(str(source), tmp_path / out).selection_data()
        assert np.allclose(data.scores, reference.scores, equal_nan=True)
        assert np.array_equal(data.answers, reference.answers)


def test_where_filters_and_num_problems(parquet_file: Path, tmp_path: Path):
    data = load_weaver_dataset(str(parquet_file), tmp_path / "d", where={"type": "diamond"}, num_problems=3).selection_data()
    assert data.n_problems == 3
    assert main([str(parquet_file), "--out", str(tmp_path / "cli"), "--where", "type=main"]) == 0
    assert (tmp_path / "cli" / "report.md").is_file()


def test_bad_files_are_refused_with_the_row_and_column(tmp_path: Path, parquet_file: Path):
    rows = weaver_rows(3)
    rows[2]["GRM_scores"] = rows[2]["GRM_scores"][:-1]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    with pytest.raises(ValueError, match=r"row 2, column 'GRM_scores': expected a list of 5 scores"):
        load_weaver_dataset(str(bad), tmp_path / "x")
    assert not (tmp_path / "x").exists()  # nothing written
    no_samples = tmp_path / "no_samples.parquet"
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "samples"} for r in weaver_rows(2)]), no_samples)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['samples'\]"):
        load_weaver_dataset(str(no_samples), tmp_path / "y")
    load_weaver_dataset(str(parquet_file), tmp_path / "z")
    with pytest.raises(StoreError, match="not empty"):
        load_weaver_dataset(str(parquet_file), tmp_path / "z")
    with pytest.raises(ValueError, match="short name"):
        load_weaver_dataset("gpqa-9b", tmp_path / "w")
    assert main(["gpqa-9b", "--out", str(tmp_path / "w")]) == 2


def test_verifier_columns_skip_step_scores_and_weaver_output():
    names = ["instruction", "A_scores", "B_verdicts", "C_step_scores", "C_avg_scores", "weaver_scores"]
    assert verifier_columns(names) == ["A_scores", "B_verdicts", "C_avg_scores"]
    assert verifier_columns(names, include_weaver_scores=True)[-1] == "weaver_scores"
