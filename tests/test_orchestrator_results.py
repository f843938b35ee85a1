"""Honest figures and ways to look at them: intervals, null not NaN, no-label reports, show, compare,
export, report.html in headless Chromium, and clean errors (exit 2, one line)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import yaml

from conftest import REPO, tiny_config
from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.intervals import bootstrap_ci, paired_difference_ci
from monkeybarrel.core.records import ANSWER_SCHEMA, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.report.markdown import percent
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore

ARTIFACTS = Path(os.environ.get("MONKEYBARREL_ARTIFACTS", REPO / "test-artifacts"))


def synthetic_store(directory: Path, problems: int = 40, samples: int = 8, generators=("g1", "g2"),
                    accuracy=(0.3, 0.7), labels: bool = True, seed: int = 0) -> Path:
    """A store written with the store's own writers: candidates, one verifier, answers, labels (no model)."""
    rng = np.random.default_rng(seed)
    store = ExperimentStore(directory)
    config = ExperimentConfig.from_dict({
        "name": "synthetic", "seed": seed, "task": {"name": "arithmetic", "num_problems": problems},
        "generators": [{"id": g, "num_samples": samples} for g in generators],
        "verifiers": [{"name": "v", "type": "has_answer"}]})
    store.write_text("config.yaml", config.to_yaml())
    rows, answers, label_rows, scores = [], [], [], []
    for p in range(problems):
        for g, acc in zip(generators, accuracy):
            for i in range(samples):
                ok = bool(rng.random() < acc)
                key = {"problem_id": f"p{p:03d}", "generator_id": g, "sample_index": i}
                answer = "42" if ok else str(rng.integers(0, 4))
                rows.append({**key, "text": f"<b>{g}</b> says </script> {answer}", "prompt_tokens": 5,
                             "completion_tokens": 7, "finish_reason": "stop", "wall_time_s": 0.01, "seed": 0,
                             "error": None})
                answers.append({**key, "answer": answer})
                label_rows.append({**key, "correct": ok})
                scores.append({**key, "verifier": "v", "score": float(ok) + rng.normal(0, 0.5), "error": None})
    store.append_chunk("candidates", pa.Table.from_pylist(rows, schema=CANDIDATE_SCHEMA))
    store.append_chunk("scores/v", pa.Table.from_pylist(scores, schema=SCORE_SCHEMA))
    store.write_table("answers", pa.Table.from_pylist(answers, schema=ANSWER_SCHEMA))
    if labels:
        store.write_table("labels", pa.Table.from_pylist(label_rows, schema=LABEL_SCHEMA))
    return directory


