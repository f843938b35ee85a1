"""Hidden unit tests as a verifier: 1.0 when the candidate passes its problem's tests, else 0.0.

This reads the problem's reference (the hidden tests), so it is a label (``uses_reference``): an
upper-bound column for analysis, not an input for label-free selection. It works for any code
problem that follows the code-task convention (``monkeybarrel.tasks.humaneval``):
``metadata["code_prompt"]`` and ``metadata["entry_point"]``, and the test code (defining
``check(candidate)``) as ``reference_answer``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..sandbox.base import Limits, Outcome, Sandbox
from ..kits.code_programs import assemble_program, checked_job, code_sandbox, extract_code, passed
from .base import VERIFIERS, Verifier


class SandboxedVerifier(Verifier):
    """A verifier that runs code: one sandbox (``code_sandbox(sandbox_spec, workers, limits)``), built by the
    subclass's constructor (so a refused layer fails the config check) and closed with the verifier.
    Subclasses set ``sandbox_spec``, ``workers`` and ``limits``."""

    sandbox_spec: Any
    workers: int
    limits: Limits
    _sandbox: Sandbox | None = None

    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = code_sandbox(self.sandbox_spec, max_workers=self.workers, limits=self.limits)
        return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


@VERIFIERS.register("unit_tests")
class UnitTestVerifier(SandboxedVerifier):
    """Runs each candidate with the hidden tests in a sandbox.

    Args:
        name: score column name.
        sandbox: sandbox config (``"local"`` or ``{"type": "docker", "image": ...}``).
        time_limit_s: wall seconds per run.
        memory_mb: memory limit per run.
        workers: runs at once.
        python: interpreter command in the sandbox.

    Scores: 1.0 passed (the checker's verdict, ``kits.code_programs.checked_job``), 0.0 failed
    (error, timeout, memory, no code, an early exit); NaN only when the sandbox itself failed
    (recorded as the candidate's error).
    """

    uses_reference = True

    def __init__(self, name: str, sandbox: str | Mapping[str, Any] | None = None, time_limit_s: float = 10.0,
                 memory_mb: int = 1024, workers: int = 2, python: str = "python3") -> None:
        super().__init__(name)
        self.sandbox_spec, self.workers, self.python = sandbox, int(workers), python
        self.limits = Limits(time_s=float(time_limit_s), memory_mb=int(memory_mb), output_bytes=16 * 1024)
        self._sandbox: Sandbox | None = None
        self.sandbox()  # built now: a layer that cannot isolate is refused before anything runs

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        if problem.reference_answer is None:
            raise ValueError(f"problem {problem.problem_id!r} has no hidden tests (reference_answer)")
        entry_point, code_prompt = problem.metadata["entry_point"], problem.metadata["code_prompt"]
        scores = np.zeros(len(candidates))
        jobs, rows = [], []
        for row, candidate in enumerate(candidates):
            # like the label stage: only finished replies count (truncated or failed ones score 0)
            code = extract_code(candidate.text, entry_point) if candidate.finish_reason == "stop" else None
            if code is None:
                continue
            jobs.append(checked_job(assemble_program(code_prompt, code, entry_point), code_prompt,
                                    problem.reference_answer, entry_point, call_check=True, python=self.python,
                                    limits=self.limits))
            rows.append(row)
        for row, result in zip(rows, self.sandbox().run_many(jobs)):
            scores[row] = np.nan if result.outcome is Outcome.SANDBOX_ERROR else float(passed(result))
        return scores
