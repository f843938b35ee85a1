"""Weaver: the label model recovers known verifier accuracies, and selection matches an ensemble told the truth."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sklearn.base import clone

from monkeybarrel.core.groups import group_argmax
from monkeybarrel.core.metrics import selection_accuracy
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.selection.weaver import (ScoreNormalizer, WeaverModel, WeaverSelector, bin_indicators, describe_fit,
                                           fit_latent_class, majority_column)

# Heterogeneous verifiers: strong, weak, one worse than chance (index 8), one missing on 60 % of rows (index 3).
TPR = np.array([0.90, 0.85, 0.80, 0.70, 0.65, 0.60, 0.58, 0.65, 0.30, 0.75])
FPR = np.array([0.20, 0.30, 0.10, 0.40, 0.35, 0.45, 0.50, 0.20, 0.60, 0.45])
MISSING = np.array([0.1, 0.1, 0.1, 0.6, 0.1, 0.2, 0.1, 0.1, 0.1, 0.3])


def latent_class_data(prior: float = 0.3, problems: int = 1000, candidates: int = 20, seed: int = 0):
    """Votes drawn from the label model's own assumptions: Y ~ Bern(prior), votes independent given Y."""
    rng = np.random.default_rng(seed)
    n = problems * candidates
    y = rng.random(n) < prior
    votes = np.where(y[:, None], rng.random((n, TPR.size)) < TPR, rng.random((n, TPR.size)) < FPR).astype(float)
    votes[rng.random(votes.shape) < MISSING] = np.nan
    keys = pa.table({"problem_id": np.repeat([f"p{i}" for i in range(problems)], candidates),
                     "generator_id": ["g"] * n, "sample_index": np.tile(np.arange(candidates), problems)})
    data = SelectionData.build(keys, votes, tuple(f"v{j}" for j in range(TPR.size)))
    return data, y


def naive_bayes_selection(data: SelectionData, tpr: np.ndarray, fpr: np.ndarray, prior: float) -> np.ndarray:
    """Per-problem argmax of the posterior log-odds under the given rates (ties: smallest tiebreak)."""
    tpr, fpr = np.clip(tpr, 1e-3, 1 - 1e-3), np.clip(fpr, 1e-3, 1 - 1e-3)
    positive, negative = (data.scores == 1).astype(float), (data.scores == 0).astype(float)
    log_odds = np.log(prior / (1 - prior)) + positive @ np.log(tpr / fpr) + negative @ np.log((1 - tpr) / (1 - fpr))
    return group_argmax(log_odds, data.groups, data.n_problems, data.tiebreak)


def assert_recovers(data: SelectionData, y: np.ndarray, tpr: np.ndarray, fpr: np.ndarray, prior: float) -> None:
    """The issue's bar: rates within 0.05 of the truth, selection within 1 point of the true-rate ensemble."""
    error = max(np.max(np.abs(tpr - TPR)), np.max(np.abs(fpr - FPR)))
    assert error < 0.05, f"estimated rates off by up to {error:.3f}"
    truth = selection_accuracy(naive_bayes_selection(data, TPR, FPR, y.mean()), y)
    estimated = selection_accuracy(naive_bayes_selection(data, tpr, fpr, prior), y)
    assert estimated >= truth - 0.01, f"selection {estimated:.3f} vs {truth:.3f} with the true rates"


@pytest.mark.parametrize("prior", [0.3, 0.12, 0.85])
def test_label_model_recovers_rates_and_selects_like_the_truth(prior: float):
    data, y = latent_class_data(prior)
    selector = WeaverSelector(majority_verifier=False, tie_break="index").fit(data)
    model = selector.model_
    assert model.converged_ and model.n_iter_ < model.max_iter and not model.dropped_
    assert abs(model.prior_ - y.mean()) < 0.03
    assert_recovers(data, y, model.tpr_, model.fpr_, model.prior_)
    # the selector's own choice is the posterior argmax of its estimates
    expected = naive_bayes_selection(data, model.tpr_, model.fpr_, model.prior_)
    assert np.array_equal(selector.select(data), expected)


def test_the_bar_fails_for_uniform_and_random_weights():
    data, y = latent_class_data()
    with pytest.raises(AssertionError):  # uniform weights: every verifier "70 % accurate" (= vote counting)
        assert_recovers(data, y, np.full(TPR.size, 0.7), np.full(TPR.size, 0.3), 0.5)
    rng = np.random.default_rng(3)
    for _ in range(5):
        with pytest.raises(AssertionError):
            assert_recovers(data, y, rng.uniform(0.05, 0.95, TPR.size), rng.uniform(0.05, 0.95, TPR.size), 0.5)
    # and the selection gap alone is larger than a point for the uniform vote count
    truth = selection_accuracy(naive_bayes_selection(data, TPR, FPR, y.mean()), y)
    uniform = selection_accuracy(naive_bayes_selection(data, np.full(TPR.size, 0.7), np.full(TPR.size, 0.3), 0.5), y)
    assert uniform < truth - 0.01


