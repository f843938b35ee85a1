"""Released candidates, answers, labels and scores written into an experiment store as they are.

For recipes whose paper released every sample's outcome (Weaver's sets, SWE-bench leaderboard
predictions): no model or container runs; the store then goes through the same select, evaluate
and report stages as any experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from ..core.config import ExperimentConfig
from ..core.records import ANSWER_SCHEMA, CANDIDATE_SCHEMA, LABEL_SCHEMA, SCORE_SCHEMA, Problem, problems_to_table
from ..orchestrator.experiment import Experiment
from ..orchestrator.store.manifest import new_manifest
from ..orchestrator.store.experiment_store import ExperimentStore, StoreError


def write_precomputed(out_dir: str | Path, config: ExperimentConfig, problems: Sequence[Problem],
                      keys: Sequence[tuple[str, str, int]], texts: Sequence[str | None],
                      answers: Sequence[str | None], labels: Sequence[bool],
                      scores: dict[str, np.ndarray] | None = None, source: dict[str, Any] | None = None,
                      force: bool = False) -> Experiment:
    """Create the store at ``out_dir`` from flat per-candidate lists.

    Args:
        config: the experiment's config (generators with ``backend: precomputed``).
        problems: the problems.
        keys: ``[N]`` (problem_id, generator_id, sample_index) per candidate.
        texts, answers, labels: ``[N]`` each (answer None = no answer; label = correct).
        scores: verifier name -> ``[N]`` floats (NaN = missing in the released data).
        source: recorded in the manifest under ``source``.
        force: replace the store at ``out_dir`` (only the files it wrote are deleted).

    Raises:
        StoreError: ``out_dir`` holds a store and not ``force``, or holds files that are not a store's.
    """
    out_dir = Path(out_dir)
    ExperimentStore.check_target(out_dir)  # a new or empty directory, or a store: never among a user's files
    store = ExperimentStore(out_dir)
    if out_dir.exists() and (out_dir / "manifest.json").exists():
        if not force:
            raise StoreError(f"{out_dir}: not empty (it holds a store); pass force=True (--force) to replace it")
        store.discard()  # exactly the files the store wrote
    n = len(keys)
    store.write_text("config.yaml", config.to_yaml())
    manifest = new_manifest(config)
    if source is not None:
        manifest["source"] = source
    store.write_manifest(manifest)
    store.write_table("problems", problems_to_table(list(problems)))
    key_columns = {"problem_id": [k[0] for k in keys], "generator_id": [k[1] for k in keys],
                   "sample_index": [k[2] for k in keys]}
    store.append_chunk("candidates", pa.table({
        **key_columns, "text": list(texts), "prompt_tokens": [0] * n, "completion_tokens": [0] * n,
        "finish_reason": ["stop"] * n, "wall_time_s": [0.0] * n, "seed": [None] * n, "error": [None] * n},
        schema=CANDIDATE_SCHEMA))
    store.write_table("answers", pa.table({**key_columns, "answer": list(answers)}, schema=ANSWER_SCHEMA))
    store.write_table("labels", pa.table({**key_columns, "correct": [bool(x) for x in labels]}, schema=LABEL_SCHEMA))
    for name, values in (scores or {}).items():
        values = np.asarray(values, dtype=np.float64)
        store.append_chunk(f"scores/{name}", pa.table({
            **key_columns, "verifier": [name] * n, "score": values,
            "error": np.where(np.isnan(values), "missing in the released data", None).tolist(),
            "failed_attempts": [None] * n}, schema=SCORE_SCHEMA))
    return Experiment(out_dir)