def _strict_json(path: Path):
    def refuse(token):
        raise AssertionError(f"{path}: {token} is not JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_bootstrap_intervals_have_the_binomial_width_and_pair_differences():
    hits = np.array([1.0, 0.0] * 100)                 # 200 problems at 50 %: normal interval +-6.9 points
    low, high = bootstrap_ci(hits)[0]
    assert low < 0.5 < high and 0.12 < high - low < 0.16
    assert np.isnan(bootstrap_ci(np.full(10, np.nan))).all()
    a = np.random.default_rng(1).random(300) < 0.5
    b = a.copy()
    b[:30] = True                                      # b fixes some of a's misses: paired spread is tight
    gain = b.mean() - a.mean()
    low, high = paired_difference_ci(a.astype(float), b.astype(float))
    assert 0 < low <= gain <= high and high - low < 0.08


def test_percent_keeps_small_shares_visible():
    assert percent(0.0002) == "0.02" and percent(0.0) == "0.0" and percent(0.1234) == "12.3"


def test_metrics_have_intervals_exact_random_and_per_generator_curves(tmp_path: Path, capsys):
    out = synthetic_store(tmp_path / "s")
    assert main(["report", str(out)]) == 0
    metrics = _strict_json(out / "metrics.json")
    labels = pa.Table.from_pylist([]) if False else ExperimentStore(out).read_table("labels")
    per_problem = {}
    for row in labels.to_pylist():
        per_problem.setdefault(row["problem_id"], []).append(row["correct"])
    expected_random = np.mean([np.mean(v) for v in per_problem.values()])
    random = metrics["selection"]["random (pass@1)"]
    assert random["accuracy"] == pytest.approx(expected_random, abs=1e-12)   # the expectation, not a draw
    assert random["accuracy"] == pytest.approx(metrics["coverage"]["1"], abs=1e-12)
    for name, info in metrics["selection"].items():
        low, high = info["ci95"]
        assert low <= info["accuracy"] <= high, name
    for k in metrics["ks"]:
        assert metrics["coverage_ci95"][str(k)][0] <= metrics["coverage"][str(k)] <= metrics["coverage_ci95"][str(k)][1]
    assert set(metrics["per_generator"]) == {"g1", "g2"}
    g1, g2 = metrics["per_generator"]["g1"], metrics["per_generator"]["g2"]
    assert sorted(g1["coverage"], key=int) == ["1", "2", "4", "8"]          # a curve per generator
    assert g1["sample_accuracy"] < g2["sample_accuracy"] and g1["coverage"]["1"] < g2["coverage"]["1"]
    assert g2["coverage_ci95"]["8"] is not None
    assert metrics["verifiers"]["v"]["top1_accuracy_ci95"] is not None
    report = (out / "report.md").read_text()
    assert f"{percent(random['accuracy'])} [{percent(random['ci95'][0])}, {percent(random['ci95'][1])}]" in report
    assert "exact expected" in report and "| g1 |" in report


def test_report_without_labels_says_so_and_writes_null_not_nan(tmp_path: Path, capsys):
    out = synthetic_store(tmp_path / "s", labels=False)
    assert main(["report", str(out)]) == 0
    assert "no labels stored" in capsys.readouterr().out
    metrics = _strict_json(out / "metrics.json")               # strict: NaN would fail here
    assert metrics["labelled_candidates"] == 0
    assert metrics["selection"]["majority"]["accuracy"] is None and metrics["coverage"]["1"] is None
    report = (out / "report.md").read_text()
    assert "No labels stored" in report and "| 1 | – | – |" in report


def test_errors_exit_2_with_one_line(tmp_path: Path, capsys):
    empty_store = tmp_path / "empty"
    ExperimentStore(empty_store).write_text("config.yaml", yaml.safe_dump(tiny_config()))
    assert main(["report", str(empty_store)]) == 2
    assert "no candidates stored" in capsys.readouterr().err

    def run_with(path: Path) -> str:
        config = tmp_path / f"{path.stem}.yaml"
        config.write_text(yaml.safe_dump(tiny_config(task={"name": "gsm8k", "path": str(path)})))
        assert main(["run", str(config), "--out", str(tmp_path / "never")]) == 2
        assert not (tmp_path / "never").exists()
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    (tmp_path / "empty.jsonl").write_text("\n")
    assert "no problems; the dataset is empty" in run_with(tmp_path / "empty.jsonl")
    (tmp_path / "nohash.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n'
                                           '{"question": "2+2?", "answer": "It is 4."}\n')
    assert "nohash.jsonl:2: 'answer' has no final answer after '####'" in run_with(tmp_path / "nohash.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes('{"question": "1+1?", "answer": "#### 2"}\n'.encode()
                                            + '{"question": "caf\u00e9", "answer": "#### 1"}\n'.encode("latin-1"))
    assert "latin1.jsonl:2: not UTF-8" in run_with(tmp_path / "latin1.jsonl")

    out = synthetic_store(tmp_path / "s", problems=3, samples=2)
    assert main(["export", str(out), "--format", "jsonl", "--out", str(tmp_path)]) == 2   # a directory: OSError
    assert "Is a directory" in capsys.readouterr().err
    assert main(["show", str(out), "--problem", "nope"]) == 2
    assert "no problem 'nope'" in capsys.readouterr().err


def test_validate_builds_every_plugin_and_finds_models_and_servers(tmp_path: Path, capsys):
    def validate(**changes) -> tuple[int, str]:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(tiny_config(**changes)))
        code = main(["validate", str(path)])
        return code, capsys.readouterr().err

    code, err = validate(verifiers=[{"name": "j", "type": "weavr"}])
    assert code == 2 and "verifiers[0]" in err and "weavr" in err
    code, err = validate(verifiers=[{"name": "j", "type": "length", "options": {"prefer": "middle"}}])
    assert code == 2 and "verifiers[0]" in err and "prefer" in err
    code, err = validate(verifiers=[{"name": "rm", "type": "reward_model", "options": {"model": str(tmp_path / "rm")}}])
    assert code == 2 and "verifiers[0].options.model" in err and "no such model" in err
    code, err = validate(selectors=[{"name": "s", "type": "majority", "options": {"bogus": 1}}])
    assert code == 2 and "selectors[0]" in err and "bogus" in err
    code, err = validate(generators=[{"id": "api", "backend": "openai", "model": "m",
                                      "options": {"base_url": "http://127.0.0.1:9/v1"}}])
    assert code == 2 and "generators[0].options.base_url" in err and "does not answer" in err
    assert validate()[0] == 0


