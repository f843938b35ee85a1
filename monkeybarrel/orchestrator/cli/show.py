"""``monkeybarrel show DIR [--problem ID]``: stored results in the terminal."""

from __future__ import annotations

import argparse
from pathlib import Path

from .arguments import positive_int


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("show", help="per-problem results, or one problem's candidates (--problem)")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--problem", default=None, help="problem id: its candidates, answers, scores, labels, picks")
    parser.add_argument("--limit", type=positive_int, default=50, help="problems listed without --problem")
    parser.add_argument("--full", action="store_true", help="whole candidate texts")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..report.show import show
    from .output import console

    show(args.directory, args.problem, args.limit, args.full, console())
    return 0
