"""``sweep report`` at scale: the Large Language Monkeys Pythia sweep, 7 points x 1.28 M candidates.

Builds the sweep from the released outcomes (``experiments/llmonk_sweep.py``; 128 MATH problems x
10,000 samples per model), then times the report: reading every point's per-problem counts,
bootstrapping coverage at every k for all points at once, the frontier, and writing the page and
plot. ``--copies N`` adds N-1 more views of every store (symlinks), for a sweep of 7N points. The
report never re-runs selection, so its time grows with the number of points and candidates read
(three label columns per point), not with the selectors. The load average is printed: on a shared
machine the wall time moves with it.

    python benchmarks/sweep_report.py --out /tmp/llmonk-sweep --copies 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

from monkeybarrel.experiments.llmonk_data import read_outcomes_parquet
from monkeybarrel.experiments.llmonk_sweep import write_llmonk_sweep
from monkeybarrel.orchestrator.sweep.report import build_report, write_report

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "llmonk" / "pythia_math_individual_outcomes.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, required=True, help="a new directory (replaced if it exists)")
    parser.add_argument("--copies", type=int, default=1, help="views of every store (7 x copies points)")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    began = time.perf_counter()
    blocks = read_outcomes_parquet(args.data)
    sweep = write_llmonk_sweep(blocks, args.out / "sweep")
    built = time.perf_counter() - began
    target = sweep
    if args.copies > 1:  # a plain directory of stores: every store under `copies` names
        target = args.out / "many"
        target.mkdir()
        for store in sorted(p for p in sweep.iterdir() if (p / "config.yaml").is_file()):
            for copy in range(args.copies):
                (target / f"{store.name},copy={copy}").symlink_to(store.resolve(), target_is_directory=True)
    candidates = sum(int(b.n_samples.sum()) for b in blocks) * args.copies
    load = os.getloadavg()[0]
    began, cpu = time.perf_counter(), time.process_time()
    report = build_report(target)
    build_s, build_cpu = time.perf_counter() - began, time.process_time() - cpu
    began, cpu = time.perf_counter(), time.process_time()
    write_report(target)
    write_s, write_cpu = time.perf_counter() - began, time.process_time() - cpu
    print(json.dumps({
        "points": sum(len(t["points"]) for t in report["tasks"]), "candidates": candidates,
        "build_sweep_s": round(built, 1),
        "report_figures_s": {"wall": round(build_s, 2), "cpu": round(build_cpu, 2)},
        "report_with_page_and_plot_s": {"wall": round(write_s, 2), "cpu": round(write_cpu, 2)},
        "best_at_largest_budget": report["tasks"][0]["frontier"]["coverage"]["table"][-1]["best"],
        "load_average_1min": [round(load, 1), round(os.getloadavg()[0], 1)], "cores": os.cpu_count(),
    }, indent=2))


if __name__ == "__main__":
    main()
