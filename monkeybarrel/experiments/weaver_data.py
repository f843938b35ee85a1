"""Load Weaver's released datasets (hub ``hazyresearch/*``, split ``data``) into an experiment store.

Each row is one problem with K samples and per-sample verifier scores, so selection methods can be
compared on the paper's data without sampling or scoring anything:

=====================  ======================================================================
column                 use
=====================  ======================================================================
``instruction``        the problem's prompt
``answer``             reference answer (labels only)
``samples``            ``list[str]``, the K candidate texts
``extracted_answers``  ``list[str]``, final answers (``NO_ANSWER``/empty = none), for majority vote
``answer_correct``     ``list[bool]``, the ground-truth labels
``<RM>_scores``        ``list[float]``, a reward model's raw scores: one verifier column each
``<PRM>_{min,max,avg}_scores``  process reward model aggregates: verifier columns
``<Judge>_verdicts``   ``list[float]`` or ``list[[float]]`` judge verdicts (None = NaN): verifier columns
``*_step_scores``      nested step scores: ignored
``weaver_scores``      the authors' Weaver output: not a verifier (kept only as a reference column
                       when ``include_weaver_scores``)
other scalars          problem metadata (``type``, ``subject``, ``level``, ...)
=====================  ======================================================================

Python::

    from monkeybarrel.experiments.weaver_data import load_weaver_dataset
    experiment = load_weaver_dataset("gpqa-8b", "runs/weaver-gpqa-8b")    # hub name, id or local file
    metrics = evaluate_and_report(experiment)                                # selection table -> report.md

Command line: ``python -m monkeybarrel.experiments.weaver_data gpqa-8b --out runs/weaver-gpqa-8b``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
import pyarrow as pa

from ..core.config import EvaluateSpec, ExperimentConfig, GeneratorSpec, SelectorSpec, TaskSpec, VerifierSpec
from ..core.records import Problem

if TYPE_CHECKING:
    from ..orchestrator.experiment import Experiment

HUB_DATASETS = {
    "math500-8b": "hazyresearch/MATH-500_with_Llama_3.1_8B_Instruct_v1",
    "math500-70b": "hazyresearch/MATH500_with_Llama_3.1_70B_Instruct_v1",
    "gpqa-8b": "hazyresearch/GPQA_with_Llama_3.1_8B_Instruct_v1",
    "gpqa-70b": "hazyresearch/GPQA_with_Llama_3.1_70B_Instruct_v1",
    "mmlu-8b": "hazyresearch/MMLU_with_Llama_3.1_8B_Instruct_v1",
    "mmlu-70b": "hazyresearch/MMLU_with_Llama_3.1_70B_Instruct_v1",
    "mmlu-pro-8b": "hazyresearch/MMLU-Pro_with_Llama_3.1_8B_Instruct_v1",
    "mmlu-pro-70b": "hazyresearch/MMLU-Pro_with_Llama_3.1_70B_Instruct_v1",
    "gpqa-diamond-70b-1k": "hazyresearch/GPQA_Diamond_with_Llama_3.1_70B_Instruct_up_to_1K_Samples_v1",
}
"""Short names of the released sets (the two MATH-500 ids really are spelled differently). GPQA-Diamond
is ``gpqa-*`` with ``where={"type": "diamond"}``."""

REQUIRED = ("instruction", "samples", "answer_correct")
ENSEMBLE_TYPES = ("weaver", "naive_ensemble", "supervised", "best_single", "best_single_labeled")
"""Selectors that read every verifier column unless given ``verifiers``."""
NO_ANSWER = {"", "NO_ANSWER", "None"}

DEFAULT_SELECTORS = (
    SelectorSpec(name="majority", type="majority"),
    SelectorSpec(name="best single (label-free pick)", type="best_single"),
    SelectorSpec(name="best single (oracle pick)", type="best_single_labeled"),
    SelectorSpec(name="naive ensemble", type="naive_ensemble"),
    SelectorSpec(name="weaver", type="weaver"),
    SelectorSpec(name="weaver (1% dev labels)", type="weaver", options={"dev_fraction": 0.01, "model__threshold": "search"}),
    SelectorSpec(name="supervised (5-fold LR)", type="supervised"),
)


def verifier_columns(names: Iterable[str], include_weaver_scores: bool = False) -> list[str]:
    """The columns that are verifiers: ``*_scores`` and ``*_verdicts``, without step scores or Weaver's output."""
    return [n for n in names if (n.endswith("_scores") or n.endswith("_verdicts")) and not n.endswith("_step_scores")
            and (n != "weaver_scores" or include_weaver_scores)]


