"""Generated-test votes for SWE-bench patches (CodeMonkeys' majority voting with tests).

Per problem: a model writes ``num_tests`` reproduction tests (exit 0 solved / 2 not solved /
1 error); each runs on every distinct well-formed patch and on the unpatched code, in containers;
a candidate's score is the number of tests that exit 0 on its patch. Malformed, trivial (empty or
one-line) and unappliable patches score NaN (never selected; the reason is recorded). Tests,
exit-code matrix and outputs are written to ``artifacts_dir/<problem_id>.json`` when set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core.records import Candidate, Problem
from .base import VERIFIERS, Verifier


@VERIFIERS.register("swe_test_votes")
class SWETestVotes(Verifier):
    """Score = generated tests passed by the candidate's patch.

    Args:
        name: score column.
        backend, model, temperature, max_tokens, base_url, sampler_options: the test-writing LLM
            (see ``monkeybarrel.kits.chat.ChatLLM``).
        num_tests: tests written per problem.
        timeout_s: limit per test run.
        max_workers: containers at once.
        cache_dir: container-result cache.
        artifacts_dir: where tests and matrices are stored (None = not stored).
        context_chars: characters of the task's retrieved file context shown to the test writer.
        seed: sampling seed of the tests.
    """

    def __init__(self, name: str, backend: str = "embedded", model: str = "smollm2-135m-instruct",
                 temperature: float = 0.7, max_tokens: int = 384, base_url: str | None = None,
                 sampler_options: dict | None = None, num_tests: int = 4, timeout_s: float = 30.0,
                 max_workers: int = 2, cache_dir: str | None = None, artifacts_dir: str | None = None,
                 context_chars: int = 1500, seed: int = 0) -> None:
        super().__init__(name)
        from ..kits.chat import ChatLLM
        from ..kits.swebench.containers import DEFAULT_CACHE

        self.llm = ChatLLM(backend=backend, model=model, temperature=temperature, max_tokens=max_tokens,
                           base_url=base_url, options=sampler_options)
        self.num_tests, self.timeout_s, self.seed = num_tests, timeout_s, seed
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else DEFAULT_CACHE
        self.artifacts_dir = Path(artifacts_dir).expanduser() if artifacts_dir else None
        self.max_workers, self.context_chars = max_workers, context_chars
        self._pool = None

    @property
    def pool(self):
        if self._pool is None:
            from ..kits.swebench.containers import ContainerPool

            self._pool = ContainerPool(cache_dir=self.cache_dir, max_workers=self.max_workers)
        return self._pool

    def write_tests(self, problem: Problem) -> list[str]:
        """``num_tests`` test scripts from the LLM (replies without a script are dropped)."""
        from ..kits.swebench.voting import extract_script, test_prompt

        meta = problem.metadata
        [replies] = self.llm.complete([test_prompt(meta["repo"], meta["problem_statement"], meta.get("context", "")[: self.context_chars])],
                                      n=self.num_tests, seed=self.seed)
        return [s for s in (extract_script(r) for r in replies) if s]

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        from ..kits.swebench.diffs import MalformedPatch, is_trivial, normalize_patch
        from ..kits.swebench.voting import run_vote_matrix

        patches: list[str | None] = []
        for candidate in candidates:
            try:
                patch = normalize_patch(candidate.text).text
            except MalformedPatch:
                patch = None
            patches.append(None if is_trivial(patch) else patch)
        tests = self.write_tests(problem)
        from ..kits.swebench.schema import public_instance

        image, repo_dir = public_instance(problem).environment
        matrix = run_vote_matrix(self.pool, image, repo_dir, problem.metadata["base_commit"],
                                 [p for p in patches if p is not None], tests, self.timeout_s)
        votes = dict(zip(matrix.patches, matrix.votes.tolist()))
        applied = dict(zip(matrix.patches, matrix.applied.tolist()))
        scores = np.array([float(votes[p]) if p is not None and applied[p] else np.nan for p in patches])
        if self.artifacts_dir is not None:
            self.artifacts_dir.mkdir(parents=True, exist_ok=True)
            (self.artifacts_dir / f"{problem.problem_id}.json").write_text(json.dumps({
                "problem_id": problem.problem_id, "tests": list(matrix.tests), "patches": list(matrix.patches),
                "codes": matrix.codes.tolist(), "base_codes": matrix.base_codes.tolist(),
                "applied": matrix.applied.tolist(), "votes": matrix.votes.tolist(),
                "pool": self.pool.stats.as_dict()}, indent=1))
        return scores

    def close(self) -> None:
        self.llm.close()
