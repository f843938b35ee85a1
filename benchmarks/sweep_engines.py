"""A sweep with shared engines against the same points as separate ``monkeybarrel run`` processes.

Both are measured in one invocation, sweep first (the separate runs then find the model files in
the page cache, which can only favour them): the sweep's wall time and engine starts (counted by
its engine pool, from ``sweep.json``), then each point's config (the ``config.yaml`` the sweep
stored) run alone in its own process, one engine start each. Per point the sample stage's wall
time is read from each store's manifest: the sweep's first point on an engine pays that engine's
start, the separate runs pay it every time. Prints one JSON object (also written to
``OUT/sweep_engines.json``); run from the repository root (data paths are relative to it):

    python benchmarks/sweep_engines.py monkeybarrel/experiments/configs/sweep_gsm8k_vllm_gpu.yaml --out runs/sweep-engines
    python benchmarks/sweep_engines.py monkeybarrel/experiments/configs/sweep_arithmetic_cpu.yaml --out /tmp/se  # CPU

Where one call's time is limited (the GPU machine: 10 minutes), run ``--part sweep`` then
``--part separate`` with the same ``--out``; ``benchmarks/sweep_device_run.sh`` does that there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return round(time.perf_counter() - began, 2)


def sample_wall(store: Path) -> float:
    """The sample stage's wall seconds of the store's runs (engine start included where it happened)."""
    manifest = json.loads((store / "manifest.json").read_text())
    return round(sum(info.get("wall_s", 0.0) for run in manifest.get("runs", [])
                     for info in (run.get("sampled") or {}).values()), 2)


def device() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="working directory (the sweep part starts it afresh)")
    parser.add_argument("--part", choices=["both", "sweep", "separate"], default="both",
                        help="one part per call where a call's time is limited; `separate` needs the sweep part's OUT")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "monkeybarrel.orchestrator.cli.main"]
    sweep_dir, result_path = args.out / "sweep", args.out / "sweep_engines.json"
    if args.part in ("both", "sweep"):
        shutil.rmtree(args.out, ignore_errors=True)
        load = os.getloadavg()[0]
        wall = timed([*cli, "sweep", str(args.sweep), "--out", str(sweep_dir), "--no-progress"])
        manifest = json.loads((sweep_dir / "sweep.json").read_text())
        points = [r["name"] for r in sorted(manifest["points"], key=lambda r: r["index"])]
        result = {"device": device(), "sweep_file": str(args.sweep), "points": len(points),
                  "sweep": {"wall_s": wall, "engine_starts": manifest["runs"][-1].get("engine_starts", {}),
                            "sample_wall_s": {n: sample_wall(sweep_dir / n) for n in points},
                            "load_average_1min_before": round(load, 1)}}
        result_path.write_text(json.dumps(result, indent=2))
    if args.part in ("both", "separate"):
        result = json.loads(result_path.read_text())
        points = list(result["sweep"]["sample_wall_s"])
        load = os.getloadavg()[0]
        separate = {name: timed([*cli, "run", str(sweep_dir / name / "config.yaml"), "--out",
                                 str(args.out / "separate" / name), "--no-progress"]) for name in points}
        result["separate_runs"] = {"wall_s": round(sum(separate.values()), 2), "engine_starts": len(points),
                                   "wall_s_per_run": separate,
                                   "sample_wall_s": {n: sample_wall(args.out / "separate" / n) for n in points},
                                   "load_average_1min_before": round(load, 1)}
        result["separate_over_sweep_wall"] = round(result["separate_runs"]["wall_s"] / result["sweep"]["wall_s"], 2)
        result_path.write_text(json.dumps(result, indent=2))
    print(result_path.read_text())


if __name__ == "__main__":
    main()
