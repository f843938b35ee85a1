"""``monkeybarrel compare DIR1 DIR2``: config diff and metric deltas with 95% bootstrap intervals."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("compare", help="config diff and metric deltas (95%% intervals) of two stores")
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..report.compare import compare

    print_comparison(compare(args.first, args.second), args.first, args.second)
    return 0


def print_comparison(result: dict, first: Path, second: Path) -> None:
    from ..report.markdown import percent
    from .output import print_lines, print_table

    print_lines([f"config ({first} -> {second}):", *(f"  {line}" for line in result["config"] or ["identical"]), ""])
    problems = result["problems"]
    columns = ["metric", "first %", "second %", "delta", "95% interval"]
    rows = [[row["name"], percent(row["first"]), percent(row["second"]), f"{100 * row['delta']:+.1f}",
             f"[{100 * row['ci95'][0]:+.1f}, {100 * row['ci95'][1]:+.1f}]"] for row in result["metrics"]]
    print_table(columns, rows, f"metrics: second - first, {problems['shared']} shared problems of {problems['first']} / "
                f"{problems['second']} (95% bootstrap interval, {'paired' if problems['shared'] else 'unpaired'})",
                right=columns[1:])
