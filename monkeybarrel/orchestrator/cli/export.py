"""``monkeybarrel export DIR``: one row per candidate (text, answer, label, scores, picks) as CSV or JSONL."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("export", help="one row per candidate with answer, label, scores and picks")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    parser.add_argument("--out", type=Path, default=None, help="output file (default DIR/export.<format>)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..report.export import export
    from .output import print_lines

    print_lines([f"wrote {export(args.directory, args.format, args.out)}"])
    return 0
