"""CodeMonkeys' "Barrel of Monkeys" (Ehrlich et al., arXiv 2501.14723): selecting among other systems'
SWE-bench Verified submissions.

Data: a checkout of SWE-bench/experiments (or its ``evaluation/verified`` folder): one folder per
submission, ``<run>/all_preds.jsonl`` (harness format: instance_id, model_name_or_path, model_patch)
and ``<run>/results/results.json`` (``{"resolved": [instance_id, ...], ...}``). The 8 pinned members
are found by name fragment (the newest matching run); each member's patch for an instance is one
candidate, labelled resolved iff that instance is in the member's ``resolved`` list.

Our stages run on the store: random (expected pass@1 over the members), majority of identical
patches (patches normalised by the SWE-bench kit, so whitespace-only differences vote together;
ties to the shortest patch, CodeMonkeys' order), and the oracle (any member resolved). Test voting
and the selection state machine need the instances' containers and an LLM: not run here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ...core.config import ExperimentConfig, GeneratorSpec, SelectorSpec, TaskSpec
from ...core.files import TaskDataError
from ...core.records import Problem
from ...kits.swebench.diffs import MalformedPatch, normalize_patch
from ...kits.swebench.predictions import read_predictions
from ...core.hub import DataUnavailableError
from .base import Comparison, Published, RecipeDataError, Row
from .catalog import CODEMONKEYS_REPOSITORY as REPOSITORY

BARREL = Published(66.2, "arXiv 2501.14723 (Barrel of Monkeys; README and blog)",
                   "selection state machine over the pool: needs an LLM and containers, not run here")
PINNED = ("blackbox", "codestory", "interact", "devlo", "gru", "emergent", "amazon-q", "openhands")
"""Name fragments of the members: the four in CodeMonkeys' README command and the four more it supports."""
SELECTORS = (SelectorSpec(name="majority of identical patches", type="majority"),)


def find_runs(root: Path, pinned: tuple[str, ...] = PINNED) -> dict[str, Path]:
    """``{fragment: run folder}``: the newest run under ``root`` whose name holds each fragment."""
    base = root / "evaluation" / "verified" if (root / "evaluation" / "verified").is_dir() else root
    runs = sorted(p for p in base.iterdir() if p.is_dir() and (p / "all_preds.jsonl").is_file())
    if not runs:
        raise RecipeDataError(f"{base}: no <run>/all_preds.jsonl folders (the SWE-bench/experiments "
                              "evaluation/verified layout)")
    found = {}
    for fragment in pinned:
        matches = [p for p in runs if fragment in p.name.lower()]
        if matches:
            found[fragment] = matches[-1]  # names start with the date: the newest sorts last
    if not found:
        raise RecipeDataError(f"{base}: none of the pinned members {list(pinned)} among the runs "
                              f"{[p.name for p in runs][:10]}")
    return found


def read_resolved(run: Path) -> set[str]:
    path = run / "results" / "results.json"
    if not path.is_file():
        raise RecipeDataError(f"{path}: missing (each run needs results/results.json with a 'resolved' list)")
    try:
        resolved = json.loads(path.read_text()).get("resolved")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise RecipeDataError(f"{path}: expected a JSON object with a 'resolved' list of instance ids") from exc
    if not isinstance(resolved, list):
        raise RecipeDataError(f"{path}: 'resolved' must be a list of instance ids")
    return set(map(str, resolved))


def _answer(patch: str | None) -> tuple[str | None, int]:
    """Normalised patch (None when empty or not a diff) and its length for the tie order."""
    if not patch or not patch.strip():
        return None, 0
    try:
        text = normalize_patch(patch).text
    except MalformedPatch:
        return None, len(patch)
    return text, len(text)


