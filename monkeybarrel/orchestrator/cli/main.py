"""Command line: ``monkeybarrel run | demo | report | validate | show | compare | export | store | sweep | reproduce``.

Every user-facing error (config, data, store, I/O, encoding, missing model, unreachable server)
exits with status 2 and one message naming the file or key; Ctrl-C exits 130 after the stages
have written every finished candidate and score.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...core.config import ConfigError, ExperimentConfig
from ...core.registry import UnknownNameError
from ...core.files import TaskDataError
from ..store.config_guard import ConfigConflictError
from ..report.markdown import pct, percent
from ..store.experiment_store import StoreError

console = Console()


def demo_config_path() -> Path:
    return Path(str(files("monkeybarrel.experiments").joinpath("configs/demo.yaml")))


def _version() -> str:
    try:
        return version("monkeybarrel")
    except PackageNotFoundError:
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="monkeybarrel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"monkeybarrel {_version()}")
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

    validate = sub.add_parser("validate", help="validate a config file and every plug-in, model and server it names")
    validate.add_argument("config", type=Path)

    show = sub.add_parser("show", help="per-problem results, or one problem's candidates (--problem)")
    show.add_argument("directory", type=Path)
    show.add_argument("--problem", default=None, help="problem id: its candidates, answers, scores, labels, picks")
    show.add_argument("--limit", type=int, default=50, help="problems listed without --problem")
    show.add_argument("--full", action="store_true", help="whole candidate texts")

    compare = sub.add_parser("compare", help="config diff and metric deltas (95%% intervals) of two stores")
    compare.add_argument("first", type=Path)
    compare.add_argument("second", type=Path)

    export = sub.add_parser("export", help="one row per candidate with answer, label, scores and picks")
    export.add_argument("directory", type=Path)
    export.add_argument("--format", choices=["csv", "jsonl"], default="csv")
    export.add_argument("--out", type=Path, default=None, help="output file (default DIR/export.<format>)")

    store = sub.add_parser("store", help="check, repair or compact a store")
    store.add_argument("action", choices=["check", "repair", "compact"])
    store.add_argument("directory", type=Path)

    sub.add_parser("sweep", add_help=False, help="run, track and compare a grid of experiments (`sweep -h`)")

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
    cov_ci, maj_ci = metrics.get("coverage_ci95", {}), metrics.get("majority_ci95", {})
    for k in metrics["ks"]:
        table.add_row(str(k), pct(metrics["coverage"][str(k)], cov_ci.get(str(k))),
                      pct(metrics["majority"][str(k)], maj_ci.get(str(k))))
    console.print(table)
    selection = Table(title="selection (95% bootstrap interval over problems)")
    selection.add_column("method")
    selection.add_column("accuracy %", justify="right")
    selection.add_column("uses labels")
    for name, info in metrics["selection"].items():
        selection.add_row(name, pct(info["accuracy"], info.get("ci95")), "yes" if info["uses_labels"] else "no")
    console.print(selection)
    if metrics.get("labelled_candidates", 1) == 0:
        console.print("[yellow]no labels stored: accuracies are unknown (–), not 0 %[/]")
    console.print(f"report: {directory / 'report.md'}  page: {directory / 'report.html'}  plot: {directory / 'coverage.png'}")


def print_comparison(result: dict, first: Path, second: Path) -> None:
    console.print(f"[bold]config[/] ({first} -> {second}):", highlight=False)
    for line in result["config"] or ["identical"]:
        console.print(f"  {line}", highlight=False, markup=False)
    problems = result["problems"]
    table = Table(title=f"metrics: second - first ({problems['shared']} shared problems of "
                        f"{problems['first']} / {problems['second']}; 95% bootstrap interval, "
                        f"{'paired' if problems['shared'] else 'unpaired'})")
    for column in ("metric", "first %", "second %", "delta (points)", "95% interval"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for row in result["metrics"]:
        table.add_row(row["name"], percent(row["first"]), percent(row["second"]), f"{100 * row['delta']:+.1f}",
                      f"[{100 * row['ci95'][0]:+.1f}, {100 * row['ci95'][1]:+.1f}]")
    console.print(table)


def _run_command(args: argparse.Namespace) -> int:
    from ..report.compare import compare
    from ..experiment import Experiment
    from ..report.export import export
    from ..store.lock import RunLock
    from ..stages.preflight import preflight
    from ..runner import evaluate_and_report, run_experiment
    from ..report.show import show
    from ..store.maintenance import check, compact, repair

    if args.command == "reproduce":
        from ...experiments.reproduce.command import reproduce

        return reproduce(args.recipe, args.data, args.out, console)
    if args.command == "validate":
        config = ExperimentConfig.from_yaml(args.config)
        _, problems = preflight(config)
        console.print(config.to_yaml(), highlight=False)
        console.print(f"# ok: {len(problems)} problems; every generator, verifier and selector builds", highlight=False)
        return 0
    if args.command == "report":
        experiment = Experiment(args.directory)
        with RunLock(experiment.directory, "report"):
            metrics = evaluate_and_report(experiment)
        print_summary(metrics, experiment.directory)
        return 0
    if args.command == "show":
        show(args.directory, args.problem, args.limit, args.full, console)
        return 0
    if args.command == "compare":
        print_comparison(compare(args.first, args.second), args.first, args.second)
        return 0
    if args.command == "export":
        console.print(f"wrote {export(args.directory, args.format, args.out)}", highlight=False)
        return 0
    if args.command == "store":
        if args.action == "check":
            health = check(args.directory)
            for line in health.lines():
                console.print(line, highlight=False, markup=False, soft_wrap=True)  # one line per finding
            return 1 if health.problems else 0
        for line in (repair(args.directory) if args.action == "repair" else
                     [f"{kind}: {before} chunk(s) -> {after}" for kind, (before, after) in compact(args.directory).items()]):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["sweep"]:  # its own parser and error handling, imported only here (cli/sweep.py)
        from .sweep import main as sweep_main

        return sweep_main(argv[1:], console)
    args = _parser().parse_args(argv)
    if getattr(args, "ray_address", None):
        os.environ["RAY_ADDRESS"] = args.ray_address
    try:
        return _run_command(args)
    except (ConfigError, ConfigConflictError, TaskDataError, StoreError, UnknownNameError) as exc:
        return _fail(str(exc))
    except UnicodeDecodeError as exc:
        return _fail(f"{getattr(exc, 'filename', None) or 'input'}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    except OSError as exc:  # missing files, permissions, full disks, models that cannot load
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return _fail(f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        print("interrupted: every finished candidate and score is stored; run the same command again to resume",
              file=sys.stderr)
        return 130


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
