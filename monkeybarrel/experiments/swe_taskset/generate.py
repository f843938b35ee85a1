"""Generate the local SWE task set (the SWE-smith recipe): real projects, injected bugs, failing tests.

For each project of ``projects.json`` (pristine PyPI sdists as git repos in the env image):
enumerate single-token mutations of its source (comparison flipped, ``and``/``or`` swapped,
``+``/``-`` swapped, ``not`` dropped, integer constant off by one), in a seeded order; run the
project's tests in a container with each mutation applied; keep mutations that break between 1
and ``--max-f2p`` previously passing tests. FAIL_TO_PASS = those tests, PASS_TO_PASS = the other
passing tests of the same files, gold patch = the mutation reversed, base commit = the buggy state
(built by ``build_repos.commit_bug``, identical inside the image), problem statement = an issue
written from the failing test's error. Writes ``tasks.jsonl``; then run ``.ci/swe_setup.sh``.

    python -m monkeybarrel.experiments.swe_taskset.generate --per-project 6
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from ...kits.swebench.containers import ContainerPool, Execution, Workspace
from ...kits.swebench.evaluate import PASSING, parse_pytest_summary
from ...kits.swebench.schema import SWEInstance, write_instances
from .build_repos import HERE, build_pristine, commit_bug, load_projects, sdist_path

ENV_IMAGE = "monkeybarrel/swe-taskset-env:1"
_SWAPS = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
          ast.Add: "-", ast.Sub: "+", ast.And: "or", ast.Or: "and"}
_TOKENS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.Add: "+", ast.Sub: "-", ast.And: "and", ast.Or: "or"}


@dataclass(frozen=True)
class Mutation:
    """One single-line edit: ``path`` line ``line`` (1-based) becomes ``new``; ``kind`` and enclosing function."""

    path: str
    line: int
    old: str
    new: str
    kind: str
    function: str


def _splice(line: str, start: int, end: int, old: str, new: str) -> str | None:
    """Replace the operator token ``old`` between byte offsets ``start:end`` of ``line`` by ``new``."""
    raw = line.encode()
    gap = raw[start:end].decode(errors="replace")
    if old.isalpha():
        pattern = rf"\b{old}\b"
    else:
        pattern = rf"(?<![<>=!+\-*/%&|^]){re.escape(old)}(?![<>=+\-])"
    match = re.search(pattern, gap)
    if not match:
        return None
    piece = gap[:match.start()] + new + gap[match.end():]
    return raw[:start].decode() + piece + raw[end:].decode()


def mutations(path: str, source: str) -> list[Mutation]:
    """All single-token mutations of ``source`` inside functions (one line each)."""
    tree = ast.parse(source)
    lines = source.split("\n")
    out: list[Mutation] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if name and getattr(child, "lineno", None) and child.lineno == getattr(child, "end_lineno", -1):
                out.extend(_node_mutations(path, lines, child, name))
            visit(child, name)

    visit(tree, "")
    return out


def _node_mutations(path: str, lines: list[str], node: ast.AST, function: str) -> list[Mutation]:
    line_no = node.lineno
    line = lines[line_no - 1]
    pairs: list[tuple[int, int, type, str]] = []
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAPS:
        pairs.append((node.left.end_col_offset, node.comparators[0].col_offset, type(node.ops[0]), "comparison"))
    elif isinstance(node, ast.BinOp) and type(node.op) in _SWAPS and not isinstance(node.left, ast.Constant | ast.JoinedStr):
        pairs.append((node.left.end_col_offset, node.right.col_offset, type(node.op), "arithmetic"))
    elif isinstance(node, ast.BoolOp) and type(node.op) in _SWAPS:
        pairs.append((node.values[0].end_col_offset, node.values[1].col_offset, type(node.op), "boolean"))
    found = []
    for start, end, op, kind in pairs:
        new_line = _splice(line, start, end, _TOKENS[op], _SWAPS[op])
        if new_line and new_line != line:
            found.append(Mutation(path, line_no, line, new_line, kind, function))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        raw = line.encode()
        new_line = (raw[:node.col_offset] + raw[node.operand.col_offset:]).decode()
        found.append(Mutation(path, line_no, line, new_line, "negation", function))
    if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 16:
        raw = line.encode()
        new_line = (raw[:node.col_offset] + str(node.value + 1).encode() + raw[node.end_col_offset:]).decode()
        found.append(Mutation(path, line_no, line, new_line, "constant", function))
    return found


def mutation_diff(mutation: Mutation, source: str, reverse: bool = False) -> str:
    """Unified diff (``a/``/``b/`` paths) of the mutation, or of its reversal (the gold fix)."""
    before = source.splitlines(keepends=True)
    after = list(before)
    after[mutation.line - 1] = mutation.new + ("\n" if before[mutation.line - 1].endswith("\n") else "")
    old, new = (after, before) if reverse else (before, after)
    body = "".join(difflib.unified_diff(old, new, f"a/{mutation.path}", f"b/{mutation.path}", n=3))
    return f"diff --git a/{mutation.path} b/{mutation.path}\n{body}"


def issue_text(project: dict, mutation: Mutation, f2p: list[str], output: str) -> str:
    """An issue in a user's words: what is wrong, the failing test and its error."""
    module = mutation.path.removeprefix("src/").removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    test = f2p[0]
    error = ""
    for line in output.splitlines():
        if line.startswith("FAILED ") and test in line and " - " in line:
            error = line.split(" - ", 1)[1].strip()
            break
    where = f"`{mutation.function}()` in `{module}`" if mutation.function else f"`{module}`"
    lines = [f"{where} returns wrong results", "",
             f"With {project['name']} {project['version']} from this repository, {where} does not behave as documented.",
             f"The project's own test `{test}` fails:", "", "```", error or "AssertionError", "```", ""]
    if len(f2p) > 1:
        lines.append(f"{len(f2p) - 1} other test(s) fail the same way, e.g. `{f2p[1]}`.")
    lines.append(f"Expected: `{mutation.function or module}` behaves as described in its docstring and the tests pass.")
    return "\n".join(lines) + "\n"


