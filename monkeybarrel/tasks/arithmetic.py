"""Built-in, seeded arithmetic word problems: a demo and test task that needs no files.

Problem ``i`` depends only on ``(seed, difficulty, i)``, so asking for more problems keeps the
earlier ones unchanged (resume-safe). ``difficulty`` is the number of arithmetic steps (1-6);
numbers grow with it.
"""

from __future__ import annotations

import random

from ..core.records import Problem
from .base import TASKS, MathAnswerTask, take

_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam"]
_ITEMS = ["apples", "marbles", "stickers", "books", "coins", "pencils", "cookies", "stamps", "shells", "cards"]


@TASKS.register("arithmetic")
class ArithmeticTask(MathAnswerTask):
    """Seeded multi-step word problems over +, -, x.

    Args:
        num_problems: how many problems.
        seed: base seed.
        difficulty: number of steps after the starting amount (1 = one addition/subtraction).
        path, split: unused (accepted for a uniform task signature).
    """

    name = "arithmetic"

    def __init__(self, num_problems: int | None = 20, seed: int = 0, difficulty: int = 2,
                 path: str | None = None, split: str = "test") -> None:
        if not 1 <= int(difficulty) <= 6:
            raise ValueError(f"difficulty must be between 1 and 6, got {difficulty}")
        if path is not None:
            raise ValueError("the arithmetic task is generated and takes no path")
        self.num_problems = 20 if num_problems is None else num_problems
        self.seed = seed
        self.difficulty = int(difficulty)

    def load(self) -> list[Problem]:
        return take([self._problem(i) for i in range(self.num_problems)], self.num_problems)

    def _problem(self, index: int) -> Problem:
        rng = random.Random(f"arithmetic/{self.seed}/{self.difficulty}/{index}")
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        high = 10 * self.difficulty
        amount = rng.randint(2, high)
        sentences = [f"{name} has {amount} {item}."]
        for _ in range(self.difficulty):
            operation = rng.choice(["add", "sub", "mul"] if amount < 200 else ["add", "sub"])
            if operation == "add":
                value = rng.randint(1, high)
                amount += value
                sentences.append(f"A friend gives {name} {value} more {item}.")
            elif operation == "sub" and amount > 1:
                value = rng.randint(1, amount - 1)
                amount -= value
                sentences.append(f"{name} gives away {value} {item}.")
            else:
                value = rng.randint(2, 4)
                amount *= value
                times = {2: "doubles", 3: "triples", 4: "quadruples"}[value]
                sentences.append(f"Then {name} {times} the number of {item}.")
        question = " ".join(sentences) + f" How many {item} does {name} have now?"
        return Problem(
            problem_id=f"arithmetic-d{self.difficulty}-{index:05d}",
            task=self.name,
            prompt=self.make_prompt(question),
            reference_answer=str(amount),
            metadata={"difficulty": self.difficulty, "question": question},
        )
