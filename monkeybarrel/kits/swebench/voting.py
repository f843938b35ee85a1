"""Generated-test voting (CodeMonkeys): model-written reproduction tests vote for candidate patches.

Exit-code contract of a generated test (a standalone Python script run from the repository root):
0 = the issue is solved, 2 = not solved yet (expected on the original code), 1 = error (the
default when it raises), a timeout counts as an error. The code is the script's own, attested by a
runner that holds the run's sealed token (``_script_verdict.py``): a ``SystemExit`` raised by the
code under test (a patch that exits 0 on import) or an ``os._exit`` is an error, never a vote. Every
test runs on every distinct patch and on the unpatched code, in containers (one per patch, tests by
exec, cached by content). votes(patch) = number of tests that exit 0. Ranking: most votes, then the
shorter patch.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...core.groups import rank_by_votes
from ...sandbox.sealed import READER_SOURCE
from .containers import ContainerPool, ExecResult, Execution, Workspace

RUNNER = "/tmp/mb/run_test.py"
RUNNER_SOURCE = READER_SOURCE + "\n\n" + Path(__file__).with_name("_script_verdict.py").read_text()

SOLVED, NOT_SOLVED, ERROR = 0, 2, 1

TEST_INSTRUCTIONS = """Write a standalone Python script that reproduces the issue below in the repository {repo}.
The script is run with `python test_issue.py` from the repository root (the package is importable).
Exit-code contract: `sys.exit(0)` if the issue is fixed, `sys.exit(2)` if the issue is still present;
any crash exits with 1. Print what you observe. Reply with the script in one ```python block.

## Issue
{issue}
{context}"""


def test_prompt(repo: str, issue: str, context: str = "") -> list[dict[str, str]]:
    """The chat that asks for one reproduction test."""
    context = f"\n## Relevant code\n{context}\n" if context else ""
    return [{"role": "user", "content": TEST_INSTRUCTIONS.format(repo=repo, issue=issue.strip(), context=context)}]


def extract_script(text: str | None, tag: str | None = None) -> str | None:
    """The script in a reply: inside ``<tag>`` when given, else the first ```python block (None if absent)."""
    if not text:
        return None
    if tag is not None:
        match = re.search(rf"<{tag}>(.*?)</{tag}>", text, re.S)
        if not match:
            return None
        text = match.group(1)
    fenced = re.search(r"```(?:python|py)?[ \t]*\n(.*?)```", text, re.S)
    script = fenced.group(1) if fenced else (text if tag is not None else None)
    return script.strip() + "\n" if script and script.strip() else None


def script_execution(script: str, timeout_s: float = 60.0) -> Execution:
    """Run a generated test script from the repository root, under the attesting runner."""
    name = f"/tmp/mb/gen_{hashlib.sha256(script.encode()).hexdigest()[:16]}.py"
    # harness images keep the project's Python in a conda env named testbed; local images have it on PATH
    activate = "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate testbed; fi; "
    return Execution(command=f"{activate}python {RUNNER} {name}", files=((name, script), (RUNNER, RUNNER_SOURCE)),
                     timeout_s=timeout_s, checked=True)


def exit_code(result: ExecResult) -> int:
    """The contract's code of a run, as the runner attested it: 0/2; anything else (crash, timeout, no
    apply, no attestation, an exit status the runner did not attest) -> 1."""
    if result.error is not None or not result.patch_applied or result.timed_out:
        return ERROR
    attested = int(result.verdict) if result.verdict and result.verdict.isdigit() else None
    return attested if attested in (SOLVED, NOT_SOLVED) and attested == result.exit_code else ERROR


@dataclass(frozen=True)
class VoteMatrix:
    """Results of T tests on P distinct patches.

    Attributes:
        patches: ``[P]`` distinct normalised patches.
        tests: ``[T]`` test scripts.
        codes: ``[P, T]`` contract exit codes (0 solved, 2 not solved, 1 error).
        base_codes: ``[T]`` codes on the unpatched code.
        applied: ``[P]`` whether the patch applied.
        outputs: ``[P][T]`` outputs (for transcripts).
    """

    patches: tuple[str, ...]
    tests: tuple[str, ...]
    codes: np.ndarray
    base_codes: np.ndarray
    applied: np.ndarray
    outputs: tuple[tuple[str, ...], ...]

    @property
    def votes(self) -> np.ndarray:
        """``[P]`` tests passed (exit 0) per patch."""
        return (self.codes == SOLVED).sum(axis=1)


def run_vote_matrix(pool: ContainerPool, image: str, repo_dir: str, base_commit: str, patches: Sequence[str],
                    tests: Sequence[str], timeout_s: float = 60.0) -> VoteMatrix:
    """Run every test on every distinct patch and on the unpatched code."""
    distinct = list(dict.fromkeys(patches))
    executions = [script_execution(t, timeout_s) for t in tests]
    jobs = [(Workspace(image, repo_dir, base_commit, p), executions) for p in [*distinct, None]]
    results = pool.run(jobs) if tests else [[] for _ in jobs]
    codes = np.array([[exit_code(r) for r in row] for row in results[:-1]], dtype=np.int64).reshape(len(distinct), len(tests))
    applied = np.array([all(r.patch_applied for r in row) if row else True for row in results[:-1]], dtype=bool)
    return VoteMatrix(patches=tuple(distinct), tests=tuple(tests), codes=codes,
                      base_codes=np.array([exit_code(r) for r in results[-1]], dtype=np.int64),
                      applied=applied, outputs=tuple(tuple(r.output for r in row) for row in results[:-1]))


def rank_candidates(patches: Sequence[str], votes: Sequence[float], max_candidates: int | None = 3) -> list[int]:
    """CodeMonkeys' filter: indices by ``core.groups.rank_by_votes`` (votes, then patch length), exact
    duplicates dropped, first ``max_candidates``.

    NaN votes (malformed or trivial patches) are left out.
    """
    votes = np.asarray(votes, dtype=np.float64)
    [order] = rank_by_votes(votes, [len(p) for p in patches], np.zeros(len(patches), np.int64), 1)
    kept, seen = [], set()
    for i in order[np.isfinite(votes[order])].tolist():
        if patches[i] not in seen:
            seen.add(patches[i])
            kept.append(i)
    return kept if max_candidates is None else kept[:max_candidates]


def expected_tie_accuracy(votes: np.ndarray, correct: np.ndarray) -> float:
    """Mean correctness over all patches tied at the maximum vote (a uniform tie-break's expectation)."""
    finite = np.isfinite(votes)
    if not finite.any():
        return 0.0
    best = np.nanmax(votes)
    tied = finite & (votes == best)
    return float(np.mean(correct[tied]))
