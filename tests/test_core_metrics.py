from itertools import combinations
from math import comb

import numpy as np
import pyarrow as pa
import pytest

from monkeybarrel.core.groups import group_argmax
from monkeybarrel.core.metrics import coverage_curve, default_ks, majority_at_k, pass_at_k, selection_accuracy
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.selection.base import SELECTORS
from monkeybarrel.selection.majority import MajorityVote
from monkeybarrel.selection.oracle import Oracle


def test_pass_at_k_matches_brute_force_enumeration():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 9))
        labels = rng.random(n) < 0.4
        for k in range(1, n + 1):
            brute = np.mean([labels[list(s)].any() for s in combinations(range(n), k)])
            assert pass_at_k(np.array([n]), np.array([labels.sum()]), k)[0] == pytest.approx(brute, abs=1e-12)
    assert np.isnan(pass_at_k(np.array([2]), np.array([1]), 3)[0])
    assert pass_at_k(np.array([100]), np.array([0]), 50)[0] == 0.0
    assert pass_at_k(np.array([1000]), np.array([1]), 1)[0] == pytest.approx(1e-3)
    assert 1 - comb(10 - 3, 4) / comb(10, 4) == pytest.approx(pass_at_k(np.array([10]), np.array([3]), 4)[0])


def _data(problem_ids, answers, scores=None, sample_index=None):
    n = len(problem_ids)
    keys = pa.table({"problem_id": problem_ids, "generator_id": ["g"] * n,
                     "sample_index": list(range(n)) if sample_index is None else list(sample_index)})
    matrix = None if scores is None else np.asarray(scores, dtype=float)[:, None]
    return SelectionData.build(keys, matrix, ("v",) if scores is not None else (), answers)


def test_majority_at_n_equals_majority_selection_and_estimates_by_subsets():
    rng = np.random.default_rng(1)
    problem_ids, answers, labels = [], [], []
    for p in range(40):
        for _ in range(8):
            a = int(rng.integers(0, 3))
            problem_ids.append(f"p{p}")
            answers.append(None if rng.random() < 0.1 else str(a))
            labels.append(answers[-1] == "0")
    data, labels = _data(problem_ids, answers), np.array(labels)
    chosen = MajorityVote().fit(data).select(data)
    exact = majority_at_k(data.answers, labels, data.groups, data.tiebreak, data.n_problems, 8)
    assert exact == pytest.approx(selection_accuracy(chosen, labels))
    # k = 1 majority is a random sample's answer being correct (abstentions count as wrong)
    one = majority_at_k(data.answers, labels, data.groups, data.tiebreak, data.n_problems, 1, trials=4000)
    assert one == pytest.approx(labels.mean(), abs=0.02)


def test_majority_ties_and_abstentions():
    # answers 'a','b' tie 2-2: the tie goes to the candidate with the smallest sample index ('b' at index 0)
    data = _data(["p"] * 5, ["b", "a", "a", "b", None])
    chosen = MajorityVote().fit(data).select(data)
    assert chosen.tolist() == [0]
    # no answers at all: majority abstains and the problem counts as wrong
    data = _data(["p", "p"], [None, None])
    assert MajorityVote().select(data).tolist() == [-1]
    assert selection_accuracy(np.array([-1]), np.array([True, True])) == 0.0


def test_selection_is_invariant_to_row_order():
    rng = np.random.default_rng(2)
    problem_ids = [f"p{i // 6}" for i in range(60)]
    answers = [str(int(x)) for x in rng.integers(0, 3, 60)]
    data = _data(problem_ids, answers)
    original = {(data.problems[g], int(data.sample_index[r])) for g, r in enumerate(MajorityVote().select(data))}
    perm = rng.permutation(60)
    shuffled = _data([problem_ids[i] for i in perm], [answers[i] for i in perm], sample_index=perm)
    permuted = {(shuffled.problems[g], int(shuffled.sample_index[r])) for g, r in enumerate(MajorityVote().select(shuffled))}
    assert permuted == original and len(original) == 10


