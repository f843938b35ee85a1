"""GSM8K (Cobbe et al., 2021): grade-school math word problems, answers after ``####``."""

from __future__ import annotations

from ..core.records import Problem
from .base import TASKS, MathAnswerTask, take
from ..core.files import TaskDataError, read_records
from ..core.hub import load_hub_dataset
from ..kits.math_answers import reference_from_solution

HUB_DATASET = ("openai/gsm8k", "main")


@TASKS.register("gsm8k")
class GSM8KTask(MathAnswerTask):
    """GSM8K from a local JSONL/Parquet file (fields ``question``, ``answer``) or the hub.

    Args:
        path: local file in the hub schema; when None, ``datasets.load_dataset(dataset, subset)``.
        split: hub split (``test`` or ``train``).
        num_problems: take the first N.
        seed: unused (the order is the file's).
        dataset: hub dataset id (or a local dataset directory ``datasets`` can load).
        subset: hub configuration name (``main``; ``socratic`` has step-by-step questions).
    """

    name = "gsm8k"

    def __init__(self, path: str | None = None, split: str = "test", num_problems: int | None = None,
                 seed: int = 0, dataset: str = HUB_DATASET[0], subset: str | None = HUB_DATASET[1]) -> None:
        self.path, self.split, self.num_problems = path, split, num_problems
        self.dataset, self.subset = dataset, subset

    def load(self) -> list[Problem]:
        if self.path is not None:
            rows = ((line, rec) for line, rec in read_records(self.path, required=("question", "answer")))
            source = self.path
        else:
            rows = enumerate(_load_hub(self.dataset, self.subset, self.split), start=1)
            source = f"hub:{self.dataset}"
        problems = []
        for line, record in rows:
            if self.num_problems is not None and len(problems) >= self.num_problems:
                break
            reference = reference_from_solution(record["answer"])
            if not reference:  # would be stored as None and every sample counted wrong
                raise TaskDataError(f"{source}:{line}: 'answer' has no final answer after '####' "
                                    f"(got {record['answer'][-60:]!r})")
            problems.append(
                Problem(
                    problem_id=f"gsm8k-{self.split}-{line - 1:05d}",
                    task=self.name,
                    prompt=self.make_prompt(record["question"]),
                    reference_answer=reference,
                    metadata={"solution": record["answer"], "source": source, "line": line},
                )
            )
        return take(problems, self.num_problems)


def _load_hub(dataset: str, subset: str | None, split: str):
    return load_hub_dataset(dataset, subset, split, local_hint="set task.path to a local JSONL or Parquet file with "
                            "fields question and answer")
