"""Allocation policies at equal compute, replayed on recorded per-sample outcomes.

Three inputs:

* ``pythia``: Large Language Monkeys' Pythia MATH outcomes (7 models x 128 problems x 10,000 samples).
  Each policy runs with a budget of a fraction of uniform's 1,280,000 samples per model; the figure is
  the share of uniform's 10,000-sample coverage kept, mean over models, averaged over random orders.
  ``difficulty`` runs the seven models as one experiment with seven generators (it learns across
  them from what it has drawn) and, as ``difficulty (per model)``, as seven separate experiments.
  The two ``ceiling: peeks`` rows are no policy: ``difficulty``'s rounds with a prior made of the
  other problems' recorded pass rates (``monkeybarrel.allocation.ceiling``), a yardstick for what
  learning across problems could buy at best.
* ``store DIR``: any experiment's store: every policy at budgets 1, 2, 4, ... samples per problem.
* ``real DIR``: the majority-vote accuracy of ``confident_majority`` (from the store's
  ``allocation.parquet`` when the run used that policy, else replayed on the samples in index order
  at each ``--threshold``) against uniform majority@samples (of DIR's samples, or of the store
  ``--uniform DIR2`` of the same problems), with paired bootstrap intervals over problems and the
  share of samples saved.

    python benchmarks/allocation_replay.py pythia [--orders 20] [--difficulty-orders 8] [--fractions 0.1 0.25 0.5]
        [--no-ceiling] [--out DIR]
    python benchmarks/allocation_replay.py store runs/demo
    python benchmarks/allocation_replay.py real runs/gsm8k_uniform --samples 16 --threshold 0.8 0.9 0.95
    python benchmarks/allocation_replay.py real runs/gsm8k_cm --uniform runs/gsm8k_uniform
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
from monkeybarrel.allocation.ceiling import PeekingCeiling
from monkeybarrel.allocation.equal_compute import equal_compute_table, outcomes_from_selection
from monkeybarrel.allocation.simulate import RecordedOutcomes, draw, majority_correct, replay
from monkeybarrel.core.intervals import bootstrap_ci, paired_difference_ci
from monkeybarrel.core.metrics import default_ks
from monkeybarrel.experiments.llmonk_data import read_outcomes_parquet
from monkeybarrel.orchestrator.report.allocation import plot_equal_compute, render_section
from monkeybarrel.orchestrator.experiment import Experiment

PYTHIA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "llmonk" / "pythia_math_individual_outcomes.parquet"


def pythia_arms(outcomes: RecordedOutcomes, args: argparse.Namespace) -> list[tuple[str, object, bool, int]]:
    """``(name, policy, pooled, orders)`` per row; the two ceilings (which peek) unless ``--no-ceiling``."""
    arms = [("uniform", Uniform(), True, args.orders), ("until_solved", UntilSolved(), True, args.orders),
            ("difficulty", Difficulty(), True, args.difficulty_orders),
            ("difficulty (per model)", Difficulty(), False, args.difficulty_orders)]
    if args.ceiling:
        arms += [("ceiling: peeks (pooled)", PeekingCeiling.from_outcomes(outcomes), True, args.difficulty_orders),
                 ("ceiling: peeks (per model)", PeekingCeiling.from_outcomes(outcomes, pooled=False), True,
                  args.difficulty_orders)]
    return arms


def pythia(args: argparse.Namespace) -> dict:
    blocks = read_outcomes_parquet(args.data)
    outcomes = RecordedOutcomes(np.stack([b.correct for b in blocks]), np.stack([b.n_samples for b in blocks]),
                                generators=tuple(b.model for b in blocks))
    G, P, N = outcomes.shape
    full = outcomes.covered()
    print(f"{args.data}: {G} models x {P} problems x {N} samples; uniform coverage at {N}: "
          + ", ".join(f"{m} {100 * c:.1f}%" for m, c in zip(outcomes.generators, full)))
    rows = []
    print(f"\n| budget | policy | coverage kept (mean of {G} models, %) | per model (%) | s |")
    print("|---:|---|---:|---|---:|")
    for fraction in args.fractions:
        for name, policy, pooled, orders in pythia_arms(outcomes, args):
            started = time.perf_counter()
            result = replay(policy, outcomes, int(fraction * P * N), orders=orders, seed=args.seed, pooled=pooled)
            kept = result.coverage / full
            seconds = time.perf_counter() - started
            rows.append({"fraction": fraction, "policy": name, "orders": orders, "pooled": pooled,
                         "kept": float(kept.mean()),
                         "kept_per_model": dict(zip(outcomes.generators, kept.round(4).tolist())),
                         "kept_per_order": (result.coverage_per_order / full).mean(axis=1).round(4).tolist(),
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


def _store_outcomes(directory: Path) -> tuple[RecordedOutcomes, list[str]]:
    """A store's samples as outcomes, with its problem ids in the outcomes' order."""
    experiment = Experiment(directory)
    data = experiment.selection_data()
    return outcomes_from_selection(data, experiment.labels_array()), [str(p) for p in data.problems]


def _ledger_drawn(path: Path, generators: tuple[str, ...], problems: list[str]) -> np.ndarray:
    """``[G, P]`` final target per cell in an ``allocation.parquet`` ledger (its last round's)."""
    final = {(row["generator_id"], row["problem_id"]): row["target"] for row in pq.read_table(path).to_pylist()}
    return np.array([[final.get((g, p), 0) for p in problems] for g in generators])


def real(args: argparse.Namespace) -> dict:
    outcomes, problems = _store_outcomes(args.directory)
    G, P, N = outcomes.shape
    baseline, base_problems = (outcomes, problems) if args.uniform is None else _store_outcomes(args.uniform)
    if not set(problems) <= set(base_problems) or baseline.generators != outcomes.generators:
        raise SystemExit(f"{args.uniform}: needs the generators and every problem of {args.directory}")
    align = np.array([base_problems.index(p) for p in problems])
    base_correct, base_answers = baseline.correct[:, align], baseline.answers[:, align]
    if (baseline.available[:, align] < args.samples).any():
        raise SystemExit(f"{args.uniform or args.directory}: every problem needs {args.samples} samples for uniform "
                         f"majority@{args.samples}; some have {int(baseline.available.min())} (pass --uniform DIR, a "
                         "store of the same problems sampled uniformly)")
    uniform_drawn = np.full((G, P), args.samples)
    uniform_right = majority_correct(base_correct, base_answers, uniform_drawn).reshape(-1).astype(float)
    ledger_path = args.ledger or Path(args.directory) / "allocation.parquet"
    arms: list[tuple[str, np.ndarray]] = []
    if ledger_path.is_file():
        arms.append((f"confident_majority (the run's own allocation, {ledger_path.name})",
                     _ledger_drawn(ledger_path, outcomes.generators, problems)))
    else:
        for threshold in args.threshold:
            policy = ConfidentMajority(threshold=threshold, round_size=args.round_size)
            arms.append((f"confident_majority@{threshold:g} (rounds of {args.round_size}, replayed in sample order)",
                         draw(policy, outcomes.correct, outcomes.answers, outcomes.available,
                              outcomes.available.sum(axis=1))))
    right = [majority_correct(outcomes.correct, outcomes.answers, drawn).reshape(-1).astype(float) for _, drawn in arms]
    intervals = bootstrap_ci(np.stack([uniform_right, *right], axis=1), args.bootstrap, args.seed)
    baseline_name = "the same samples" if args.uniform is None else f"{args.uniform} (its own samples)"
    print(f"{args.directory}: {P} problems; uniform majority@{args.samples} from {baseline_name}")
    print("| arm | samples | per problem | share of uniform | majority accuracy (%) | 95% bootstrap interval |")
    print("|---|---:|---:|---:|---:|---|")
    print(f"| uniform majority@{args.samples} | {uniform_drawn.sum()} | {args.samples} | 100% | "
          f"{100 * uniform_right.mean():.1f} | {_interval(intervals[0])} |")
    rows = []
    for (name, drawn), arm_right, interval in zip(arms, right, intervals[1:]):
        difference = paired_difference_ci(uniform_right, arm_right, args.bootstrap, args.seed)
        share = drawn.sum() / uniform_drawn.sum()
        print(f"| {name} | {drawn.sum()} | {drawn.mean():.2f} | {100 * share:.0f}% | {100 * arm_right.mean():.1f} | "
              f"{_interval(interval)} |")
        print(f"| difference (adaptive - uniform), paired over problems | | | | "
              f"{100 * (arm_right.mean() - uniform_right.mean()):+.1f} | {_interval(difference)} |")
        rows.append({"arm": name, "samples": int(drawn.sum()), "share": float(share),
                     "accuracy": float(arm_right.mean()), "interval": interval.tolist(),
                     "difference": float(arm_right.mean() - uniform_right.mean()),
                     "interval_difference": list(difference), "drawn": drawn.tolist()})
    return {"problems": P, "baseline": baseline_name, "samples_uniform": int(uniform_drawn.sum()),
            "accuracy_uniform": float(uniform_right.mean()), "interval_uniform": intervals[0].tolist(), "arms": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pythia")
    p.add_argument("--data", type=Path, default=PYTHIA)
    p.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    p.add_argument("--orders", type=int, default=20)
    p.add_argument("--difficulty-orders", type=int, default=8)
    p.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                   help="skip the two ceiling rows (difficulty's greedy with a prior that peeks at the outcomes)")
    s = sub.add_parser("store")
    s.add_argument("directory")
    s.add_argument("--orders", type=int, default=8)
    s.add_argument("--round-size", type=int, default=1)
    r = sub.add_parser("real")
    r.add_argument("directory")
    r.add_argument("--samples", type=int, default=16)
    r.add_argument("--threshold", type=float, nargs="+", default=[0.95])
    r.add_argument("--round-size", type=int, default=4)
    r.add_argument("--ledger", type=Path, default=None, help="allocation.parquet of the adaptive run")
    r.add_argument("--uniform", type=Path, default=None,
                   help="uniform majority@samples from this store of the same problems (default: DIRECTORY itself)")
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
