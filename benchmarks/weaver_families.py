"""Weaver on the families of issue #34, against the exact answer-aware Bayes posterior, before and after.

Families (``monkeybarrel.experiments.weaver_families``, several random instances each, with their own
settings per seed):

* a strong verifier on part of the problems: ``judge_where_disagree`` (an LLM judge run only where the
  samples disagree) and ``unit_tests_partial`` (unit tests on 25-35 % of the problems);
* worse-than-chance mixes (``worse_than_chance``: 4-7 of 10 verifiers worse than chance), with and without
  final answers, with and without a few dev labels (5 % of the problems).

For every instance: the exact posterior's accuracy (``exact_accuracy``, the best any selector seeing the same
data can do in expectation), majority vote (without answers: a random pick), the naive ensemble, and the
default ``WeaverSelector`` of git revision ``--before`` (default ``main``, run in a fresh process on the same
instances) and of this tree; for the orientation cases also what the user sees (the orientation warning).

    python benchmarks/weaver_families.py [--seeds 8] [--before main] [--part strong,orientation]

Targets (issue #34): within 2 points of the exact posterior where a strong verifier covers part of the
problems; no silent pick below majority vote on any worse-than-chance instance.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RUN_SCRIPT = """
import json, sys, warnings
sys.path.insert(0, sys.argv[2])
from weaver_families import load
from monkeybarrel.core.metrics import selection_accuracy
from monkeybarrel.selection.weaver import WeaverSelector
out = {}
for path, dev in json.loads(sys.argv[1]):
    data, labels = load(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selector = WeaverSelector(dev_fraction=dev).fit(data, labels if dev else None)
        chosen = selector.select(data)
    said = [str(w.message) for w in caught if "orientation" in str(w.message) or "agreement" in str(w.message)]
    out[f"{path}:{dev}"] = {"accuracy": selection_accuracy(chosen, labels), "warned": said,
                            "orientation": getattr(selector.model_, "orientation_", None)}
print(json.dumps(out))
"""


def save(data, labels: np.ndarray, path: Path) -> None:
    """The instance as plain arrays another version of the package can rebuild ``SelectionData`` from (``load``)."""
    answers = np.array(["" if a < 0 else f"a{a}" for a in data.answers])
    np.savez(path, scores=data.scores, problem_id=data.problem_id.astype(str), sample_index=data.sample_index,
             answers=answers, verifiers=np.array(data.verifiers), labels=labels)


def load(path: str | Path):
    """``(SelectionData, labels)`` of an instance written by ``save``, built by whichever package is imported."""
    import pyarrow as pa

    from monkeybarrel.core.selection_data import SelectionData

    z = np.load(path, allow_pickle=False)
    keys = pa.table({"problem_id": z["problem_id"], "generator_id": ["g"] * z["problem_id"].size,
                     "sample_index": z["sample_index"]})
    answers = [None if a == "" else a for a in z["answers"].tolist()]
    data = SelectionData.build(keys, z["scores"], tuple(z["verifiers"].tolist()),
                               answers if any(a is not None for a in answers) else None)
    return data, z["labels"]


def run_tree(package: Path, jobs: list[tuple[str, float]]) -> dict[str, dict]:
    """Default Weaver of the package at ``package`` on the saved instances (a fresh process, one core's BLAS)."""
    env = dict(os.environ, PYTHONPATH=str(package), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", RUN_SCRIPT, json.dumps(jobs), str(HERE)], capture_output=True,
                         text=True, check=True, cwd=package, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from monkeybarrel.core.metrics import selection_accuracy
    from monkeybarrel.experiments.weaver_families import exact_accuracy, make_family
    from monkeybarrel.selection.baselines import NaiveEnsemble
    from monkeybarrel.selection.majority import MajorityVote
    from weaver_fit import ROOT, unpack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="random instances per family (and per setting)")
    parser.add_argument("--before", default="main", help="git revision of 'Weaver before' ('none': skip)")
    parser.add_argument("--part", default="strong,orientation", help="strong, orientation or both")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    cases = []  # (table, label, seed, path, dev, row)
    with tempfile.TemporaryDirectory() as tmp:
        def add(table: str, label: str, seed: int, instance, dev: float = 0.0) -> None:
            path = Path(tmp) / f"{label.replace(' ', '_').replace(',', '')}-{seed}.npz"
            data, y = instance.data, instance.labels
            answered = bool((data.answers >= 0).any())
            row = {"exact": exact_accuracy(instance),
                   "majority": selection_accuracy(MajorityVote().select(data), y) if answered else float(y.mean()),
                   "naive": selection_accuracy(NaiveEnsemble().fit(data).select(data), y)}
            save(data, y, path)
            cases.append((table, label, seed, str(path), dev, row))

        parts = args.part.split(",")
        for seed in range(args.seeds):
            if "strong" in parts:
                for family in ("judge_where_disagree", "unit_tests_partial"):
                    add("strong", family, seed, make_family(family, seed))
            if "orientation" in parts:
                for answers in (True, False):
                    for n_bad in (4, 5, 6, 7):
                        instance = make_family("worse_than_chance", seed, n_bad=n_bad, answers=answers)
                        for dev in (0.0, 0.05):
                            label = f"{n_bad} of 10 worse, {'answers' if answers else 'no answers'}" + \
                                    (", 5 % dev labels" if dev else "")
                            add("orientation", label, seed, instance, dev)
        jobs = sorted({(path, dev) for _, _, _, path, dev, _ in cases})
        trees = {"after": ROOT}
        if args.before != "none":
            trees["before"] = unpack(args.before, Path(tmp) / "before")
        for name, package in trees.items():
            results = run_tree(package, jobs)
            for case in cases:
                case[5][name] = results[f"{case[3]}:{case[4]}"]
    if "strong" in args.part:
        print_strong([c for c in cases if c[0] == "strong"], args)
    if "orientation" in args.part:
        print_orientation([c for c in cases if c[0] == "orientation"], args)


def print_strong(cases: list, args: argparse.Namespace) -> None:
    weavers = ["before", "after"] if args.before != "none" else ["after"]
    columns = ["exact", "majority", "naive", *weavers]
    print(f"\nA strong verifier on part of the problems: {args.seeds} instances per family, accuracy (%) averaged; "
          "'- exact' = mean (worst instance)")
    print("| family | exact posterior | majority | naive | " + " | ".join(f"Weaver {w}" for w in weavers) + " | "
          + " | ".join(f"{w} - exact" for w in weavers) + " |")
    print("|---|" + "---:|" * (len(columns) + len(weavers)))
    for family in sorted({c[1] for c in cases}):
        rows = [c[5] for c in cases if c[1] == family]
        value = {c: 100 * np.mean([_accuracy(r[c]) for r in rows]) for c in columns}
        gaps = [[100 * (_accuracy(r[w]) - r["exact"]) for r in rows] for w in weavers]
        print(f"| {family} | " + " | ".join(f"{value[c]:.1f}" for c in columns) + " | "
              + " | ".join(f"{np.mean(g):+.1f} (worst {min(g):+.1f})" for g in gaps) + " |")


def print_orientation(cases: list, args: argparse.Namespace) -> None:
    trees = ["before", "after"] if args.before != "none" else ["after"]
    print(f"\nWorse-than-chance mixes: {args.seeds} instances per row, accuracy (%) averaged; majority = a random pick "
          "without answers; 'silent below majority' = instances more than 1 point below majority with no "
          "orientation warning")
    print("| case | exact posterior | majority | " + " | ".join(f"Weaver {t} | {t}: below majority (silent)"
                                                          for t in trees) + " | what the user sees (after) |")
    print("|---|---:|---:|" + "---:|---:|" * len(trees) + "---|")
    for label in dict.fromkeys(c[1] for c in cases):
        rows = [c[5] for c in cases if c[1] == label]
        line = f"| {label} | {100 * np.mean([r['exact'] for r in rows]):.1f} | {100 * np.mean([r['majority'] for r in rows]):.1f} |"
        for tree in trees:
            below = [r for r in rows if r[tree]["accuracy"] < r["majority"] - 0.01]
            silent = [r for r in below if not r[tree]["warned"]]
            line += f" {100 * np.mean([r[tree]['accuracy'] for r in rows]):.1f} | {len(below)} ({len(silent)}) |"
        seen = sorted({(r["after"]["orientation"], bool(r["after"]["warned"])) for r in rows})
        line += " " + "; ".join(f"{how}{' + warning' if warned else ''}" for how, warned in seen) + " |"
        print(line)
    example = next((c[5]["after"]["warned"][0] for c in cases if c[5]["after"]["warned"]), None)
    if example:
        print(f"\nExample warning (after): {example}")


def _accuracy(value) -> float:
    return value["accuracy"] if isinstance(value, dict) else value


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
