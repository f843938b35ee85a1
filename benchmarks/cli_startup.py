"""Start-up of the command line in CPU seconds, before/after in one run (issue #36 targets on an idle core:
``validate`` of a full config < 1.0 s, ``reproduce list`` < 0.3 s, ``--version`` < 0.15 s).

Each command runs ``--repeats`` times with this tree's code and with an older commit's (a temporary
``git worktree``, see ``baseline.py``), alternating, with this interpreter; printed: the median and
the best CPU seconds (user + system, the figure other load on a shared machine disturbs least) and the
median wall seconds of each, and the ratio of the CPU medians. Also what ``import monkeybarrel`` loads.

    python benchmarks/cli_startup.py [--before REV] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import REPO, TREE_ONLY, checkout, default_before, git, machine_line, run_cli

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
        "validate demo.yaml (full config: model, Weaver)": ["validate", str(REPO / DEMO)],
    }


def heavy_imports(tree: Path) -> str:
    code = (TREE_ONLY + "import monkeybarrel, monkeybarrel.orchestrator.cli.main\n"
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
        print(f"\n{'command':48} {'before CPU s':>14} {'after CPU s':>14} {'ratio':>6} {'wall s':>13}")
        print(f"{'':48} {'median (best)':>14} {'median (best)':>14} {'':>6} {'before/after':>13}")
        for label, argv in commands(Path(scratch)).items():
            runs = {name: [] for name in trees}
            for _ in range(args.repeats):
                for name, tree in trees.items():
                    runs[name].append(run_cli(tree, argv)[:2])
            cpu = {name: statistics.median(c for _, c in r) for name, r in runs.items()}
            wall = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
            cells = [f"{cpu[n]:6.2f} ({min(c for _, c in runs[n]):5.2f})" for n in trees]
            print(f"{label:48} {cells[0]:>14} {cells[1]:>14} {cpu['before'] / cpu['after']:5.1f}x "
                  f"{wall['before']:6.2f}/{wall['after']:<6.2f}", flush=True)
    print(f"\n{machine_line()}")


if __name__ == "__main__":
    main()
