"""Coverage scaling-law fit time: 10^4 samples x 10^3 problems x 8 models, from raw 0/1 outcomes.

Synthetic outcomes (no data needed): per model, per-problem success rates p ~ Beta(0.15, 3) x scale;
the 0/1 outcome matrix ``[8, 1000, 10000]`` (8e7 samples, 80 MB of bools) is reduced to counts, then
``coverage_at_k`` (100 values of k evenly spaced in log k) and ``fit_coverage_law`` run on all 8 curves
at once. Prints the best of ``--repeats`` for each step and the fitted laws. Target: seconds on 2 cores.

    python benchmarks/scaling_laws.py [--models 8 --problems 1000 --samples 10000 --repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from monkeybarrel.core.scaling_laws import coverage_at_k, fit_coverage_law, log_spaced_ks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--problems", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=10_000, help="samples per problem (the largest k)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    p = rng.beta(0.15, 3, size=(args.models, args.problems)) * np.linspace(0.2, 1, args.models)[:, None]
    outcomes = rng.random((args.models, args.problems, args.samples), dtype=np.float32) < p[..., None]
    best = {"counts": np.inf, "coverage": np.inf, "fit": np.inf}
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        c = outcomes.sum(axis=2)
        n = np.full(c.shape, args.samples)
        t1 = time.perf_counter()
        ks = log_spaced_ks(args.samples)
        curves = coverage_at_k(n, c, ks)
        t2 = time.perf_counter()
        law = fit_coverage_law(ks, curves)
        t3 = time.perf_counter()
        for key, value in (("counts", t1 - t0), ("coverage", t2 - t1), ("fit", t3 - t2)):
            best[key] = min(best[key], value)
    print(f"{args.models} models x {args.problems} problems x {args.samples} samples ({outcomes.size:.1e} outcomes), "
          f"{ks.size} values of k; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    for key, value in best.items():
        print(f"  {key:9s} {value:.3f} s")
    print(f"  total     {sum(best.values()):.3f} s (best of {args.repeats})")
    for m in range(args.models):
        print(f"  model {m}: a {law.a[m]:.2f}  b {law.b[m]:.3f}  error {law.error_mean[m]:.4f} ± {law.error_std[m]:.4f}"
              f"  k for 50% {law.samples_for(0.5)[m]:.0f}")


if __name__ == "__main__":
    main()
