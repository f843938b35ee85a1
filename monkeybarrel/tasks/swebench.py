"""SWE-bench as a task: GitHub issues -> Problems; candidates are patches; labels = resolved.

The prompt is a one-shot, Agentless-style request for a unified diff, with the repository files
BM25 ranks highest for the issue. The label-free answer of a candidate is its normalised patch
(equal edits vote together); the label is "resolved", from the local container evaluator
(``evaluator: local``, task sets built offline) or the official ``swebench`` harness
(``evaluator: harness``, needs its registry images). Hidden test lists and the gold patch travel in
``reference_answer`` only, so label-free verifiers never see them.
"""

from __future__ import annotations

import json
from typing import Sequence

from ..core.records import Problem
from ..kits.swebench.containers import ContainerPool, cache_path
from ..kits.swebench.diffs import MalformedPatch, normalize_patch
from ..kits.swebench.evaluate import evaluate_patches
from ..kits.swebench.harness import evaluate_with_harness
from ..kits.swebench.retrieval import context_block, rank_files, repo_files
from ..kits.swebench.schema import PUBLIC_FIELDS, SWEInstance, full_instance, load_instances
from .base import TASKS, Task

PATCH_INSTRUCTIONS = """You are fixing an issue in the repository {repo}. Below are the issue and the repository files most
relevant to it. Write a patch that resolves the issue: a unified diff in `git diff` format (paths `a/...` and
`b/...`, hunks with three lines of context) inside one ```diff block. Change only what the fix needs.

## Issue
{issue}

## Relevant files
{context}
"""


@TASKS.register("swebench")
class SWEBenchTask(Task):
    """SWE-bench instances (hub Lite/Verified, or a local JSONL/Parquet file in that schema).

    Args:
        path: local file; None = hub ``dataset``.
        split: hub split.
        num_problems: first N instances.
        seed: unused (file order).
        dataset: ``lite``, ``verified``, or a hub id / local dataset dir.
        instance_ids: only these instances.
        evaluator: ``local`` (containers from the instances' ``image_name``) or ``harness`` (official).
        retrieval_top_k: files of context in the prompt (0 = none).
        repos_dir: git checkouts for retrieval (default: read the files from the instance's image).
        max_context_chars: characters per context file.
        cache_dir: container-result cache.
        max_workers: containers at once.
        timeout_s: test-run limit per patch.
        harness_options: extra keyword arguments of ``swebench.harness.run_evaluation.main``.
    """

    name = "swebench"

    def __init__(self, path: str | None = None, split: str = "test", num_problems: int | None = None, seed: int = 0,
                 dataset: str = "lite", instance_ids: list[str] | None = None, evaluator: str = "local",
                 retrieval_top_k: int = 3, repos_dir: str | None = None, max_context_chars: int = 8000,
                 cache_dir: str | None = None, max_workers: int = 2, timeout_s: float = 300.0,
                 harness_options: dict | None = None) -> None:
        if evaluator not in ("local", "harness"):
            raise ValueError(f"evaluator must be 'local' or 'harness', got {evaluator!r}")
        self.path, self.split, self.num_problems, self.dataset = path, split, num_problems, dataset
        self.instance_ids, self.evaluator, self.retrieval_top_k = instance_ids, evaluator, retrieval_top_k
        self.repos_dir, self.max_context_chars = repos_dir, max_context_chars
        self.cache_dir = cache_path(cache_dir)
        self.max_workers, self.timeout_s, self.harness_options = max_workers, timeout_s, dict(harness_options or {})
        self._pool = None

    # ---- problems -------------------------------------------------------------------------
    def load(self) -> list[Problem]:
        instances = load_instances(self.path, dataset=self.dataset, split=self.split, instance_ids=self.instance_ids)
        if self.num_problems is not None:
            instances = instances[: self.num_problems]
        return [self.to_problem(instance) for instance in instances]

    def to_problem(self, instance: SWEInstance) -> Problem:
        context, files = self.context(instance)
        prompt = PATCH_INSTRUCTIONS.format(repo=instance.repo, issue=instance.problem_statement.strip(),
                                           context=context or "(none retrieved)")
        meta = {k: getattr(instance, k) for k in PUBLIC_FIELDS if getattr(instance, k) not in (None, "")}
        meta.update(context=context, context_files=files, source=self.path or f"hub:{self.dataset}")
        return Problem(problem_id=instance.instance_id, task=self.name, prompt=prompt,
                       reference_answer=json.dumps(instance.to_record(), sort_keys=True), metadata=meta)

    def context(self, instance: SWEInstance) -> tuple[str, list[str]]:
        """Retrieved file context (BM25 over the repository at the base commit) and its paths."""
        if self.retrieval_top_k <= 0 or (self.repos_dir is None and not instance.image_name):
            return "", []
        files = repo_files(instance, self.repos_dir)
        paths = rank_files(instance.problem_statement, files, self.retrieval_top_k)
        return context_block(files, paths, self.max_context_chars), paths

    # ---- answers and labels -----------------------------------------------------------------
    def extract_answer(self, text: str | None) -> str | None:
        """The normalised patch (None when the text holds no well-formed diff)."""
        try:
            return normalize_patch(text).text
        except MalformedPatch:
            return None

    def is_correct(self, text: str | None, problem: Problem) -> bool:
        return self.check([text], [problem])[0]

    def check(self, texts: Sequence[str | None], problems: Sequence[Problem]) -> list[bool]:
        """Resolved or not, for every (candidate, problem); malformed patches are unresolved."""
        patches = [self.extract_answer(t) for t in texts]
        todo = [i for i, p in enumerate(patches) if p is not None]
        out = [False] * len(texts)
        if not todo:
            return out
        instances = {p.problem_id: full_instance(p) for p in problems}
        pairs = [(instances[problems[i].problem_id], patches[i]) for i in todo]
        if self.evaluator == "harness":
            resolved = evaluate_with_harness(pairs, **self.harness_options)
        else:
            resolved = [r.resolved for r in evaluate_patches(self.pool, pairs, self.timeout_s)]
        for i, ok in zip(todo, resolved):
            out[i] = bool(ok)
        return out

    @property
    def pool(self):
        if self._pool is None:
            self._pool = ContainerPool(cache_dir=self.cache_dir, max_workers=self.max_workers)
        return self._pool
