"""Command line: ``monkeybarrel run | demo | report | validate | reproduce``."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.resources import files
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..core.config import ConfigError, ExperimentConfig
from ..core.registry import UnknownNameError
from ..core.files import TaskDataError
from .config_guard import ConfigConflictError
from .store import StoreError

console = Console()


def demo_config_path() -> Path:
    return Path(str(files("monkeybarrel.experiments").joinpath("configs/demo.yaml")))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monkeybarrel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run or resume an experiment from a YAML config")
    run.add_argument("config", type=Path)
    run.add_argument("--out", type=Path, default=None,
                     help="experiment directory (default: $MONKEYBARREL_OUT/<name> or runs/<name>)")
    run.add_argument("--force", action="store_true", help="discard stored results of a different config")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    run.add_argument("--show-config", action="store_true", help="print the resolved config and exit")
    run.add_argument("--ray-address", default=None,
                     help="Ray cluster for `backend: ray` generators (`auto`, ray://head:10001); sets $RAY_ADDRESS")

    demo = sub.add_parser("demo", help="a real small experiment with the embedded model (~20 problems x 16 samples)")
    demo.add_argument("--out", type=Path, default=None, help="experiment directory (default: runs/demo)")
    demo.add_argument("--problems", type=int, default=None, help="number of problems (default from demo.yaml)")
    demo.add_argument("--samples", type=int, default=None, help="samples per problem (default from demo.yaml)")
    demo.add_argument("--force", action="store_true")
    demo.add_argument("--no-progress", action="store_true")

    report = sub.add_parser("report", help="rebuild selections, metrics, report.md and the plot from a store")
    report.add_argument("directory", type=Path)

    validate = sub.add_parser("validate", help="validate a config file and print it resolved")
    validate.add_argument("config", type=Path)

    reproduce = sub.add_parser("reproduce", help="a paper's table beside ours, on the paper's released data")
    reproduce.add_argument("recipe", help="recipe name, or `list`")
    reproduce.add_argument("--data", default=None, help="local copy of the released data (default: load from the hub)")
    reproduce.add_argument("--out", type=Path, default=None, help="output directory (default: runs/reproduce/<recipe>)")
    return parser


def _default_out(config: ExperimentConfig) -> Path:
    return Path(os.environ.get("MONKEYBARREL_OUT", "runs")) / config.name


def print_summary(metrics: dict, directory: Path) -> None:
    table = Table(title=f"{metrics['n_problems']} problems, {metrics['n_candidates']} candidates")
    table.add_column("k", justify="right")
    table.add_column("coverage pass@k %", justify="right")
    table.add_column("majority@k %", justify="right")
    for k in metrics["ks"]:
        table.add_row(str(k), f"{100 * metrics['coverage'][str(k)]:.1f}", f"{100 * metrics['majority'][str(k)]:.1f}")
    console.print(table)
    selection = Table(title="selection")
    selection.add_column("method")
    selection.add_column("accuracy %", justify="right")
    selection.add_column("uses labels")
    for name, info in metrics["selection"].items():
        selection.add_row(name, f"{100 * info['accuracy']:.1f}", "yes" if info["uses_labels"] else "no")
    console.print(selection)
    console.print(f"report: {directory / 'report.md'}  plot: {directory / 'coverage.png'}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "ray_address", None):
        os.environ["RAY_ADDRESS"] = args.ray_address
    from .experiment import Experiment
    from .runner import evaluate_and_report, run_experiment

    try:
        if args.command == "reproduce":
            from ..experiments.reproduce.command import reproduce

            return reproduce(args.recipe, args.data, args.out, console)
        if args.command == "validate":
            console.print(ExperimentConfig.from_yaml(args.config).to_yaml(), highlight=False)
            return 0
        if args.command == "report":
            experiment = Experiment(args.directory)
            metrics = evaluate_and_report(experiment)
            print_summary(metrics, experiment.directory)
            return 0
        if args.command == "demo":
            data = ExperimentConfig.from_yaml(demo_config_path()).to_dict()
            if args.problems is not None:
                data["task"]["num_problems"] = args.problems
            if args.samples is not None:
                for generator in data["generators"]:
                    generator["num_samples"] = args.samples
            config = ExperimentConfig.from_dict(data, source="demo")
        else:
            config = ExperimentConfig.from_yaml(args.config)
            if args.show_config:
                console.print(config.to_yaml(), highlight=False)
                return 0
        out = args.out or _default_out(config)
        experiment = run_experiment(config, out, force=args.force, show_progress=not args.no_progress)
        print_summary(experiment.metrics(), experiment.directory)
        return 0
    except (ConfigError, ConfigConflictError, TaskDataError, StoreError, UnknownNameError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
