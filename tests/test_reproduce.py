"""`monkeybarrel reproduce`: every recipe on a small fixture in its released schema; Pythia MATH on the real file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_llmonk_data import REAL, write_outcomes
from test_selection_weaver_data import weaver_rows

from monkeybarrel.experiments.reproduce import all_recipes
from monkeybarrel.orchestrator.cli import main


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _comparison(out: Path) -> dict:
    return json.loads((out / "comparison.json").read_text())


def _row(comparison: dict, group: str, metric: str) -> dict:
    return next(r for r in comparison["rows"] if r["group"] == group and r["metric"] == metric)


def test_list_names_every_recipe(capsys):
    assert main(["reproduce", "list"]) == 0
    printed = capsys.readouterr().out
    for name in all_recipes():
        assert name[:12] in printed


def test_unknown_recipe_and_missing_data_exit_2(capsys, tmp_path):
    assert main(["reproduce", "no-such-paper"]) == 2
    assert "unknown recipe 'no-such-paper'" in capsys.readouterr().err
    assert main(["reproduce", "llmonk-pythia-math", "--data", str(tmp_path / "missing.parquet")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize("recipe,dataset", [("llmonk-pythia-math", "ScalingIntelligence/monkey_business"),
                                            ("weaver-math500-70b", "hazyresearch/MATH500_with_Llama_3.1_70B_Instruct_v1")])
def test_offline_hub_exits_2_naming_the_dataset_and_data_flag(offline, capsys, tmp_path, recipe, dataset):
    assert main(["reproduce", recipe, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert dataset in err and "--data" in err and "Traceback" not in err


def test_llmonk_recipe_on_a_fixture_recovers_a_planted_law(tmp_path):
    """Per-problem success rates drawn so that coverage follows a known curve; the recipe fits it."""
    rng = np.random.default_rng(0)
    blocks = {}
    for model, scale in (("Pythia 70M", 0.01), ("Pythia 160M", 0.05)):
        p = np.clip(rng.beta(0.3, 3, size=40) * scale * 10, 0, 1)
        blocks[("MATH", model)] = {100 + i: (rng.random(64) < p[i]).astype(int).tolist() for i in range(40)}
    data = write_outcomes(tmp_path / "outcomes.parquet", blocks)
    out = tmp_path / "out"
    assert main(["reproduce", "llmonk-pythia-math", "--data", str(data), "--out", str(out)]) == 0
    comparison = _comparison(out)
    for (_, model), matrix in blocks.items():
        correct = np.array(list(matrix.values()))
        assert _row(comparison, model, "pass@1")["ours"] == pytest.approx(100 * correct.mean())
        assert _row(comparison, model, "coverage@64")["ours"] == pytest.approx(100 * correct.any(axis=1).mean())
        assert _row(comparison, model, "fit a")["ours"] < 0
    # the paper's numbers are attached where it prints them, with the delta
    fit_a = _row(comparison, "Pythia 70M", "fit a")
    assert fit_a["paper"]["value"] == -7.59 and "Fig. 5" in fit_a["paper"]["source"]
    assert fit_a["delta"] == pytest.approx(fit_a["ours"] + 7.59)
    report = (out / "report.md").read_text()
    assert "| Pythia 70M |" in report and "(-7.59, " in report and (out / "coverage_laws.png").stat().st_size > 0


def test_llmonk_codecontests_reads_monkey_business_files(tmp_path):
    rng = np.random.default_rng(1)
    for model in ("Gemma-2B", "Gemma-7B", "Llama-3-8B-Instruct", "Llama-3-70B-Instruct"):
        rows = [{"question": f"q{i}", "samples": ["print(1)"] * 32, "orig_dset_idx": i,
                 "is_corrects": (rng.random(32) < 0.05 * (i % 4)).tolist()} for i in range(12)]
        (tmp_path / f"CodeContests_{model}.json").write_text(json.dumps(rows))
    out = tmp_path / "out"
    assert main(["reproduce", "llmonk-codecontests", "--data", str(tmp_path), "--out", str(out)]) == 0
    comparison = _comparison(out)
    assert {r["group"] for r in comparison["rows"]} == {"Gemma 2B", "Gemma 7B", "Llama 3 8B Instruct",
                                                          "Llama 3 70B Instruct"}
    assert _row(comparison, "Llama 3 8B Instruct", "fit b")["paper"]["value"] == -0.11


@pytest.mark.skipif(not REAL.is_file(), reason=f"{REAL} (shared data) not present")
def test_pythia_math_on_the_real_released_outcomes(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["reproduce", "llmonk-pythia-math", "--data", str(REAL), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    comparison = _comparison(out)
    groups = ["Pythia 70M", "Pythia 160M", "Pythia 410M", "Pythia 1B", "Pythia 2.8B", "Pythia 6.9B", "Pythia 12B"]
    assert list(dict.fromkeys(r["group"] for r in comparison["rows"])) == groups
    for model in groups:
        assert model in printed
    # the paper's headline: Pythia-160M MATH 0.27% -> 57% at 10,000 samples (§2.2)
    assert _row(comparison, "Pythia 160M", "pass@1")["ours"] == pytest.approx(0.27, abs=0.005)
    assert _row(comparison, "Pythia 160M", "coverage@10000")["ours"] == pytest.approx(57.0, abs=0.1)
    # Fig. 5 fits: ours within 0.2 (a) and 0.01 (b); fit errors the same order
    for model, a, b in (("Pythia 70M", -7.59, -0.18), ("Pythia 12B", -3.92, -0.35)):
        assert _row(comparison, model, "fit a")["ours"] == pytest.approx(a, abs=0.2)
        assert _row(comparison, model, "fit b")["ours"] == pytest.approx(b, abs=0.01)
        assert _row(comparison, model, "fit error")["ours"] < 0.02
    coverage = [_row(comparison, m, "coverage@10000")["ours"] for m in groups]
    assert coverage == sorted(coverage)  # bigger Pythia, more coverage


def test_weaver_recipe_on_a_fixture_in_the_released_schema(tmp_path):
    path = tmp_path / "math500_70b.parquet"
    pq.write_table(pa.Table.from_pylist(weaver_rows(problems=24)), path)
    out = tmp_path / "out"
    assert main(["reproduce", "weaver-math500-70b", "--data", str(path), "--out", str(out)]) == 0
    comparison = _comparison(out)
    group = "MATH500 70B"
    rows = weaver_rows(problems=24)
    labels = np.array([c for r in rows for c in r["answer_correct"]])
    assert _row(comparison, group, "first sample (mean sample accuracy)")["ours"] == pytest.approx(100 * labels.mean())
    oracle = _row(comparison, group, "pass@5 (oracle)")
    assert oracle["ours"] == pytest.approx(100 * np.mean([any(r["answer_correct"]) for r in rows]))
    assert oracle["paper"]["value"] == 98.6
    for name in ("majority", "naive ensemble", "weaver (label-free)", "weaver (1% dev labels)",
                 "weaver (paper settings: all labels set prior and threshold)"):
        row = _row(comparison, group, name)
        assert 0 <= row["ours"] <= oracle["ours"]
    assert _row(comparison, group, "weaver (label-free)")["paper"]["value"] == 93.4
    assert (out / "store" / "report.md").is_file()
