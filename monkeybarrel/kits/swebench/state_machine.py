"""The selection state machine (CodeMonkeys): an LLM writes discriminating tests, reads their outputs, picks.

States: ``write_test`` (the first reply must hold a ``<test>`` script) -> ``run`` (the script runs on
the original code and on every candidate, in containers) -> ``select_or_revise`` (the reply holds
exactly one of ``<test>`` = a new script, back to ``run``, or ``<chosen_candidate_fix_id>``) -> done.
A reply with both tags or neither gets a format error and counts as an attempt. At most
``max_attempts`` LLM calls; an out-of-range id counts as no selection. Final answer: the chosen
candidate, else candidate 0 (the top-voted, shortest). Every message and execution is kept in the
transcript. ``barrel_of_monkeys`` builds the candidate list of the ensemble mode.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from .containers import ContainerPool, Workspace
from .diffs import MalformedPatch, is_trivial, normalize_patch
from ..chat import ChatLLM
from .voting import extract_script, script_execution

SYSTEM = ("You are a careful software engineer choosing between candidate fixes for a GitHub issue. "
          "Base every decision on execution evidence; tests can be wrong too; when fixes behave the same, "
          "prefer the simpler one.")
INITIAL = """## Issue
{issue}

## Current code of the files the candidates modify
{context}