def run(data: str | None, out: Path) -> Comparison:
    if data is None:
        raise DataUnavailableError(f"the submissions live in the git repository {REPOSITORY}, not on the hub; "
                                   "clone it (a sparse checkout of evaluation/verified is enough) and pass "
                                   "--data PATH")
    if not Path(data).is_dir():
        raise RecipeDataError(f"--data {data}: is a file; codemonkeys-barrel takes a directory: a checkout of "
                              f"{REPOSITORY}, or its evaluation/verified folder (<run>/all_preds.jsonl per submission)")
    from ...orchestrator.runner import evaluate_and_report
    from ..precomputed import write_precomputed

    began = time.perf_counter()
    runs = find_runs(Path(data))
    members = {}
    for fragment, folder in runs.items():
        try:
            members[folder.name] = (read_predictions(folder / "all_preds.jsonl"), read_resolved(folder))
        except TaskDataError as exc:
            raise RecipeDataError(str(exc)) from exc
    instances = sorted(set().union(*(set(p) for p, _ in members.values())))
    problems = [Problem(problem_id=i, task="swebench-verified", prompt="", metadata={"source": str(data)})
                for i in instances]
    rows = []  # (instance, member, patch, answer, length, resolved)
    for name, (predictions, resolved) in members.items():
        for instance in instances:
            entries = predictions.get(instance, [])
            patch = entries[0]["model_patch"] if entries else None
            answer, length = _answer(patch)
            rows.append((instance, name, patch, answer, length, instance in resolved and answer is not None))
    # One generator ("barrel"); sample_index = rank by normalised patch length within the instance, so
    # majority ties go to the shortest patch (CodeMonkeys' order; the selectors break ties by sample_index).
    order = sorted(range(len(rows)), key=lambda r: (rows[r][0], rows[r][3] is None, rows[r][4], rows[r][1]))
    rank: dict[str, int] = {}
    keys: list = [None] * len(rows)
    member_of: dict[str, list[str]] = {}
    for r in order:
        rank[rows[r][0]] = rank.get(rows[r][0], -1) + 1
        keys[r] = (rows[r][0], "barrel", rank[rows[r][0]])
        member_of.setdefault(rows[r][0], []).append(rows[r][1])
    config = ExperimentConfig(
        name="codemonkeys barrel of monkeys", task=TaskSpec(name="swebench-verified-submissions", path=str(data)),
        generators=[GeneratorSpec(id="barrel", backend="precomputed", model="+".join(members),
                                  num_samples=len(members))],
        selectors=list(SELECTORS))
    experiment = write_precomputed(out / "store", config, problems, keys, [r[2] for r in rows], [r[3] for r in rows],
                                   [r[5] for r in rows], force=True,
                                   source={"runs": {runs[f].name: str(runs[f]) for f in runs},
                                           "member_by_sample_index": member_of})
    loaded = time.perf_counter()
    metrics = evaluate_and_report(experiment)
    done = time.perf_counter()
    group = f"{len(members)} submissions"
    result = Comparison("codemonkeys-barrel", "CodeMonkeys Barrel of Monkeys: selecting among SWE-bench Verified "
                        "submissions (% resolved)", f"{data} ({len(members)} runs: {', '.join(members)})")
    per_member = {name: 100 * len(resolved & set(instances)) / len(instances) for name, (_, resolved) in members.items()}
    for name, value in per_member.items():
        result.rows.append(Row(name, "resolved", value))
    sel = metrics["selection"]
    result.rows += [
        Row(group, "best single member", max(per_member.values())),
        Row(group, "random (expected pass@1)", 100 * sel["random (pass@1)"]["accuracy"]),
        Row(group, "majority of identical patches", 100 * sel["majority of identical patches"]["accuracy"]),
        Row(group, "oracle (any member resolved)", 100 * sel["oracle (coverage)"]["accuracy"]),
        Row(group, "Barrel of Monkeys (selection state machine)", None, BARREL),
    ]
    missing = [f for f in PINNED if f not in runs]
    result.notes += [
        f"{len(instances)} instances; a member without a prediction for an instance gives an empty candidate.",
        "members pinned by name fragment (newest matching run): " + ", ".join(f"{f} -> {runs[f].name}" for f in runs)
        + (f"; not found: {', '.join(missing)}" if missing else "") + ".",
        "the paper's 66.2% comes from the selection state machine over these patches plus CodeMonkeys' own; it needs "
        "Claude and the instances' containers, so 'ours' is left empty; random, majority and oracle bound it.",
        f"full report with per-generator table and coverage: {out / 'store' / 'report.md'}",
    ]
    result.timings = {"load": loaded - began, "select+evaluate": done - loaded}
    return result

