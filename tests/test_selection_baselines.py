"""Baselines (best single, naive ensemble, supervised), the conformance suite, and the label wall."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.metrics import selection_accuracy
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.orchestrator.stages.select import run_select_stage
from monkeybarrel.selection.base import SELECTORS, Selector
from monkeybarrel.selection.baselines import BestSingle, BestSingleLabeled, NaiveEnsemble, Supervised
from monkeybarrel.selection.checks import CHECKS, check_selector, make_data


def graded_data(problems: int = 200, candidates: int = 10, seed: int = 0):
    """Verifiers of known, different quality: v_good >> v_mid > v_noise; v_good on a logit scale."""
    rng = np.random.default_rng(seed)
    n = problems * candidates
    y = rng.random(n) < 0.3
    scores = np.column_stack([rng.normal(size=n) + 0.4 * y, 5 * (rng.normal(size=n) + 2.0 * y),
                              rng.normal(size=n), rng.normal(size=n) + 0.8 * y])
    keys = pa.table({"problem_id": np.repeat([f"p{i:03d}" for i in range(problems)], candidates),
                     "generator_id": ["g"] * n, "sample_index": np.tile(np.arange(candidates), problems)})
    return SelectionData.build(keys, scores, ("v_weak", "v_good", "v_noise", "v_mid")), y


# ---- conformance ---------------------------------------------------------------------------------
OWN = ("weaver", "best_single", "best_single_labeled", "naive_ensemble", "supervised", "majority", "random", "oracle")
"""This issue's selectors and the spine's; other stages' selectors need their own data (generators, test votes)."""


@pytest.mark.parametrize("name", OWN)
def test_every_selector_passes_check_selector(name: str):
    selector = SELECTORS.create(name)
    # random choice draws by row position: by design it neither breaks ties by the rule nor ignores row order
    check_selector(selector, skip=("ties", "permutation") if name == "random" else ())


@pytest.mark.parametrize("options", [{"dev_fraction": 0.3, "model__threshold": "search"}, {"model__n_bins": 4},
                                     {"model__normalize": "weaver", "tie_break": "index"}])
def test_weaver_variants_pass_check_selector(options):
    check_selector(SELECTORS.create("weaver").set_params(**options))  # nested parameters, as configs give them


class _RowOrder(Selector):
    """Broken on purpose: prefers later rows, whatever the candidates are."""

    def __init__(self) -> None:
        pass

    def decision_function(self, data):
        return np.arange(data.n_candidates, dtype=float)


class _Argmin(Selector):
    """Broken on purpose: select ignores its own decision function."""

    def __init__(self) -> None:
        pass

    def decision_function(self, data):
        return data.scores[:, 0].copy()

    def select(self, data):
        return super().select(dataclasses.replace(data, scores=-data.scores))


class _Stateful(Selector):
    """Broken on purpose: __init__ computes state."""

    def __init__(self, k: int = 1) -> None:
        self.k = k
        self.table_ = {}

    def decision_function(self, data):
        return np.zeros(data.n_candidates)


@pytest.mark.parametrize("broken, check", [(_RowOrder(), "permutation"), (_Argmin(), "output"), (_Stateful(), "params")])
def test_check_selector_catches_broken_selectors(broken, check):
    with pytest.raises(AssertionError, match=f"check '{check}'"):
        check_selector(broken, skip=[c for c in CHECKS if c != check])


def test_random_choice_is_caught_by_the_tie_check():
    with pytest.raises(AssertionError, match="check 'ties'"):
        check_selector(SELECTORS.create("random"), skip=("permutation",))


# ---- the label wall ------------------------------------------------------------------------------
def test_selection_data_has_no_label_field():
    names = {f.name for f in dataclasses.fields(SelectionData)}
    assert not names & {"labels", "label", "correct", "y", "reference_answer"}


@pytest.mark.parametrize("name", OWN)
def test_label_free_selectors_refuse_labels_and_label_based_ones_require_them(name: str):
    data, labels = make_data()
    selector = SELECTORS.create(name)
    with pytest.raises(TypeError):
        selector.fit(data, labels) if not selector.uses_labels else selector.fit(data)


def test_the_select_stage_hands_labels_only_to_label_based_selectors():
    data, labels = make_data(n_problems=30)
    config = ExperimentConfig.from_dict({"selectors": [
        {"name": "weaver", "type": "weaver"}, {"name": "weaver dev", "type": "weaver", "options": {"dev_fraction": 0.2}},
        {"name": "best", "type": "best_single"}, {"name": "best (labels)", "type": "best_single_labeled"},
        {"name": "naive", "type": "naive_ensemble"}, {"name": "lr", "type": "supervised"}]})
    _, info = run_select_stage(config, data, labels)
    assert {k: v["uses_labels"] for k, v in info.items()} == {
        "weaver": False, "weaver dev": True, "best": False, "best (labels)": True, "naive": False, "lr": True,
        "random (pass@1)": False, "oracle (coverage)": True}


