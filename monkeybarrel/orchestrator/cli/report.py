"""``monkeybarrel report DIR``: re-select, re-evaluate and rebuild the report from a store (no sampling)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("report", help="rebuild selections, metrics, report.md, report.html and plots from a store")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--equal-compute", action="store_true",
                        help="also replay the allocation policies on the stored samples (cached in the store)")
    return parser


def run(args: argparse.Namespace) -> int:
    from ..experiment import Experiment
    from ..runner import evaluate_and_report
    from ..store.lock import RunLock
    from ..store.presence import OUTPUTS, require_intact
    from .output import print_summary

    require_intact(args.directory, missing_ok=OUTPUTS)  # a store that lost data is refused by name, never reported partially
    experiment = Experiment(args.directory)
    with RunLock(experiment.directory, "report"):
        metrics = evaluate_and_report(experiment, equal_compute=args.equal_compute or None)
    print_summary(metrics, experiment.directory)
    return 0
