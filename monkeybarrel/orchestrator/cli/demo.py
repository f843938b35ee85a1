"""``monkeybarrel demo``: a real small experiment with the embedded model (``experiments/configs/demo.yaml``)."""

from __future__ import annotations

import argparse
from importlib.resources import files
from pathlib import Path


def demo_config_path() -> Path:
    return Path(str(files("monkeybarrel.experiments").joinpath("configs/demo.yaml")))


def add_parser(sub) -> argparse.ArgumentParser:
    parser = sub.add_parser("demo", help="a real small experiment: the embedded model, cheap verifiers, Weaver")
    parser.add_argument("--out", type=Path, default=None, help="experiment directory (default: runs/demo)")
    parser.add_argument("--problems", type=int, default=None, help="number of problems (default from demo.yaml)")
    parser.add_argument("--samples", type=int, default=None, help="samples per problem (default from demo.yaml)")
    parser.add_argument("--force", action="store_true", help="discard stored results of a different config")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def run(args: argparse.Namespace) -> int:
    from ...core.config import ExperimentConfig
    from .run import run_config

    data = ExperimentConfig.from_yaml(demo_config_path()).to_dict()
    if args.problems is not None:
        data["task"]["num_problems"] = args.problems
    if args.samples is not None:
        for generator in data["generators"]:
            generator["num_samples"] = args.samples
    config = ExperimentConfig.from_dict(data, source="demo")
    return run_config(config, args.out, args.force, not args.no_progress)
