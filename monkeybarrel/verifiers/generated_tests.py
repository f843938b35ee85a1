"""Model-generated tests, CodeMonkeys-style: every candidate runs against every generated test.

Per problem, a model writes test cases (``assert`` lines calling the entry point) from the visible
code prompt; optionally the ``>>>`` examples of the prompt's docstring are added (label-free).
Each (candidate, test) pair is one sandbox run checking the candidate's module with that test
(``kits.code_programs.checked_job``: the test runs in the checker's process with the visible code
prompt, the candidate in a process of its own); only the checker's verdict counts as a pass, never
the candidate's exit status. A candidate's score is the share of the problem's tests it passes
(the test votes of CodeMonkeys, normalised by the number of tests). Identical programs and tests run
once (results are cached by content). Problems for which no test could be produced score NaN
("no score"), so selectors fall back to their tie rule.

Code problems follow the convention of ``monkeybarrel.tasks.humaneval``: ``metadata["code_prompt"]``
and ``metadata["entry_point"]``. The hidden tests are never seen (``uses_reference = False``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.models import load_pretrained
from ..core.records import Candidate, Problem
from ..sandbox.base import Job, Limits, Outcome, Sandbox
from ..kits.code_programs import (assemble_program, assert_lines, check_sandbox_failures, checked_job, docstring_tests,
                                  extract_code, passed)
from .base import VERIFIERS
from .unit_tests import SandboxedVerifier

TEST_PROMPT = (
    "Here is a Python function to test:\n\n```python\n{code_prompt}\n```\n\n"
    "Write {num_tests} test cases for `{entry_point}` as Python assert statements, one per line, "
    "each of the form:\nassert {entry_point}(...) == ...\nCheck the expected values against the description."
)
"""User turn asking for tests; placeholders ``{code_prompt}``, ``{entry_point}``, ``{num_tests}``."""


@VERIFIERS.register("generated_tests")
class GeneratedTestsVerifier(SandboxedVerifier):
    """Share of model-written tests each candidate passes.

    Args:
        name: score column name.
        model: test writer: ``smollm2-135m-instruct`` (embedded), a local HF directory or hub id;
            None writes no model tests (only docstring examples, if enabled).
        num_generations: sampled replies per problem (each may hold several asserts).
        num_tests: asserts asked for in each reply.
        max_tests: most tests kept per problem (first seen first).
        docstring_examples: also use the ``>>>`` examples of the prompt as tests.
        temperature, top_p, max_tokens: sampling of the test writer.
        seed: sampling seed (per problem: seed + a hash of the problem id).
        prompt_template: the user turn (see ``TEST_PROMPT``).
        sandbox: sandbox config (``"local"`` or ``{"type": "docker", ...}``).
        time_limit_s, memory_mb: limits per run.
        workers: runs at once.
        python: interpreter command in the sandbox.
        num_threads: torch CPU threads (torch's default when None).
    """

    def __init__(self, name: str, model: str | None = "smollm2-135m-instruct", num_generations: int = 4,
                 num_tests: int = 5, max_tests: int = 20, docstring_examples: bool = False,
                 temperature: float = 0.8, top_p: float = 0.95, max_tokens: int = 256, seed: int = 0,
                 prompt_template: str = TEST_PROMPT, sandbox: str | Mapping[str, Any] | None = None,
                 time_limit_s: float = 5.0, memory_mb: int = 512, workers: int = 2, python: str = "python3",
                 num_threads: int | None = None) -> None:
        super().__init__(name)
        if model is None and not docstring_examples:
            raise ValueError("no source of tests: give a model or set docstring_examples: true")
        for option, value in (("num_generations", num_generations), ("num_tests", num_tests),
                              ("max_tests", max_tests), ("max_tokens", max_tokens)):
            if int(value) < 1:
                raise ValueError(f"{option} must be >= 1, got {value}")
        self.model_name, self.num_generations, self.num_tests = model, int(num_generations), int(num_tests)
        self.max_tests, self.docstring_examples = int(max_tests), bool(docstring_examples)
        self.temperature, self.top_p, self.max_tokens = float(temperature), float(top_p), int(max_tokens)
        self.seed = seed
        self.prompt_template, self.sandbox_spec = prompt_template, sandbox
        self.workers, self.python = int(workers), python
        self.limits = Limits(time_s=float(time_limit_s), memory_mb=int(memory_mb), output_bytes=4096)
        self.num_threads = num_threads
        self._model = self._tokenizer = None
        self._sandbox: Sandbox | None = None
        self._results: dict[str, bool] = {}
        self.tests_: dict[str, list[str]] = {}
        """problem_id -> the tests used (for inspection)."""
        self.sandbox()  # built now: a layer that cannot isolate is refused before anything runs

    # ---- the protocol -----------------------------------------------------------------------
    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        entry_point, code_prompt = problem.metadata["entry_point"], problem.metadata["code_prompt"]
        tests = self.tests_.get(problem.problem_id)
        if tests is None:
            tests = self.tests_[problem.problem_id] = self.write_tests(problem)
        if not tests:
            return np.full(len(candidates), np.nan)
        programs = []
        for candidate in candidates:
            code = extract_code(candidate.text, entry_point) if candidate.finish_reason == "stop" else None
            programs.append(None if code is None else assemble_program(code_prompt, code, entry_point))
        matrix = self.execution_matrix([p for p in programs if p is not None], tests, entry_point, code_prompt)
        scores, row = np.zeros(len(candidates)), 0
        for index, program in enumerate(programs):
            if program is not None:
                scores[index] = matrix[row].mean()
                row += 1
        return scores

    def execution_matrix(self, programs: Sequence[str], tests: Sequence[str], entry_point: str,
                         code_prompt: str = "") -> np.ndarray:
        """``[len(programs), len(tests)]`` bool: program p passes test t (the checker's verdict).

        ``entry_point`` is the function the tests call; ``code_prompt`` (the visible prompt) runs
        before each test in the checker, so the tests may call its helpers.

        Pairs seen before (same program and test text) are not run again. A run the sandbox could not
        complete counts as failed (not cached, with a warning); only a sandbox that failed on every
        run raises (the verifier stage records it as the problem's error).
        """
        keys = [[_pair_key(p, t, entry_point, code_prompt) for t in tests] for p in programs]
        todo: dict[str, Job] = {}
        for program, row in zip(programs, keys):
            for test, key in zip(tests, row):
                if key not in self._results and key not in todo:
                    todo[key] = checked_job(program, code_prompt, test, entry_point, call_check=False,
                                            python=self.python, limits=self.limits)
        results = self.sandbox().run_many(list(todo.values()))
        check_sandbox_failures(results, "generated_tests")
        for key, result in zip(todo, results):
            if result.outcome is not Outcome.SANDBOX_ERROR:
                self._results[key] = passed(result)
        return np.array([[self._results.get(key, False) for key in row] for row in keys], dtype=bool).reshape(
            len(programs), len(tests))

    # ---- tests ----------------------------------------------------------------------------
    def write_tests(self, problem: Problem) -> list[str]:
        """The problem's tests: docstring examples (if enabled) then the model's asserts, unique, capped."""
        entry_point, code_prompt = problem.metadata["entry_point"], problem.metadata["code_prompt"]
        tests = docstring_tests(code_prompt, entry_point) if self.docstring_examples else []
        if self.model_name is not None:
            for reply in self.generate(problem):
                tests.extend(t for t in assert_lines(reply, entry_point) if t not in tests)
        return tests[: self.max_tests]

    def generate(self, problem: Problem) -> list[str]:
        """``num_generations`` sampled replies of the test writer for ``problem``."""
        import torch

        model, tokenizer = self._load()
        content = self.prompt_template.format(code_prompt=problem.metadata["code_prompt"].rstrip(),
                                              entry_point=problem.metadata["entry_point"], num_tests=self.num_tests)
        ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)
        digest = int(hashlib.sha256(f"{self.seed}/{problem.problem_id}".encode()).hexdigest()[:8], 16)
        torch.manual_seed(digest)
        with torch.inference_mode():
            output = model.generate(**ids, do_sample=self.temperature > 0, temperature=self.temperature or None,
                                    top_p=self.top_p, max_new_tokens=self.max_tokens,
                                    num_return_sequences=self.num_generations,
                                    pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        prompt_length = ids["input_ids"].shape[1]
        return tokenizer.batch_decode(output[:, prompt_length:], skip_special_tokens=True)

    def _load(self):
        if self._model is None:
            self._tokenizer, self._model = load_pretrained(self.model_name, num_threads=self.num_threads)
        return self._model, self._tokenizer

    def close(self) -> None:
        super().close()
        self._model = self._tokenizer = None


def _pair_key(program: str, test: str, entry_point: str, code_prompt: str) -> str:
    return hashlib.sha256(json.dumps([program, test, entry_point, code_prompt]).encode()).hexdigest()
