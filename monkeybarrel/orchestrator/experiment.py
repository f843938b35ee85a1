"""``Experiment``: the Python handle on a stored experiment (tables, selection data, metrics)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from ..core.config import ExperimentConfig
from ..core.keys import align_rows, key_codes
from ..core.records import ANSWER_SCHEMA, CANDIDATE_KEY, LABEL_SCHEMA, Problem, problems_from_table
from ..core.selection_data import SelectionData
from .store.experiment_store import ExperimentStore, StoreError


class Experiment:
    """Read access to an experiment directory.

    Examples:
        >>> exp = Experiment("runs/demo")                    # doctest: +SKIP
        >>> exp.candidates().to_pandas().head()              # doctest: +SKIP
        >>> data, labels = exp.selection_data(), exp.labels_array()   # doctest: +SKIP
    """

    def __init__(self, directory: str | Path) -> None:
        if not (Path(directory) / "config.yaml").is_file():
            raise StoreError(f"{directory}: not an experiment directory (no config.yaml)")
        self.store = ExperimentStore(directory)
        self.config = ExperimentConfig.from_yaml(self.store.config_path)
        self._candidates: pa.Table | None = None
        self._memo: dict[str, Any] = {}  # aligned arrays, computed once per handle

    @property
    def directory(self) -> Path:
        return self.store.root

    def manifest(self) -> dict[str, Any]:
        return self.store.read_manifest()

    def problems(self) -> list[Problem]:
        table = self.store.read_table("problems")
        return problems_from_table(table) if table is not None else []

    def candidates(self) -> pa.Table:
        """Candidates of the configured generators, sorted by key (read once per handle; ``refresh`` re-reads)."""
        if self._candidates is None:
            table = self.store.candidates()
            ids = pa.array([g.id for g in self.config.generators])
            table = table.filter(pa.compute.is_in(table.column("generator_id"), value_set=ids))
            self._candidates = table.sort_by([(k, "ascending") for k in CANDIDATE_KEY])
        return self._candidates

    def refresh(self) -> None:
        """Forget cached tables (after the store changed)."""
        self._candidates = None
        self._memo.clear()

    def scores(self) -> tuple[np.ndarray, tuple[str, ...], pa.Table]:
        """``[n, m]`` scores aligned with ``candidates()`` for the configured verifiers, their names, failures."""
        if "scores" not in self._memo:
            self._memo["scores"] = self._read_scores()
        return self._memo["scores"]

    def _read_scores(self) -> tuple[np.ndarray, tuple[str, ...], pa.Table]:
        keys = self.candidates().select(list(CANDIDATE_KEY))
        names = tuple(v.name for v in self.config.verifiers)
        matrix = np.full((keys.num_rows, len(names)), np.nan)
        failures = []
        for column, name in enumerate(names):
            table = self.store.scores(name)
            if table.num_rows == 0:
                continue
            matrix[:, column] = _align(keys, table, "score")
            failed = table.filter(pa.compute.is_valid(table.column("error")))
            if failed.num_rows:
                failures.append(failed)
        failures_table = pa.concat_tables(failures) if failures else None
        return matrix, names, failures_table

    def answers(self) -> pa.Table:
        return self.store.read_table("answers", ANSWER_SCHEMA)

    def labels(self) -> pa.Table:
        return self.store.read_table("labels", LABEL_SCHEMA)

    def selection_data(self) -> SelectionData:
        """Label-free data for selectors: keys, scores, answers (aligned with ``candidates()``)."""
        candidates = self.candidates()
        keys = candidates.select(list(CANDIDATE_KEY))
        matrix, names, _ = self.scores()
        answers = self.answers_array()
        problem_texts = {p.problem_id: p.prompt or (p.messages[-1]["content"] if p.messages else "")
                         for p in self.problems()}
        return SelectionData.build(keys, matrix, names, answers, texts=candidates.column("text").to_pylist(),
                                   problem_texts=problem_texts)

    def answers_array(self) -> np.ndarray:
        """``[n]`` object canonical answers aligned with ``candidates()`` (None = no answer)."""
        if "answers" not in self._memo:
            keys = self.candidates().select(list(CANDIDATE_KEY))
            self._memo["answers"] = _align(keys, self.answers(), "answer", fill=None)
        return self._memo["answers"]

    def labels_array(self) -> np.ndarray:
        """``[n]`` bool correctness aligned with ``candidates()`` (ground truth: evaluation only; False where unlabelled)."""
        return self.labels_and_mask()[0]

    def labels_and_mask(self) -> tuple[np.ndarray, np.ndarray]:
        """``([n] bool correct, [n] bool labelled)`` aligned with ``candidates()``."""
        if "labels" not in self._memo:
            keys = self.candidates().select(list(CANDIDATE_KEY))
            labels = self.labels()
            if labels.num_rows == 0:
                self._memo["labels"] = np.zeros(keys.num_rows, bool), np.zeros(keys.num_rows, bool)
            else:
                values = _align(keys, labels.append_column("__labelled", pa.array(np.ones(labels.num_rows, bool))),
                                ["correct", "__labelled"], fill=False)
                self._memo["labels"] = values[0].astype(bool), values[1].astype(bool)
        return self._memo["labels"]

    def selections(self) -> pa.Table | None:
        return self.store.read_table("selections")

    def metrics(self) -> dict[str, Any]:
        path = self.store.root / "metrics.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except json.JSONDecodeError as exc:
            raise StoreError(f"{path}: damaged ({exc.msg} at line {exc.lineno}); `monkeybarrel report "
                             f"{self.store.root}` writes it again") from None


def _align(keys: pa.Table, table: pa.Table, column: str | list[str], fill: Any = np.nan) -> Any:
    """Values of ``table[column]`` in the row order of ``keys`` (``fill`` where absent); a list of
    columns gives a list of arrays from one alignment.

    ``table`` must have unique keys; aligned by sorted key codes (``core.keys``; no Python loop over rows).
    """
    names = [column] if isinstance(column, str) else column
    target, source = key_codes(keys, table)
    rows = align_rows(target, source)
    joined = table.select(names).take(pa.array(rows, mask=rows < 0))
    out = []
    for name in names:
        values = joined.column(name)
        if fill is None:
            out.append(np.asarray(values.to_pylist(), dtype=object))
        else:
            out.append(np.asarray(pa.compute.fill_null(values, fill).to_numpy(zero_copy_only=False)))
    return out[0] if isinstance(column, str) else out