def read_rows(source: str, split: str = "data") -> tuple[pa.Table, str]:
    """The dataset as an Arrow table and a description of where it came from.

    ``source`` is a short name from ``HUB_DATASETS``, a hub id, a local ``.parquet``/``.jsonl``/``.json``
    file, or a local dataset directory in the hub layout (read by ``datasets.load_dataset``).
    """
    path = Path(source)
    if path.is_file():
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path), str(path)
        if path.suffix in (".jsonl", ".json"):
            import pyarrow.json as pj

            return pj.read_json(path), str(path)
        raise ValueError(f"{path}: expected a .parquet, .jsonl or .json file")
    name = HUB_DATASETS.get(source, source)
    if not path.exists() and "/" not in name:
        raise ValueError(f"{source!r}: not a file, a known short name ({', '.join(HUB_DATASETS)}) or a hub id")
    try:
        from datasets import load_dataset
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("loading from the hub needs `pip install monkeybarrel[hub]`") from exc
    dataset = load_dataset(name, split=split)
    return dataset.with_format("arrow")[:], f"hub:{name}" if not path.exists() else str(path)


def _per_sample(value: Any, k: int, column: str, row: int, source: str) -> np.ndarray:
    """A verifier cell as ``[k]`` floats (nested one-element lists squeezed, None -> NaN)."""
    if value is None:
        return np.full(k, np.nan)
    if not isinstance(value, (list, tuple)) or len(value) != k:
        raise ValueError(f"{source}: row {row}, column {column!r}: expected a list of {k} scores (one per sample), "
                         f"got {type(value).__name__} of length {len(value) if isinstance(value, (list, tuple)) else '-'}")
    out = np.full(k, np.nan)
    for i, item in enumerate(value):
        if isinstance(item, (list, tuple)):
            if len(item) > 1:
                raise ValueError(f"{source}: row {row}, column {column!r}, sample {i}: nested list of {len(item)} values")
            item = item[0] if item else None
        if item is not None:
            out[i] = float(item)
    return out


def _generator_id(name: str) -> str:
    match = re.search(r"with_(.+?)(?:_up_to.*)?_v\d+$", name)
    return (match.group(1) if match else "generator").lower().replace("_", "-")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48] or "weaver"


