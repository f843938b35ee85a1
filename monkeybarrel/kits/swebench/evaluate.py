"""Local evaluation of patches: FAIL_TO_PASS and PASS_TO_PASS tests in containers.

Mirrors the official harness for task sets whose environment we build offline: the patch is
applied to ``base_commit``; the test files and every ``conftest.py`` are then restored from
``base_commit`` (conftest files the patch added are removed: a patch that deletes or edits the
tests, or hooks pytest's reporting from a conftest, gains nothing), ``test_patch`` is applied, and
the instance's test files run under a reporter plugin (``_pytest_verdict.py``, loaded with ``-p``
before any repository code) that attests each test's outcome with the run's sealed token. That
verdict decides each test, never the printed summary or pytest's exit status: printed ``PASSED``
lines, an early exit or a killed pytest leave every test failed. Resolved = every FAIL_TO_PASS and
every PASS_TO_PASS test passes.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ...sandbox.sealed import READER_SOURCE
from .containers import ContainerPool, ExecResult, Execution, Workspace
from .schema import SWEInstance

PLUGIN = "_mb_verdict"
"""Module name of the reporter plugin in the repository root (``-p _mb_verdict``)."""
PLUGIN_SOURCE = READER_SOURCE + "\n\n" + Path(__file__).with_name("_pytest_verdict.py").read_text()

_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) (.+?)(?: - .*)?$")
PASSING = {"PASSED", "XFAIL"}


def parse_pytest_summary(output: str) -> dict[str, str]:
    """``{node id: status}`` from pytest ``-rA`` short-summary lines."""
    statuses: dict[str, str] = {}
    for line in output.splitlines():
        match = _STATUS.match(line.strip())
        if match and "::" in match.group(2):
            statuses.setdefault(match.group(2).strip(), match.group(1))
    return statuses


@dataclass(frozen=True)
class EvalResult:
    """Outcome of one patch on one instance.

    Attributes:
        resolved: all FAIL_TO_PASS and PASS_TO_PASS tests pass.
        patch_applied: ``git apply`` accepted the patch.
        fail_to_pass: FAIL_TO_PASS tests that now pass.
        pass_to_pass_broken: PASS_TO_PASS tests that no longer pass.
        timed_out: the test run hit its time limit.
        error: infrastructure error (None when the run happened).
        log: the test output (truncated).
    """

    resolved: bool
    patch_applied: bool
    fail_to_pass: tuple[str, ...] = ()
    pass_to_pass_broken: tuple[str, ...] = ()
    timed_out: bool = False
    error: str | None = None
    log: str = ""


def test_execution(instance: SWEInstance, timeout_s: float = 300.0) -> Execution:
    """The command that restores the tests and conftest files, then runs the instance's test files under
    the reporter plugin (summary lines printed for the log; the plugin's verdict decides)."""
    if not instance.test_cmd:
        raise ValueError(f"{instance.instance_id}: field test_cmd is empty; the local evaluator needs it "
                         "(hub instances are evaluated with the official harness)")
    base = shlex.quote(instance.base_commit)
    files = " ".join(shlex.quote(f) for f in instance.test_files)
    restore = f"git checkout -q {base} -- {files} 2>/dev/null; " if files else ""
    conftests = (f"git diff --name-only {base} -- '*conftest.py' | while read -r f; do "
                 f"git checkout -q {base} -- \"$f\" 2>/dev/null || rm -f \"$f\"; done; "
                 "git ls-files --others -- '*conftest.py' | while read -r f; do rm -f \"$f\"; done; ")
    plugin = f"rm -rf {PLUGIN} {PLUGIN}.* __pycache__/{PLUGIN}.*; cp /tmp/mb/{PLUGIN}.py {PLUGIN}.py && "
    apply_tests = "git apply -v /tmp/mb/test.diff && " if instance.test_patch.strip() else ""
    script = (f"{restore}{conftests}{plugin}{apply_tests}MONKEYBARREL_VERDICT_FD=3 {instance.test_cmd} -p {PLUGIN} "
              f"{files} 3>&1 > /tmp/mb/test.log 2>&1; code=$?; rm -f {PLUGIN}.py; "
              "grep -E '^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) ' /tmp/mb/test.log; "
              "echo '--- tail ---'; tail -n 40 /tmp/mb/test.log; exit $code")
    extra = (("/tmp/mb/test.diff", instance.test_patch),) if instance.test_patch.strip() else ()
    return Execution(command=script, files=((f"/tmp/mb/{PLUGIN}.py", PLUGIN_SOURCE), *extra), timeout_s=timeout_s,
                     checked=True)


def attested_statuses(result: ExecResult) -> dict[str, str]:
    """``{node id: status}`` as the reporter plugin attested them; empty when there is no attestation."""
    try:
        statuses = json.loads(result.verdict) if result.verdict else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in statuses.items()} if isinstance(statuses, dict) else {}


def workspace(instance: SWEInstance, patch: str | None) -> Workspace:
    if not instance.image_name or not instance.repo_dir:
        missing = [f for f in ("image_name", "repo_dir") if not getattr(instance, f)]
        raise ValueError(f"{instance.instance_id}: field(s) {missing} empty; the local evaluator needs them")
    return Workspace(image=instance.image_name, repo_dir=instance.repo_dir, base_commit=instance.base_commit, patch=patch)


def judge(instance: SWEInstance, result: ExecResult) -> EvalResult:
    """Turn a test run into an EvalResult."""
    if result.error is not None:
        return EvalResult(resolved=False, patch_applied=result.patch_applied, error=result.error, log=result.output)
    if not result.patch_applied:
        return EvalResult(resolved=False, patch_applied=False, log=result.output)
    statuses = attested_statuses(result)
    f2p = tuple(t for t in instance.FAIL_TO_PASS if statuses.get(t) in PASSING)
    broken = tuple(t for t in instance.PASS_TO_PASS if statuses.get(t) not in PASSING)
    resolved = len(f2p) == len(instance.FAIL_TO_PASS) and not broken and not result.timed_out
    return EvalResult(resolved=resolved, patch_applied=True, fail_to_pass=f2p, pass_to_pass_broken=broken,
                      timed_out=result.timed_out, log=result.output)


def evaluate_patches(pool: ContainerPool, pairs: Sequence[tuple[SWEInstance, str | None]],
                     timeout_s: float = 300.0) -> list[EvalResult]:
    """Evaluate ``(instance, patch)`` pairs (patch None = unpatched), one container per distinct pair.

    A patch that does not apply, times out or crashes is a failed (unresolved) result, never an
    exception; results are cached by content in the pool.
    """
    jobs = []
    for instance, patch in pairs:
        jobs.append((workspace(instance, patch), [test_execution(instance, timeout_s)]))
    results = pool.run(jobs)
    return [judge(instance, runs[0]) for (instance, _), runs in zip(pairs, results)]
