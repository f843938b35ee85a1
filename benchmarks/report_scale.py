"""``monkeybarrel report DIR`` against the store's size, before/after in one run (issue #25 targets:
<= 2 s at 10^3 candidates, <= 15 s at 10^6, growing with the size in between; issue #36: < 1.5 CPU s at
10^3 on an idle core).

Stores of 10^3, 10^4, 10^5 and 10^6 candidates (problems x samples, one generator, two verifier
columns; written with ``spine_scale.build``) are reported by this tree and by an older commit (a
temporary ``git worktree``, see ``baseline.py``) as separate processes: wall s, CPU s (less sensitive
to other load) and peak RSS. The older code replayed the allocation policies on every store below
200,000 samples; now that replay runs on request (``report --equal-compute``) and is kept in the
store, so its cost is shown separately: first run and a repeat (reused).

    python benchmarks/report_scale.py [--before REV] [--sizes 1000 10000 100000 1000000] [--no-before]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from baseline import REPO, checkout, default_before, git, machine_line, run_cli
from spine_scale import build

SHAPES = {1_000: (100, 10), 10_000: (1_000, 10), 100_000: (1_000, 100), 1_000_000: (10_000, 100)}
"""Candidates -> (problems, samples per problem)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=None, help="older commit to compare with (default: merge base with main)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--no-before", action="store_true", help="only this tree")
    parser.add_argument("--equal-compute-up-to", type=int, default=10_000,
                        help="also time `report --equal-compute` (first and reused) up to this many candidates")
    args = parser.parse_args()
    before = args.before or default_before()
    print(f"before: {git('rev-parse', '--short', before)}  after: {git('rev-parse', '--short', 'HEAD')} (+ working tree)"
          f"; {machine_line()}")
    print(f"{'candidates':>10} {'problems x samples':>19}  {'before wall / CPU s':>20}  {'after wall / CPU s':>19}  "
          f"{'after RSS GB':>12}  {'--equal-compute first / reused s':>33}")
    with tempfile.TemporaryDirectory() as scratch, checkout(before) as old:
        for size in args.sizes:
            problems, samples = SHAPES[size]
            directory = Path(scratch) / f"store-{size}"
            build(directory, problems, samples)
            old_cell = "–"
            if not args.no_before:
                wall, cpu, _, status = run_cli(old, ["report", str(directory)])
                old_cell = f"{wall:.1f} / {cpu:.1f}" + ("" if status == 0 else f" (exit {status})")
            wall, cpu, rss, status = run_cli(REPO, ["report", str(directory)], check=True)
            new_cell = f"{wall:.1f} / {cpu:.1f}"
            replay = "–"
            if size <= args.equal_compute_up_to:
                first = run_cli(REPO, ["report", str(directory), "--equal-compute"], check=True)[0]
                again = run_cli(REPO, ["report", str(directory)], check=True)[0]
                replay = f"{first:.1f} / {again:.1f}"
            print(f"{size:>10,} {f'{problems:,} x {samples}':>19}  {old_cell:>20}  {new_cell:>19}  {rss:>12.2f}  "
                  f"{replay:>33}", flush=True)
    print(machine_line())


if __name__ == "__main__":
    main()
