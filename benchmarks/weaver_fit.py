"""Weaver fit + predict time on 500 problems x 100 candidates x 30 verifiers, beside the naive ensemble.

Synthetic scores (no model needed): each candidate is correct with probability ``--prior`` (0.3); verifier j
scores N(d_j * y, 1) with separations d_j in [0.1, 0.8] (a few verifiers are logit-scaled or
[0, 1] probabilities, 10 % of scores missing). Both selectors run the full selector path
(``fit`` then ``select`` on a ``SelectionData``); the figure is the best of ``--repeats`` runs,
with the median beside it. Target: Weaver under 1 s on 2 cores.

    python benchmarks/weaver_fit.py [--problems 500 --candidates 100 --verifiers 30 --repeats 5]
    python benchmarks/weaver_fit.py --candidates 64 --verifiers 10 --prior 0.02   # the low-prior case
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import pyarrow as pa

from monkeybarrel.core.metrics import selection_accuracy
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.selection.baselines import NaiveEnsemble
from monkeybarrel.selection.weaver import WeaverSelector


def synthetic(problems: int, candidates: int, verifiers: int, seed: int = 0, prior: float = 0.3) -> tuple[SelectionData, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = problems * candidates
    labels = rng.random(n) < prior
    separation = rng.uniform(0.1, 0.8, verifiers)
    scores = rng.normal(size=(n, verifiers)) + labels[:, None] * separation
    scores[:, : verifiers // 5] *= 4.0  # reward-model logits
    scores[:, -verifiers // 5:] = 1 / (1 + np.exp(-scores[:, -verifiers // 5:]))  # probabilities
    scores[rng.random((n, verifiers)) < 0.1] = np.nan
    keys = pa.table({"problem_id": np.repeat([f"p{i:04d}" for i in range(problems)], candidates),
                     "generator_id": ["g"] * n, "sample_index": np.tile(np.arange(candidates), problems)})
    answers = [f"{a}" for a in np.where(labels, 0, rng.integers(1, 6, n))]
    data = SelectionData.build(keys, scores, tuple(f"v{j}" for j in range(verifiers)), answers)
    return data, labels


def timed(make, data: SelectionData, repeats: int) -> tuple[list[float], np.ndarray, object]:
    times, chosen, selector = [], None, None
    for _ in range(repeats):
        selector = make()
        started = time.perf_counter()
        chosen = selector.fit(data).select(data)
        times.append(time.perf_counter() - started)
    return times, chosen, selector


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=500)
    parser.add_argument("--candidates", type=int, default=100, help="candidates per problem")
    parser.add_argument("--verifiers", type=int, default=30, help="verifier score columns")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prior", type=float, default=0.3, help="share of correct candidates (0.02: the low-prior case)")
    args = parser.parse_args()
    data, labels = synthetic(args.problems, args.candidates, args.verifiers, prior=args.prior)
    timed(WeaverSelector, data, 1)  # warm-up: imports, page faults
    weaver_times, weaver_chosen, weaver = timed(WeaverSelector, data, args.repeats)
    naive_times, naive_chosen, _ = timed(NaiveEnsemble, data, args.repeats)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{args.problems} problems x {args.candidates} candidates x {args.verifiers} verifiers "
          f"({data.n_candidates} rows); {cores} usable cores, load {load:.1f}; {platform.processor() or platform.machine()}")
    print(f"| method | fit+select best (s) | median (s) | selection accuracy (%) |")
    print(f"|---|---:|---:|---:|")
    for name, times, chosen in (("weaver", weaver_times, weaver_chosen), ("naive ensemble", naive_times, naive_chosen)):
        print(f"| {name} | {min(times):.3f} | {np.median(times):.3f} | {100 * selection_accuracy(chosen, labels):.1f} |")
    print(f"weaver / naive time ratio: {min(weaver_times) / min(naive_times):.2f}; "
          f"EM iterations {weaver.model_.n_iter_}, converged {weaver.model_.converged_}, "
          f"verifiers kept {int(weaver.model_.keep_.sum())}/{weaver.model_.keep_.size}; "
          f"target < 1 s: {'met' if min(weaver_times) < 1.0 else 'MISSED'}")


if __name__ == "__main__":
    main()
