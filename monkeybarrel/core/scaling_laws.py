"""Coverage scaling laws: fit ``c(k) ≈ exp(a · k^b)`` to unbiased coverage curves.

Large Language Monkeys (Brown et al., 2024, §3.1, Eq. 2-3) model log-coverage as a power law in
the number of samples k: ``log c(k) ≈ a · k^b`` with ``a < 0`` (``c(1) = e^a``) and ``b < 0``
(coverage rises towards 1). Its fit error is the mean ± std of ``|curve - fit|`` over 100 values of
k evenly spaced in log k; this module reports the same figure.

Everything works on many curves at once (models or generators x problems): coverage is one
broadcast log-gamma grid ``[M, P, K]``, the starting fit is a closed-form weighted least squares in
``log(-log c)`` vs ``log k`` for all curves together, and the refinement is a damped Gauss-Newton
on ``log c``, also batched. 10^4 samples x 10^3 problems x 8 models take well under a second
(``benchmarks/scaling_laws.py``).

Python::

    ks = log_spaced_ks(10_000)                       # [K] ints, 1 .. 10_000
    curves = coverage_at_k(n, c, ks)                 # n, c: [M, P] samples / correct per problem
    law = fit_coverage_law(ks, curves)               # a, b, error_mean, error_std: [M]
    samples_for_coverage(law.a, law.b, 0.5)          # [M] k for 50 % coverage (inf if never)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .metrics import pass_at_k

FIT_POINTS = 100
"""Points evenly spaced in log k at which a curve is fitted and its error measured (the paper's choice)."""


def log_spaced_ks(k_max: int, points: int = FIT_POINTS) -> np.ndarray:
    """``[K]`` distinct ints from 1 to ``k_max`` evenly spaced in log k (fewer than ``points`` when
    ``k_max`` is small: every int then appears once)."""
    if k_max < 1:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.round(np.geomspace(1, k_max, points)).astype(np.int64))


