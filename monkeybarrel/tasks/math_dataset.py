"""MATH-style problems with ``\\boxed{}`` answers (e.g. MATH500 from the hub or a local copy)."""

from __future__ import annotations

from ..core.records import Problem
from .base import TASKS, MathAnswerTask, take
from ..core.files import TaskDataError, read_records
from ..core.hub import load_hub_dataset
from ..kits.math_answers import reference_from_solution

HUB_DATASET = "HuggingFaceH4/MATH-500"


@TASKS.register("math")
class MathTask(MathAnswerTask):
    """MATH/MATH500: fields ``problem`` plus ``answer`` or a ``solution`` whose last ``\\boxed{}`` is the answer.

    Args:
        path: local JSONL/Parquet file; when None, ``datasets.load_dataset(dataset)``.
        dataset: hub dataset id (default ``HuggingFaceH4/MATH-500``).
        split: hub split.
        num_problems: take the first N.
        seed: unused.
    """

    name = "math"
    instruction = "Solve the problem. Put the final answer in \\boxed{}."

    def __init__(self, path: str | None = None, split: str = "test", num_problems: int | None = None,
                 seed: int = 0, dataset: str = HUB_DATASET) -> None:
        self.path, self.split, self.num_problems, self.dataset = path, split, num_problems, dataset

    def load(self) -> list[Problem]:
        if self.path is not None:
            rows = read_records(self.path, required=("problem",))
            source = self.path
        else:
            rows = enumerate(load_hub_dataset(self.dataset, split=self.split, local_hint=(
                "set task.path to a local JSONL or Parquet file with fields problem and answer (or solution)")), start=1)
            source = f"hub:{self.dataset}"
        problems = []
        for line, record in rows:
            if self.num_problems is not None and len(problems) >= self.num_problems:
                break
            reference = record.get("answer") or reference_from_solution(record.get("solution") or "")
            if reference is None:
                raise TaskDataError(f"{source}:{line}: no 'answer' field and no \\boxed{{}} in 'solution'")
            problems.append(
                Problem(
                    problem_id=str(record.get("unique_id") or f"math-{self.split}-{line - 1:05d}"),
                    task=self.name,
                    prompt=self.make_prompt(record["problem"]),
                    reference_answer=str(reference),
                    metadata={k: record[k] for k in ("level", "subject", "type") if record.get(k) is not None},
                )
            )
        return take(problems, self.num_problems)
