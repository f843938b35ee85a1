"""Weaver fit + select time and peak memory at scale, before and after a change, in one run.

Synthetic scores (no model needed): each candidate is correct with probability ``--prior`` (0.3); verifier j
scores N(d_j * y, 1) with separations d_j in [0.1, 0.8] (a fifth logit-scaled, a fifth probabilities),
10 % of scores missing; correct candidates share one final answer, wrong ones spread over five. Every
measurement is a fresh process (``--child``) that builds the data, then times the full selector path
(``WeaverSelector().fit(data).select(data)``) and reports its peak resident memory *including the data*
(the kernel's peak mark is reset once the data is built, so building it does not count; Linux).
"before" is the package at git revision ``--before`` (default ``main``), unpacked into a temporary directory
with ``git archive``; "after" is this working tree; their runs alternate, so both see the same load.

    python benchmarks/weaver_fit.py                                   # 5,000 x 100 x 30: < 2 s, < 750 MiB
    python benchmarks/weaver_fit.py --problems 10000                  # 10^6 candidates x 30: < 10 s
    python benchmarks/weaver_fit.py --problems 500 --before none      # after only, with the naive ensemble
    python benchmarks/weaver_fit.py --candidates 64 --verifiers 10 --prior 0.02   # the low-prior case

The machine is usually shared: read the before/after ratio (same run, same load) and the printed load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def synthetic(problems: int, candidates: int, verifiers: int, seed: int = 0, prior: float = 0.3):
    """``(SelectionData, labels)`` built column by column (the data's own footprint, few temporaries)."""
    import pyarrow as pa

    from monkeybarrel.core.selection_data import SelectionData

    rng = np.random.default_rng(seed)
    n = problems * candidates
    labels = rng.random(n) < prior
    separation = rng.uniform(0.1, 0.8, verifiers)
    scores = np.empty((n, verifiers))
    for j in range(verifiers):
        column = rng.standard_normal(n) + labels * separation[j]
        if j < verifiers // 5:
            column *= 4.0  # reward-model logits
        elif j >= verifiers - verifiers // 5:
            column = 1 / (1 + np.exp(-column))  # probabilities
        column[rng.random(n) < 0.1] = np.nan
        scores[:, j] = column
    keys = pa.table({"problem_id": np.repeat(np.char.add("p", np.arange(problems).astype(str)), candidates),
                     "generator_id": pa.array(np.zeros(n, dtype=np.int8)).cast(pa.string()),
                     "sample_index": np.tile(np.arange(candidates, dtype=np.int32), problems)})
    answers = np.where(labels, 0, rng.integers(1, 6, n)).astype(str)
    return SelectionData.build(keys, scores, tuple(f"v{j}" for j in range(verifiers)), answers), labels


def rss_mib(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, MiB; ru_maxrss as a fallback."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux ``clear_refs`` 5), so the next peak excludes building the data."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def child(args: argparse.Namespace) -> None:
    """One measurement in this process: build the data, fit + select, print JSON."""
    import gc

    from monkeybarrel.core.metrics import selection_accuracy
    from monkeybarrel.selection.baselines import NaiveEnsemble
    from monkeybarrel.selection.weaver import WeaverSelector

    data, labels = synthetic(args.problems, args.candidates, args.verifiers, prior=args.prior)
    build_peak = rss_mib("VmHWM")
    gc.collect()
    data_mib, reset = rss_mib("VmRSS"), reset_peak()
    make = NaiveEnsemble if args.method == "naive" else WeaverSelector
    began = time.perf_counter()
    selector = make()
    chosen = selector.fit(data).select(data)
    seconds = time.perf_counter() - began
    model = getattr(selector, "model_", None)
    print(json.dumps({"seconds": seconds, "peak_mib": rss_mib("VmHWM") if reset else float("nan"),
                      "data_mib": data_mib, "build_peak_mib": build_peak, "accuracy": selection_accuracy(chosen, labels),
                      "n_iter": getattr(model, "n_iter_", None), "converged": getattr(model, "converged_", None)}))


def measure(path: Path, method: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", "--method", method, "--problems", str(args.problems),
               "--candidates", str(args.candidates), "--verifiers", str(args.verifiers), "--prior", str(args.prior)]
    env = dict(os.environ, PYTHONPATH=str(path))
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True, cwd=path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def unpack(revision: str, directory: Path) -> Path:
    """The ``monkeybarrel`` package at ``revision`` (git archive) under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "monkeybarrel"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=5000)
    parser.add_argument("--candidates", type=int, default=100, help="candidates per problem")
    parser.add_argument("--verifiers", type=int, default=30, help="verifier score columns")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per implementation")
    parser.add_argument("--prior", type=float, default=0.3, help="share of correct candidates (0.02: the low-prior case)")
    parser.add_argument("--before", default="main", help="git revision to compare with ('none': after only)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="weaver", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    n = args.problems * args.candidates
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{args.problems} problems x {args.candidates} candidates x {args.verifiers} verifiers ({n:,} rows); "
          f"{cores} usable cores; {platform.processor() or platform.machine()}; load before {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"after": (ROOT, "weaver")}
        if args.before != "none":
            runs = {f"before ({args.before})": (unpack(args.before, Path(tmp)), "weaver"), **runs}
        else:
            runs["naive ensemble"] = (ROOT, "naive")
        results: dict[str, list[dict]] = {name: [] for name in runs}
        for _ in range(args.repeats):  # alternate, so every implementation sees the same load
            for name, (path, method) in runs.items():
                results[name].append(measure(path, method, args))
    print(f"load after {os.getloadavg()[0]:.1f}")
    print("| implementation | fit+select best (s) | median (s) | peak RSS incl. data (MiB) | data alone (MiB) | "
          "selection accuracy (%) | EM steps |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        times = [r["seconds"] for r in rows]
        print(f"| {name} | {min(times):.3f} | {np.median(times):.3f} | {max(r['peak_mib'] for r in rows):.0f} | "
              f"{rows[0]['data_mib']:.0f} | {100 * rows[0]['accuracy']:.1f} | {rows[0]['n_iter']} |")
    print(f"(building the data peaked at {max(r['build_peak_mib'] for rows in results.values() for r in rows):.0f} MiB, "
          "before the measured section)")
    names = list(results)
    if len(names) == 2:
        first, second = (min(r["seconds"] for r in results[k]) for k in names)
        print(f"time ratio {names[0]} / {names[1]}: {first / second:.2f}")
    after = results["after"]
    target_s = 2.0 if n <= 500_000 else 10.0
    peak = max(r["peak_mib"] for r in after)
    print(f"after: {min(r['seconds'] for r in after):.2f} s (target < {target_s:g} s on 2 idle cores), "
          f"peak {peak:.0f} MiB" + (" (target < 750 MiB)" if n <= 500_000 else ""))


if __name__ == "__main__":
    main()
