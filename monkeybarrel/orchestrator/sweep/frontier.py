"""The compute-optimal frontier over configurations (a point's model and settings at k samples).

Large Language Monkeys (Brown et al., 2024) compares models by coverage against inference FLOPs;
compute-optimal test-time scaling (Snell et al., 2024) asks, for each budget, which configuration
is best. Given every configuration's cost and accuracy (``[C]`` arrays, all of one task):

* ``pareto``: the configurations no cheaper one beats (the upper envelope, cost ascending);
* ``best_at``: for each budget, the best configuration costing at most that, and the best one of
  another model (how much the choice of model matters there).
"""

from __future__ import annotations

import math

import numpy as np


def pareto(cost: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Indices of the frontier: cost ascending, each strictly more accurate than every cheaper configuration.

    NaN costs or accuracies are left out; among equal costs the most accurate comes first.

    Examples:
        >>> pareto(np.array([1., 2., 3., 4.]), np.array([.1, .05, .3, .3])).tolist()
        [0, 2]
    """
    cost, accuracy = np.asarray(cost, float), np.asarray(accuracy, float)
    valid = np.flatnonzero(~np.isnan(cost) & ~np.isnan(accuracy))
    order = valid[np.lexsort((-accuracy[valid], cost[valid]))]
    if order.size == 0:
        return order
    running = np.maximum.accumulate(accuracy[order])
    better = accuracy[order] > np.concatenate([[-np.inf], running[:-1]])
    return order[better]


def best_at(cost: np.ndarray, accuracy: np.ndarray, group: np.ndarray,
            budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each budget, the best configuration within it and the best of another group (model).

    Args:
        cost, accuracy: ``[C]`` per configuration (NaN = unknown, never chosen).
        group: ``[C]`` int model code of each configuration.
        budgets: ``[B]`` budgets.

    Returns:
        ``best [B]`` and ``other [B]`` configuration indices (-1 where none fits); ties go to the cheaper one.
    """
    cost, accuracy, group = np.asarray(cost, float), np.asarray(accuracy, float), np.asarray(group)
    order = np.argsort(np.where(np.isnan(cost), np.inf, cost), kind="stable")  # ties -> cheapest first
    fits = (cost[order][None, :] <= np.asarray(budgets, float)[:, None]) & ~np.isnan(accuracy[order])[None, :]
    score = np.where(fits, accuracy[order][None, :], -np.inf)
    best_local = np.argmax(score, axis=1)
    best = np.where(fits.any(axis=1), order[best_local], -1)
    other_fits = fits & (group[order][None, :] != group[order][best_local][:, None])
    other_score = np.where(other_fits, accuracy[order][None, :], -np.inf)
    other = np.where(other_fits.any(axis=1), order[np.argmax(other_score, axis=1)], -1)
    return best, other


def budget_grid(low: float, high: float) -> np.ndarray:
    """``low``, round budgets between (1-2-5 steps over < 2 decades, 1-3 over < 4, else decades), ``high``.

    Examples:
        >>> budget_grid(3.0, 40.0).tolist()
        [3.0, 5.0, 10.0, 20.0, 40.0]
    """
    if not (np.isfinite(low) and np.isfinite(high)) or high <= 0:
        return np.zeros(0)
    low = max(low, high * 1e-12)
    decades = math.log10(high / low)
    steps = (1, 2, 5) if decades < 2 else (1, 3) if decades < 4 else (1,)
    grid = [m * 10.0 ** e for e in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1) for m in steps]
    grid = [g for g in grid if low < g < high]
    return np.array([float(low), *grid, float(high)] if high > low else [float(high)])
