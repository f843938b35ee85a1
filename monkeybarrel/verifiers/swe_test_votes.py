"""Generated-test votes for SWE-bench patches (CodeMonkeys' majority voting with tests).

Per problem: a model writes ``num_tests`` reproduction tests (exit 0 solved / 2 not solved /
1 error); each runs on every distinct well-formed patch and on the unpatched code, in containers;
a candidate's score is the number of tests that exit 0 on its patch. Malformed, trivial (empty or
one-line) and unappliable patches score NaN (never selected; the reason is recorded). The tests,
exit-code matrix and outputs are the problem's record, stored with the scores
(``artifacts/<verifier>/<problem_id>.json``); the ``swe_state_machine`` verifier reads them.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..kits.chat import ChatLLM
from ..kits.swebench.containers import ContainerPool, cache_path
from ..kits.swebench.diffs import candidate_patches
from ..kits.swebench.schema import public_instance
from ..kits.swebench.voting import extract_script, run_vote_matrix, test_prompt
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
        context_chars: characters of the task's retrieved file context shown to the test writer.
        seed: sampling seed of the tests.
    """

    def __init__(self, name: str, backend: str = "embedded", model: str = "smollm2-135m-instruct",
                 temperature: float = 0.7, max_tokens: int = 384, base_url: str | None = None,
                 sampler_options: dict | None = None, num_tests: int = 4, timeout_s: float = 30.0,
                 max_workers: int = 2, cache_dir: str | None = None, context_chars: int = 1500, seed: int = 0) -> None:
        super().__init__(name)
        self.llm = ChatLLM(backend=backend, model=model, temperature=temperature, max_tokens=max_tokens,
                           base_url=base_url, options=sampler_options)
        self.num_tests, self.timeout_s, self.seed = num_tests, timeout_s, seed
        self.cache_dir = cache_path(cache_dir)
        self.max_workers, self.context_chars = max_workers, context_chars
        self._pool: ContainerPool | None = None

    @property
    def pool(self) -> ContainerPool:
        if self._pool is None:
            self._pool = ContainerPool(cache_dir=self.cache_dir, max_workers=self.max_workers)
        return self._pool

    def write_tests(self, problem: Problem) -> list[str]:
        """``num_tests`` test scripts from the LLM (replies without a script are dropped)."""
        meta = problem.metadata
        [replies] = self.llm.complete([test_prompt(meta["repo"], meta["problem_statement"], meta.get("context", "")[: self.context_chars])],
                                      n=self.num_tests, seed=self.seed)
        return [s for s in (extract_script(r) for r in replies) if s]

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        patches = candidate_patches([c.text for c in candidates])
        tests = self.write_tests(problem)
        image, repo_dir = public_instance(problem).environment
        matrix = run_vote_matrix(self.pool, image, repo_dir, problem.metadata["base_commit"],
                                 [p for p in patches if p is not None], tests, self.timeout_s)
        votes = dict(zip(matrix.patches, matrix.votes.tolist()))
        applied = dict(zip(matrix.patches, matrix.applied.tolist()))
        scores = np.array([float(votes[p]) if p is not None and applied[p] else np.nan for p in patches])
        self.keep_record(problem.problem_id, {
            "problem_id": problem.problem_id, "tests": list(matrix.tests), "patches": list(matrix.patches),
            "codes": matrix.codes.tolist(), "base_codes": matrix.base_codes.tolist(),
            "applied": matrix.applied.tolist(), "votes": matrix.votes.tolist(),
            "pool": self.pool.stats.as_dict()})
        return scores

    def close(self) -> None:
        self.llm.close()