def test_show_compare_export(tmp_path: Path, capsys):
    first = synthetic_store(tmp_path / "a", accuracy=(0.3, 0.5), seed=0)
    second = synthetic_store(tmp_path / "b", accuracy=(0.3, 0.8), seed=1)
    for store in (first, second):
        assert main(["report", str(store)]) == 0
    capsys.readouterr()
    assert main(["show", str(first)]) == 0
    listing = capsys.readouterr().out
    assert "p000" in listing and "majority" in listing
    assert main(["show", str(first), "--problem", "p001", "--full"]) == 0
    detail = capsys.readouterr().out
    assert "g2" in detail and "</script>" in detail and "v" in detail

    assert main(["compare", str(first), str(second)]) == 0
    text = capsys.readouterr().out
    assert "config.seed: 0 -> 1" in text and "sample accuracy" in text and "paired" in text
    from monkeybarrel.orchestrator.report.compare import compare
    result = compare(first, second)
    row = next(r for r in result["metrics"] if r["name"] == "sample accuracy")
    a, b = (_strict_json(d / "metrics.json")["sample_accuracy"] for d in (first, second))
    assert row["delta"] == pytest.approx(b - a) and row["ci95"][0] <= row["delta"] <= row["ci95"][1]
    assert row["ci95"][0] > 0                          # 0.4 -> 0.55 on 40 problems x 16 samples: clearly better

    assert main(["export", str(first), "--format", "csv"]) == 0
    import pyarrow.csv as pacsv
    table = pacsv.read_csv(first / "export.csv")
    assert table.num_rows == 40 * 16
    assert {"answer", "correct", "score:v", "picked:majority"} <= set(table.column_names)
    assert sum(table.column("picked:majority").to_pylist()) == 40


def test_report_html_drills_down_in_headless_chromium(tmp_path: Path):
    out = synthetic_store(tmp_path / "s", problems=12, samples=4)
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "<script>alert" not in page and "says <\\/script>" in page      # data cannot close the script
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless Chromium (Debian: apt-get install chromium)")
    from monkeybarrel.orchestrator.report.drilldown import Drilldown
    from monkeybarrel.orchestrator.experiment import Experiment
    view = Drilldown.load(Experiment(out))
    wrong = [p for p in view.problem_ids() if view.summary(p)["picks"]["majority"]["correct"] is False]
    assert wrong
    url = f"file://{out / 'report.html'}#filter=incorrect&method=majority&problem={wrong[0]}"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1500"]
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout
    assert f"{len(wrong)} of 12 problems shown" in dom                       # the filter ran in the browser
    assert dom.count('class="problem"') == len(wrong)
    assert dom.count('class="detail"') == 1 and "&lt;b&gt;g2&lt;/b&gt; says" in dom   # deep link opened; text escaped
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report_html.png"
    subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
