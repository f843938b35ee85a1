"""Final-answer extraction and equivalence for math, built on math-verify.

``answer_key`` gives a canonical string per answer so that equivalent answers (``0.5``,
``\\frac{1}{2}``, ``1/2``) fall in one majority-vote bucket; ``is_equivalent`` is the full
math-verify check used for correctness labels.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _math_verify():
    """``(parse, verify, extraction configs)``; math-verify loads sympy (~1 s), so on first use only."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    return parse, verify, (LatexExtractionConfig(), ExprExtractionConfig())


@lru_cache(maxsize=65536)
def _parse(text: str) -> tuple:
    parse, _, configs = _math_verify()
    try:
        return tuple(parse(text, extraction_config=configs))
    except Exception:  # math-verify can raise on pathological input; no answer then
        return ()


def answer_key(text: str | None) -> str | None:
    """Canonical string of the final answer in ``text``, or None when none can be extracted.

    Examples:
        >>> answer_key("so the answer is \\\\boxed{0.5}") == answer_key("The answer is 1/2")
        True
        >>> answer_key("I do not know") is None
        True
    """
    if not text:
        return None
    parsed = _parse(text)
    if not parsed:
        return None
    return str(_canonical(parsed[0])).replace(" ", "")


def _canonical(value):
    """Exact rationals for decimals (``0.75`` -> ``3/4``, ``18.0`` -> ``18``) so equal answers share a key."""
    import sympy

    if isinstance(value, sympy.Float):
        return sympy.nsimplify(value, rational=True)
    return value


def is_equivalent(text: str | None, reference: str | None) -> bool:
    """Whether the final answer in ``text`` equals ``reference`` (math-verify semantics)."""
    if not text or reference is None:
        return False
    gold, guess = _parse(reference), _parse(text)
    if not gold or not guess:
        return False
    try:
        return bool(_math_verify()[1](list(gold), list(guess)))
    except Exception:
        return False


def reference_from_solution(solution: str) -> str | None:
    """The last ``\\boxed{...}`` content of a MATH-style solution, or after ``####`` (GSM8K style)."""
    if "####" in solution:
        return solution.rsplit("####", 1)[1].strip().replace(",", "")
    start = solution.rfind("\\boxed")
    if start < 0:
        return None
    brace = solution.find("{", start)
    if brace < 0:
        return None
    depth = 0
    for position in range(brace, len(solution)):
        if solution[position] == "{":
            depth += 1
        elif solution[position] == "}":
            depth -= 1
            if depth == 0:
                return solution[brace + 1 : position]
    return None
