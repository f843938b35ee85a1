"""A sweep directory made from Large Language Monkeys' released outcomes: one point per model.

The Pythia MATH outcomes (7 models x 128 problems x 10,000 samples, 0/1 per sample) become a
sweep over ``generators[0].model`` whose stores hold every sample as a candidate (no text) with
its label and an assumed completion length, so ``monkeybarrel sweep status`` and ``sweep report``
run on 10^6 candidates per point: the report's compute-optimal frontier then says which Pythia
size and k is best at each FLOPs budget, as the paper's coverage-against-FLOPs figure does::

    python -m monkeybarrel.experiments.llmonk_sweep ../shared/data/llmonk/pythia_math_individual_outcomes.parquet \\
        --out runs/llmonk-pythia-sweep && monkeybarrel sweep report runs/llmonk-pythia-sweep

The data has no token counts: every sample is given ``completion_tokens`` (default 256) and the
prompt ``prompt_tokens`` (default 0), so the FLOPs proxy is 2 x parameters x k x 256 per problem.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..core.records import CANDIDATE_SCHEMA, LABEL_SCHEMA, Problem, problems_to_table
from ..orchestrator.store.experiment_store import ExperimentStore, StoreError
from ..orchestrator.store.manifest import new_manifest
from ..orchestrator.sweep.manifest import claim, config_hash, point_record, write_manifest, write_sweep_file
from ..orchestrator.sweep.spec import Sweep, sweep_from_dict
from .llmonk_data import SampleOutcomes, read_outcomes_parquet


def llmonk_sweep(blocks: list[SampleOutcomes], name: str = "llmonk-pythia") -> Sweep:
    """The sweep the blocks would come from: a precomputed generator, one point per model."""
    base = {"name": name, "task": {"name": "math", "num_problems": int(max(b.problem_ids.size for b in blocks))},
            "generators": [{"id": "sampler", "backend": "precomputed", "model": blocks[0].model,
                            "num_samples": int(max(b.n_samples.max() for b in blocks))}],
            "selectors": []}
    return sweep_from_dict({"name": name, "base": base, "axes": {"generators[0].model": [b.model for b in blocks]}})


def write_llmonk_sweep(blocks: list[SampleOutcomes], out: str | Path, *, completion_tokens: int = 256,
                       prompt_tokens: int = 0, name: str = "llmonk-pythia") -> Path:
    """Write the sweep directory ``out`` (must be new or empty): ``sweep.json``, ``sweep.yaml`` and a store per model.

    Args:
        blocks: outcome blocks of one benchmark, one per model (``llmonk_data``).
        completion_tokens, prompt_tokens: the token counts each sample is given.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise StoreError(f"{out}: not empty; give a new directory")
    sweep = llmonk_sweep(blocks, name)
    manifest = claim(out, sweep)
    for point, block in zip(sweep.points, blocks):
        record = point_record(manifest, point.id)
        _write_store(out / record["name"], point.config, block, completion_tokens, prompt_tokens)
        record.update(state="done", config_hash=config_hash(point), attempts=1, tries=1,
                      expected_candidates=int(block.n_samples.sum()))
    write_sweep_file(out, sweep)
    write_manifest(out, manifest)
    return out


def _write_store(directory: Path, config, block: SampleOutcomes, completion_tokens: int, prompt_tokens: int) -> None:
    """A store whose candidates are the block's samples (columnar: no Python loop over samples)."""
    store = ExperimentStore(directory)
    ids = block.problem_ids.astype(str)
    generator = config.generators[0].id
    store.write_text("config.yaml", config.to_yaml())
    store.write_table("problems", problems_to_table([Problem(pid, "math", prompt=f"MATH problem {pid}") for pid in ids]))
    rows = np.arange(block.correct.shape[1])[None, :] < block.n_samples[:, None]  # [P, N] samples present
    problem = np.repeat(ids, block.n_samples)
    index = np.nonzero(rows)[1].astype(np.int32)
    n = problem.size
    keys = {"problem_id": pa.array(problem), "generator_id": pa.array(np.full(n, generator)),
            "sample_index": pa.array(index)}
    store.append_chunk("candidates", pa.table({
        **keys, "text": pa.nulls(n, pa.string()), "prompt_tokens": pa.array(np.full(n, prompt_tokens, np.int32)),
        "completion_tokens": pa.array(np.full(n, completion_tokens, np.int32)),
        "finish_reason": pa.array(np.full(n, "stop")), "wall_time_s": pa.array(np.zeros(n)),
        "seed": pa.nulls(n, pa.int64()), "error": pa.nulls(n, pa.string())}, schema=CANDIDATE_SCHEMA))
    store.write_table("labels", pa.table({**keys, "correct": pa.array(block.correct[rows])}, schema=LABEL_SCHEMA))
    manifest = new_manifest(config)
    manifest["source"] = {"data": "Large Language Monkeys per-sample outcomes", "benchmark": block.benchmark,
                          "model": block.model, "assumed_tokens": {"prompt": prompt_tokens, "completion": completion_tokens}}
    manifest["costs"] = {"generators": {generator: {"candidates": n, "prompt_tokens": n * prompt_tokens,
                                                    "completion_tokens": n * completion_tokens, "errors": 0,
                                                    "truncated": 0}}}
    store.write_manifest(manifest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parquet", type=Path, help="the processed per-sample outcomes parquet")
    parser.add_argument("--out", type=Path, required=True, help="new sweep directory")
    parser.add_argument("--benchmark", default="MATH")
    parser.add_argument("--samples", type=int, default=None, help="keep the first N samples of each problem")
    parser.add_argument("--completion-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    blocks = read_outcomes_parquet(args.parquet, benchmarks=[args.benchmark])
    if args.samples is not None:
        blocks = [truncate(b, args.samples) for b in blocks]
    print(write_llmonk_sweep(blocks, args.out, completion_tokens=args.completion_tokens))
    return 0


def truncate(block: SampleOutcomes, samples: int) -> SampleOutcomes:
    """The block's first ``samples`` attempts of each problem."""
    return SampleOutcomes(block.benchmark, block.model, block.problem_ids, block.correct[:, :samples],
                          np.minimum(block.n_samples, samples))


if __name__ == "__main__":
    sys.exit(main())
