"""Allocation policies at equal compute, replayed on recorded per-sample outcomes.

Three inputs:

* ``pythia``: Large Language Monkeys' Pythia MATH outcomes (7 models x 128 problems x 10,000 samples).
  Each policy runs with a budget of a fraction of uniform's 1,280,000 samples per model (the seven
  models run together: ``difficulty`` learns across them from what it has drawn); the figure is the
  share of uniform's 10,000-sample coverage kept, mean over models, averaged over random orders.
* ``store DIR``: any experiment's store: every policy at budgets 1, 2, 4, ... samples per problem.
* ``real DIR``: a store whose problems all have ``--samples`` samples: the majority-vote accuracy of
  ``confident_majority`` (from the store's ``allocation.parquet`` when the run used that policy,
  else replayed on the samples in index order) against uniform majority@samples, with paired
  bootstrap intervals over problems and the share of samples saved.

    python benchmarks/allocation_replay.py pythia [--orders 20] [--fractions 0.1 0.25 0.5] [--out DIR]
    python benchmarks/allocation_replay.py store runs/demo
    python benchmarks/allocation_replay.py real runs/arith_alloc --samples 16
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from monkeybarrel.allocation import ConfidentMajority, Difficulty, Uniform, UntilSolved
from monkeybarrel.allocation.equal_compute import equal_compute_table, outcomes_from_selection
from monkeybarrel.allocation.simulate import RecordedOutcomes, draw, majority_correct, replay
from monkeybarrel.core.intervals import bootstrap_ci, paired_difference_ci
from monkeybarrel.core.metrics import default_ks
from monkeybarrel.experiments.llmonk_data import read_outcomes_parquet
from monkeybarrel.orchestrator.allocation_report import plot_equal_compute, render_section
from monkeybarrel.orchestrator.experiment import Experiment

PYTHIA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "llmonk" / "pythia_math_individual_outcomes.parquet"


def pythia(args: argparse.Namespace) -> dict:
    blocks = read_outcomes_parquet(args.data)
    outcomes = RecordedOutcomes(np.stack([b.correct for b in blocks]), np.stack([b.n_samples for b in blocks]),
                                generators=tuple(b.model for b in blocks))
    G, P, N = outcomes.shape
    full = outcomes.covered()
    print(f"{args.data}: {G} models x {P} problems x {N} samples; uniform coverage at {N}: "
          + ", ".join(f"{m} {100 * c:.1f}%" for m, c in zip(outcomes.generators, full)))
    rows = []
    policies = {"uniform": Uniform(), "until_solved": UntilSolved(), "difficulty": Difficulty()}
    print(f"\n| budget | policy | coverage kept (mean of {G} models, %) | per model (%) | s |")
    print("|---:|---|---:|---|---:|")
    for fraction in args.fractions:
        for name, policy in policies.items():
            started = time.perf_counter()
            orders = args.orders if name != "difficulty" else args.difficulty_orders
            result = replay(policy, outcomes, int(fraction * P * N), orders=orders, seed=args.seed)
            kept = result.coverage / full
            seconds = time.perf_counter() - started
            rows.append({"fraction": fraction, "policy": name, "orders": orders, "kept": float(kept.mean()),
                         "kept_per_model": dict(zip(outcomes.generators, kept.round(4).tolist())),
                         "coverage": float(result.coverage.mean()), "seconds": round(seconds, 1)})
            print(f"| {100 * fraction:g}% | {name} | {100 * kept.mean():.1f} | "
                  f"{' '.join(f'{100 * k:.0f}' for k in kept)} | {seconds:.0f} |", flush=True)
    if args.out:
        points = [{"policy": r["policy"], "budget": r["fraction"], "samples_per_problem": r["fraction"] * N,
                   "coverage_kept": r["kept"]} for r in rows]
        plot_equal_compute({"rows": points}, args.out / "pythia_allocation.png",
                           f"Pythia MATH, mean of {G} models",
                           panels=("coverage_kept",))
    return {"data": str(args.data), "models": list(outcomes.generators), "uniform_full_coverage": full.tolist(),
            "rows": rows}


def store(args: argparse.Namespace) -> dict:
    experiment = Experiment(args.directory)
    outcomes = outcomes_from_selection(experiment.selection_data(), experiment.labels_array())
    budgets = [float(k) for k in default_ks(int(outcomes.available.min()))]
    table = {"orders": args.orders, "rows": equal_compute_table(outcomes, budgets, orders=args.orders, seed=args.seed,
                                                                 round_size=args.round_size)}
    print(render_section(table, None))
    if args.out:
        plot_equal_compute(table, Path(args.out) / "allocation.png", experiment.config.name)
    return table


def _interval(bounds) -> str:
    low, high = bounds
    return f"[{100 * low:.1f}, {100 * high:.1f}]"


def real(args: argparse.Namespace) -> dict:
    experiment = Experiment(args.directory)
    outcomes = outcomes_from_selection(experiment.selection_data(), experiment.labels_array())
    G, P, N = outcomes.shape
    if (outcomes.available < args.samples).any():
        raise SystemExit(f"{args.directory}: every problem needs {args.samples} samples for uniform majority@"
                         f"{args.samples}; some have {int(outcomes.available.min())}")
    data = experiment.selection_data()
    ledger_path = Path(args.directory) / "allocation.parquet"
    if args.ledger or ledger_path.is_file():
        ledger = pq.read_table(args.ledger or ledger_path).to_pylist()
        final = {}
        for row in ledger:
            final[(row["generator_id"], row["problem_id"])] = row["target"]
        problems = [str(p) for p in data.problems]
        generators = outcomes.generators
        drawn = np.array([[final[(g, p)] for p in problems] for g in generators])
        source = f"the run's own allocation ({ledger_path.name})"
    else:
        policy = ConfidentMajority(threshold=args.threshold, round_size=args.round_size)
        drawn = draw(policy, outcomes.correct, outcomes.answers, outcomes.available, outcomes.available.sum(axis=1))
        source = f"confident_majority(threshold={args.threshold}, round_size={args.round_size}) replayed in sample order"
    uniform_drawn = np.full((G, P), args.samples)
    adaptive_right = majority_correct(outcomes.correct, outcomes.answers, drawn).reshape(-1).astype(float)
    uniform_right = majority_correct(outcomes.correct, outcomes.answers, uniform_drawn).reshape(-1).astype(float)
    u, a = bootstrap_ci(np.stack([uniform_right, adaptive_right], axis=1), args.bootstrap, args.seed)
    difference = paired_difference_ci(uniform_right, adaptive_right, args.bootstrap, args.seed)
    share = drawn.sum() / uniform_drawn.sum()
    print(f"{args.directory}: {P} problems; confident_majority from {source}")
    print("| arm | samples | share of uniform | majority accuracy (%) | 95% bootstrap interval |")
    print("|---|---:|---:|---:|---|")
    print(f"| uniform majority@{args.samples} | {uniform_drawn.sum()} | 100% | {100 * uniform_right.mean():.1f} | {_interval(u)} |")
    print(f"| confident_majority | {drawn.sum()} | {100 * share:.0f}% | {100 * adaptive_right.mean():.1f} | {_interval(a)} |")
    print(f"| difference (adaptive - uniform) | | | {100 * (adaptive_right.mean() - uniform_right.mean()):+.1f} | {_interval(difference)} |")
    return {"problems": P, "source": source, "samples_adaptive": int(drawn.sum()), "samples_uniform": int(uniform_drawn.sum()),
            "share": float(share), "accuracy_adaptive": float(adaptive_right.mean()),
            "accuracy_uniform": float(uniform_right.mean()), "interval_adaptive": a.tolist(),
            "interval_uniform": u.tolist(), "interval_difference": list(difference), "drawn": drawn.tolist()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pythia")
    p.add_argument("--data", type=Path, default=PYTHIA)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    p.add_argument("--orders", type=int, default=20)
    p.add_argument("--difficulty-orders", type=int, default=4)
    s = sub.add_parser("store")
    s.add_argument("directory")
    s.add_argument("--orders", type=int, default=8)
    s.add_argument("--round-size", type=int, default=1)
    r = sub.add_parser("real")
    r.add_argument("directory")
    r.add_argument("--samples", type=int, default=16)
    r.add_argument("--threshold", type=float, default=0.95)
    r.add_argument("--round-size", type=int, default=4)
    r.add_argument("--ledger", type=Path, default=None, help="allocation.parquet of the adaptive run")
    r.add_argument("--bootstrap", type=int, default=4000)
    for each in (p, s, r):
        each.add_argument("--seed", type=int, default=0)
        each.add_argument("--out", type=Path, default=None, help="write result.json (and plots) here")
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, numpy {np.__version__}")
    result = {"pythia": pythia, "store": store, "real": real}[args.command](args)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.command}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
