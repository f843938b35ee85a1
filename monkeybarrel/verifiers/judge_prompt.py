"""The LLM-as-judge prompt and the Yes/No read-out shared by the local and the endpoint judges.

A judge sees the problem (without its reference answer) and one candidate solution, and is asked
a Yes/No question; the score is the probability of "Yes" at the first token of its reply. The
template is a ``str.format`` string with the placeholders ``{problem}`` and ``{solution}``.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from ..core.records import Candidate, Problem

DEFAULT_TEMPLATE = (
    "Here is a math problem and a proposed solution.\n\n"
    "Problem:\n{problem}\n\n"
    "Proposed solution:\n{solution}\n\n"
    "Is the final answer of the proposed solution correct? Answer Yes or No."
)
"""The default user turn: ``{problem}`` is the problem's prompt, ``{solution}`` the candidate's text."""

YES_WORDS = ("Yes", "yes", "YES")
NO_WORDS = ("No", "no", "NO")


def check_template(template: str) -> str:
    """Return ``template`` if it has both placeholders and no others; raise ValueError naming the problem."""
    try:
        template.format(problem="", solution="")
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"prompt_template: only {{problem}} and {{solution}} may be used ({exc!r})") from None
    for field in ("{problem}", "{solution}"):
        if field not in template:
            raise ValueError(f"prompt_template must contain the placeholder {field}")
    return template


def problem_text(problem: Problem) -> str:
    """The question as the generator saw it: the last user message, or ``prompt``."""
    users = [m["content"] for m in problem.messages if m.get("role") == "user"]
    return users[-1] if users else (problem.prompt or "")


def judge_messages(problem: Problem, solution: str, template: str, system_prompt: str | None) -> list[dict[str, str]]:
    """The chat sent to the judge for one candidate."""
    user = {"role": "user", "content": template.format(problem=problem_text(problem), solution=solution.strip())}
    return [{"role": "system", "content": system_prompt}, user] if system_prompt else [user]


def judgeable(candidate: Candidate) -> bool:
    """Candidates with text that did not fail; others get NaN (the judge abstains)."""
    return candidate.text is not None and candidate.finish_reason != "error" and bool(candidate.text.strip())


def yes_probability(yes_logprobs: Iterable[float], no_logprobs: Iterable[float], normalize: bool) -> float:
    """P("Yes") from the log-probabilities of the Yes-like and No-like first tokens.

    Args:
        yes_logprobs: log-probabilities (natural log) of every token that spells Yes.
        no_logprobs: the same for No.
        normalize: True gives P(yes) / (P(yes) + P(no)); False gives P(yes) over the whole vocabulary.

    Returns:
        A probability in [0, 1], or NaN when neither Yes nor No has any probability mass.
    """
    yes = math.fsum(math.exp(v) for v in yes_logprobs)
    no = math.fsum(math.exp(v) for v in no_logprobs)
    if not normalize:
        return yes if yes > 0 or no > 0 else math.nan
    total = yes + no
    return yes / total if total > 0 else math.nan


def word_variants(words: Sequence[str]) -> tuple[str, ...]:
    """The words with and without a leading space (tokenizers spell a reply's first word either way)."""
    return tuple(dict.fromkeys([*words, *(" " + w for w in words)]))