def coverage_at_k(n: np.ndarray, c: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Mean unbiased pass@k over problems, for many curves and many k at once.

    Args:
        n: ``[..., P]`` samples per problem (0 = problem absent from this curve).
        c: ``[..., P]`` correct samples per problem.
        ks: ``[K]`` values of k.

    Returns:
        ``[..., K]`` coverage in [0, 1]; a problem with fewer than k samples is left out of the mean
        at that k; NaN where no problem has k samples.
    """
    n = np.asarray(n, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    ks = np.asarray(ks, dtype=np.float64)
    grid = pass_at_k(n[..., None], c[..., None], ks)  # [..., P, K]
    valid = ~np.isnan(grid)
    counted = valid.sum(axis=-2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, np.where(valid, grid, 0.0).sum(axis=-2) / counted, np.nan)


@dataclass(frozen=True)
class CoverageLaw:
    """Fitted ``c(k) = exp(a · k^b)`` for ``M`` curves (every field ``[M]``; NaN where a curve
    cannot be fitted: fewer than two points with 0 < c < 1).

    Attributes:
        a: log-coverage at k = 1 (``c(1) = e^a``); negative.
        b: exponent; negative when coverage rises with k.
        error_mean: mean of ``|c - fit|`` over the fitted points (coverage units, 0-1).
        error_std: standard deviation of the same.
        k_max: the largest k fitted (extrapolation beyond it is a forecast).
    """

    a: np.ndarray
    b: np.ndarray
    error_mean: np.ndarray
    error_std: np.ndarray
    k_max: np.ndarray

    def predict(self, ks: np.ndarray) -> np.ndarray:
        """``[M, K]`` fitted coverage at ``ks``."""
        return predict_coverage(self.a, self.b, ks)

    def samples_for(self, target: float) -> np.ndarray:
        """``[M]`` samples needed for ``target`` coverage (see ``samples_for_coverage``)."""
        return samples_for_coverage(self.a, self.b, target)

    def row(self, i: int) -> dict[str, float]:
        """Curve ``i`` as plain floats (for ``metrics.json``)."""
        return {"a": float(self.a[i]), "b": float(self.b[i]), "error_mean": float(self.error_mean[i]),
                "error_std": float(self.error_std[i]), "k_max": float(self.k_max[i])}


def predict_coverage(a: np.ndarray, b: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """``[M, K]`` = ``exp(a[:, None] · ks^b[:, None])``."""
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))[:, None]
    b = np.atleast_1d(np.asarray(b, dtype=np.float64))[:, None]
    return np.exp(a * np.asarray(ks, dtype=np.float64)[None, :] ** b)


def samples_for_coverage(a: np.ndarray, b: np.ndarray, target: float) -> np.ndarray:
    """Samples k with ``exp(a · k^b) = target``: ``k = (log(target) / a)^(1/b)``.

    Returns ``[M]`` sample counts (the solution rounded up): 1 where ``target <= e^a`` (one sample already
    reaches it), inf where the law never reaches the target (``b >= 0`` or ``target >= 1``), NaN for an
    unfitted curve.
    """
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    b = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if not 0 < target < 1:
        return np.where(np.isnan(a) | np.isnan(b), np.nan, np.inf if target >= 1 else 1.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = (np.log(target) / a) ** (1.0 / b)
    k = np.where(b >= 0, np.inf, np.ceil(k * (1 - 1e-12)))
    k = np.where(np.exp(a) >= target, 1.0, k)
    return np.where(np.isnan(a) | np.isnan(b), np.nan, k)


def fit_coverage_law(ks: np.ndarray, coverage: np.ndarray, iterations: int = 50) -> CoverageLaw:
    """Least-squares fit of ``exp(a · k^b)`` to each row of ``coverage``.

    Start: weighted linear least squares of ``log(-log c) = log(-a) + b · log k`` over the points with
    ``0 < c < 1`` (closed form, all rows at once). Refinement: Levenberg-Marquardt steps on the
    paper's form ``log c = a · k^b`` (residual ``log c - a · k^b`` at each point with c > 0) for all rows
    together, keeping a step only where it lowers that row's squared error. NaN points (k beyond a
    curve's samples) are ignored. On the released Pythia MATH outcomes this gives a and b within 0.2
    and 0.01 of the paper's Figure 5 values; fitting ``c`` itself instead moves a by up to 0.7.

    Args:
        ks: ``[K]`` sample counts (use ``log_spaced_ks`` for the paper's even spacing in log k).
        coverage: ``[M, K]`` coverage in [0, 1] (or ``[K]`` for one curve).
        iterations: refinement steps.

    Returns:
        A ``CoverageLaw`` with ``[M]`` fields.
    """
    coverage = np.atleast_2d(np.asarray(coverage, dtype=np.float64))
    x = np.log(np.asarray(ks, dtype=np.float64))[None, :].repeat(coverage.shape[0], axis=0)  # [M, K]
    present = ~np.isnan(coverage)
    inner = present & (coverage > 0) & (coverage < 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(-np.log(np.where(inner, coverage, 0.5)))
    w = inner.astype(np.float64)
    sw = w.sum(axis=1)
    fittable = _spread(x, inner) > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mx = (w * x).sum(axis=1) / sw
        mz = (w * z).sum(axis=1) / sw
        b = (w * (x - mx[:, None]) * (z - mz[:, None])).sum(axis=1) / (w * (x - mx[:, None]) ** 2).sum(axis=1)
    log_minus_a = mz - b * mx
    a = -np.exp(log_minus_a)
    a, b = np.where(fittable, a, np.nan), np.where(fittable, b, np.nan)
    a, b = _levenberg_marquardt(x, coverage, present, a, b, fittable, iterations)
    fitted = np.exp(a[:, None] * np.exp(b[:, None] * x))
    error = np.where(present, np.abs(coverage - fitted), 0.0)
    counted = np.maximum(present.sum(axis=1), 1)
    error_mean = (error.sum(axis=1) / counted)
    error_std = np.sqrt((np.where(present, (error - error_mean[:, None]) ** 2, 0.0)).sum(axis=1) / counted)
    error_mean, error_std = np.where(fittable, error_mean, np.nan), np.where(fittable, error_std, np.nan)
    k_max = np.where(present, np.asarray(ks, dtype=np.float64)[None, :], -np.inf).max(axis=1)
    return CoverageLaw(a=a, b=b, error_mean=error_mean, error_std=error_std, k_max=k_max)


def _spread(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, max - min of ``x`` over ``mask`` (0 for fewer than two points)."""
    high = np.where(mask, x, -np.inf).max(axis=1)
    low = np.where(mask, x, np.inf).min(axis=1)
    return np.where(mask.sum(axis=1) >= 2, high - low, 0.0)


def _levenberg_marquardt(x: np.ndarray, y: np.ndarray, present: np.ndarray, a: np.ndarray, b: np.ndarray,
                         active: np.ndarray, iterations: int) -> tuple[np.ndarray, np.ndarray]:
    """Batched 2-parameter LM on ``log y ≈ a · e^{b x}`` (points with y = 0 left out); rows not
    ``active`` are left as they are."""
    w = (present & (np.nan_to_num(y) > 0)).astype(np.float64)
    with np.errstate(divide="ignore"):
        target = np.where(w > 0, np.log(np.where(w > 0, y, 1.0)), 0.0)

    def loss(a_: np.ndarray, b_: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            r = w * (target - a_[:, None] * np.exp(b_[:, None] * x))
        return (np.where(np.isfinite(r), r, 1e6) ** 2).sum(axis=1)

    damping = np.full(a.shape, 1e-3)
    current = loss(a, b)
    for _ in range(iterations):
        with np.errstate(over="ignore", invalid="ignore"):
            power = np.exp(b[:, None] * x)           # k^b
            r = w * (target - a[:, None] * power)
            ja = w * power                           # d fit / d a
            jb = w * a[:, None] * power * x          # d fit / d b
        haa, hab, hbb = (ja * ja).sum(1), (ja * jb).sum(1), (jb * jb).sum(1)
        ga, gb = (ja * r).sum(1), (jb * r).sum(1)
        haa_d, hbb_d = haa * (1 + damping), hbb * (1 + damping)
        det = haa_d * hbb_d - hab * hab
        with np.errstate(divide="ignore", invalid="ignore"):
            da = (hbb_d * ga - hab * gb) / det
            db = (haa_d * gb - hab * ga) / det
        ok = active & np.isfinite(da) & np.isfinite(db)
        a_new, b_new = np.where(ok, a + da, a), np.where(ok, b + db, b)
        trial = loss(a_new, b_new)
        better = ok & (trial < current)
        a, b, current = np.where(better, a_new, a), np.where(better, b_new, b), np.where(better, trial, current)
        damping = np.where(better, damping / 3, damping * 4)
    return a, b
