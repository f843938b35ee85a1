"""Smoothie's estimator on data drawn from its own generative model, with known qualities."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from scipy.stats import spearmanr

from monkeybarrel.selection.smoothie import (Smoothie, candidate_deltas, cell_sq_distances,
                                             pairwise_sq_distances, theta_from_deltas, triplet_deltas)

THETA = np.array([0.4, 3.0, 1.0, 6.0, 0.7, 2.0])
"""True canonical parameters (quality) of 6 voters; voter 0 is the worst, voter 3 the best."""


def generative_sample(n: int = 300, d: int = 32, theta: np.ndarray = THETA, seed: int = 0):
    """λ_i(x) = y(x) + e_i, e_i ~ N(0, I_d / (2 θ_i)); labels: error below the median error."""
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(n, 1, d))
    errors = rng.normal(size=(n, len(theta), d)) / np.sqrt(2 * theta)[None, :, None]
    sq_error = (errors ** 2).sum(-1)
    return (y + errors).astype(np.float32), sq_error < np.median(sq_error)


def recovery(quality: np.ndarray, labels: np.ndarray, theta: np.ndarray = THETA) -> tuple[float, float, float]:
    """(Spearman of estimated vs true quality, routing accuracy, random-routing accuracy).

    ``quality`` is ``[m]`` (higher = better); ties route to the smallest voter index.
    """
    rho = spearmanr(quality, theta).statistic
    routed = labels[:, int(np.argmax(quality))].mean()
    return float(rho), float(routed), float(labels.mean())


def passes(quality: np.ndarray, labels: np.ndarray) -> bool:
    rho, routed, random = recovery(quality, labels)
    return bool(rho >= 0.9 and routed > random)


def test_triplet_closed_form_equals_the_mean_over_all_pairs():
    rng = np.random.default_rng(3)
    for m in (3, 4, 7):
        D = rng.random((m, m))
        D = D + D.T
        np.fill_diagonal(D, 0.0)
        brute = [np.mean([0.5 * (D[i, j] + D[i, k] - D[j, k])
                          for j, k in itertools.combinations([v for v in range(m) if v != i], 2)]) for i in range(m)]
        np.testing.assert_allclose(triplet_deltas(D), brute)


def test_global_recovers_the_true_ranking_and_beats_random_routing():
    X, labels = generative_sample()
    model = Smoothie("global").fit(X)
    rho, routed, random = recovery(model.theta_, labels)
    assert rho >= 0.9
    assert routed > random + 0.2
    assert model.predict().tolist() == [3]
    # δ̂ estimates d / (2θ) itself, not only its order
    np.testing.assert_allclose(model.delta_, 32 / (2 * THETA), rtol=0.15)
    assert np.isclose(model.theta_.sum(), 1.0)


@pytest.mark.filterwarnings("ignore:An input array is constant")
def test_the_recovery_check_fails_for_an_estimator_with_constant_scores():
    X, labels = generative_sample()
    assert passes(Smoothie("global").fit(X).theta_, labels)
    assert not passes(np.ones(len(THETA)), labels)          # constant: no ranking, routes to voter 0
    assert not passes(-Smoothie("global").fit(X).theta_, labels)  # reversed ranking


def test_local_variant_tracks_input_dependent_quality():
    rng = np.random.default_rng(1)
    n, d, m = 600, 24, 4
    cluster = rng.integers(2, size=n)
    inputs = np.eye(2)[cluster] * 5 + rng.normal(size=(n, 2))
    theta = np.where(cluster[:, None] == 0, [4.0, 0.5, 1.0, 1.0], [0.5, 4.0, 1.0, 1.0])  # the best voter flips
    y = rng.normal(size=(n, 1, d))
    X = y + rng.normal(size=(n, m, d)) / np.sqrt(2 * theta)[:, :, None]
    truth = theta.argmax(1)
    global_hits = (Smoothie("global").fit(X).predict() == truth).mean()
    local = Smoothie("local", n_neighbors=20).fit(X, inputs)
    local_hits = (local.predict() == truth).mean()
    assert local.delta_.shape == (n, m) and local.neighbors_.shape == (n, 20)
    assert (local.neighbors_ == np.arange(n)[:, None]).any(1).all()   # each input is its own neighbour
    assert local_hits > 0.95 and global_hits < 0.6
    # train-time regime: unseen inputs are routed by their nearest fitted inputs
    new_inputs = np.array([[5.0, 0.0], [0.0, 5.0]])
    assert local.predict(new_inputs).tolist() == [0, 1]


def test_local_k1_is_the_per_input_medoid_and_equals_candidate_deltas():
    X, _ = generative_sample(n=50, d=8)
    P = pairwise_sq_distances(X)
    k1 = Smoothie("local", n_neighbors=1).fit(X)
    np.testing.assert_allclose(k1.delta_, triplet_deltas(P), rtol=1e-6)
    np.testing.assert_array_equal(k1.predict(), P.sum(-1).argmin(-1))
    flat = candidate_deltas(X.reshape(-1, X.shape[2]), np.repeat(np.arange(50), X.shape[1]), 50)
    np.testing.assert_allclose(flat.reshape(50, -1), k1.delta_, rtol=1e-4, atol=1e-4)


def test_several_samples_per_voter_use_every_cross_pair_and_missing_cells_are_nan():
    rng = np.random.default_rng(0)
    E = rng.normal(size=(7, 5))
    problem = np.array([0, 0, 0, 0, 1, 1, 1])
    voter = np.array([0, 0, 1, 2, 0, 1, 1])
    P = cell_sq_distances(E, problem, voter, 2, 3)
    expected = np.mean([((E[a] - E[2]) ** 2).sum() for a in (0, 1)])
    assert np.isclose(P[0, 0, 1], expected) and np.isclose(P[0, 1, 0], expected)
    assert np.isnan(P[1, 0, 2]) and np.isnan(P[1, 2, 1])
    assert np.isnan(triplet_deltas(P[1])).all()            # only 2 voters present: not estimable
    assert np.isfinite(triplet_deltas(P[0])).all()


def test_nonpositive_deltas_do_not_flip_the_routing():
    # voter 0 sits almost on top of voters 1 and 2, which are far apart: its δ̂ is negative
    D = np.array([[0.0, 1.0, 1.0, 5.0], [1.0, 0.0, 4.0, 6.0], [1.0, 4.0, 0.0, 6.0], [5.0, 6.0, 6.0, 0.0]])
    delta = triplet_deltas(D)
    assert delta[0] <= 0 < delta[1:].min()
    assert Smoothie("global").fit_distances(D[None]).predict().tolist() == [0]
    assert np.nanargmax(theta_from_deltas(delta, 1)) == 0   # θ̂ is clipped, not sign-flipped


def test_bad_arguments_name_the_problem():
    X, _ = generative_sample(n=10, d=4)
    with pytest.raises(ValueError, match="at least 3 voters"):
        Smoothie("global").fit(X[:, :2])
    with pytest.raises(ValueError, match="variant"):
        Smoothie("medium").fit(X)
    with pytest.raises(ValueError, match="needs input_embeddings"):
        Smoothie("local", n_neighbors=3).fit(X)
    with pytest.raises(ValueError, match=r"input_embeddings must be \[10, e\]"):
        Smoothie("local", n_neighbors=3).fit(X, np.zeros((9, 2)))
    with pytest.raises(ValueError, match="n_inputs, n_voters, dim"):
        Smoothie("global").fit(X[0])
    with pytest.raises(NotFittedError):
        Smoothie().predict()


def test_exclude_self_uses_the_nearest_other_inputs_and_new_inputs_get_theta():
    from sklearn.base import clone

    rng = np.random.default_rng(1)
    n, d, m = 400, 24, 4
    cluster = rng.integers(2, size=n)
    inputs = np.eye(2)[cluster] * 5 + rng.normal(size=(n, 2))
    theta = np.where(cluster[:, None] == 0, [4.0, 0.5, 1.0, 1.0], [0.5, 4.0, 1.0, 1.0])
    X = rng.normal(size=(n, 1, d)) + rng.normal(size=(n, m, d)) / np.sqrt(2 * theta)[:, :, None]
    model = Smoothie("local", n_neighbors=20, exclude_self=True)
    assert clone(model).get_params() == {"variant": "local", "n_neighbors": 20, "exclude_self": True}
    model.fit(X, inputs)
    assert model.neighbors_.shape == (n, 20)
    assert not (model.neighbors_ == np.arange(n)[:, None]).any()  # the 20 nearest *other* inputs
    assert (model.predict() == theta.argmax(1)).mean() > 0.95
    # the window without the input is what the input-inclusive window would be with its own row dropped
    inclusive = Smoothie("local", n_neighbors=21).fit(X, inputs)
    same = np.array([set(a) == set(b) - {i} for i, (a, b) in enumerate(zip(model.neighbors_, inclusive.neighbors_))])
    assert same.mean() > 0.95
    # θ for new inputs: from their nearest fitted inputs, normalised
    new = model.thetas(np.array([[5.0, 0.0], [0.0, 5.0]]))
    assert new.shape == (2, m) and np.allclose(new.sum(axis=1), 1) and new.argmax(axis=1).tolist() == [0, 1]
    with pytest.raises(ValueError, match="needs input_embeddings"):
        Smoothie("local", exclude_self=True).fit(X)
    with pytest.raises(ValueError, match="local variant only"):
        Smoothie("global", exclude_self=True).fit(X)
