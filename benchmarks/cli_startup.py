"""Start-up of the command line, before/after in one run (issue #25 targets: ``--version`` and
``--help`` < 0.3 s, ``validate`` and ``reproduce list`` < 1 s on 2 cores).

Each command runs ``--repeats`` times with this tree's code and with an older commit's (a temporary
``git worktree``, see ``baseline.py``), alternating, with this interpreter; printed: the median and
the best wall time of each, and the ratio of the medians. Also what ``import monkeybarrel`` loads.

    python benchmarks/cli_startup.py [--before REV] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import REPO, checkout, default_before, git, machine_line, run_cli

DEMO = "monkeybarrel/experiments/configs/demo.yaml"


def commands(scratch: Path) -> dict[str, list[str]]:
    bad = scratch / "bad.yaml"
    bad.write_text("name: x\ntask: [unclosed\n")
    return {
        "--version": ["--version"],
        "--help": ["--help"],
        "validate (missing file)": ["validate", str(scratch / "missing.yaml")],
        "validate (bad YAML)": ["validate", str(bad)],
        "reproduce list": ["reproduce", "list"],
        "reproduce (unknown name)": ["reproduce", "no-such-recipe"],
        "validate demo.yaml (builds model, Weaver)": ["validate", str(REPO / DEMO)],
    }


def heavy_imports(tree: Path) -> str:
    code = ("import sys, monkeybarrel, monkeybarrel.orchestrator.cli.main\n"
            "print(', '.join(m for m in ('sklearn', 'torch', 'transformers', 'matplotlib', 'scipy', 'pandas', "
            "'numpy', 'pyarrow', 'pydantic') if m in sys.modules) or 'nothing heavy')")
    return subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(tree)}, capture_output=True,
                          text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="older commit to compare with (default: merge base with main)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command per tree")
    args = parser.parse_args()
    before = args.before or default_before()
    print(f"before: {git('rev-parse', '--short', before)}  after: {git('rev-parse', '--short', 'HEAD')} (+ working tree)"
          f"; {machine_line()}")
    with checkout(before) as old, tempfile.TemporaryDirectory() as scratch:
        trees = {"before": old, "after": REPO}
        for name, tree in trees.items():
            print(f"import monkeybarrel + the CLI module, {name}: {heavy_imports(tree)}")
        print(f"\n{'command':44} {'before s':>14} {'after s':>14} {'ratio':>7}")
        print(f"{'':44} {'median (best)':>14} {'median (best)':>14} {'':>7}")
        for label, argv in commands(Path(scratch)).items():
            walls = {name: [] for name in trees}
            for _ in range(args.repeats):
                for name, tree in trees.items():
                    walls[name].append(run_cli(tree, argv)[0])
            medians = {name: statistics.median(w) for name, w in walls.items()}
            cells = [f"{medians[n]:6.2f} ({min(walls[n]):5.2f})" for n in trees]
            print(f"{label:44} {cells[0]:>14} {cells[1]:>14} {medians['before'] / medians['after']:6.1f}x")
    print(f"\n{machine_line()}")


if __name__ == "__main__":
    main()