def load_weaver_dataset(source: str, out_dir: str | Path, *, split: str = "data", where: dict[str, Any] | None = None,
                        num_problems: int | None = None, include_weaver_scores: bool = False,
                        selectors: Iterable[SelectorSpec] = DEFAULT_SELECTORS, force: bool = False) -> Experiment:
    """Write a released Weaver dataset into the experiment store at ``out_dir``.

    Args:
        source: short name (``HUB_DATASETS``), hub id, local file or local dataset directory.
        out_dir: experiment directory to create (must be empty unless ``force``).
        split: hub split (the released sets have only ``data``).
        where: keep rows whose columns equal these values, e.g. ``{"type": "diamond"}`` for GPQA-Diamond.
        num_problems: keep the first N problems (after ``where``).
        include_weaver_scores: also store the authors' ``weaver_scores`` (as a reference selector
            ``weaver (released scores)``; never as an input of the ensembles).
        selectors: the selection methods written into the experiment's config.
        force: replace what ``out_dir`` holds.

    Returns:
        An ``Experiment`` on ``out_dir``; ``evaluate_and_report(experiment)`` selects and writes the report.

    Raises:
        ValueError: a missing column, or a row whose lists do not have one entry per sample
            (the message names the source, row and column).
    """
    table, origin = read_rows(source, split)
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise ValueError(f"{origin}: missing column(s) {missing}; the Weaver schema needs {list(REQUIRED)}")
    columns = verifier_columns(table.column_names, include_weaver_scores)
    if not columns:
        raise ValueError(f"{origin}: no verifier columns (*_scores or *_verdicts)")
    rows = table.to_pylist()
    if where:
        unknown = [k for k in where if k not in table.column_names]
        if unknown:
            raise ValueError(f"{origin}: where= names unknown column(s) {unknown}")
        rows = [r for r in rows if all(r[k] == v for k, v in where.items())]
    rows = rows[:num_problems] if num_problems is not None else rows
    if not rows:
        raise ValueError(f"{origin}: no rows left (where={where!r}, num_problems={num_problems!r})")

    name = HUB_DATASETS.get(source, source)
    generator, prefix = _generator_id(Path(name).stem if Path(name).suffix else name), _slug(Path(name).stem or name)
    scalar = [c for c in table.column_names if c not in columns and c not in (*REQUIRED, "answer", "extracted_answers")
              and not pa.types.is_nested(table.schema.field(c).type)]
    problems, keys, texts, answers, labels, max_samples = [], [], [], [], [], 1
    scores = {c: [] for c in columns}
    for index, row in enumerate(rows):
        samples = row["samples"]
        if not isinstance(samples, list) or not samples:
            raise ValueError(f"{origin}: row {index}: 'samples' must be a non-empty list of strings")
        k = len(samples)
        max_samples = max(max_samples, k)
        correct = row["answer_correct"]
        if not isinstance(correct, list) or len(correct) != k:
            raise ValueError(f"{origin}: row {index}, column 'answer_correct': expected {k} booleans (one per sample)")
        extracted = row.get("extracted_answers") or [None] * k
        if len(extracted) != k:
            raise ValueError(f"{origin}: row {index}, column 'extracted_answers': expected {k} answers (one per sample)")
        problem_id = f"{prefix}-{index:05d}"
        metadata = {c: row[c] for c in scalar if row[c] is not None}
        problems.append(Problem(problem_id, f"weaver:{prefix}", prompt=row["instruction"],
                                reference_answer=None if row.get("answer") is None else str(row["answer"]),
                                metadata={**metadata, "source": origin, "row": index}))
        keys.extend((problem_id, i) for i in range(k))
        texts.extend(samples)
        answers.extend(None if a is None or str(a).strip() in NO_ANSWER else str(a).strip() for a in extracted)
        labels.extend(bool(c) for c in correct)
        for column in columns:
            scores[column].append(_per_sample(row.get(column), k, column, index, origin))

    selector_specs = list(selectors)
    if include_weaver_scores:  # the released Weaver output is a reference row, never an ensemble input
        inputs = [c for c in columns if c != "weaver_scores"]
        selector_specs = [s.model_copy(update={"options": {"verifiers": inputs, **s.options}})
                          if s.type in ENSEMBLE_TYPES and "verifier" not in s.options else s for s in selector_specs]
        selector_specs.append(SelectorSpec(name="weaver (released scores)", type="best_single",
                                           options={"verifier": "weaver_scores"}))
    config = ExperimentConfig(
        name=f"weaver data: {name}", task=TaskSpec(name=f"weaver:{prefix}", num_problems=None, path=origin),
        generators=[GeneratorSpec(id=generator, backend="precomputed", model=generator, num_samples=max_samples)],
        verifiers=[VerifierSpec(name=c, type="precomputed") for c in columns], selectors=selector_specs,
        evaluate=EvaluateSpec())
    from .precomputed import write_precomputed  # the store (pyarrow.dataset, pandas): not for `reproduce list`

    return write_precomputed(out_dir, config, problems, [(p, generator, i) for p, i in keys], texts, answers, labels,
                             scores={c: np.concatenate(scores[c]) for c in columns},
                             source={"dataset": origin, "split": split, "where": where, "rows": len(rows)}, force=force)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Load a released Weaver dataset into a store and run selection.")
    parser.add_argument("source", help=f"short name ({', '.join(HUB_DATASETS)}), hub id or local file")
    parser.add_argument("--out", required=True, help="experiment directory to create")
    parser.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                        help="keep rows with this column value (e.g. type=diamond); repeatable")
    parser.add_argument("--num-problems", type=int, default=None)
    parser.add_argument("--include-weaver-scores", action="store_true")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    from ..orchestrator.runner import evaluate_and_report
    from ..orchestrator.store.experiment_store import StoreError

    where = dict(item.split("=", 1) for item in args.where) or None
    try:
        experiment = load_weaver_dataset(args.source, args.out, where=where, num_problems=args.num_problems,
                                         include_weaver_scores=args.include_weaver_scores, force=args.force)
    except (ValueError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    metrics = evaluate_and_report(experiment)
    print(json.dumps({name: round(100 * info["accuracy"], 1) for name, info in metrics["selection"].items()}, indent=2))
    print(f"report: {experiment.directory / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
