"""``monkeybarrel sweep``: run, track and compare a grid of experiments (docs/sweeps.md).

::

    monkeybarrel sweep SWEEP.yaml [--out DIR] [--ray-address ADDR] [--dry-run]   # run or resume
        [--gpus auto|N|0,1,..] [--shard I/N]                                     # engines side by side; Slurm arrays
    monkeybarrel sweep status DIR [--json]
    monkeybarrel sweep report DIR [--budget flops|tokens|samples|gpu_s]

Exit status: 0 every point done; 1 some point failed (the others ran; run again to retry it);
2 bad input (an invalid point, another sweep's directory), naming the point and key; 130 Ctrl-C
(every finished candidate is stored; the same command resumes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:  # imported when a sweep runs (``--help`` answers at once)
    from ..sweep.driver import SweepResult

ACTIONS = ("run", "status", "report")


def _parser() -> argparse.ArgumentParser:
    from .arguments import Parser

    parser = Parser(prog="monkeybarrel sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run or resume a sweep (the default: `monkeybarrel sweep SWEEP.yaml`)")
    run.add_argument("sweep", type=Path, help="sweep file: a base config plus axes")
    run.add_argument("--out", type=Path, default=None,
                     help="sweep directory (default: $MONKEYBARREL_OUT/<name> or runs/<name>)")
    run.add_argument("--ray-address", default=None,
                     help="run every generator through the ray backend on this cluster (`auto`, ray://head:10001)")
    run.add_argument("--attempts", type=int, default=None, help="tries per failing point (default: the file's retry)")
    run.add_argument("--retry-wait", type=float, default=None, help="seconds before the second try (doubles each try)")
    run.add_argument("--gpus", default=None, metavar="auto|N|IDS",
                     help="devices engines are placed on, each group of points in its own worker process: every "
                          "visible GPU (auto, the default), the first N, or ids 0,1,2,3; without GPUs, N CPU slots")
    run.add_argument("--shard", default=None, metavar="I/N",
                     help="run shard I of N (1 <= I <= N; split by engine, so each shard starts each engine once); "
                          "shards may share one --out on shared storage (Slurm: --array=1-N)")
    run.add_argument("--dry-run", action="store_true", help="validate every point and print the plan; run nothing")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    status = sub.add_parser("status", help="each point's state, candidates, errors, GPU-seconds, last error")
    status.add_argument("directory", type=Path)
    status.add_argument("--json", action="store_true", help="machine-readable")
    report = sub.add_parser("report", help="report.md/.html/.png comparing the points: accuracy against compute")
    report.add_argument("directory", type=Path)
    report.add_argument("--budget", choices=["flops", "tokens", "samples", "gpu_s"], default=None,
                        help="compute axis of the frontier (default: flops when every model's size is known, "
                             "else tokens)")
    return parser


def main(argv: list[str] | None = None, console: Console | None = None) -> int:
    """Run ``monkeybarrel sweep ARGS``; returns the exit status (errors: ``cli.main`` prints them, exit 2)."""
    from .output import console as shared_console

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ACTIONS and not argv[0].startswith("-"):
        argv = ["run", *argv]
    args = _parser().parse_args(argv)
    console = console or shared_console()
    if args.action == "status":
        return _status(args, console)
    if args.action == "report":
        return _report(args, console)
    return _run(args, console)


def _run(args: argparse.Namespace, console: Console) -> int:
    from ...core.config import ConfigError
    from ..sweep.driver import run_sweep
    from ..sweep.shards import parse_shard
    from ..sweep.spec import load_sweep
    from ..sweep.status import print_status, sweep_status

    shard = parse_shard(args.shard) if args.shard is not None else None
    sweep = load_sweep(args.sweep)
    retry = sweep.spec.retry.model_copy(update={k: v for k, v in (("attempts", args.attempts),
                                                                 ("wait_s", args.retry_wait)) if v is not None})
    if retry.attempts < 1 or retry.wait_s < 0:
        raise ConfigError("--attempts must be >= 1 and --retry-wait >= 0")
    out = args.out or Path(os.environ.get("MONKEYBARREL_OUT", "runs")) / sweep.name

    def echo(line: str) -> None:  # whole lines, also in logs (Slurm, `ray job logs`)
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    main_thread = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, _interrupted) if main_thread else None  # Slurm's time limit, scancel:
    try:                                                                             # stop as on Ctrl-C, resumable
        result = run_sweep(sweep, out, ray_address=args.ray_address, retry=retry, show_progress=not args.no_progress,
                           dry_run=args.dry_run, echo=echo, gpus=args.gpus, shard=shard)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, before)
    if args.dry_run:
        _print_plan(result, console)
        return 0
    print_status(sweep_status(out), console)
    for line in (f"status: monkeybarrel sweep status {out}", f"report: monkeybarrel sweep report {out}"):
        console.print(line, highlight=False, markup=False, soft_wrap=True)  # a path is never broken
    return 1 if result.states.get("failed") else 0


def _print_plan(result: SweepResult, console: Console) -> None:
    """The dry run's plan: a table of this run's points (with ``--gpus``, the devices each one's lane holds)."""
    from rich.markup import escape

    from ..report.terminal import table

    columns = ["point", "state", "engines", *(["needs"] if result.devices else [])]
    rows = [[row["name"], row["state"], ", ".join(row["engines"]),
             *([f"{row['needs']} of {result.devices}"] if result.devices else [])] for row in result.plan]
    console.print(table(columns, [[escape(c) for c in row] for row in rows]))
    if result.devices:
        console.print(f"# lanes: engine groups side by side on {result.devices}", highlight=False, markup=False)
    shard = f" (shard {result.shard[0]}/{result.shard[1]})" if result.shard else ""
    console.print(f"# ok: {len(rows)} points{shard}; every point validates (nothing was run)", highlight=False,
                  markup=False, soft_wrap=True)


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _status(args: argparse.Namespace, console: Console) -> int:
    from ..sweep.status import print_status, sweep_status

    status = sweep_status(args.directory)
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    else:
        print_status(status, console)
    return 0


def _report(args: argparse.Namespace, console: Console) -> int:
    from ..sweep.report import print_summary, write_report

    report = write_report(args.directory, budget=args.budget)
    print_summary(report, console)
    return 0
