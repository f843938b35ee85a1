import json
from pathlib import Path

import pytest

from monkeybarrel.tasks.arithmetic import ArithmeticTask
from monkeybarrel.core.files import TaskDataError
from monkeybarrel.tasks.gsm8k import GSM8KTask
from monkeybarrel.kits.math_answers import answer_key, is_equivalent, reference_from_solution
from monkeybarrel.tasks.math_dataset import MathTask


def test_arithmetic_is_seeded_and_prefix_stable():
    five = ArithmeticTask(num_problems=5, seed=3, difficulty=2).load()
    ten = ArithmeticTask(num_problems=10, seed=3, difficulty=2).load()
    assert five == ten[:5]
    assert ArithmeticTask(num_problems=5, seed=4, difficulty=2).load() != five
    assert len({p.problem_id for p in ten}) == 10
    for problem in ten:  # the reference is the value the story computes
        assert int(problem.reference_answer) >= 0
        assert problem.metadata["question"] in problem.prompt


def test_gsm8k_local_file(gsm8k_path: Path):
    problems = GSM8KTask(path=str(gsm8k_path), num_problems=3).load()
    assert [p.problem_id for p in problems] == ["gsm8k-test-00000", "gsm8k-test-00001", "gsm8k-test-00002"]
    assert problems[0].reference_answer == "18"
    assert "Janet" in problems[0].prompt
    assert len(GSM8KTask(path=str(gsm8k_path)).load()) == 1319


def test_malformed_jsonl_names_file_and_line(tmp_path: Path):
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n" + "{not json\n")
    with pytest.raises(TaskDataError, match=r"broken.jsonl:2: invalid JSON"):
        GSM8KTask(path=str(path)).load()
    path.write_text(json.dumps({"question": "q"}) + "\n")
    with pytest.raises(TaskDataError, match=r"broken.jsonl:1: missing field\(s\) \['answer'\]"):
        GSM8KTask(path=str(path)).load()
    with pytest.raises(TaskDataError, match="file not found"):
        GSM8KTask(path=str(tmp_path / "none.jsonl")).load()


def test_math_loader_takes_boxed_answers(tmp_path: Path):
    path = tmp_path / "math.jsonl"
    rows = [{"problem": "Compute 1/2+1/4.", "solution": "We get $\\boxed{\\frac{3}{4}}$.", "level": "Level 1"},
            {"problem": "2+2?", "answer": "4", "unique_id": "test/x.json"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = MathTask(path=str(path))
    first, second = task.load()
    assert first.reference_answer == "\\frac{3}{4}" and second.problem_id == "test/x.json"
    assert task.is_correct("so it is 0.75", first)
    assert not task.is_correct("The answer is 3/5", first)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The answer is 1,234.", "1234"),  # thousands separators are not dropped digits
        ("so we get \\boxed{\\frac{3}{4}}", "3/4"),  # fractions stay fractions
        ("The answer is 0.75", "3/4"),
        ("no answer here", None),
        (None, None),
    ],
)
def test_answer_key(text, expected):
    assert answer_key(text) == expected


def test_equivalence_and_references():
    assert is_equivalent("The answer is \\boxed{0.5}", "1/2")
    assert not is_equivalent("The answer is 34", "(3,4)")
    assert not is_equivalent("", "1")
    assert reference_from_solution("lots of work\n#### 1,000") == "1000"
    assert reference_from_solution("x = \\boxed{\\sqrt{2}}") == "\\sqrt{2}"
    assert reference_from_solution("no box") is None


def test_hub_loaders_read_a_local_dataset_in_the_hub_schema(tmp_path: Path, gsm8k_path: Path):
    """The hub code path (datasets.load_dataset) on a local dataset directory of the same schema."""
    gsm = tmp_path / "gsm8k"
    gsm.mkdir()
    (gsm / "test.jsonl").write_text("".join(gsm8k_path.read_text().splitlines(keepends=True)[:4]))
    problems = GSM8KTask(dataset=str(gsm), subset=None, split="test", num_problems=3).load()
    assert [p.reference_answer for p in problems] == ["18", "3", "70000"]
    assert problems[0].metadata["source"] == f"hub:{gsm}"

    math500 = tmp_path / "math500"
    math500.mkdir()
    (math500 / "test.jsonl").write_text(json.dumps(
        {"problem": "What is $1+1$?", "solution": "$\\\\boxed{2}$", "answer": "2", "subject": "Algebra",
         "level": 1, "unique_id": "test/algebra/1.json"}) + "\n")
    (problem,) = MathTask(dataset=str(math500), split="test").load()
    assert problem.problem_id == "test/algebra/1.json" and problem.reference_answer == "2"
    assert problem.metadata == {"level": 1, "subject": "Algebra"}
