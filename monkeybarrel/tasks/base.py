"""The Task protocol and registry.

A task turns a data source into Problems and knows how to read a candidate's final answer
(label-free) and whether it is correct (the ground-truth label, for evaluation only).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from ..core.records import Problem
from ..core.registry import Registry
from ..kits.math_answers import answer_key, is_equivalent

TASKS: Registry["Task"] = Registry("task", package="monkeybarrel.tasks")


class Task(ABC):
    """A source of problems plus answer extraction and correctness checking.

    Subclasses take their options as keyword arguments (from ``task.options`` in the config)
    plus ``path``, ``split``, ``num_problems`` and ``seed``.
    """

    name: str = "task"

    @abstractmethod
    def load(self) -> list[Problem]:
        """The problems, in a stable order (the first N of a larger N are the same problems)."""

    @abstractmethod
    def extract_answer(self, text: str | None) -> str | None:
        """Canonical final answer of a completion (None when absent). Label-free."""

    @abstractmethod
    def is_correct(self, text: str | None, problem: Problem) -> bool:
        """Ground truth: whether the completion solves ``problem``."""

    def extract_answers(self, texts: Sequence[str | None]) -> list[str | None]:
        """Vectorised ``extract_answer`` (override for batch speed-ups)."""
        return [self.extract_answer(text) for text in texts]

    def check(self, texts: Sequence[str | None], problems: Sequence[Problem]) -> list[bool]:
        """Vectorised ``is_correct`` over aligned ``texts`` and ``problems``."""
        return [self.is_correct(text, problem) for text, problem in zip(texts, problems)]


class MathAnswerTask(Task):
    """Shared behaviour of math tasks: math-verify answers, correctness against the reference."""

    instruction = "Solve the problem. End your reply with: The answer is <number>."

    def extract_answer(self, text: str | None) -> str | None:
        return answer_key(text)

    def is_correct(self, text: str | None, problem: Problem) -> bool:
        return is_equivalent(text, problem.reference_answer)

    def make_prompt(self, question: str) -> str:
        return f"{question.strip()}\n\n{self.instruction}"


def take(problems: list[Problem], num_problems: int | None) -> list[Problem]:
    """The first ``num_problems`` problems (all when None)."""
    return problems if num_problems is None else problems[:num_problems]
