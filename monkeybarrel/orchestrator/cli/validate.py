"""``monkeybarrel validate CONFIG``: check a config, its data and everything it names, without running.

In well under a second: plug-ins whose modules import torch or scikit-learn are checked from their
source (``core.plugin_source``), the others are built; ``run`` builds everything before it samples."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("validate", help="check a config file, its data and every plug-in, model and server it names")
    parser.add_argument("config", type=Path)
    return parser


def run(args: argparse.Namespace) -> int:
    from ...core.config import ExperimentConfig

    config = ExperimentConfig.from_yaml(args.config)  # a config that does not load is refused before the stages load
    from ..stages.preflight import preflight
    from .errors import naming
    from .output import print_lines

    with naming(args.config):
        _, problems = preflight(config, build=False)  # torch and scikit-learn plug-ins: checked from their source
    print_lines([*config.to_yaml().splitlines(),
                 f"# ok: {len(problems)} problems; every generator, verifier and selector checks out"])
    return 0
