"""CodeMonkeys' selection state machine as a verifier (and its "barrel of monkeys" ensemble mode).

Per problem, the candidates are filtered (``votes``: the scores of an earlier ``swe_test_votes``
verifier, most votes then shortest patch, duplicates dropped, top ``max_candidates``; ``ensemble``:
no votes, every distinct non-trivial patch sorted by length), then
``kits.swebench.state_machine`` runs the LLM loop in containers and picks one.

Score: 1 for candidates whose patch is the one picked, 0 for the other well-formed patches; NaN
(with the reason) for malformed or trivial patches and, with ``votes``, for patches without votes
(e.g. they did not apply), which are never shown, so a problem without any shown patch abstains. The transcript (messages, tests, executions) is the problem's
record, stored with the scores under ``artifacts/<verifier>/<problem_id>.json``; the selector
``best_single`` with ``verifier: <this name>`` turns the scores into the selection.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..core.records import Candidate, Problem
from ..kits.chat import ChatLLM
from ..kits.swebench.containers import ContainerPool, cache_path
from ..kits.swebench.diffs import candidate_patches, normalize_patch
from ..kits.swebench.retrieval import context_block, repo_files
from ..kits.swebench.schema import SWEInstance, public_instance
from ..kits.swebench.state_machine import SelectionStateMachine, barrel_of_monkeys
from ..kits.swebench.voting import NOT_SOLVED, SOLVED, rank_candidates
from .base import VERIFIERS, Verifier


@VERIFIERS.register("swe_state_machine")
class SWEStateMachine(Verifier):
    """Args:
        name: score column.
        votes: the earlier verifier whose scores are the test votes (ignored when ``ensemble``).
        ensemble: barrel-of-monkeys mode (candidates sorted by length, no votes).
        max_candidates: candidates shown to the model (3 in the paper; None = all).
        max_attempts: LLM calls per problem.
        backend, model, temperature, max_tokens, base_url, sampler_options: the LLM (``kits.chat.ChatLLM``).
        repos_dir: git checkouts for the file context (default: the instances' images).
        cache_dir, max_workers, timeout_s: the container pool.
        context_chars: characters of current file contents shown to the model.
        seed: sampling seed.
    """

    scores_whole_problem = True  # the pick depends on every candidate of the problem

    def __init__(self, name: str, votes: str | None = "test_votes", ensemble: bool = False,
                 max_candidates: int | None = 3, max_attempts: int = 10, backend: str = "embedded",
                 model: str = "smollm2-135m-instruct", temperature: float = 0.0, max_tokens: int = 512,
                 base_url: str | None = None, sampler_options: dict | None = None, repos_dir: str | None = None,
                 cache_dir: str | None = None, max_workers: int = 2, timeout_s: float = 30.0,
                 context_chars: int = 1500, seed: int = 0) -> None:
        super().__init__(name)
        if not ensemble and not votes:
            raise ValueError("swe_state_machine needs `votes` (an earlier swe_test_votes verifier) or ensemble: true")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.votes, self.ensemble, self.max_candidates = votes, ensemble, max_candidates
        self.repos_dir, self.context_chars = repos_dir, context_chars
        self.llm = ChatLLM(backend=backend, model=model, temperature=temperature, max_tokens=max_tokens,
                           base_url=base_url, options=sampler_options)
        self.pool = ContainerPool(cache_dir=cache_path(cache_dir), max_workers=max_workers)
        self.machine = SelectionStateMachine(self.llm, self.pool, max_attempts, timeout_s, seed=seed)

    @property
    def reads(self) -> tuple[str, ...]:
        return () if self.ensemble else (self.votes,)

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.score_detailed(problem, candidates)[0]

    def score_detailed(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list[str | None]]:
        patches = candidate_patches([c.text for c in candidates])
        example = None
        scores = np.where([p is None for p in patches], np.nan, 0.0)
        reasons: list[str | None] = ["malformed or trivial patch" if p is None else None for p in patches]
        if self.ensemble:
            order = barrel_of_monkeys(patches)
            order = order if self.max_candidates is None else order[: self.max_candidates]
        else:
            votes, record = self.provided(problem.problem_id, self.votes)
            votes = np.where(np.isnan(scores), np.nan, votes)
            for i in np.flatnonzero(np.isnan(votes) & ~np.isnan(scores)):  # e.g. the patch did not apply
                scores[i], reasons[i] = np.nan, f"no votes in {self.votes!r}"
            order = rank_candidates([p or "" for p in patches], votes, self.max_candidates)
            example = example_test(record)
        shown = [patches[i] for i in order]
        if not shown:
            return scores, reasons
        outcome = None
        if len(shown) == 1:
            chosen = shown[0]
        else:
            instance = public_instance(problem)
            image, repo_dir = instance.environment
            outcome = self.machine.run(instance.problem_statement, image, repo_dir, instance.base_commit, shown,
                                       self.context(instance, shown), example)
            chosen = shown[outcome.final]
        scores[np.array([p == chosen for p in patches], dtype=bool)] = 1.0
        self.keep_record(problem.problem_id, {
            "problem_id": problem.problem_id,
            "candidates_shown": [[candidates[i].generator_id, candidates[i].sample_index] for i in order],
            **(outcome.transcript if outcome is not None else  # one patch shown: no model, nothing to run
               {"candidates": shown, "example_test": example, "tests": [], "executions": [], "events": [],
                "messages": [], "selected": None, "attempts": 0, "final": 0}),
            "pool": self.pool.stats.as_dict()})
        return scores, reasons

    def context(self, instance: SWEInstance, candidates: list[str]) -> str:
        """Current contents of the files the candidates modify (empty when the repository cannot be read)."""
        normalized = [normalize_patch(c) for c in candidates]
        paths = sorted({f for n in normalized for f in n.files} - {f for n in normalized for f in n.added_files})
        try:
            files = repo_files(instance, self.repos_dir)
        except Exception:  # context is optional: the machine still runs on diffs alone
            return ""
        return context_block(files, [p for p in paths if p in files], self.context_chars)

    def close(self) -> None:
        self.llm.close()


def example_test(record: dict[str, Any] | None) -> str | None:
    """From a ``swe_test_votes`` record: the test passed by most patches while failing (exit 2) on the original code."""
    if not record or not record.get("tests"):
        return None
    codes = np.asarray(record["codes"], dtype=np.int64).reshape(len(record["patches"]), len(record["tests"]))
    passes = (codes == SOLVED).sum(axis=0) + 0.5 * (np.asarray(record["base_codes"]) == NOT_SOLVED)
    return record["tests"][int(np.argmax(passes))]
