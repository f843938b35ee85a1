"""``monkeybarrel store check|repair|compact DIR``: store maintenance."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("store", help="check, repair or compact a store")
    parser.add_argument("action", choices=["check", "repair", "compact"])
    parser.add_argument("directory", type=Path)
    return parser


def run(args: argparse.Namespace) -> int:
    from ..stages.preflight import build_task
    from ..store.maintenance import check, compact, repair
    from .output import print_lines

    if args.action == "check":
        health = check(args.directory)
        print_lines(health.lines())
        return 1 if health.problems else 0
    print_lines(repair(args.directory, load_problems=lambda config: build_task(config).load())
                if args.action == "repair" else
                [f"{kind}: {before} chunk(s) -> {after}" for kind, (before, after) in compact(args.directory).items()])
    return 0
