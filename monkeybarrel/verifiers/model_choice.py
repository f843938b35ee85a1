"""A model picks among the top few candidates by test votes (CodeMonkeys' "model selection" ablation).

Per problem, the candidates are ranked by an earlier verifier's votes (``core.groups.rank_by_votes``:
most votes, then the shortest text, then (generator_id, sample_index)); the top ``top_k`` distinct
texts with votes are shown to a model together with the problem, and one forward pass reads the
next-token probabilities of the candidate numbers after "The correct solution is Solution " (a
distribution instead of a parsed reply, so a small model cannot answer out of format).

Score: the probability that the model names the candidate's text; when fewer than two distinct texts
qualify, no model runs and the top-ranked candidate's text scores 1 (with no votes at all: the
shortest candidate, as in CodeMonkeys where every candidate then ties at zero votes). Candidates not
shown score 0 (the model gave them no probability). The shortlist and the probabilities are the problem's record. The
selector ``best_single`` with ``verifier: <this name>`` takes the pick.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..core.groups import rank_by_votes
from ..core.models import load_pretrained
from ..core.records import Candidate, Problem
from .base import VERIFIERS, Verifier

CHOICE_PROMPT = (
    "{problem}\n\nHere are {k} candidate solutions.\n\n{solutions}\n\n"
    "Which solution is correct? Answer with its number."
)
ANSWER_PREFIX = "The correct solution is Solution "


@VERIFIERS.register("model_choice")
class ModelChoice(Verifier):
    """Args:
        name: score column.
        votes: the earlier verifier whose scores are the test votes (e.g. a ``generated_tests`` verifier).
        top_k: distinct candidates shown to the model (>= 2).
        model: the choosing model (``smollm2-135m-instruct``, a local HF directory or hub id).
        max_solution_chars: each candidate's text is cut to this many characters in the prompt.
        num_threads: torch CPU threads (torch's default when None).
    """

    scores_whole_problem = True  # the shortlist depends on every candidate of the problem

    def __init__(self, name: str, votes: str, top_k: int = 3, model: str = "smollm2-135m-instruct",
                 max_solution_chars: int = 2000, num_threads: int | None = None) -> None:
        super().__init__(name)
        if int(top_k) < 2:
            raise ValueError(f"top_k must be >= 2, got {top_k}")
        self.votes, self.top_k, self.model = votes, int(top_k), model
        self.max_solution_chars, self.num_threads = max_solution_chars, num_threads
        self._model = self._tokenizer = None

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.votes,)

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        votes, _ = self.provided(problem.problem_id, self.votes)
        texts = [c.text for c in candidates]
        scores = np.zeros(len(candidates))
        if not candidates:
            return scores
        lengths = [len(t) if isinstance(t, str) else np.iinfo(np.int64).max for t in texts]
        keys = sorted(range(len(candidates)), key=lambda i: (candidates[i].generator_id, candidates[i].sample_index))
        tiebreak = np.empty(len(candidates), np.int64)
        tiebreak[keys] = np.arange(len(candidates))
        [order] = rank_by_votes(votes, lengths, np.zeros(len(candidates), np.int64), 1, tiebreak)
        shortlist: list[str] = []
        for row in order.tolist():
            if isinstance(texts[row], str) and texts[row] not in shortlist and not np.isnan(votes[row]):
                shortlist.append(texts[row])
            if len(shortlist) == self.top_k:
                break
        record: dict = {"problem_id": problem.problem_id, "shown": shortlist}
        if len(shortlist) >= 2:
            probabilities = self.choose(problem.prompt or (problem.messages[-1]["content"] if problem.messages else ""),
                                        shortlist)
            by_text = dict(zip(shortlist, probabilities.tolist()))
            record["probabilities"] = probabilities.tolist()
        else:  # nothing to choose between: the top-ranked candidate
            top = order[0]
            by_text = {texts[top]: 1.0} if isinstance(texts[top], str) else {}
            scores[top] = 1.0
        for i, text in enumerate(texts):
            if isinstance(text, str) and text in by_text:
                scores[i] = by_text[text]
        self.keep_record(problem.problem_id, record)
        return scores

    def choose(self, problem: str, solutions: Sequence[str]) -> np.ndarray:
        """Probabilities (summing to 1) that the model names each of ``solutions`` as correct."""
        import torch

        if self._model is None:
            self._tokenizer, self._model = load_pretrained(self.model, num_threads=self.num_threads)
        tokenizer = self._tokenizer
        listed = "\n\n".join(f"Solution {i + 1}:\n{text[: self.max_solution_chars]}" for i, text in enumerate(solutions))
        content = CHOICE_PROMPT.format(problem=(problem or "Solve the programming problem.").strip(), k=len(solutions),
                                       solutions=listed)
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True,
                                               tokenize=False) + ANSWER_PREFIX
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        number_ids = [tokenizer.encode(str(i + 1), add_special_tokens=False)[0] for i in range(len(solutions))]
        with torch.inference_mode():
            logits = self._model(**ids).logits[0, -1].float()
        return torch.softmax(logits[number_ids], dim=0).numpy()

    def close(self) -> None:
        self._model = self._tokenizer = None
