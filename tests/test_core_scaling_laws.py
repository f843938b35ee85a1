from itertools import combinations

import numpy as np
import pytest

from monkeybarrel.core.metrics import pass_at_k
from monkeybarrel.core.scaling_laws import (coverage_at_k, fit_coverage_law, log_spaced_ks, predict_coverage,
                                            samples_for_coverage)


def test_pass_at_k_broadcasts_to_a_problem_by_k_grid():
    n, c, ks = np.array([10, 10, 5]), np.array([0, 3, 5]), np.array([1, 4, 6])
    grid = pass_at_k(n[:, None], c[:, None], ks[None, :])
    for p in range(3):
        for j, k in enumerate(ks):
            assert grid[p, j] == pytest.approx(pass_at_k(n[p:p + 1], c[p:p + 1], int(k))[0], nan_ok=True)
    assert np.isnan(grid[2, 2])  # k = 6 > n = 5
    # small coverages keep their precision (expm1): one success in 10^4 samples
    assert pass_at_k(np.array([10_000]), np.array([1]), 1)[0] == pytest.approx(1e-4, rel=1e-6)


def test_coverage_at_k_equals_brute_force_mean_over_problems_and_skips_short_problems():
    rng = np.random.default_rng(0)
    labels = [rng.random(n) < 0.3 for n in (6, 6, 4)]
    n = np.array([[len(x) for x in labels]])
    c = np.array([[x.sum() for x in labels]])
    ks = np.array([1, 3, 5])
    got = coverage_at_k(n, c, ks)[0]
    for j, k in enumerate(ks):
        per_problem = [np.mean([x[list(s)].any() for s in combinations(range(len(x)), k)]) for x in labels if len(x) >= k]
        assert got[j] == pytest.approx(np.mean(per_problem), abs=1e-12)


def test_fit_recovers_exact_laws_for_many_curves_at_once():
    ks = log_spaced_ks(10_000)
    assert ks[0] == 1 and ks[-1] == 10_000 and np.all(np.diff(ks) > 0)
    a, b = np.array([-7.6, -3.9, -1.3, -0.75]), np.array([-0.18, -0.35, -0.43, -0.46])
    law = fit_coverage_law(ks, predict_coverage(a, b, ks))
    np.testing.assert_allclose(law.a, a, rtol=1e-6)
    np.testing.assert_allclose(law.b, b, rtol=1e-6)
    assert np.all(law.error_mean < 1e-9)
    assert np.all(law.k_max == pytest.approx(10_000))


def test_fit_on_sampled_outcomes_is_close_and_reports_its_error():
    rng = np.random.default_rng(1)
    p = rng.beta(0.2, 4, size=(3, 500))
    n = np.full(p.shape, 2_000)
    c = rng.binomial(n, p)
    ks = log_spaced_ks(2_000)
    curves = coverage_at_k(n, c, ks)
    law = fit_coverage_law(ks, curves)
    assert np.all(law.a < 0) and np.all(law.b < 0)
    assert np.all(law.error_mean < 0.05) and np.all(law.error_std >= 0)
    # the fitted error is what it says: mean |curve - fit| over the fitted points
    np.testing.assert_allclose(law.error_mean, np.abs(curves - law.predict(ks)).mean(axis=1), rtol=1e-9)
    # e^a is the fitted coverage at k = 1, close to the measured pass@1
    np.testing.assert_allclose(np.exp(law.a), curves[:, 0], rtol=0.5)


def test_unfittable_curves_are_nan_not_errors():
    ks = np.array([1, 2, 4, 8])
    curves = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [0.1, 0.2, np.nan, np.nan], [0.1, 0.2, 0.3, 0.4]], dtype=float)
    law = fit_coverage_law(ks, curves)
    assert np.isnan(law.a[:2]).all() and np.isnan(law.b[:2]).all()
    assert np.isfinite(law.a[2:]).all()
    assert law.k_max[2] == 2
    assert np.isnan(samples_for_coverage(law.a, law.b, 0.5)[:2]).all()


def test_samples_for_coverage_inverts_the_law():
    a, b = np.array([-4.0, -1.0, -2.0]), np.array([-0.35, -0.4, 0.1])
    k = samples_for_coverage(a, b, 0.6)
    assert k[0] == np.round(k[0])
    assert predict_coverage(a[:1], b[:1], k[:1])[0, 0] >= 0.6 > predict_coverage(a[:1], b[:1], k[:1] - 1)[0, 0]
    assert k[2] == np.inf  # a law that does not rise never gets there
    assert samples_for_coverage(a, b, 0.2)[1] == 1.0  # e^-1 = 0.37 already at k = 1
    assert np.all(samples_for_coverage(a, b, 1.0) == np.inf)