def test_missing_scores_are_abstains_not_negative_votes():
    data, y = latent_class_data()
    model = WeaverModel().fit(data.scores)
    assert abs(model.tpr_[3] - TPR[3]) < 0.05  # 60 % missing: as a "no" vote its TPR would look like ~0.28
    as_negative = WeaverModel().fit(np.nan_to_num(data.scores, nan=0.0))
    assert abs(as_negative.tpr_[3] - TPR[3]) > 0.2


def test_fit_latent_class_returns_the_mirror_guarded_solution():
    data, y = latent_class_data(prior=0.5, problems=300)
    fit = fit_latent_class(data.scores)
    assert fit["converged"] and np.sum(fit["tpr"] - fit["fpr"]) > 0
    assert np.corrcoef(fit["posterior"], y)[0, 1] > 0.5


def test_degenerate_verifiers_are_dropped_with_plain_reasons_and_copies_share_a_vote():
    data, y = latent_class_data(problems=200)
    X = data.scores
    extra = np.column_stack([np.ones(len(y)), np.full(len(y), np.nan), X[:, 0], np.random.default_rng(99).random(len(y))])
    model = WeaverModel().fit(np.column_stack([X, extra]))
    m = X.shape[1]
    assert model.dropped_ == {m: "constant: every score is 1", m + 1: "no scores: missing on every candidate"}
    assert np.isnan(model.tpr_[m:m + 2]).all() and np.all(model.weights_[:, m:m + 2] == 0)
    # an exact copy of column 0 is kept, and the two share one vote; the random column is near random
    assert model.dependence_[m + 2][0] == 0 and model.dependence_[0][0] == m + 2
    assert np.allclose(model.dependence_weights_[[0, m + 2]], 0.5, atol=0.02)
    assert model.near_random_[m + 3] and not model.near_random_[:m].any()
    notes = describe_fit(model, [f"v{j}" for j in range(m + 4)])
    assert f"dropped v{m}: constant: every score is 1" in notes
    assert any(note.startswith(f"down-weighted v{m + 2} to 0.5") and "votes like v0" in note for note in notes)
    assert any(note.startswith(f"v{m + 3} is near random") for note in notes)


def test_fewer_than_three_usable_verifiers_fall_back_to_vote_counting():
    X = np.array([[1, 0], [1, 1], [0, 0], [0, 1]], dtype=float)
    with pytest.warns(UserWarning, match="at least 3"):
        model = WeaverModel().fit(X)
    assert model.fallback_ == "vote_count"
    assert np.array_equal(np.argsort(-model.decision_function(X), kind="stable")[:1], [1])


def test_sklearn_contract_and_nan_input():
    data, _ = latent_class_data(problems=100)
    model = WeaverModel()
    assert clone(model).get_params() == model.get_params()
    assert not [k for k in vars(model) if k.endswith("_")]
    fitted = model.fit(data.scores)
    proba = fitted.predict_proba(data.scores)
    assert proba.shape == (data.n_candidates, 2) and np.allclose(proba.sum(axis=1), 1)
    assert np.array_equal(fitted.predict(data.scores), (proba[:, 1] > 0.5).astype(int))
    all_missing = np.full((3, data.scores.shape[1]), np.nan)  # a candidate nobody scored gets the prior
    assert np.allclose(fitted.predict_proba(all_missing)[:, 1], fitted.prior_)
    with pytest.raises(ValueError, match="expecting 10 features"):
        fitted.predict_proba(data.scores[:, :3])
    with pytest.raises(ValueError, match="infinity"):
        WeaverModel().fit(np.array([[np.inf, 0, 1]]))
    with pytest.raises(ValueError, match="threshold"):
        WeaverModel(threshold=1.5).fit(data.scores)


