"""GSM8K (Cobbe et al., 2021): grade-school math word problems, answers after ``####``."""

from __future__ import annotations

from ..core.records import Problem
from .base import TASKS, MathTask, take
from .files import read_records
from .math_answers import reference_from_solution

HUB_DATASET = ("openai/gsm8k", "main")


@TASKS.register("gsm8k")
class GSM8KTask(MathTask):
    """GSM8K from a local JSONL/Parquet file (fields ``question``, ``answer``) or the hub.

    Args:
        path: local file in the hub schema; when None, ``datasets.load_dataset("openai/gsm8k", "main")``.
        split: hub split (``test`` or ``train``).
        num_problems: take the first N.
        seed: unused (the order is the file's).
    """

    name = "gsm8k"

    def __init__(self, path: str | None = None, split: str = "test", num_problems: int | None = None,
                 seed: int = 0) -> None:
        self.path, self.split, self.num_problems = path, split, num_problems

    def load(self) -> list[Problem]:
        if self.path is not None:
            rows = ((line, rec) for line, rec in read_records(self.path, required=("question", "answer")))
            source = self.path
        else:
            rows = enumerate(_load_hub(self.split), start=1)
            source = f"hub:{HUB_DATASET[0]}"
        problems = []
        for line, record in rows:
            if self.num_problems is not None and len(problems) >= self.num_problems:
                break
            problems.append(
                Problem(
                    problem_id=f"gsm8k-{self.split}-{line - 1:05d}",
                    task=self.name,
                    prompt=self.make_prompt(record["question"]),
                    reference_answer=reference_from_solution(record["answer"]),
                    metadata={"solution": record["answer"], "source": source, "line": line},
                )
            )
        return take(problems, self.num_problems)


def _load_hub(split: str):
    try:
        from datasets import load_dataset
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("loading GSM8K from the hub needs `pip install monkeybarrel[hub]`") from exc
    return load_dataset(*HUB_DATASET, split=split)
