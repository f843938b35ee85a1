"""Per-sample 0/1 outcomes of Large Language Monkeys (Brown et al., 2024) as dense arrays.

Two released layouts load into the same ``SampleOutcomes`` blocks, one per (benchmark, model):

* **processed parquet** (one row per sample; e.g. ``pythia_math_individual_outcomes.parquet``,
  7 Pythia models x 128 MATH problems x 10,000 samples)::

      Problem Idx: int64   Attempt Idx: int64 (1..N)   Score: 0/1 (any float type)
      Benchmark: string    Model: string ("Pythia 160M", "Gemma 2B", ...)

* **hub** ``ScalingIntelligence/monkey_business``: one config ``{TASK}_{MODEL}`` (``MATH_Pythia-160M``,
  ``CodeContests_Gemma-2B``) with a ``test`` split, one row per problem: ``is_corrects`` (list[bool],
  one per sample), ``samples``, ``question``, ``gt_answer``, ``orig_dset_idx``. A local copy (the
  config's ``.json``/``.jsonl`` file, or a directory of them named ``{TASK}_{MODEL}.json``) reads the same.

A block is ``correct[P, N]`` (column j = the j-th attempt, in attempt order) plus ``n_samples[P]``, so
coverage needs only ``n_samples`` and ``correct.sum(1)``, and a policy simulator can replay the
samples in order. Python::

    blocks = read_outcomes_parquet("../shared/data/llmonk/pythia_math_individual_outcomes.parquet")
    n, c, problems = stack_counts(blocks)          # [M, P] samples / correct per problem
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.hub import load_hub_dataset

HUB_NAME = "ScalingIntelligence/monkey_business"
PARQUET_COLUMNS = ("Problem Idx", "Attempt Idx", "Score", "Benchmark", "Model")


class OutcomeDataError(ValueError):
    """Outcome data that does not have the released layout (the message names the file and what was expected)."""


@dataclass(frozen=True)
class SampleOutcomes:
    """The 0/1 outcome of every sample of one model on one benchmark.

    Attributes:
        benchmark: e.g. ``"MATH"``, ``"CodeContests"``.
        model: as written in the data (``"Pythia 160M"``; hub names are normalised the same way).
        problem_ids: ``[P]`` the data's problem identifiers (ints in the parquet layout, row index or
            ``orig_dset_idx`` on the hub), sorted.
        correct: ``[P, N]`` bool; column j is attempt j; entries past ``n_samples[p]`` are False.
        n_samples: ``[P]`` int, samples present for each problem.
    """

    benchmark: str
    model: str
    problem_ids: np.ndarray
    correct: np.ndarray
    n_samples: np.ndarray

    @property
    def n_correct(self) -> np.ndarray:
        """``[P]`` correct samples per problem."""
        return self.correct.sum(axis=1)

    @property
    def name(self) -> str:
        return f"{self.benchmark} {self.model}"


def normalise_model(name: str) -> str:
    """Hub spelling to the parquet's: ``"Pythia-160M"`` -> ``"Pythia 160M"``, ``"Llama-3-8B-Instruct"`` ->
    ``"Llama 3 8B Instruct"``."""
    return " ".join(name.replace("_", "-").split("-"))


def read_outcomes_parquet(path: str | Path, benchmarks: Sequence[str] | None = None,
                          models: Sequence[str] | None = None) -> list[SampleOutcomes]:
    """Blocks of the processed parquet layout, one per (benchmark, model), in the file's order.

    Args:
        path: the parquet file.
        benchmarks: keep only these benchmarks (default all).
        models: keep only these models (either spelling, see ``normalise_model``; default all).

    Raises:
        OutcomeDataError: a missing column, a score other than 0/1, a repeated (problem, attempt), or a
            filter that keeps nothing (the message names the file).
    """
    path = Path(path)
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise OutcomeDataError(f"{path}: not a readable parquet file ({exc})") from exc
    missing = [c for c in PARQUET_COLUMNS if c not in schema.names]
    if missing:
        raise OutcomeDataError(f"{path}: missing column(s) {missing}; the per-sample outcome layout has "
                               f"{list(PARQUET_COLUMNS)} (one row per sample)")
    table = pq.read_table(path, columns=list(PARQUET_COLUMNS), read_dictionary=["Benchmark", "Model"])
    if benchmarks is not None:
        table = table.filter(pc.is_in(table["Benchmark"].cast(pa.string()), pa.array(list(benchmarks))))
    if models is not None:
        table = table.filter(pc.is_in(table["Model"].cast(pa.string()), pa.array([normalise_model(m) for m in models])))
    if table.num_rows == 0:
        raise OutcomeDataError(f"{path}: no rows for benchmarks={benchmarks!r}, models={models!r}")
    score = table["Score"].to_numpy().astype(np.float64)
    bad = np.flatnonzero(~np.isin(score, (0.0, 1.0)))
    if bad.size:
        raise OutcomeDataError(f"{path}: row {int(bad[0])}: 'Score' is {float(score[bad[0]])}; expected 0 or 1 "
                               f"({bad.size} such rows)")
    bench = _dictionary(table["Benchmark"])
    model = _dictionary(table["Model"])
    bench_codes, model_codes = bench.indices.to_numpy(), model.indices.to_numpy()
    key = bench_codes.astype(np.int64) * len(model.dictionary) + model_codes
    problem = table["Problem Idx"].to_numpy()
    attempt = table["Attempt Idx"].to_numpy()
    present = np.bincount(key)
    keys = np.flatnonzero(present)
    first = np.array([int(np.argmax(key == k)) for k in keys])
    blocks = []
    for block_key in keys[np.argsort(first)]:  # blocks in order of first appearance
        rows = np.flatnonzero(key == block_key)
        name_b = str(bench.dictionary[int(block_key // len(model.dictionary))])
        name_m = str(model.dictionary[int(block_key % len(model.dictionary))])
        blocks.append(_dense_block(path, name_b, name_m, problem[rows], attempt[rows], score[rows] > 0.5))
    return blocks


def _dictionary(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array (unified across chunks) for a string or dictionary column."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    return column.unify_dictionaries().combine_chunks() if column.num_chunks > 1 else column.chunk(0)


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and each row's index into them (a bincount for small non-negative ints)."""
    if values.dtype.kind in "iu" and values.size and 0 <= values.min() and values.max() < 4 * values.size + 1024:
        seen = np.bincount(values) > 0
        return np.flatnonzero(seen), (np.cumsum(seen) - 1)[values]
    uniques, codes = np.unique(values, return_inverse=True)
    return uniques, codes.reshape(-1).astype(np.int64)


