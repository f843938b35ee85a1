"""Smoothie routing speed at scale, and the routing table of a stored experiment.

Speed (default): 10,000 problems x 10 generators x 384-dim unit embeddings drawn from Smoothie's
generative model with per-cluster qualities; times ``Smoothie("global")`` and ``Smoothie("local")``
(fit + predict, best of ``--repeats``) and prints how well each recovers the best generator.
Targets on 2 CPU cores: global < 1 s, local < 10 s.

    python benchmarks/smoothie_route.py [--problems 10000 --generators 10 --dim 384 --neighbors 20]

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
    args = parser.parse_args()
    if args.experiment:
        routing_table(args.experiment)
    else:
        speed(args)


if __name__ == "__main__":
    main()
