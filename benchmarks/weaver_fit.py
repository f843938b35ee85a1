"""Weaver and the naive ensemble at scale: fit + select CPU time and peak memory, before and after, in one run.

Synthetic scores (no model needed): each candidate is correct with probability ``--prior`` (0.3); verifier j
scores N(d_j * y, 1) with separations d_j in [0.1, 0.8] (a fifth logit-scaled, a fifth probabilities),
10 % of scores missing; with final answers, correct candidates share one answer and wrong ones spread over
five; without, every answer is missing (the label model then treats each candidate alone).

Every measurement is a fresh process pinned to one core (BLAS on one thread) that builds the data, then
measures the full selector path (``Selector().fit(data).select(data)``): its CPU seconds
(``time.process_time``, so other work on a shared machine does not count), its wall seconds, and its peak
resident memory *including the data* (the kernel's peak mark is reset once the data is built; Linux).
"before" is the package at git revision ``--before`` (default ``main``), unpacked with ``git archive``;
"after" is this working tree; runs alternate, so both see the same load.

    python benchmarks/weaver_fit.py                       # 5,000 x 100 x 30, with and without answers: < 2 s each
    python benchmarks/weaver_fit.py --problems 10000      # 10^6 candidates x 30: < 8 s and < 2 GB
    python benchmarks/weaver_fit.py --answers no --before none --repeats 1   # quick, after only
    python benchmarks/weaver_fit.py --candidates 64 --verifiers 10 --prior 0.02   # the low-prior case
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
TARGETS = {500_000: (2.0, None), 1_000_000: (8.0, 2048.0)}
"""Rows -> (CPU seconds, peak MiB) targets of issue #34 (one core)."""


def synthetic(problems: int, candidates: int, verifiers: int, seed: int = 0, prior: float = 0.3, answers: bool = True):
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
    codes = np.where(labels, 0, rng.integers(1, 6, n)).astype(str) if answers else None
    return SelectionData.build(keys, scores, tuple(f"v{j}" for j in range(verifiers)), codes), labels


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
    import warnings

    from monkeybarrel.core.metrics import selection_accuracy
    from monkeybarrel.selection.baselines import NaiveEnsemble
    from monkeybarrel.selection.weaver import WeaverSelector

    data, labels = synthetic(args.problems, args.candidates, args.verifiers, prior=args.prior,
                             answers=args.answers == "yes")
    gc.collect()
    data_mib, reset = rss_mib("VmRSS"), reset_peak()
    make = NaiveEnsemble if args.method == "naive" else WeaverSelector
    cpu, wall = time.process_time(), time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selector = make()
        chosen = selector.fit(data).select(data)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    model = getattr(selector, "model_", None)
    print(json.dumps({"cpu": cpu, "wall": wall, "peak_mib": rss_mib("VmHWM") if reset else float("nan"),
                      "data_mib": data_mib, "accuracy": selection_accuracy(chosen, labels),
                      "n_iter": getattr(model, "n_iter_", None), "converged": getattr(model, "converged_", None),
                      "warnings": sorted({type(w.message).__name__ for w in caught})}))


def measure(path: Path, method: str, answers: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", "--method", method, "--answers", answers,
               "--problems", str(args.problems), "--candidates", str(args.candidates),
               "--verifiers", str(args.verifiers), "--prior", str(args.prior)]
    env = dict(os.environ, PYTHONPATH=str(path), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    core = sorted(os.sched_getaffinity(0))[-1] if hasattr(os, "sched_getaffinity") else None
    pin = ["taskset", "-c", str(core)] if core is not None and _has("taskset") else []
    out = subprocess.run(pin + command, env=env, capture_output=True, text=True, check=True, cwd=path)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _has(program: str) -> bool:
    from shutil import which

    return which(program) is not None


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
    parser.add_argument("--answers", default="both", choices=("yes", "no", "both"), help="final answers in the data")
    parser.add_argument("--before", default="main", help="git revision to compare with ('none': after only)")
    parser.add_argument("--naive", default="yes", choices=("yes", "no"), help="also time the naive ensemble")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--method", default="weaver", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    n = args.problems * args.candidates
    print(f"{args.problems} problems x {args.candidates} candidates x {args.verifiers} verifiers ({n:,} rows); "
          f"one core per measurement; {platform.processor() or platform.machine()}; load {os.getloadavg()[0]:.1f}")
    answer_modes = ["yes", "no"] if args.answers == "both" else [args.answers]
    methods = ["weaver", *(["naive"] if args.naive == "yes" else [])]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT}
        if args.before != "none":
            trees = {f"before ({args.before})": unpack(args.before, Path(tmp)), **trees}
        runs = [(method, answers, tree) for method in methods for answers in answer_modes for tree in trees]
        results: dict[tuple, list[dict]] = {run: [] for run in runs}
        for _ in range(args.repeats):  # alternate, so every implementation sees the same load
            for method, answers, tree in runs:
                results[(method, answers, tree)].append(measure(trees[tree], method, answers, args))
    print(f"load after {os.getloadavg()[0]:.1f}")
    print("| selector | final answers | implementation | fit+select CPU s (best) | wall s (median) | peak RSS incl. "
          "data (MiB) | data alone (MiB) | selection accuracy (%) | EM steps | warnings |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
    for (method, answers, tree), rows in results.items():
        print(f"| {'Weaver' if method == 'weaver' else 'naive ensemble'} | {answers} | {tree} | "
              f"{min(r['cpu'] for r in rows):.2f} | {np.median([r['wall'] for r in rows]):.2f} | "
              f"{max(r['peak_mib'] for r in rows):.0f} | {rows[0]['data_mib']:.0f} | {100 * rows[0]['accuracy']:.1f} | "
              f"{rows[0]['n_iter'] if rows[0]['n_iter'] is not None else '-'} | {', '.join(rows[0]['warnings']) or '-'} |")
    target = TARGETS.get(n)
    for method in methods:
        for answers in answer_modes:
            after = results[(method, answers, "after")]
            cpu, peak = min(r["cpu"] for r in after), max(r["peak_mib"] for r in after)
            line = f"{method}, answers {answers}: after {cpu:.2f} CPU s, peak {peak:.0f} MiB"
            before = [k for k in results if k[:2] == (method, answers) and k[2] != "after"]
            if before:
                line += f"; before / after CPU time {min(r['cpu'] for r in results[before[0]]) / cpu:.1f}x"
            if target and method == "weaver":
                line += f" (target < {target[0]:g} s" + (f", < {target[1]:.0f} MiB)" if target[1] else ")")
            print(line)


if __name__ == "__main__":
    main()
