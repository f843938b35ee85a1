"""Answer frequency, cheap heuristics, the Verifier contract and check_verifier."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monkeybarrel.core.config import ConfigError
from monkeybarrel.core.plugins import build_plugin
from monkeybarrel.core.records import Candidate, Problem
from monkeybarrel.verifiers.base import VERIFIERS, Verifier
from monkeybarrel.verifiers.checks import CHECKS, PROBLEM, candidates, check_verifier
from monkeybarrel.verifiers.judge_prompt import check_template, yes_probability

def make(kind: str, name: str, **options) -> Verifier:
    return VERIFIERS.get(kind)(name, **options)


CHEAP = {"answer_frequency": {}, "has_answer": {}, "length": {}, "repetition": {}}


@pytest.mark.parametrize("name", sorted(CHEAP))
def test_cheap_verifiers_pass_check_verifier(name: str):
    check_verifier(make(name, name, **CHEAP[name]))


def test_answer_frequency_groups_equivalent_answers_and_counts_every_candidate():
    texts = ["The answer is 0.5", "so \\boxed{\\frac{1}{2}}", "The answer is 1/2", "The answer is 3", "no idea", None]
    batch = candidates(texts)
    batch[4] = replace(batch[4], finish_reason="stop")
    verifier = make("answer_frequency", "freq")
    assert verifier.score(PROBLEM, batch).tolist() == pytest.approx([3 / 6, 3 / 6, 3 / 6, 1 / 6, 0.0, 0.0])
    truncated = [replace(c, finish_reason="length") if c.sample_index == 0 else c for c in batch]
    assert verifier.score(PROBLEM, truncated)[:2].tolist() == pytest.approx([0.0, 2 / 6])
    lenient = make("answer_frequency", "freq", finished_only=False)
    assert lenient.score(PROBLEM, truncated)[0] == pytest.approx(3 / 6)


def test_heuristics_score_answers_length_and_loops():
    batch = candidates(["The answer is 7.", "I think it is seven", "a b c d a b c d a b c d a b c d"])
    assert make("has_answer", "h").score(PROBLEM, batch).tolist() == [1.0, 0.0, 0.0]
    short_first = make("length", "l").score(PROBLEM, batch)
    assert short_first.tolist() == [-4.0, -5.0, -16.0]
    assert make("length", "l", prefer="longer").score(PROBLEM, batch).tolist() == [4.0, 5.0, 16.0]
    repetition = make("repetition", "r").score(PROBLEM, batch)
    assert repetition[0] == 1.0 and repetition[1] == 1.0 and repetition[2] == pytest.approx(4 / 13)
    failed = [replace(batch[0], text=None, finish_reason="error")]
    scores, errors = make("length", "l").score_safely(PROBLEM, failed)
    assert np.isnan(scores[0]) and errors == ["no score"]


def test_a_crashing_verifier_is_a_recorded_failure():
    class Crashes(Verifier):
        def score(self, problem, batch):
            raise RuntimeError("judge server unreachable")

    scores, errors = Crashes("c").score_safely(PROBLEM, candidates())
    assert np.isnan(scores).all() and all("judge server unreachable" in e for e in errors)

    class WrongShape(Verifier):
        def score(self, problem, batch):
            return np.zeros(len(batch) + 1)

    scores, errors = WrongShape("w").score_safely(PROBLEM, candidates())
    assert np.isnan(scores).all() and "expected (5,)" in errors[0]


def test_label_free_verifiers_never_see_the_reference():
    seen = []

    class Peeks(Verifier):
        def score(self, problem, batch):
            seen.append(problem.reference_answer)
            return np.zeros(len(batch))

    class Labels(Peeks):
        uses_reference = True

    Peeks("p").score_safely(PROBLEM, candidates())
    Labels("l").score_safely(PROBLEM, candidates())
    assert seen == [None, "7"]


def test_check_verifier_catches_a_verifier_that_reads_the_reference_or_the_order():
    class Cheats(Verifier):
        uses_reference = False

        def score(self, problem, batch):
            return np.array([float(problem.reference_answer is not None)] * len(batch))

    check_verifier(Cheats("c"))  # score_safely hides the reference, so even this one cannot cheat

    class OrderDependent(Verifier):
        def score(self, problem, batch):
            return np.arange(len(batch), dtype=float)

    with pytest.raises(AssertionError, match="check 'permutation'"):
        check_verifier(OrderDependent("o"))

    class Flaky(Verifier):
        calls = 0

        def score(self, problem, batch):
            Flaky.calls += 1
            return np.full(len(batch), float(Flaky.calls))

    with pytest.raises(AssertionError, match="check 'deterministic'"):
        check_verifier(Flaky("f"), skip=[c for c in CHECKS if c != "deterministic"])


def test_config_errors_name_the_option():
    with pytest.raises(ConfigError, match=r"verifiers\[1\].options: unknown option\(s\) \['nope'\]"):
        build_plugin(VERIFIERS, "length", "verifiers[1]", name="l", nope=1)
    with pytest.raises(ConfigError, match="prefer must be"):
        build_plugin(VERIFIERS, "length", "verifiers[0]", name="l", prefer="wider")
    with pytest.raises(ValueError, match="placeholder {solution}"):
        check_template("Is {problem} right?")
    with pytest.raises(ValueError, match="only {problem} and {solution}"):
        check_template("{problem} {solution} {reference}")


def test_yes_probability_normalises_over_yes_and_no():
    assert yes_probability([np.log(0.3), np.log(0.1)], [np.log(0.2)], True) == pytest.approx(0.4 / 0.6)
    assert yes_probability([np.log(0.3)], [np.log(0.2)], False) == pytest.approx(0.3)
    assert np.isnan(yes_probability([], [], True))