# ---- behaviour ---------------------------------------------------------------------------------
def test_best_single_picks_the_strongest_verifier_without_labels():
    data, y = graded_data()
    label_free = BestSingle().fit(data)
    assert label_free.verifier_ == "v_good"
    assert label_free.estimated_gap_["v_good"] > label_free.estimated_gap_["v_mid"] > label_free.estimated_gap_["v_weak"]
    assert abs(label_free.estimated_gap_["v_noise"]) < 0.05
    labeled = BestSingleLabeled().fit(data, y)
    assert labeled.verifier_ == "v_good" and labeled.accuracy_["v_good"] == max(labeled.accuracy_.values())
    chosen = labeled.select(data)
    assert selection_accuracy(chosen, y) == pytest.approx(labeled.accuracy_["v_good"])
    named = BestSingle(verifier="v_mid").fit(data)
    assert np.array_equal(named.decision_function(data), data.verifier_scores("v_mid"))
    with pytest.raises(ValueError, match="not in the data"):
        BestSingle(verifier="nope").fit(data)


def test_naive_ensemble_is_the_mean_of_normalised_scores_skipping_missing_ones():
    keys = pa.table({"problem_id": ["a", "a", "b"], "generator_id": ["g"] * 3, "sample_index": [0, 1, 0]})
    scores = np.array([[0.0, 10.0], [1.0, np.nan], [0.5, 20.0]])
    data = SelectionData.build(keys, scores, ("p", "logit"))
    naive = NaiveEnsemble(normalize="minmax").fit(data)
    assert naive.decision_function(data).tolist() == [0.0, 1.0, 0.75]
    assert naive.select(data).tolist() == [1, 2]
    only = NaiveEnsemble(verifiers=["logit"], normalize="minmax").fit(data).decision_function(data)
    assert only[0] == 0.0 and np.isnan(only[1])


def test_supervised_never_scores_a_problem_with_a_model_trained_on_it():
    data, y = graded_data(problems=40)
    seen: list[tuple[set, set]] = []

    class Spy(Supervised):
        def _fit_predict(self, X_train, y_train, X_test):
            seen.append((X_train.shape[0], X_test.shape[0]))
            return super()._fit_predict(X_train, y_train, X_test)

    spy = Spy(n_splits=4)
    folds = []
    from sklearn.model_selection import GroupKFold

    for train, test in GroupKFold(n_splits=4).split(data.scores, y, groups=data.problem_id.astype(str)):
        assert not set(data.problem_id[train]) & set(data.problem_id[test])
        folds.append(test)
    spy.fit(data, y)
    assert len(seen) == 4 and sum(t for _, t in seen) == data.n_candidates  # every candidate scored once, out of fold
    scores = spy.decision_function(data)
    assert np.isfinite(scores).all()
    # changing the labels of one fold's problems does not change that fold's scores
    flipped = y.copy()
    flipped[folds[0]] = ~flipped[folds[0]]
    again = Supervised(n_splits=4).fit(data, flipped).decision_function(data)
    assert np.allclose(again[folds[0]], scores[folds[0]])
    assert not np.allclose(again[folds[1]], scores[folds[1]])


def test_supervised_beats_chance_and_handles_single_class_folds():
    data, y = graded_data()
    supervised = Supervised().fit(data, y)
    assert selection_accuracy(supervised.select(data), y) > selection_accuracy(BestSingle(verifier="v_mid").fit(data).select(data), y)
    none_correct = np.zeros_like(y)
    flat = Supervised().fit(data, none_correct).decision_function(data)
    assert np.all(flat == 0.0)
    with pytest.raises(ValueError, match="n_splits"):
        Supervised(n_splits=1).fit(data, y)


@pytest.mark.parametrize("name", ["oracle", "oracle_routing", "best_generator", "best_single_labeled", "supervised"])
def test_labels_of_the_wrong_length_are_refused_by_every_labelled_selector(name):
    keys = pa.table({"problem_id": ["a", "a", "b", "b"], "generator_id": ["g", "h", "g", "h"], "sample_index": [0, 0, 0, 0]})
    data = SelectionData.build(keys, np.zeros((4, 1)), ("v",))
    with pytest.raises(ValueError, match=r"labels must be \[4\]"):
        SELECTORS.create(name).fit(data, np.ones(3))
