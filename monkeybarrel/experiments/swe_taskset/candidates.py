"""Prediction files of the task set's non-model systems (harness format, one system per file).

- ``gold``: the gold patch, plus the gold patch with an explanatory comment added (correct, distinct text).
- ``mutants``: plausible wrong fixes: the buggy line rewritten by another single-token mutation of
  the fixed line (e.g. the right operator, the wrong constant), up to ``--mutants`` per instance.

    python -m monkeybarrel.experiments.swe_taskset.candidates   # writes predictions/{gold,mutants}.jsonl
"""

from __future__ import annotations

import argparse
import difflib
import json
import random
from pathlib import Path

from ...kits.swebench.schema import load_instances
from ...kits.swebench.predictions import write_predictions
from .build_repos import HERE, git
from .generate import mutations


def _changed_line(patch: str) -> tuple[str, str, str]:
    """(path, removed line, added line) of a single-line gold patch."""
    path = next(l[6:] for l in patch.splitlines() if l.startswith("+++ b/"))
    removed = next(l[1:] for l in patch.splitlines() if l.startswith("-") and not l.startswith("---"))
    added = next(l[1:] for l in patch.splitlines() if l.startswith("+") and not l.startswith("+++"))
    return path, removed, added


def _diff(path: str, before: str, after: str) -> str:
    body = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n{body}"


def build(tasks: Path, repos: Path, max_mutants: int, seed: int) -> dict[str, list[dict]]:
    systems: dict[str, list[dict]] = {"gold": [], "mutants": []}
    for instance in load_instances(tasks):
        repo = repos / instance.repo.split("/")[-1]
        path, removed, added = _changed_line(instance.patch)
        fixed = git(repo, "show", f"{instance.environment_setup_commit}:{path}")
        buggy = git(repo, "show", f"{instance.base_commit}:{path}")
        line_no = fixed.splitlines().index(added) + 1
        systems["gold"].append({"instance_id": instance.instance_id, "model_name_or_path": "gold", "model_patch": instance.patch})
        indent = added[: len(added) - len(added.lstrip())]
        commented = fixed.splitlines(True)
        commented.insert(line_no - 1, f"{indent}# fix: restore the documented behaviour\n")
        systems["gold"].append({"instance_id": instance.instance_id, "model_name_or_path": "gold",
                                "model_patch": _diff(path, buggy, "".join(commented))})
        options = [m for m in mutations(path, fixed) if m.line == line_no and m.new not in (removed, added)]
        random.Random(f"{seed}/{instance.instance_id}").shuffle(options)
        for mutant in options[:max_mutants]:
            lines = fixed.splitlines(True)
            lines[line_no - 1] = mutant.new + "\n"
            systems["mutants"].append({"instance_id": instance.instance_id, "model_name_or_path": "mutants",
                                       "model_patch": _diff(path, buggy, "".join(lines))})
    return systems


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=Path, default=HERE / "tasks.jsonl")
    parser.add_argument("--repos", type=Path, default=Path.home() / ".cache/monkeybarrel/swe_taskset/generate",
                        help="the repositories generate.py built (with every task commit)")
    parser.add_argument("--mutants", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "predictions")
    args = parser.parse_args(argv)
    args.out.mkdir(exist_ok=True)
    for name, rows in build(args.tasks, args.repos, args.mutants, args.seed).items():
        write_predictions(rows, args.out / f"{name}.jsonl")
        print(f"{args.out / name}.jsonl: {len(rows)} predictions")


if __name__ == "__main__":
    main()
