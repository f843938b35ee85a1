"""Test-voting selection (most votes, then the shortest text) and the model_choice verifier among the top k."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from monkeybarrel.core.records import Candidate, Problem
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.selection.base import SELECTORS
from monkeybarrel.selection.checks import check_selector
from monkeybarrel.selection.votes import TestVoting
from monkeybarrel.verifiers.model_choice import ModelChoice


def voting_data(votes, texts, problems, problem_texts=None) -> SelectionData:
    n = len(votes)
    keys = pa.table({"problem_id": problems, "generator_id": ["g"] * n,
                     "sample_index": [i for i in range(n)]})
    data = SelectionData.build(keys, np.asarray(votes, float)[:, None], ("votes",), texts=texts)
    if problem_texts is not None:
        from dataclasses import replace

        data = replace(data, problem_texts=np.asarray(problem_texts, dtype=object)) \
            if "problem_texts" in SelectionData.__dataclass_fields__ else data
    return data


def test_conformance():
    check_selector(TestVoting(verifier="v0"))


def test_registered_and_needs_its_column():
    assert SELECTORS.get("test_voting") is TestVoting
    data = voting_data([1, 0], ["a", "b"], ["p", "p"])
    with pytest.raises(ValueError, match="needs the option `verifier`"):
        TestVoting().fit(data)
    with pytest.raises(ValueError, match="'gen_tests' is not among the scores"):
        TestVoting(verifier="gen_tests").fit(data)
    with pytest.raises(TypeError):
        TestVoting(verifier="votes").fit(data, np.array([True, False]))  # label-free


def test_most_votes_then_shortest_then_first():
    votes = [0.5, 1.0, 1.0, np.nan, 0.0, 0.0, np.nan, np.nan]
    texts = ["x" * 5, "y" * 30, "z" * 10, "w", "long one", "short", "a", "b"]
    problems = ["p0"] * 4 + ["p1"] * 2 + ["p2"] * 2
    data = voting_data(votes, texts, problems)
    selector = TestVoting(verifier="votes").fit(data)
    assert selector.select(data).tolist() == [2, 5, 6]  # p0: tie at 1.0 -> shorter; p2: no votes -> first
    ranking = selector.ranking(data)
    assert ranking[0].tolist() == [2, 1, 0, 3]  # NaN votes rank last


def test_model_choice_among_the_top_three_distinct():
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    code = {
        "right": "def add(a, b):\n    return a + b\n",
        "wrong": "def add(a, b):\n    return a - b\n",
        "odd": "def add(a, b):\n    return 42\n",
    }
    texts = [code["wrong"], code["right"], code["wrong"], code["odd"], code["right"], "def add(a, b): pass"]
    votes = [3, 3, 3, 2, 1, 0]
    problems = [Problem(problem_id=f"p{g}", task="humaneval", prompt="Write add(a, b) returning the sum of a and b.")
                for g in range(2)]
    groups = [[0, 1, 2, 3], [4, 5]]
    verifier = ModelChoice("choice", votes="votes", top_k=3, num_threads=1)
    assert verifier.reads == ("votes",)

    def choose(problem, rows):
        candidates = [Candidate(problem_id=problem.problem_id, generator_id="g", sample_index=r, text=texts[r])
                      for r in rows]
        verifier.provide(problem.problem_id, "votes", [votes[r] for r in rows], None)
        scores, reasons = verifier.score_safely(problem, candidates)
        return scores, reasons, verifier.pop_record(problem.problem_id)

    scores, reasons, record = choose(problems[0], groups[0])
    # top by votes/length, duplicate texts shown once: wrong (rows 0, 2), right (row 1), odd (row 3)
    assert record["shown"] == [code["wrong"], code["right"], code["odd"]]
    probabilities = record["probabilities"]
    assert len(probabilities) == 3 and abs(sum(probabilities) - 1) < 1e-5
    assert scores.tolist() == pytest.approx([probabilities[0], probabilities[1], probabilities[0], probabilities[2]])
    assert reasons == [None] * 4
    data = voting_data(scores, [texts[r] for r in groups[0]], ["p0"] * 4)
    picked = SELECTORS.get("best_single")(verifier="votes").fit(data).select(data)[0]
    assert texts[picked] == record["shown"][int(np.argmax(probabilities))]
    again, _, _ = choose(problems[0], groups[0])
    assert again.tolist() == scores.tolist()  # deterministic (no sampling)
    scores, reasons, record = choose(problems[1], groups[1])  # two distinct texts with votes: the model decides
    assert np.isfinite(scores).all() and len(record["probabilities"]) == 2
    scores, reasons, record = choose(problems[1], [4])  # one candidate: no model, it scores 1
    assert scores.tolist() == [1.0] and "probabilities" not in record
    verifier.close()