def _dense_block(source: Path | str, benchmark: str, model: str, problem: np.ndarray, attempt: np.ndarray,
                 correct: np.ndarray) -> SampleOutcomes:
    """``[P, N]`` matrix of one block from flat (problem, attempt, correct) rows."""
    problem_ids, p_code = _codes(problem)
    attempts, a_code = _codes(attempt)
    cell = p_code * attempts.size + a_code
    if np.bincount(cell, minlength=problem_ids.size * attempts.size).max() > 1:
        raise OutcomeDataError(f"{source}: {benchmark} / {model}: a (Problem Idx, Attempt Idx) pair appears twice")
    per_problem = np.bincount(p_code, minlength=problem_ids.size)
    if (per_problem == attempts.size).all():  # every problem has every attempt (the released files)
        rank = a_code
    else:  # attempts ranked within each problem, so a problem with fewer samples fills its first columns
        order = np.lexsort((attempt, p_code))
        rank = np.empty(order.size, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(per_problem)[:-1]])
        rank[order] = np.arange(order.size) - np.repeat(starts, per_problem)
    matrix = np.zeros((problem_ids.size, int(per_problem.max())), dtype=bool)
    matrix[p_code, rank] = correct
    return SampleOutcomes(benchmark, model, problem_ids, matrix, per_problem.astype(np.int64))


