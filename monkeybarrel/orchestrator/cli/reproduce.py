"""``monkeybarrel reproduce list | NAME [--data PATH] [--out DIR]``: a paper's table beside ours."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("reproduce", help="a paper's table beside ours, on the paper's released data")
    parser.add_argument("recipe", help="recipe name, or `list`")
    parser.add_argument("--data", default=None, help="local copy of the released data (default: load from the hub)")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: runs/reproduce/<recipe>)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ...experiments.reproduce.command import reproduce
    from .output import console

    return reproduce(args.recipe, args.data, args.out, console())
