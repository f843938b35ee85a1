"""Select + evaluate + report at scale: 10^4 problems x 100 candidates (10^6 rows) through the real store.

Writes synthetic candidates, answers, labels and two verifier score columns into an experiment
directory with the store's own writers (``--chunks`` candidate chunk files), then times reading
them back into ``SelectionData``, majority selection, and the full evaluate stage in-process; last,
the target figure: ``monkeybarrel report DIR`` as a separate process (wall time and its peak RSS;
target <= 15 s and <= 1.5 GB on 2 cores), before and after ``monkeybarrel store compact``.
The machine's load average is printed with it (the figures are wall times on a shared machine).

    python benchmarks/spine_scale.py --problems 10000 --samples 100 --chunks 10000
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import ANSWER_SCHEMA, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA
from monkeybarrel.orchestrator.experiment import Experiment
from monkeybarrel.orchestrator.runner import evaluate_and_report
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore


def build(directory: Path, problems: int, samples: int, seed: int = 0, chunks: int = 10) -> None:
    rng = np.random.default_rng(seed)
    n = problems * samples
    problem_id = np.repeat(np.array([f"p{i:06d}" for i in range(problems)], dtype=object), samples)
    sample_index = np.tile(np.arange(samples, dtype=np.int32), problems)
    difficulty = np.repeat(rng.random(problems), samples)
    correct = rng.random(n) < difficulty
    answers = np.where(correct, "42", rng.integers(0, 6, n).astype(str)).astype(object)
    keys = {"problem_id": problem_id, "generator_id": np.full(n, "g", dtype=object), "sample_index": sample_index}
    config = ExperimentConfig.from_dict({
        "name": "scale", "task": {"name": "arithmetic", "num_problems": problems},
        "generators": [{"id": "g", "num_samples": samples}],
        "verifiers": [{"name": "v1", "type": "heuristic"}, {"name": "v2", "type": "heuristic"}],
    })
    store = ExperimentStore(directory)
    store.write_text("config.yaml", config.to_yaml())
    chunk = -(-n // chunks)
    for start in range(0, n, chunk):
        part = slice(start, start + chunk)
        size = len(problem_id[part])
        store.append_chunk("candidates", pa.table({
            **{k: v[part] for k, v in keys.items()}, "text": np.full(size, "The answer is 42.", dtype=object),
            "prompt_tokens": np.full(size, 80, np.int32), "completion_tokens": np.full(size, 120, np.int32),
            "finish_reason": np.full(size, "stop", dtype=object), "wall_time_s": np.full(size, 0.01),
            "seed": np.zeros(size, np.int64), "error": pa.nulls(size, pa.string())}, schema=CANDIDATE_SCHEMA))
    for name, quality in (("v1", 0.7), ("v2", 0.6)):
        scores = np.where(rng.random(n) < quality, correct, ~correct).astype(float) + rng.normal(0, 0.1, n)
        store.append_chunk(f"scores/{name}", pa.table({**keys, "verifier": np.full(n, name, dtype=object),
                                                        "score": scores, "error": pa.nulls(n, pa.string()),
                                                        "failed_attempts": pa.nulls(n, pa.int32())},  # (older
                                                       schema=SCORE_SCHEMA))   # checkouts ignore the column)
    store.write_table("answers", pa.table({**keys, "answer": answers}, schema=ANSWER_SCHEMA))
    store.write_table("labels", pa.table({**keys, "correct": correct}, schema=LABEL_SCHEMA))


def report_in_subprocess(directory: Path) -> tuple[float, float, float]:
    """``monkeybarrel report DIR`` in a child process: (wall s, CPU s, peak RSS of the largest child so far in GB).

    CPU seconds (user + system) are less sensitive than wall time to other load on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "report", str(directory)],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, after.ru_maxrss / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--chunks", type=int, default=10, help="candidate chunk files written")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "scale"
        began = time.perf_counter()
        build(directory, args.problems, args.samples, chunks=args.chunks)
        print(f"write {args.problems * args.samples:,} candidates + 2 score columns: {time.perf_counter() - began:.1f} s")
        experiment = Experiment(directory)
        began = time.perf_counter()
        data = experiment.selection_data()
        labels = experiment.labels_array()
        print(f"read into SelectionData ({data.n_candidates:,} x {len(data.verifiers)}): {time.perf_counter() - began:.1f} s")
        from monkeybarrel.selection.majority import MajorityVote

        began = time.perf_counter()
        MajorityVote().fit(data).select(data)
        print(f"majority selection: {time.perf_counter() - began:.2f} s")
        began = time.perf_counter()
        metrics = evaluate_and_report(experiment)
        print(f"select + evaluate + report (coverage/majority@k for ks {metrics['ks']}): {time.perf_counter() - began:.1f} s")
        print(f"coverage@100 {metrics['coverage'][str(args.samples)]:.3f}, majority@100 {metrics['majority'][str(args.samples)]:.3f}")
        load = os.getloadavg()[0]
        wall, cpu, peak = report_in_subprocess(directory)
        print(f"`monkeybarrel report` ({args.chunks} candidate chunks, {os.cpu_count()} cores, load {load:.1f}): "
              f"{wall:.1f} s wall, {cpu:.1f} s CPU, peak RSS {peak:.2f} GB")
        if args.chunks > 1:
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", "store", "compact", str(directory)],
                           check=True, stdout=subprocess.DEVNULL)
            compacted = time.perf_counter() - began
            load = os.getloadavg()[0]
            wall, cpu, _ = report_in_subprocess(directory)
            print(f"`monkeybarrel store compact`: {compacted:.1f} s; `report` after it (1 chunk, load {load:.1f}): "
                  f"{wall:.1f} s wall, {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
