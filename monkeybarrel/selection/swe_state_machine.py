"""CodeMonkeys' selection state machine as a selector (and its "barrel of monkeys" ensemble mode).

Per problem: the candidates are filtered (``votes`` column: most votes then shortest, duplicates
dropped, top ``max_candidates``; ``ensemble=True``: no votes, every distinct non-trivial patch
sorted by length), then ``monkeybarrel.kits.swebench.state_machine`` runs the LLM loop in containers and
picks one. Transcripts go to ``transcript_dir/<problem_id>.json``. The instances (issue, image,
base commit) are read from the same task file as the task (``path``) or the hub (``dataset``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector


@SELECTORS.register("swe_state_machine")
class SWEStateMachine(Selector):
    """Args:
        path: the SWE task file (JSONL/Parquet); None = hub ``dataset``.
        dataset, split: hub source when ``path`` is None.
        votes: verifier column with test votes (ignored when ``ensemble``).
        ensemble: barrel-of-monkeys mode (candidates sorted by length, no votes).
        max_candidates: candidates shown to the model (3 in the paper; None = all).
        max_attempts: LLM calls per problem.
        backend, model, temperature, max_tokens, base_url, sampler_options: the LLM (``ChatLLM``).
        votes_artifacts_dir: a ``swe_test_votes`` verifier's artifacts: the example test comes from there.
        transcript_dir: where transcripts are written.
        repos_dir: git checkouts for the file context (default: the instances' images).
        cache_dir, max_workers, timeout_s: the container pool.
        context_chars: characters of current file contents shown to the model.
        seed: sampling seed.
    """

    def __init__(self, path: str | None = None, dataset: str = "lite", split: str = "test", votes: str | None = "test_votes",
                 ensemble: bool = False, max_candidates: int | None = 3, max_attempts: int = 10,
                 backend: str = "embedded", model: str = "smollm2-135m-instruct", temperature: float = 0.0,
                 max_tokens: int = 512, base_url: str | None = None, sampler_options: dict | None = None,
                 votes_artifacts_dir: str | None = None, transcript_dir: str = "swe_transcripts",
                 repos_dir: str | None = None, cache_dir: str | None = None, max_workers: int = 2,
                 timeout_s: float = 30.0, context_chars: int = 1500, seed: int = 0) -> None:
        self.path, self.dataset, self.split, self.votes, self.ensemble = path, dataset, split, votes, ensemble
        self.max_candidates, self.max_attempts, self.backend, self.model = max_candidates, max_attempts, backend, model
        self.temperature, self.max_tokens, self.base_url, self.sampler_options = temperature, max_tokens, base_url, sampler_options
        self.votes_artifacts_dir, self.transcript_dir, self.repos_dir = votes_artifacts_dir, transcript_dir, repos_dir
        self.cache_dir, self.max_workers, self.timeout_s, self.seed = cache_dir, max_workers, timeout_s, seed
        self.context_chars = context_chars

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "SWEStateMachine":
        super().fit(data, labels)
        from ..kits.swebench.containers import ContainerPool
        from ..kits.swebench.diffs import MalformedPatch, is_trivial, normalize_patch
        from ..kits.chat import ChatLLM
        from ..kits.swebench.schema import load_instances
        from ..kits.swebench.state_machine import SelectionJob, SelectionStateMachine, barrel_of_monkeys
        from ..kits.swebench.voting import rank_candidates
        from ..kits.swebench.containers import DEFAULT_CACHE

        if not self.ensemble and self.votes not in data.verifiers:
            raise ValueError(f"swe_state_machine: no verifier column {self.votes!r}; have {list(data.verifiers)} "
                             "(or set ensemble: true)")
        instances = {i.instance_id: i for i in load_instances(self.path, dataset=self.dataset, split=self.split)}
        llm = ChatLLM(backend=self.backend, model=self.model, temperature=self.temperature, max_tokens=self.max_tokens,
                      base_url=self.base_url, options=self.sampler_options)
        pool = ContainerPool(cache_dir=Path(self.cache_dir).expanduser() if self.cache_dir else DEFAULT_CACHE,
                             max_workers=self.max_workers)
        machine = SelectionStateMachine(llm, pool, self.max_attempts, self.timeout_s, seed=self.seed)
        texts = data.texts if data.texts is not None else np.full(data.n_candidates, None, dtype=object)
        self.chosen_ = np.full(data.n_problems, -1, dtype=np.int64)
        self.attempts_ = np.zeros(data.n_problems, dtype=np.int64)
        self.pool_stats_: dict[str, Any] = {}
        out_dir = Path(self.transcript_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        jobs, where = [], []
        try:
            for group, problem_id in enumerate(data.problems.astype(str)):
                rows = np.flatnonzero(data.groups == group)
                if problem_id not in instances:
                    raise ValueError(f"swe_state_machine: problem {problem_id!r} is not in {self.path or self.dataset}")
                instance = instances[problem_id]
                patches: list[str | None] = []
                for row in rows:
                    try:
                        patch = normalize_patch(texts[row]).text
                    except MalformedPatch:
                        patch = None
                    patches.append(None if is_trivial(patch) else patch)
                if self.ensemble:
                    order = barrel_of_monkeys(patches)
                    order = order if self.max_candidates is None else order[: self.max_candidates]
                else:
                    votes = data.verifier_scores(self.votes)[rows]
                    votes = np.where([p is None for p in patches], np.nan, votes)
                    order = rank_candidates([p or "" for p in patches], votes, self.max_candidates)
                if not order:
                    continue
                candidates = [patches[i] for i in order]
                if len(candidates) == 1:
                    self.chosen_[group] = rows[order[0]]
                    continue
                image, repo_dir = instance.environment
                jobs.append(SelectionJob(instance.problem_statement, image, repo_dir, instance.base_commit,
                                         tuple(candidates), self._context(instance, candidates), self._example_test(problem_id)))
                where.append((group, problem_id, [int(rows[i]) for i in order]))
            for (group, problem_id, candidate_rows), outcome in zip(where, machine.run_many(jobs)):
                self.chosen_[group] = candidate_rows[outcome.final]
                self.attempts_[group] = outcome.attempts
                (out_dir / f"{problem_id}.json").write_text(json.dumps(
                    {"problem_id": problem_id, "candidate_rows": candidate_rows, **outcome.transcript}, indent=1))
        finally:
            llm.close()
        self.pool_stats_ = pool.stats.as_dict()
        self.n_fitted_ = data.n_candidates
        return self

    def _context(self, instance, candidates: list[str]) -> str:
        from ..kits.swebench.diffs import normalize_patch
        from ..kits.swebench.retrieval import context_block, repo_files

        paths = sorted({f for c in candidates for f in normalize_patch(c).files} - {f for c in candidates for f in normalize_patch(c).added_files})
        try:
            files = repo_files(instance, self.repos_dir)
        except Exception:  # context is optional: the machine still runs on diffs alone
            return ""
        return context_block(files, [p for p in paths if p in files], self.context_chars)

    def _example_test(self, problem_id: str) -> str | None:
        """The test that passed on most patches while failing (exit 2) on the original code, from the votes artifacts."""
        if not self.votes_artifacts_dir:
            return None
        path = Path(self.votes_artifacts_dir) / f"{problem_id}.json"
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        if not record["tests"]:
            return None
        codes = np.asarray(record["codes"], dtype=np.int64).reshape(len(record["patches"]), len(record["tests"]))
        passes = (codes == 0).sum(axis=0) + 0.5 * (np.asarray(record["base_codes"]) == 2)
        return record["tests"][int(np.argmax(passes))]

    def decision_function(self, data: SelectionData) -> np.ndarray:
        if getattr(self, "n_fitted_", None) != data.n_candidates:
            raise ValueError("swe_state_machine must be fitted on the data it selects from")
        scores = np.full(data.n_candidates, np.nan)
        chosen = self.chosen_[self.chosen_ >= 0]
        scores[chosen] = 1.0
        return scores
