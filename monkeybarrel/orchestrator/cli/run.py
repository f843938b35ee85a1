"""``monkeybarrel run CONFIG``: run or resume an experiment."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("run", help="run or resume an experiment from a YAML config")
    parser.add_argument("config", type=Path)
    parser.add_argument("--out", type=Path, default=None,
                        help="experiment directory (default: $MONKEYBARREL_OUT/<name> or runs/<name>)")
    parser.add_argument("--force", action="store_true", help="discard stored results of a different config")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    parser.add_argument("--ray-address", default=None,
                        help="Ray cluster for `backend: ray` generators (`auto`, ray://head:10001); sets $RAY_ADDRESS")
    return parser


def run(args: argparse.Namespace) -> int:
    from ...core.config import ExperimentConfig
    from .output import print_lines

    if args.ray_address:
        os.environ["RAY_ADDRESS"] = args.ray_address
    config = ExperimentConfig.from_yaml(args.config)
    if args.show_config:
        print_lines(config.to_yaml().splitlines())
        return 0
    from .errors import naming

    with naming(args.config):
        return run_config(config, args.out, args.force, not args.no_progress)


def run_config(config, out: Path | None, force: bool, progress: bool) -> int:
    """Run ``config`` into ``out`` (default ``$MONKEYBARREL_OUT/<name>`` or ``runs/<name>``) and print the summary."""
    from ..runner import run_experiment
    from ..store.presence import REWRITTEN_BY_RUN, require_intact
    from .output import print_summary

    out = out or Path(os.environ.get("MONKEYBARREL_OUT", "runs")) / config.name
    if not force:  # a store that lost a file is refused by name (``store repair`` first); --force discards it
        require_intact(out, missing_ok=REWRITTEN_BY_RUN)
    experiment = run_experiment(config, out, force=force, show_progress=progress)
    print_summary(experiment.metrics(), experiment.directory)
    return 0