def test_group_argmax_skips_nan_and_breaks_ties_by_rank():
    values = np.array([np.nan, 1.0, 1.0, 0.5, np.nan])
    groups = np.array([0, 0, 0, 1, 2])
    tiebreak = np.array([0, 2, 1, 3, 4])
    assert group_argmax(values, groups, 3, tiebreak).tolist() == [2, 3, -1]


def test_label_free_selectors_cannot_be_given_labels():
    data = _data(["p", "p"], ["1", "2"])
    with pytest.raises(TypeError, match="label-free"):
        MajorityVote().fit(data, np.array([True, False]))
    with pytest.raises(TypeError, match="needs labels"):
        Oracle().fit(data)
    assert Oracle().fit(data, np.array([False, True])).select(data).tolist() == [1]
    assert "majority" in SELECTORS.names()


def test_coverage_curve_and_default_ks():
    assert default_ks(16) == [1, 2, 4, 8, 16]
    assert default_ks(6) == [1, 2, 4, 6]
    labels = np.array([1, 0, 0, 0, 0, 0, 0, 0], dtype=bool)
    groups = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    curve = coverage_curve(labels, groups, 2, [1, 4])
    assert curve[1] == pytest.approx(0.125) and curve[4] == pytest.approx(0.5)


def test_verifier_quality_reports_failures_top1_and_auroc():
    import pyarrow as pa

    from monkeybarrel.core.selection_data import SelectionData
    from monkeybarrel.orchestrator.stages.evaluate import verifier_quality

    keys = pa.table({"problem_id": ["a", "a", "b", "b"], "generator_id": ["g"] * 4, "sample_index": [0, 1, 0, 1]})
    labels = np.array([1, 0, 0, 1])
    scores = np.array([[0.9, 0.1, np.nan],   # "good" ranks every correct row first, "bad" the reverse,
                       [0.2, 0.8, np.nan],   # "dead" failed everywhere
                       [0.3, 0.7, np.nan],
                       [0.6, 0.4, np.nan]])
    data = SelectionData.build(keys, scores, ("good", "bad", "dead"))
    quality = verifier_quality(data, labels)
    assert quality["good"]["failed"] == 0.0 and quality["good"]["auroc"] == 1.0
    assert quality["good"]["top1_hits"].tolist() == [1.0, 1.0]
    assert quality["bad"]["top1_hits"].tolist() == [0.0, 0.0] and quality["bad"]["auroc"] == 0.0
    assert quality["dead"]["failed"] == 1.0 and quality["dead"]["top1_hits"].tolist() == [0.0, 0.0]
    assert quality["dead"]["auroc"] is None


def test_majority_at_k_breaks_ties_like_the_majority_selector():
    """A tie-heavy case: every k-subset's majority by the selector's rule (ties to the smallest sample
    index), enumerated exactly, against the Monte Carlo curve; a random tie-break is far off."""
    from itertools import combinations

    rng = np.random.default_rng(3)
    problem_ids, answers, labels = [], [], []
    for p in range(30):
        pool = ["a", "b"] if p % 3 else ["a", "b", "c"]
        for i in range(6):
            problem_ids.append(f"p{p}")
            answers.append(pool[int(rng.integers(0, len(pool)))] if i else "b")  # sample 0 carries a wrong answer
            labels.append(answers[-1] == "a")
    data, labels = _data(problem_ids, answers), np.array(labels)
    for k in (2, 3, 4):
        exact = []
        for g in range(data.n_problems):
            rows = np.flatnonzero(data.groups == g)
            hits = []
            for subset in combinations(rows, k):
                sub = data.subset(np.array(subset))
                chosen = MajorityVote().select(sub)
                hits.append(bool(labels[np.array(subset)][chosen[0]]))
            exact.append(np.mean(hits))
        estimate = majority_at_k(data.answers, labels, data.groups, data.tiebreak, data.n_problems, k, trials=3000)
        assert estimate == pytest.approx(np.mean(exact), abs=0.01), k