def test_cmd(project: dict) -> str:
    return (f"PYTHONPATH={project['pythonpath']} python -m pytest -p no:cacheprovider -o addopts= "
            "-o testpaths= -rA -q")


def run_suite(pool: ContainerPool, project: dict, pristine: str, patches: list[str | None]) -> list[tuple[dict[str, str], str]]:
    """Statuses of the project's whole test suite for each patch (None = pristine)."""
    command = f"{test_cmd(project)} {' '.join(project['tests'])} > /tmp/log 2>&1; grep -E '^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED) ' /tmp/log; true"
    jobs = [(Workspace(ENV_IMAGE, f"/repos/{project['name']}", pristine, p), [Execution(command, timeout_s=120)]) for p in patches]
    return [(parse_pytest_summary(r[0].output), r[0].output) for r in pool.run(jobs)]


def generate(per_project: int, max_f2p: int, seed: int, sdists: Path, work: Path, pool: ContainerPool) -> list[SWEInstance]:
    config = load_projects()
    instances: list[SWEInstance] = []
    for project in config["projects"]:
        repo = work / project["name"]
        pristine = build_pristine(sdist_path(sdists, project["name"], project["version"]), repo)
        sources = {p: (repo / p).read_text() for p in project["sources"]}
        sites = [m for p, text in sources.items() for m in mutations(p, text)]
        random.Random(f"{seed}/{project['name']}").shuffle(sites)
        [(base_status, _)] = run_suite(pool, project, pristine, [None])
        passing = {t for t, s in base_status.items() if s in PASSING}
        kept, used_functions = 0, set()
        for start in range(0, len(sites), 8):
            if kept >= per_project:
                break
            batch = [m for m in sites[start:start + 8] if m.function not in used_functions]
            results = run_suite(pool, project, pristine, [mutation_diff(m, sources[m.path]) for m in batch])
            for mutation, (status, output) in zip(batch, results):
                if kept >= per_project or mutation.function in used_functions:
                    continue
                f2p = sorted(t for t in passing if status.get(t) not in PASSING)
                if not 1 <= len(f2p) <= max_f2p:
                    continue
                files = sorted({t.split("::")[0] for t in f2p})
                p2p = sorted(t for t in passing - set(f2p) if t.split("::")[0] in files)
                gold = mutation_diff(mutation, sources[mutation.path], reverse=True)
                instance_id = f"{project['name']}__{project['name']}-{kept + 1:04d}"
                base = commit_bug(repo, pristine, gold, instance_id)
                instances.append(SWEInstance(
                    instance_id=instance_id, repo=f"pypi/{project['name']}", base_commit=base,
                    problem_statement=issue_text(project, mutation, f2p, output), patch=gold, test_patch="",
                    FAIL_TO_PASS=tuple(f2p), PASS_TO_PASS=tuple(p2p), version=project["version"],
                    environment_setup_commit=pristine, created_at="2024-01-01T00:00:00Z",
                    hints_text=f"mutation kind: {mutation.kind}", image_name=config["image"],
                    repo_dir=f"/repos/{project['name']}", test_cmd=test_cmd(project)))
                used_functions.add(mutation.function)
                kept += 1
                print(f"{instance_id}: {mutation.kind} in {mutation.path}:{mutation.line} {mutation.function}() "
                      f"F2P={len(f2p)} P2P={len(p2p)}", flush=True)
    return instances


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-project", type=int, default=6)
    parser.add_argument("--max-f2p", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sdists", type=Path, default=Path.home() / ".cache/monkeybarrel/swe_taskset/wheels")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache/monkeybarrel/swe_taskset/generate")
    parser.add_argument("--out", type=Path, default=HERE / "tasks.jsonl")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    pool = ContainerPool(cache_dir=None, max_workers=args.workers)
    instances = generate(args.per_project, args.max_f2p, args.seed, args.sdists, args.work, pool)
    write_instances(instances, args.out)
    print(f"{args.out}: {len(instances)} tasks; containers {pool.stats.as_dict()}")


if __name__ == "__main__":
    main()
