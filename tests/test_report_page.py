"""report.html carries report.md whole and a drill-down whose URL follows the view; checked as text, and
in headless Chromium (slow: Debian's `chromium` + `chromium-driver`, Selenium from PyPI, no browser download)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import Problem
from monkeybarrel.experiments.precomputed import write_precomputed
from monkeybarrel.orchestrator.runner import evaluate_and_report


def small_store(directory: Path, problems: int = 12, samples: int = 8, seed: int = 0):
    """A stored experiment with mixed-difficulty problems, two verifiers, three selectors; reported."""
    rng = np.random.default_rng(seed)
    config = ExperimentConfig.from_dict({
        "name": "page", "task": {"name": "page", "num_problems": None},
        "generators": [{"id": "g", "backend": "precomputed", "model": "g", "num_samples": samples}],
        "verifiers": [{"name": "v1", "type": "precomputed"}, {"name": "v2", "type": "precomputed"}],
        "selectors": [{"name": "majority", "type": "majority"}, {"name": "naive_ensemble", "type": "naive_ensemble"},
                      {"name": "best v1", "type": "best_single", "options": {"verifier": "v1"}}]})
    keys, texts, answers, labels, items = [], [], [], [], []
    for p in range(problems):
        pid = f"q{p:02d}"
        items.append(Problem(pid, "page", prompt=f"What is {p} + {p}?", reference_answer=str(2 * p)))
        rate = (p + 0.5) / problems
        for i in range(samples):
            right = bool(rng.random() < rate)
            keys.append((pid, "g", i))
            answers.append(str(2 * p) if right else str(rng.integers(0, 3)))
            texts.append(f"<b>sample {i}</b> the answer is {answers[-1]}")  # markup must stay text
            labels.append(right)
    labels_array = np.array(labels)
    scores = {"v1": labels_array + rng.normal(0, 0.6, labels_array.size),
              "v2": rng.random(labels_array.size)}
    experiment = write_precomputed(directory, config, items, keys, texts, answers, labels, scores=scores)
    return experiment, evaluate_and_report(experiment, equal_compute=True)


@pytest.fixture()
def reported(tmp_path):
    return small_store(tmp_path / "store")


def test_page_has_every_section_and_plot_of_report_md(reported):
    experiment, metrics = reported
    markdown = (experiment.directory / "report.md").read_text()
    page = (experiment.directory / "report.html").read_text()
    headings = re.findall(r"^## (.+)$", markdown, flags=re.M)
    assert {"Coverage scaling law", "Selection accuracy against k", "Cost", "Allocation at equal compute",
            "Selection", "Verifiers (against the labels: evaluation only)"} <= set(headings)
    for heading in headings:
        assert f">{heading}</h2>" in page.replace("&amp;", "&"), heading
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert set(images) == {"coverage.png", "allocation.png"}
    assert page.count('src="data:image/png;base64,') == len(images) and 'src="coverage.png"' not in page
    random_row = re.search(r"^\| random \(pass@1\) \| ([0-9.]+) ", markdown, flags=re.M).group(1)
    assert f"<td>random (pass@1)</td>\n<td style=\"text-align:right\">{random_row} " in page
    assert abs(float(random_row) - 100 * metrics["sample_accuracy"]) < 0.051  # the expectation, not one draw
    outside_data = re.sub(r'<script type="application/json" id=data>.*?</script>', "", page, flags=re.S)
    assert "<b>sample" in page and "<b>sample" not in outside_data  # candidate text is JSON data, never markup


def test_auroc_matches_scikit_learn_with_ties():
    from sklearn.metrics import roc_auc_score

    from monkeybarrel.orchestrator.stages.evaluate import auroc

    rng = np.random.default_rng(1)
    for n, digits in ((6, 0), (40, 1), (3000, 2)):
        labels = rng.random(n) < 0.4
        labels[:2] = [True, False]
        scores = np.round(rng.normal(size=n) + labels, digits)
        assert auroc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
        assert auroc(labels.astype(int), scores) == auroc(labels, scores)


def _browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    from selenium.webdriver.chrome.service import Service

    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.mark.slow
def test_page_in_headless_chromium(reported):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    experiment, metrics = reported
    url = (experiment.directory / "report.html").resolve().as_uri()
    picks = experiment.selections().to_pylist()
    labels = {(r["problem_id"], r["sample_index"]): r["correct"] for r in experiment.labels().to_pylist()}
    right = {r["problem_id"]: labels[(r["problem_id"], r["sample_index"])] for r in picks if r["method"] == "majority"}
    wrong_id = sorted(p for p, ok in right.items() if not ok)[0]
    correct_id = sorted(p for p, ok in right.items() if ok)[0]
    browser = _browser()
    try:
        def rows():
            return [r.get_attribute("data-id") for r in browser.find_elements(By.CSS_SELECTOR, "#rows tr.problem")]

        def view():
            return dict(pair.split("=", 1) for pair in browser.execute_script("return location.hash").lstrip("#").split("&") if pair)

        browser.get(url)
        assert browser.find_element(By.ID, "coverage-scaling-law").text == "Coverage scaling law"
        assert len(browser.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png']")) == 2
        assert len(rows()) == 12
        options = [o.text for o in Select(browser.find_element(By.ID, "method")).options]
        assert "random (pass@1)" not in options and {"majority", "naive_ensemble", "best v1"} <= set(options)
        # the count line agrees with the Selection table
        Select(browser.find_element(By.ID, "method")).select_by_visible_text("majority")
        count = browser.find_element(By.ID, "count").text
        majority = metrics["selection"]["majority"]["accuracy"]
        assert f"{sum(right.values())} of 12 right ({100 * majority:.1f} %" in count
        # clicks and changes are written to the URL
        browser.find_element(By.CSS_SELECTOR, "button[data-filter=incorrect]").click()
        assert view() == {"filter": "incorrect", "method": "majority"}
        assert set(rows()) == {p for p, ok in right.items() if not ok}
        browser.find_element(By.CSS_SELECTOR, f"#rows tr[data-id={wrong_id}]").click()
        assert view()["problem"] == wrong_id
        candidates = browser.find_elements(By.CSS_SELECTOR, "#rows tr.detail tr.candidate")
        assert len(candidates) == 8 and "<b>sample" in candidates[0].text  # shown as text
        browser.find_element(By.ID, "search").send_keys("q0")
        assert view()["q"] == "q0"
        # a deep link opens that view; a linked problem the filter hides is announced and can be shown
        browser.get(f"{url}#filter=incorrect&method=majority&problem={correct_id}")
        notice = browser.find_element(By.ID, "notice")
        assert f"“{correct_id}” is hidden by the filter “incorrect” for majority" in notice.text
        notice.find_element(By.TAG_NAME, "button").click()
        assert view() == {"method": "majority", "problem": correct_id}
        assert browser.find_element(By.CSS_SELECTOR, "#rows tr[data-open]").get_attribute("data-id") == correct_id
        assert browser.find_element(By.ID, "notice").text == ""
        browser.get(f"{url}#problem=no-such-problem")
        assert "No problem “no-such-problem” in this experiment" in browser.find_element(By.ID, "notice").text
        # editing the address (or going back) re-applies it
        browser.execute_script("location.hash = 'filter=correct&method=naive_ensemble'")
        assert Select(browser.find_element(By.ID, "method")).first_selected_option.text == "naive_ensemble"
        assert "on" in browser.find_element(By.CSS_SELECTOR, "button[data-filter=correct]").get_attribute("class")
        assert not browser.get_log("browser") or all(e["level"] != "SEVERE" for e in browser.get_log("browser"))
    finally:
        browser.quit()


def test_equal_compute_replay_is_on_request_and_kept_while_the_samples_are_unchanged(tmp_path):
    experiment, metrics = small_store(tmp_path / "s", problems=6, samples=4)
    rows = metrics["equal_compute"]["rows"]
    assert {r["policy"] for r in rows} >= {"uniform", "until_solved", "difficulty"}
    kept = experiment.directory / "equal_compute.parquet"
    stamp = kept.stat().st_mtime_ns
    again = evaluate_and_report(experiment)  # not asked: the stored replay is reused, not recomputed
    assert again["equal_compute"]["rows"] == rows and kept.stat().st_mtime_ns == stamp
    assert "## Allocation at equal compute" in (experiment.directory / "report.md").read_text()
    # other labels: the stored replay no longer applies, and a report not asked to replay says so
    import pyarrow.compute as pc

    labels = experiment.labels()
    experiment.store.write_table("labels", labels.set_column(labels.schema.get_field_index("correct"), "correct",
                                                              pc.invert(labels.column("correct"))))
    experiment.refresh()
    stale = evaluate_and_report(experiment)["equal_compute"]
    assert "other samples or labels" in stale["skipped"] and "--equal-compute" in stale["skipped"]
    fresh = small_store(tmp_path / "t", problems=6, samples=4)[0]
    fresh.store.table_path("equal_compute").unlink()
    fresh.refresh()
    assert "not computed by default" in evaluate_and_report(fresh)["equal_compute"]["skipped"]