def outcomes_from_rows(rows: Iterable[dict], benchmark: str, model: str, source: str) -> SampleOutcomes:
    """A block from monkey_business rows (``is_corrects`` per problem; ``orig_dset_idx`` as the id if present)."""
    ids, lists = [], []
    for index, row in enumerate(rows):
        values = row.get("is_corrects")
        if not isinstance(values, list):
            raise OutcomeDataError(f"{source}: row {index}: 'is_corrects' must be a list of booleans (one per sample), "
                                   f"got {type(values).__name__}")
        ids.append(row.get("orig_dset_idx", index) if row.get("orig_dset_idx") is not None else index)
        lists.append(np.asarray(values, dtype=bool))
    if not lists:
        raise OutcomeDataError(f"{source}: no rows")
    if len(set(ids)) != len(ids):
        ids = list(range(len(lists)))
    n = np.array([v.size for v in lists], dtype=np.int64)
    matrix = np.zeros((len(lists), int(n.max())), dtype=bool)
    for p, values in enumerate(lists):
        matrix[p, : values.size] = values
    order = np.argsort(np.asarray(ids), kind="stable")
    return SampleOutcomes(benchmark, normalise_model(model), np.asarray(ids)[order], matrix[order], n[order])


def _read_json_rows(path: Path) -> list[dict]:
    text = path.read_text()
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else data.get("rows", data.get("data", [data]))
    except json.JSONDecodeError:
        rows = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise OutcomeDataError(f"{path}:{line_no}: not JSON ({exc.msg})") from exc
        return rows


def read_monkey_business(task: str, models: Sequence[str], data: str | Path | None = None) -> list[SampleOutcomes]:
    """monkey_business configs ``{task}_{model}`` from a local copy or the hub.

    Args:
        task: ``MATH``, ``GSM8K``, ``CodeContests`` or ``MiniF2F-MATH``.
        models: hub spelling (``Pythia-160M``, ``Gemma-2B``, ``Llama-3-8B-Instruct``).
        data: a directory holding ``{task}_{model}.json`` (or ``.jsonl``) files, or one such file when
            ``models`` has one entry; ``None`` loads from the hub.

    Raises:
        DataUnavailableError: the hub cannot be reached (the message says how to pass ``--data``).
        OutcomeDataError: a local file without ``is_corrects`` lists.
    """
    blocks = []
    for model in models:
        config = f"{task}_{model}"
        if data is None:
            dataset = load_hub_dataset(HUB_NAME, config, split="test",
                                       local_hint=f"--data DIR holding {config}.json (the config's file from the "
                                                  f"dataset repo), or the processed per-sample parquet")
            rows = dataset.select_columns([c for c in ("is_corrects", "orig_dset_idx") if c in dataset.column_names])
            blocks.append(outcomes_from_rows(rows, task, model, f"hub:{HUB_NAME}/{config}"))
            continue
        path = Path(data)
        if path.is_dir():
            found = [path / f"{config}{suffix}" for suffix in (".json", ".jsonl") if (path / f"{config}{suffix}").is_file()]
            if not found:
                raise OutcomeDataError(f"{path}: no {config}.json or {config}.jsonl (monkey_business layout)")
            path = found[0]
        blocks.append(outcomes_from_rows(_read_json_rows(path), task, model, str(path)))
    return blocks


def stack_counts(blocks: Sequence[SampleOutcomes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Samples and correct counts of several blocks on the union of their problems.

    Returns:
        ``n [M, P]``, ``c [M, P]`` (0 where a block lacks the problem) and ``problem_ids [P]``.
    """
    problem_ids = np.unique(np.concatenate([b.problem_ids for b in blocks]))
    n = np.zeros((len(blocks), problem_ids.size), dtype=np.int64)
    c = np.zeros_like(n)
    for m, block in enumerate(blocks):
        where = np.searchsorted(problem_ids, block.problem_ids)
        n[m, where] = block.n_samples
        c[m, where] = block.n_correct
    return n, c, problem_ids