def test_quantile_normalisation_keeps_discrete_splits_and_cutoffs_match_the_transform():
    rng = np.random.default_rng(0)
    X = np.column_stack([(rng.random(500) < 0.7).astype(float),  # 70 % ones
                         (rng.random(500) < 0.2).astype(float),  # 20 % ones
                         rng.normal(0, 5, 500)])  # unbounded logits
    X[::7, 2] = np.nan
    normalizer = ScoreNormalizer("quantile").fit(X)
    Z = normalizer.transform(X)
    for j in (0, 1):  # 0 stays below the median split, 1 above, whatever the balance
        assert np.all(Z[X[:, j] == 0, j] < 0.5) and np.all(Z[X[:, j] == 1, j] >= 0.5)
    assert np.isnan(Z[::7, 2]).all() and np.nanmin(Z) >= 0 and np.nanmax(Z) <= 1
    for level in (0.05, 0.3, 0.5, 0.77, 0.95):  # votes by raw cutoff == normalised score >= level
        cut = normalizer.cutoffs(level)
        with np.errstate(invalid="ignore"):
            assert np.array_equal(X >= cut, Z >= level - 1e-12)
    minmax = ScoreNormalizer("weaver").fit(np.column_stack([X[:, 0], X[:, 2]]))
    out = minmax.transform(np.column_stack([X[:, 0], X[:, 2]]))
    assert np.array_equal(out[:, 0], X[:, 0])  # already in [0, 1]: left alone, as in the reference
    assert np.nanmin(out[:, 1]) == 0 and np.nanmax(out[:, 1]) == 1


def test_more_bins_use_more_of_continuous_scores():
    rng = np.random.default_rng(1)
    problems, candidates = 300, 20
    n = problems * candidates
    y = rng.random(n) < 0.3
    X = rng.normal(size=(n, 8)) + y[:, None] * np.linspace(0.3, 1.2, 8)
    keys = pa.table({"problem_id": np.repeat(np.arange(problems).astype(str), candidates), "generator_id": ["g"] * n,
                     "sample_index": np.tile(np.arange(candidates), problems)})
    data = SelectionData.build(keys, X, tuple(f"v{j}" for j in range(8)))
    two = selection_accuracy(WeaverSelector(majority_verifier=False, model=WeaverModel(n_bins=2)).fit(data).select(data), y)
    auto = WeaverSelector(majority_verifier=False).fit(data)  # the default: 8 equal-count bins per verifier here
    assert np.all(auto.model_.bins_ == 8) and selection_accuracy(auto.select(data), y) >= two
    six = WeaverSelector(majority_verifier=False, model=WeaverModel(n_bins=6)).fit(data)
    assert six.model_.theta_.shape == (2, 6, 8) and np.allclose(six.model_.theta_.sum(axis=1), 1)
    assert selection_accuracy(six.select(data), y) >= two
    order = np.argsort(np.linspace(0.3, 1.2, 8))  # estimated separation follows the true one
    gaps = six.model_.tpr_ - six.model_.fpr_
    assert np.corrcoef(gaps, np.linspace(0.3, 1.2, 8)[order])[0, 1] > 0.9


def test_majority_pseudo_verifier_marks_the_modal_answers():
    keys = pa.table({"problem_id": ["a", "a", "a", "b", "b"], "generator_id": ["g"] * 5, "sample_index": [0, 1, 2, 0, 1]})
    data = SelectionData.build(keys, answers=["1", "2", "1", None, "7"])
    assert majority_column(data).tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]


def test_dev_labels_only_of_dev_problems_are_used():
    data, y = latent_class_data(problems=200)
    selector = WeaverSelector(majority_verifier=False, dev_fraction=0.1, model=WeaverModel(threshold="search"), seed=4)
    assert selector.uses_labels and not WeaverSelector().uses_labels
    fitted = selector.fit(data, y)
    dev = fitted.dev_rows_
    assert len(set(data.problem_id[dev])) == 20  # 10 % of the problems, whole problems
    assert abs(fitted.model_.prior_ - y[dev].mean()) < 1e-9
    assert fitted.model_.threshold_ in np.round(np.arange(0.05, 0.951, 0.05), 2)
    changed = y.copy()
    changed[~dev] = ~changed[~dev]  # labels outside the dev problems must not matter
    refit = WeaverSelector(majority_verifier=False, dev_fraction=0.1, model=WeaverModel(threshold="search"), seed=4).fit(data, changed)
    assert np.array_equal(refit.model_.weights_, fitted.model_.weights_)
    with pytest.raises(ValueError, match="needs labels"):
        WeaverModel(threshold="search").fit(data.scores)


def test_label_free_weaver_refuses_labels():
    data, y = latent_class_data(problems=20)
    with pytest.raises(TypeError, match="label-free"):
        WeaverSelector().fit(data, y)
    with pytest.raises(TypeError, match="needs labels"):
        WeaverSelector(dev_fraction=0.2).fit(data)


