"""Weaver on the data kinds that broke it (``monkeybarrel.experiments.weaver_synthetic``), before and after.

For every kind, ``--seeds`` random instances (each with its own settings) are drawn; on each the
naive-Bayes oracle told the true rates (``naive_bayes_oracle``: the best of with and without the
majority vote, not told which problems are hard), majority vote, the naive ensemble and default Weaver
are scored. "Weaver before" is the default ``WeaverSelector`` of git revision ``--before`` (default
``main``), run in a fresh process on the same instances (saved to ``.npz``); "after" is this tree.

    python benchmarks/weaver_kinds.py [--seeds 8] [--before main] [--kinds mixed_difficulty,sparse_ragged]

Targets (issue #26): Weaver after within 2 points of the oracle on every kind, and never more than 1
point below the better of majority and the naive ensemble (means over the instances; the worst
instance is printed beside them).
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

BEFORE_SCRIPT = """
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
from weaver_families import load
from monkeybarrel.core.metrics import selection_accuracy
from monkeybarrel.selection.weaver import WeaverSelector
warnings.simplefilter("ignore")
out = {}
for path in sys.argv[2:]:
    data, labels = load(path)
    out[path] = selection_accuracy(WeaverSelector().fit(data).select(data), labels)
print(json.dumps(out))
"""


def main() -> None:
    from monkeybarrel.core.metrics import selection_accuracy
    from monkeybarrel.experiments.weaver_synthetic import KINDS, make_kind, naive_bayes_oracle
    from monkeybarrel.selection.baselines import NaiveEnsemble
    from monkeybarrel.selection.majority import MajorityVote
    from monkeybarrel.selection.weaver import WeaverSelector
    from weaver_families import save
    from weaver_fit import unpack

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="random instances per kind")
    parser.add_argument("--before", default="main", help="git revision of 'Weaver before' ('none': skip)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for kind in args.kinds.split(","):
            rows[kind] = []
            for seed in range(args.seeds):
                data, labels, _ = make_kind(kind, seed)
                accuracy = {"oracle": naive_bayes_oracle(data, labels)["best"],
                            "majority": selection_accuracy(MajorityVote().select(data), labels),
                            "naive": selection_accuracy(NaiveEnsemble().fit(data).select(data), labels),
                            "after": selection_accuracy(WeaverSelector().fit(data).select(data), labels)}
                path = Path(tmp) / f"{kind}-{seed}.npz"
                save(data, labels, path)
                files.append(str(path))
                rows[kind].append({"path": str(path), **accuracy})
        if args.before != "none":
            package = unpack(args.before, Path(tmp) / "before")
            here = str(Path(__file__).resolve().parent)
            out = subprocess.run([sys.executable, "-c", BEFORE_SCRIPT, here, *files], capture_output=True, text=True,
                                 check=True, cwd=package, env=dict(os.environ, PYTHONPATH=str(package)))
            before = json.loads(out.stdout.strip().splitlines()[-1])
            for kind_rows in rows.values():
                for row in kind_rows:
                    row["before"] = before[row["path"]]
    columns = ["oracle", "majority", "naive", *(["before"] if args.before != "none" else []), "after"]
    print(f"{args.seeds} instances per kind; accuracy (%) averaged over them; "
          f"'after - best baseline' = after minus the better of majority and naive (mean, worst instance)")
    print("| kind | " + " | ".join(f"Weaver {c}" if c in ("before", "after") else c for c in columns)
          + " | after - oracle | after - best baseline |")
    print("|---|" + "---:|" * (len(columns) + 2))
    for kind, kind_rows in rows.items():
        mean = {c: 100 * np.mean([r[c] for r in kind_rows]) for c in columns}
        gap_oracle = [100 * (r["after"] - r["oracle"]) for r in kind_rows]
        gap_best = [100 * (r["after"] - max(r["majority"], r["naive"])) for r in kind_rows]
        print(f"| {kind} | " + " | ".join(f"{mean[c]:.1f}" for c in columns)
              + f" | {np.mean(gap_oracle):+.1f} (worst {min(gap_oracle):+.1f}) | "
              f"{np.mean(gap_best):+.1f} (worst {min(gap_best):+.1f}) |")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
