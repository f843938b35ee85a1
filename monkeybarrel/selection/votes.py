"""Selection by test voting (CodeMonkeys), with an optional model choice among the top few.

Votes are a verifier column that counts, or gives the share of, the generated tests a candidate
passes (e.g. ``generated_tests``). Per problem, candidates are ranked by (most votes, shortest
text, then the usual tie rule); without a model the first is chosen. Candidates without votes rank
last; a problem where none has votes goes to its shortest candidate. With ``llm_top_k >= 2``, the
top ``llm_top_k`` distinct texts are shown to a model together with the problem, and the model's
pick is taken: one forward pass, reading the next-token probabilities of the candidate numbers
after "The correct solution is Solution " (CodeMonkeys' "model selection" ablation, with a
distribution instead of a parsed reply so a small model cannot answer out of format). Problems
whose top candidates are one distinct text skip the model.

The problem text comes from ``SelectionData.problem_texts`` when present; without it the model
sees only the candidates.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.models import load_pretrained
from ..core.selection_data import SelectionData
from .base import SELECTORS, Selector

CHOICE_PROMPT = (
    "{problem}\n\nHere are {k} candidate solutions.\n\n{solutions}\n\n"
    "Which solution is correct? Answer with its number."
)
ANSWER_PREFIX = "The correct solution is Solution "


@SELECTORS.register("test_voting")
class TestVoting(Selector):
    """Most test votes wins; ties go to the shortest text; optionally a model picks among the top few.

    Args:
        verifier: the score column holding each candidate's test votes (required).
        llm_top_k: 0 or 1 = no model; k >= 2 = a model chooses among the top k distinct candidates.
        model: the choosing model (``smollm2-135m-instruct``, a local HF directory or hub id).
        max_solution_chars: each candidate's text is cut to this many characters in the prompt.
        num_threads: torch CPU threads (torch's default when None).

    Attributes (after ``select``):
        llm_choices_: problem index -> (candidate rows shown, probabilities of each) for problems
            the model decided.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, verifier: str | None = None, llm_top_k: int = 0, model: str = "smollm2-135m-instruct",
                 max_solution_chars: int = 2000, num_threads: int | None = None) -> None:
        self.verifier = verifier
        self.llm_top_k = llm_top_k
        self.model = model
        self.max_solution_chars = max_solution_chars
        self.num_threads = num_threads

    def fit(self, data: SelectionData, labels: np.ndarray | None = None) -> "TestVoting":
        super().fit(data, labels)
        if self.verifier is None:
            raise ValueError("test_voting needs the option `verifier`: the score column with the test votes")
        if self.verifier not in data.verifiers:
            raise ValueError(f"test_voting: verifier {self.verifier!r} is not among the scores {list(data.verifiers)}")
        if int(self.llm_top_k) < 0:
            raise ValueError(f"llm_top_k must be >= 0, got {self.llm_top_k}")
        return self

    def decision_function(self, data: SelectionData) -> np.ndarray:
        """``[n]`` votes; ``-inf`` where the verifier gave none (e.g. no tests could be written).

        Such candidates rank last, yet stay selectable: a problem without any votes goes to its
        shortest candidate, as in CodeMonkeys where every candidate then ties at zero votes.
        """
        votes = data.verifier_scores(self.verifier).astype(np.float64)
        return np.where(np.isnan(votes), -np.inf, votes)

    def ranking(self, data: SelectionData) -> list[np.ndarray]:
        """Per problem, its candidate rows best first: votes desc, text length asc, tiebreak asc; NaN votes last."""
        votes = data.verifier_scores(self.verifier).astype(np.float64)
        lengths = np.array([len(t) if isinstance(t, str) else np.iinfo(np.int64).max for t in data.texts]
                           ) if data.texts is not None else np.zeros(data.n_candidates, np.int64)
        missing = np.isnan(votes)
        order = np.lexsort((data.tiebreak, lengths, -np.nan_to_num(votes, nan=-np.inf), missing, data.groups))
        bounds = np.searchsorted(data.groups[order], np.arange(data.n_problems + 1))
        return [order[bounds[g]:bounds[g + 1]] for g in range(data.n_problems)]

    def select(self, data: SelectionData) -> np.ndarray:
        """``[n_problems]`` chosen row per problem (-1 when a problem has no candidates)."""
        chosen = np.full(data.n_problems, -1, dtype=np.int64)
        self.llm_choices_: dict[int, tuple[list[int], list[float]]] = {}
        for group, rows in enumerate(self.ranking(data)):
            if rows.size:
                chosen[group] = rows[0]
                shortlist = self._shortlist(data, rows)
                if int(self.llm_top_k) >= 2 and len(shortlist) >= 2:
                    probabilities = self.choose(self._problem_text(data, group), [data.texts[r] for r in shortlist])
                    self.llm_choices_[group] = (list(map(int, shortlist)), probabilities.tolist())
                    chosen[group] = shortlist[int(np.argmax(probabilities))]
        return chosen

    def choose(self, problem: str, solutions: Sequence[str]) -> np.ndarray:
        """Probabilities (summing to 1) that the model names each of ``solutions`` as correct."""
        import torch

        model, tokenizer = self._load()
        listed = "\n\n".join(f"Solution {i + 1}:\n{text[: self.max_solution_chars]}"
                             for i, text in enumerate(solutions))
        content = CHOICE_PROMPT.format(problem=problem.strip(), k=len(solutions), solutions=listed)
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                               tokenize=False) + ANSWER_PREFIX
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        number_ids = [tokenizer.encode(str(i + 1), add_special_tokens=False)[0] for i in range(len(solutions))]
        with torch.inference_mode():
            logits = model(**ids).logits[0, -1].float()
        picked = torch.softmax(logits[number_ids], dim=0)
        return picked.numpy()

    def _shortlist(self, data: SelectionData, rows: np.ndarray) -> list[int]:
        if data.texts is None:
            return []
        votes = data.verifier_scores(self.verifier)
        seen, shortlist = set(), []
        for row in rows:
            text = data.texts[row]
            if isinstance(text, str) and text not in seen and not np.isnan(votes[row]):
                seen.add(text)
                shortlist.append(int(row))
            if len(shortlist) == int(self.llm_top_k):
                break
        return shortlist

    @staticmethod
    def _problem_text(data: SelectionData, group: int) -> str:
        texts = getattr(data, "problem_texts", None)
        return str(texts[group]) if texts is not None else "Solve the programming problem."

    def _load(self):
        if getattr(self, "_model", None) is None:
            self._tokenizer, self._model = load_pretrained(self.model, num_threads=self.num_threads)
        return self._model, self._tokenizer