def test_ties_go_to_the_higher_mean_score_then_the_index():
    keys = pa.table({"problem_id": ["p"] * 3 + ["q"] * 3, "generator_id": ["g"] * 6, "sample_index": [0, 1, 2] * 2})
    rng = np.random.default_rng(0)
    base = rng.normal(size=(200, 4)) + 1.5 * (rng.random(200) < 0.3)[:, None]  # filler rows with signal
    # the first 6 rows: candidates 1 and 2 of each problem share every vote but differ in raw scores
    scores = base.copy()
    scores[:6] = [[3, 3, 3, 3], [1.0, 1.1, 1.0, 1.0], [1.2, 1.3, 1.2, 1.2], [-3, -3, -3, -3], [1, 1, 1, 1], [1, 1, 1, 1]]
    keys = pa.concat_tables([keys, pa.table({"problem_id": [f"x{i}" for i in range(194)], "generator_id": ["g"] * 194,
                                             "sample_index": [0] * 194})])
    data = SelectionData.build(keys, scores, ("a", "b", "c", "d"))
    selector = WeaverSelector(majority_verifier=False, model=WeaverModel(n_bins=2)).fit(data)  # binary votes
    scores_p = selector.decision_function(data)[:6]
    assert scores_p[0] == scores_p[1] == scores_p[2]  # all above every cutoff: the same votes
    chosen = selector.select(data)
    assert chosen[0] == 0  # candidate 0 has the highest raw scores
    assert chosen[1] == 4  # q: 4 and 5 are identical, the smaller sample index wins
    index_rule = WeaverSelector(majority_verifier=False, tie_break="index", model=WeaverModel(n_bins=2)).fit(data).select(data)
    assert index_rule[0] == 0 and index_rule[1] == 4


def test_bin_indicators_partition_the_observed_scores():
    X = np.array([[0.1, np.nan], [0.5, 2.0], [0.9, -1.0]])
    bins = bin_indicators(X, np.array([[0.5, 0.0], [0.8, 1.0]]))
    assert [b.tolist() for b in bins] == [[[1, 0], [0, 0], [0, 1]], [[0, 0], [1, 0], [0, 0]], [[0, 0], [0, 1], [1, 0]]]


def test_weaver_model_passes_sklearn_check_estimator_except_the_documented_checks():
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    from monkeybarrel.selection.weaver import SKLEARN_INAPPLICABLE_CHECKS

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(WeaverModel(), expected_failed_checks=SKLEARN_INAPPLICABLE_CHECKS, on_fail=None)
        normaliser = check_estimator(ScoreNormalizer(), on_fail=None)
    failed = [r["check_name"] for r in results + normaliser if r["status"] == "failed"]
    assert not failed, failed
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert len(passed) >= 40 and "check_estimators_unfitted" in passed and "check_fit_score_takes_y" in passed
    xfailed = {r["check_name"] for r in results if r["status"] == "xfail"}
    assert xfailed <= set(SKLEARN_INAPPLICABLE_CHECKS)


def test_weaver_on_a_plain_matrix_and_problem_ids():
    rng = np.random.default_rng(0)
    y = rng.random(2000) < 0.3
    scores = rng.normal(size=(2000, 6)) + y[:, None]
    scores[rng.random(scores.shape) < 0.1] = np.nan
    problem_ids = np.repeat(np.arange(100), 20)
    data = SelectionData.from_arrays(scores, problem_ids)
    chosen = WeaverSelector(majority_verifier=False).fit_select(data)
    assert chosen.shape == (100,) and np.array_equal(chosen // 20, np.arange(100))  # row indices of each problem
    assert y[chosen].mean() > 0.9 and data.verifiers == tuple(f"v{j}" for j in range(6))
    assert data.sample_index[:3].tolist() == [0, 1, 2] and set(data.generator_id) == {""}
    with pytest.raises(ValueError, match="one entry per row"):
        SelectionData.from_arrays(scores, problem_ids[:5])


def test_nested_parameters_and_clone_keep_the_estimator_contract():
    selector = WeaverSelector().set_params(model__n_bins=4, model__n_strata=2, dev_fraction=0.0)
    assert selector.get_params()["model__n_bins"] == 4 and selector.model.n_strata == 2
    copy = clone(selector)
    assert copy.get_params()["model__n_bins"] == 4 and copy.model is not selector.model
    assert WeaverModel().get_params()["n_bins"] == "auto" and WeaverModel().get_params()["threshold"] is None
    data, y = latent_class_data(problems=60)
    fitted = copy.fit(data)
    assert fitted.model_.bins_.max() <= 4 and not hasattr(selector, "model_")
    with pytest.raises(ValueError, match="binary votes"):
        WeaverModel(n_bins=4, threshold=0.5).fit(data.scores)
