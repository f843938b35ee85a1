"""``monkeybarrel export DIR --format csv|jsonl``: one row per candidate with everything stored about it.

Columns: problem_id, generator_id, sample_index, text, finish_reason, error, prompt/completion
tokens, answer, correct (null = unlabelled), one ``score:<verifier>`` column per verifier and one
``picked:<method>`` bool column per selector.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ..experiment import Experiment
from .drilldown import Drilldown

FORMATS = ("csv", "jsonl")


def candidate_export_table(experiment: Experiment) -> pa.Table:
    """The export rows as one Arrow table (columnar; no loop over candidates)."""
    view = Drilldown.load(experiment)
    table = view.candidates.select(["problem_id", "generator_id", "sample_index", "text", "finish_reason", "error",
                                    "prompt_tokens", "completion_tokens"])
    table = table.append_column("answer", pa.array(view.answers.tolist(), pa.string()))
    table = table.append_column("correct", pa.array(view.correct.tolist(), pa.bool_()))
    for j, name in enumerate(view.verifiers):
        column = view.scores[:, j]
        table = table.append_column(f"score:{name}", pa.array(column, mask=np.isnan(column)))
    for method, by_problem in view.picks.items():
        picked = np.zeros(table.num_rows, bool)
        rows = np.array([r for r in by_problem.values() if r >= 0], dtype=np.int64)
        picked[rows] = True
        table = table.append_column(f"picked:{method}", pa.array(picked))
    return table


def export(directory: str | Path, fmt: str, out: str | Path | None = None) -> Path:
    """Write the export next to the store (``DIR/export.<fmt>``) or to ``out``; returns the path."""
    if fmt not in FORMATS:
        raise ValueError(f"--format: expected one of {FORMATS}, got {fmt!r}")
    experiment = Experiment(directory)
    table = candidate_export_table(experiment)
    if out is not None:
        _write(table, fmt, Path(out))
        return Path(out)
    name = f"export.{fmt}"  # inside the store: listed as a store file (check, run --force)
    with experiment.store.writing(name) as tmp:
        _write(table, fmt, tmp)
    return experiment.directory / name


def _write(table: pa.Table, fmt: str, path: Path) -> None:
    if fmt == "csv":
        pacsv.write_csv(table, path)
    else:
        with open(path, "w") as handle:
            for batch in table.to_batches(max_chunksize=10_000):
                for row in batch.to_pylist():
                    handle.write(json.dumps(row, allow_nan=False, default=str) + "\n")
