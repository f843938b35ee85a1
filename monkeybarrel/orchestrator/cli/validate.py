"""``monkeybarrel validate CONFIG``: check a config and build everything it names, without running."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("validate", help="validate a config file and every plug-in, model and server it names")
    parser.add_argument("config", type=Path)
    return parser


def run(args: argparse.Namespace) -> int:
    from ...core.config import ExperimentConfig

    config = ExperimentConfig.from_yaml(args.config)  # a config that does not load is refused before the stages load
    from ..stages.preflight import preflight
    from .output import print_lines

    _, problems = preflight(config)
    print_lines([*config.to_yaml().splitlines(),
                 f"# ok: {len(problems)} problems; every generator, verifier and selector builds"])
    return 0