## Candidate fixes
{candidates}
{example}
First analyse the issue and how the candidates differ. Then write ONE Python test script that tells the candidates
apart: it is run from the repository root on the original code and on each candidate. Exit 0 when the issue is fixed,
2 when it is not, 1 on errors; print what you observe. Put the script between <test> and </test>."""
SELECT_OR_REVISE = """Outputs of your test:
{outputs}
Now reply with exactly one of:
- a new test script between <test> and </test> (it starts from a clean repository, nothing is kept), or
- the id of the best fix as <chosen_candidate_fix_id>N</chosen_candidate_fix_id>."""
FORMAT_ERROR = ("Your reply must contain exactly one of <test>...</test> or "
                "<chosen_candidate_fix_id>N</chosen_candidate_fix_id>{first}. Try again.")
_CHOICE = re.compile(r"<chosen_candidate_fix_id>\s*(-?\d+)\s*</chosen_candidate_fix_id>")


@dataclass(frozen=True)
class SelectionJob:
    """One instance for the machine: the issue, where to run code, the candidates (normalised patches)."""

    issue: str
    image: str
    repo_dir: str
    base_commit: str
    candidates: tuple[str, ...]
    context: str = ""
    example_test: str | None = None


@dataclass
class SelectionOutcome:
    """Result of one run of the machine.

    Attributes:
        final: index into the candidates of the answer (the selection, else 0).
        selected: the model's valid choice, or None.
        attempts: LLM calls made.
        transcript: messages, tests, executions and events, JSON-serialisable.
    """

    final: int
    selected: int | None
    attempts: int
    transcript: dict[str, Any] = field(default_factory=dict)


def barrel_of_monkeys(patches: Sequence[str | None]) -> list[int]:
    """Ensemble candidate list: indices of distinct, non-trivial, well-formed patches sorted by length only."""
    kept: dict[str, int] = {}
    for i, patch in enumerate(patches):
        try:
            text = normalize_patch(patch).text
        except MalformedPatch:
            continue
        if not is_trivial(text) and text not in kept:
            kept[text] = i
    return [i for _, i in sorted(((len(t), i) for t, i in kept.items()))]


class SelectionStateMachine:
    """Runs the write-test / run / select-or-revise loop for one instance at a time.

    Args:
        llm: the model (temperature 0 in the paper).
        pool: containers for the test runs.
        max_attempts: LLM calls per instance.
        timeout_s: limit per test run.
        output_chars: characters of each run's output shown to the model.
        seed: sampling seed.
    """

    def __init__(self, llm: ChatLLM, pool: ContainerPool, max_attempts: int = 10, timeout_s: float = 30.0,
                 output_chars: int = 8192, seed: int = 0) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        self.llm, self.pool, self.max_attempts = llm, pool, max_attempts
        self.timeout_s, self.output_chars, self.seed = timeout_s, output_chars, seed

    def run(self, issue: str, image: str, repo_dir: str, base_commit: str, candidates: Sequence[str],
            context: str = "", example_test: str | None = None) -> SelectionOutcome:
        """Choose among ``candidates`` (normalised patches) for one instance."""
        return self.run_many([SelectionJob(issue, image, repo_dir, base_commit, tuple(candidates), context, example_test)])[0]

    def run_many(self, jobs: Sequence["SelectionJob"]) -> list[SelectionOutcome]:
        """Run the machine for many instances in lockstep: each round is one batched LLM call over the
        instances still undecided and one pool run of all their new tests (same result as one by one)."""
        states = [self._start(job) for job in jobs]
        for attempt in range(1, self.max_attempts + 1):
            active = [s for s in states if not s["done"]]
            if not active:
                break
            replies = self.llm.complete([s["messages"] for s in active], n=1, seed=self.seed + attempt - 1)
            pending = []
            for state, [reply] in zip(active, replies):
                test = self._step(state, reply, attempt)
                if test is not None:
                    pending.append((state, test))
            outputs = self.execute_many([(s["job"], t) for s, t in pending])
            for (state, test), result in zip(pending, outputs):
                state["transcript"]["tests"].append(test)
                state["transcript"]["executions"].append(result)
                state["messages"].append({"role": "user", "content": SELECT_OR_REVISE.format(outputs=self._render(result))})
                state["state"] = "select_or_revise"
        return [self._finish(s) for s in states]

    def _start(self, job: "SelectionJob") -> dict[str, Any]:
        listing = "\n".join(f"### Candidate {i}\n```diff\n{p}```" for i, p in enumerate(job.candidates))
        example = f"\n## An example test written earlier\n```python\n{job.example_test}```\n" if job.example_test else ""
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": INITIAL.format(issue=job.issue.strip(), context=job.context or "(not available)",
                                                               candidates=listing, example=example)}]
        transcript = {"candidates": list(job.candidates), "example_test": job.example_test, "tests": [],
                      "executions": [], "events": []}
        return {"job": job, "messages": messages, "transcript": transcript, "state": "write_test",
                "selected": None, "attempts": 0, "done": False}

    def _step(self, state: dict[str, Any], reply: str, attempt: int) -> str | None:
        """Apply one reply; returns a test to run, or None (format error or a decision)."""
        state["attempts"] = attempt
        state["messages"].append({"role": "assistant", "content": reply})
        events = state["transcript"]["events"]
        test = extract_script(reply, tag="test")
        choice = _CHOICE.search(reply)
        if state["state"] == "write_test" and choice is not None and test is None:
            choice = None  # the first reply must be a test
        if (test is None) == (choice is None):
            events.append({"attempt": attempt, "event": "format_error", "state": state["state"]})
            state["messages"].append({"role": "user", "content": FORMAT_ERROR.format(
                first=" (your first reply must be a test)" if state["state"] == "write_test" else "")})
            return None
        if choice is not None:
            index = int(choice.group(1))
            state["selected"] = index if 0 <= index < len(state["job"].candidates) else None
            events.append({"attempt": attempt, "event": "choice", "id": index, "valid": state["selected"] is not None})
            state["done"] = True
            return None
        events.append({"attempt": attempt, "event": "test", "state": state["state"]})
        return test

    @staticmethod
    def _finish(state: dict[str, Any]) -> SelectionOutcome:
        transcript = state["transcript"]
        final = state["selected"] if state["selected"] is not None else 0
        transcript.update(messages=state["messages"], selected=state["selected"], attempts=state["attempts"], final=final)
        return SelectionOutcome(final=final, selected=state["selected"], attempts=state["attempts"], transcript=transcript)

    def execute_many(self, items: Sequence[tuple["SelectionJob", str]]) -> list[list[dict]]:
        """Run each test on its instance's original code and candidates, all in one pool run."""
        jobs, spans = [], []
        for job, test in items:
            execution = script_execution(test, self.timeout_s)
            spans.append((len(jobs), len(job.candidates) + 1))
            jobs.extend((Workspace(job.image, job.repo_dir, job.base_commit, p), [execution]) for p in [None, *job.candidates])
        results = [runs[0] for runs in self.pool.run(jobs)] if jobs else []
        return [[{"target": "original" if i == 0 else f"candidate {i - 1}", "exit_code": r.exit_code,
                  "timed_out": r.timed_out, "patch_applied": r.patch_applied, "output": r.output[-self.output_chars:]}
                 for i, r in enumerate(results[start:start + size])] for start, size in spans]

    @staticmethod
    def _render(outputs: list[dict]) -> str:
        parts = []
        for item in outputs:
            status = "timed out" if item["timed_out"] else ("patch did not apply" if not item["patch_applied"]
                                                            else f"exit code {item['exit_code']}")
            parts.append(f"### {item['target']}: {status}\n```\n{item['output']}\n```")
        return "\n".join(parts)
