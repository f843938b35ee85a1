"""Smoothie routing speed at scale, and the routing table of a stored experiment.

Speed (default): 10,000 problems x 10 generators x 384-dim unit embeddings drawn from Smoothie's
generative model with per-cluster qualities; times ``Smoothie("global")`` and ``Smoothie("local")``
(fit + predict, best of ``--repeats``) and prints how well each recovers the best generator.
Targets on 2 CPU cores: global < 1 s, local < 10 s.

    python benchmarks/smoothie_route.py [--problems 10000 --generators 10 --dim 384 --neighbors 20]

The paper's AlpacaEval setting (``--alpaca``): 10 trials of 805 instructions x 5 models, Smoothie-Local with
the 20 nearest other instructions, default thread settings; target < 1 s for all 10 fits. ``--before REV``
times the same in a fresh process on the package at git revision REV (``git archive``), in the same run.

    python benchmarks/smoothie_route.py --alpaca [--before main]

Routing table of a real run (after ``monkeybarrel run``):

    python benchmarks/smoothie_route.py --experiment runs/smoothie_gsm8k
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def synthetic(n: int, m: int, d: int, clusters: int = 8, seed: int = 0):
    """Smoothie's model: λ_i(x) = y(x) + e_i, e_i ~ N(0, σ²_{c(x), i} I), inputs clustered.

    Returns (X [n, m, d] float32, inputs [n, d] float32, true error variance [n, m]).
    """
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d)).astype(np.float32)
    cluster = rng.integers(clusters, size=n)
    inputs = centers[cluster] + 0.3 * rng.normal(size=(n, d)).astype(np.float32)
    sigma = (rng.uniform(0.2, 1.2, size=(clusters, m)) / np.sqrt(d)).astype(np.float32)
    y = (rng.normal(size=(n, 1, d)) / np.sqrt(d)).astype(np.float32)
    X = y + rng.normal(size=(n, m, d)).astype(np.float32) * sigma[cluster][:, :, None]
    return X, inputs, (sigma[cluster] ** 2) * d


def timed(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        began = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - began)
    return best, result


def speed(args) -> None:
    from threadpoolctl import threadpool_info

    from monkeybarrel.selection.smoothie import Smoothie

    X, inputs, variance = synthetic(args.problems, args.generators, args.dim, seed=args.seed)
    truth = variance.argmin(axis=1)
    chance = float(np.mean(1.0 / args.generators))
    threads = sorted({info.get("num_threads") for info in threadpool_info()})
    print(f"data: {args.problems} problems x {args.generators} generators x {args.dim}-dim "
          f"({X.nbytes / 2**20:.0f} MiB float32); BLAS threads {threads}")
    print(f"{'variant':<22}{'seconds':>9}{'target s':>10}{'best-generator hit rate':>26}")
    rows = [("global", 1, 1.0), ("local K=1", 1, 10.0), (f"local K={args.neighbors}", args.neighbors, 10.0)]
    for name, k, target in rows:
        variant = name.split()[0]
        seconds, routes = timed(lambda: Smoothie(variant, k).fit(X, inputs).predict(), args.repeats)
        routes = np.broadcast_to(routes, truth.shape)
        print(f"{name:<22}{seconds:>9.3f}{target:>10.1f}{float((routes == truth).mean()):>26.3f}")
    print(f"(hit rate by chance {chance:.3f}; the global variant can only be right on one generator's share)")


def alpaca(args) -> None:
    """10 trials x 805 x 5 models, local K = 20 excluding the instruction itself: seconds for all fits."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from threadpoolctl import threadpool_info

    trials = [synthetic(805, 5, args.dim, seed=seed)[:2] for seed in range(10)]
    if args.child:
        from monkeybarrel.selection.smoothie import Smoothie

        best = float("inf")
        for _ in range(args.repeats):
            began = time.perf_counter()
            for X, inputs in trials:
                Smoothie("local", 20, exclude_self=True).fit(X, inputs).predict()
            best = min(best, time.perf_counter() - began)
        print(json.dumps({"seconds": best}))
        return
    from weaver_fit import ROOT, unpack

    threads = sorted({info.get("num_threads") for info in threadpool_info()})
    print(f"10 trials x 805 instructions x 5 models x {args.dim}-dim, Smoothie-Local K=20 (exclude_self), "
          f"default threads {threads}, {len(os.sched_getaffinity(0))} usable cores, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"after": ROOT}
        if args.before != "none":
            runs = {f"before ({args.before})": unpack(args.before, Path(tmp)), **runs}
        for name, path in runs.items():
            out = subprocess.run([sys.executable, __file__, "--alpaca", "--child", "--dim", str(args.dim),
                                  "--repeats", str(args.repeats)], env=dict(os.environ, PYTHONPATH=str(path)),
                                 cwd=path, capture_output=True, text=True, check=True)
            print(f"{name}: {json.loads(out.stdout.strip().splitlines()[-1])['seconds']:.3f} s for 10 fits (target < 1 s)")


def routing_table(directory: str) -> None:
    """Selection accuracy (first sample of the routed generator) and routed-generator accuracy."""
    from monkeybarrel.orchestrator.experiment import Experiment
    from monkeybarrel.selection.routing import routed_accuracy

    experiment = Experiment(directory)
    data, labels = experiment.selection_data(), experiment.labels_array()
    metrics = experiment.metrics()
    selections = experiment.selections()
    index = {(p, g, int(s)): i for i, (p, g, s) in enumerate(zip(data.problem_id, data.generator_id, data.sample_index))}
    problem_row = {p: i for i, p in enumerate(data.problems)}
    print(f"{metrics['n_problems']} problems, {metrics['n_candidates']} candidates")
    print("| method | uses labels | accuracy (%) | routed-generator accuracy (%) | problems per generator |")
    print("|---|:---:|---:|---:|---|")
    for method, info in metrics["selection"].items():
        chosen = np.full(data.n_problems, -1, dtype=np.int64)
        for row in selections.to_pylist():
            if row["method"] == method and row["generator_id"] is not None:
                chosen[problem_row[row["problem_id"]]] = index[(row["problem_id"], row["generator_id"], row["sample_index"])]
        routed = routed_accuracy(data, labels, chosen)
        picked, counts = np.unique(data.generator_id[chosen[chosen >= 0]].astype(str), return_counts=True)
        spread = ", ".join(f"{g} {c}" for g, c in zip(picked, counts))
        print(f"| {method} | {'yes' if info['uses_labels'] else 'no'} | "
              f"{100 * info['accuracy']:.1f} | {100 * routed:.1f} | {spread} |")
    print()
    print("| generator | sample accuracy (%) | coverage: any sample correct (%) |")
    print("|---|---:|---:|")
    for generator in sorted(set(data.generator_id.astype(str))):
        rows = data.generator_id.astype(str) == generator
        solved = np.bincount(data.groups[rows], weights=labels[rows], minlength=data.n_problems) > 0
        present = np.bincount(data.groups[rows], minlength=data.n_problems) > 0
        print(f"| {generator} | {100 * labels[rows].mean():.1f} | {100 * solved[present].mean():.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--generators", type=int, default=10, help="generators sampled for every problem")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimension")
    parser.add_argument("--neighbors", type=int, default=20, help="K of the local variant (timed beside K=1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--experiment", help="print the routing table of this experiment directory instead")
    parser.add_argument("--alpaca", action="store_true", help="time the AlpacaEval setting (10 trials x 805 x 5, K=20)")
    parser.add_argument("--before", default="none", help="with --alpaca: git revision to time beside this tree")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.alpaca:
        alpaca(args)
    elif args.experiment:
        routing_table(args.experiment)
    else:
        speed(args)


if __name__ == "__main__":
    main()
