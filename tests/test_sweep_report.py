"""The sweep report: frontier arithmetic against brute force, and a report on Large Language Monkeys' Pythia outcomes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from monkeybarrel.core.scaling_laws import coverage_at_k
from monkeybarrel.experiments.llmonk_data import read_outcomes_parquet
from monkeybarrel.experiments.llmonk_sweep import truncate, write_llmonk_sweep
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.store.experiment_store import StoreError
from monkeybarrel.orchestrator.sweep.curves import model_params
from monkeybarrel.orchestrator.sweep.frontier import best_at, budget_grid, pareto
from monkeybarrel.orchestrator.sweep.report import build_report

PYTHIA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "llmonk" / "pythia_math_individual_outcomes.parquet"
SAMPLES = 1000


@pytest.mark.parametrize("seed", range(20))
def test_frontier_and_best_per_budget_agree_with_brute_force(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 40))
    cost = rng.choice([1.0, 2.0, 4.0, 8.0, 16.0], size) * rng.integers(1, 3, size)  # ties in cost and accuracy
    accuracy = np.round(rng.random(size), 1)
    accuracy[rng.random(size) < 0.1] = np.nan  # unknown: never chosen
    group = rng.integers(0, 3, size)
    front = pareto(cost, accuracy)
    for i in front:  # nothing at most as expensive is more accurate; nothing cheaper is as accurate
        assert not np.any((cost <= cost[i]) & (accuracy > accuracy[i]))
        assert not np.any((cost < cost[i]) & (accuracy >= accuracy[i]))
    budgets = np.array([0.5, 1.0, 3.0, 8.0, 100.0])
    best, other = best_at(cost, accuracy, group, budgets)
    for b, i, j in zip(budgets, best, other):
        fits = (cost <= b) & ~np.isnan(accuracy)
        if not fits.any():
            assert i == -1 and j == -1
            continue
        assert accuracy[i] == np.max(accuracy[fits]) and cost[i] <= b
        assert cost[i] == np.min(cost[fits & (accuracy == accuracy[i])])  # ties go to the cheaper
        rest = fits & (group != group[i])
        assert (j == -1) if not rest.any() else (group[j] != group[i] and accuracy[j] == np.max(accuracy[rest]))


def test_budget_grid_and_model_sizes():
    assert budget_grid(3.0, 40.0).tolist() == [3.0, 5.0, 10.0, 20.0, 40.0]
    grid = budget_grid(3.6e10, 6.1e16)
    assert grid[0] == 3.6e10 and grid[-1] == 6.1e16 and np.all(np.diff(grid) > 0) and len(grid) == 8
    assert model_params("Pythia 160M", {}) == 160e6 and model_params("meta-llama/Llama-3.1-8B-Instruct", {}) == 8e9
    assert model_params("smollm2-135m-instruct", {}) == 135e6 and np.isnan(model_params("gpt-4o", {}))
    assert model_params("/models/ckpt-1", {"/models/ckpt-1": 1.5e9}) == 1.5e9


@pytest.fixture(scope="module")
def pythia_sweep(tmp_path_factory):
    if not PYTHIA.is_file():
        pytest.skip(f"{PYTHIA} (shared data) not present")
    blocks = [truncate(b, SAMPLES) for b in read_outcomes_parquet(PYTHIA)]
    return blocks, write_llmonk_sweep(blocks, tmp_path_factory.mktemp("llmonk") / "sweep")


def test_pythia_sweep_report_has_the_papers_coverage_and_a_frontier_across_model_sizes(pythia_sweep, capsys):
    blocks, directory = pythia_sweep
    assert main(["sweep", "report", str(directory)]) == 0
    assert "math: best configuration per budget" in capsys.readouterr().out
    report = json.loads((directory / "report.json").read_text())
    assert {"report.md", "report.html", "report.png"} <= {p.name for p in directory.iterdir()}
    assert report["budget"] == "flops"  # every Pythia size is in its name
    task = report["tasks"][0]
    assert [p["point"] for p in task["points"]] == [f"model={b.model.replace(' ', '-')}" for b in blocks]
    for curve, block in zip(task["curves"], blocks):  # coverage = the paper's estimator on the released counts
        expected = coverage_at_k(block.n_samples[None], block.n_correct[None], np.asarray(curve["ks"]))[0]
        np.testing.assert_allclose(curve["accuracy"]["coverage"], expected, atol=1e-12)
        low, high = np.asarray(curve["ci95"]["coverage"]).T
        assert np.all(low <= np.asarray(expected) + 1e-12) and np.all(np.asarray(expected) <= high + 1e-12)
    small = next(c for c in task["curves"] if c["model"] == "Pythia 160M")
    np.testing.assert_allclose(small["budget"], 2 * 160e6 * 256 * np.asarray(small["ks"]))  # FLOPs proxy

    configs = [(c["model"], k, cost, acc) for c in task["curves"]
               for k, cost, acc in zip(c["ks"], c["budget"], c["accuracy"]["coverage"])]
    table = task["frontier"]["coverage"]["table"]
    for row in table:  # the best within each budget, by brute force over every (model, k)
        fits = [acc for _, _, cost, acc in configs if cost <= row["budget"] * (1 + 1e-12)]
        assert row["best"]["accuracy"] == pytest.approx(max(fits))
        assert row["other"] is None or row["other"]["model"] != row["best"]["model"]
    assert table[-1]["best"]["accuracy"] == pytest.approx(max(c[3] for c in configs))
    assert len({row["best"]["model"] for row in table}) >= 3  # the compute-optimal model changes with the budget
    page = (directory / "report.md").read_text()
    assert "## math: best configuration per budget, coverage (pass@k)" in page and "Pythia 12B" in page


def test_report_without_a_sweep_manifest_and_unknown_budgets_are_clear(pythia_sweep, tmp_path, capsys):
    _, directory = pythia_sweep
    plain = tmp_path / "stores"
    plain.mkdir()
    for name in ("model=Pythia-70M", "model=Pythia-12B"):
        (plain / name).symlink_to(directory / name, target_is_directory=True)
    (plain / "empty").mkdir()
    report = build_report(plain, budget="samples")
    assert [p["point"] for p in report["tasks"][0]["points"]] == ["model=Pythia-12B", "model=Pythia-70M"]
    with pytest.raises(StoreError, match=r"budget 'gpu_s' is not known .*no GPU-seconds recorded"):
        build_report(plain, budget="gpu_s")
    assert main(["sweep", "report", str(tmp_path / "nothing")]) == 2
    assert "no sweep here" in capsys.readouterr().err
