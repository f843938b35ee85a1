"""``check_selector``: a conformance suite every selector should pass (cf. scikit-learn's ``check_estimator``).

Each check builds small synthetic ``SelectionData`` (with labels for label-based selectors) and
asserts one part of the contract in ``selection/base.py``:

* ``params``: ``__init__`` only stores parameters; ``sklearn.clone`` rebuilds an equal selector; ``fit``
  leaves the parameters alone and returns ``self``;
* ``unfitted``: ``decision_function`` and ``select`` raise sklearn's ``NotFittedError`` before ``fit``
  (unless the selector is stateless: ``requires_fit = False``);
* ``labels``: a label-free selector refuses labels, a label-based one requires them;
* ``output``: ``decision_function`` gives ``[n]`` floats, ``select`` gives ``[n_problems]`` rows of the
  right problems, each at its problem's maximum decision, -1 only where all decisions are NaN;
* ``nan_rows``: NaN scores, an all-NaN verifier and candidates without answers do not crash it;
* ``one_candidate``: problems with one candidate each get that candidate;
* ``ties``: identical candidates go to the smallest (generator_id, sample_index);
* ``permutation``: shuffling the rows does not change which candidate is chosen.

Usage::

    from monkeybarrel.selection.checks import check_selector
    check_selector(MySelector(alpha=0.1))        # raises AssertionError naming the failed check
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from ..core.selection_data import SelectionData
from .base import Selector

CHECKS = ("params", "unfitted", "labels", "output", "nan_rows", "one_candidate", "ties", "permutation")


def make_data(n_problems: int = 12, max_candidates: int = 8, n_verifiers: int = 4, seed: int = 0,
              nan_share: float = 0.0) -> tuple[SelectionData, np.ndarray]:
    """Synthetic ``SelectionData`` with informative verifiers, answers and labels.

    Problems have 1..``max_candidates`` candidates; correct candidates share one answer and score
    higher on average; texts end with the answer. Returns ``(data, labels)``.
    """
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_candidates + 1, n_problems)
    problem_id = np.repeat([f"q{i:03d}" for i in range(n_problems)], sizes)
    sample_index = np.concatenate([np.arange(s) for s in sizes])
    n = problem_id.size
    labels = rng.random(n) < 0.4
    scores = rng.normal(size=(n, n_verifiers)) + labels[:, None] * rng.uniform(0.5, 1.5, n_verifiers)
    scores[rng.random((n, n_verifiers)) < nan_share] = np.nan
    answers = [("right" if ok else f"wrong{rng.integers(3)}") for ok in labels]
    words = np.array(["first", "then", "so", "add", "subtract", "times", "check", "carry"])
    texts = [f"{' '.join(rng.choice(words, 6))}. The answer is {answer}." for answer in answers]
    keys = pa.table({"problem_id": problem_id, "generator_id": ["gen"] * n, "sample_index": sample_index})
    data = SelectionData.build(keys, scores, tuple(f"v{j}" for j in range(n_verifiers)), answers, texts=texts)
    return data, labels


def _fit(selector: Selector, data: SelectionData, labels: np.ndarray) -> Selector:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return selector.fit(data, labels) if selector.uses_labels else selector.fit(data)


def _chosen_keys(selector: Selector, data: SelectionData, labels: np.ndarray) -> dict[str, tuple]:
    chosen = _fit(selector, data, labels).select(data)
    return {str(data.problems[g]): (None if r < 0 else (str(data.generator_id[r]), int(data.sample_index[r])))
            for g, r in enumerate(chosen)}


def _fresh(selector: Selector) -> Selector:
    return clone(selector)


def _params_equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(repr(a[k]) == repr(b[k]) for k in a)


def check_params(selector: Selector) -> None:
    params = selector.get_params()
    rebuilt = _fresh(selector)
    assert _params_equal(rebuilt.get_params(), params), "get_params does not rebuild an equal selector"
    assert not [k for k in vars(rebuilt) if k.endswith("_") and not k.startswith("_")], \
        "__init__ must only store parameters (found fitted attributes ending in '_')"
    data, labels = make_data()
    assert _fit(rebuilt, data, labels) is rebuilt, "fit must return self"
    assert _params_equal(rebuilt.get_params(), params), "fit changed the selector's parameters"
    repr(rebuilt)


def check_unfitted(selector: Selector) -> None:
    if not selector.requires_fit:
        return
    data, _ = make_data()
    for method in ("decision_function", "select"):
        try:
            getattr(_fresh(selector), method)(data)
        except NotFittedError:
            continue
        raise AssertionError(f"{method} before fit must raise sklearn's NotFittedError")


def check_labels(selector: Selector) -> None:
    data, labels = make_data()
    if selector.uses_labels:
        try:
            _fresh(selector).fit(data)
        except TypeError:
            pass
        else:
            raise AssertionError("a label-based selector must refuse fit(data) without labels")
    else:
        try:
            _fresh(selector).fit(data, labels)
        except TypeError:
            pass
        else:
            raise AssertionError("a label-free selector accepted labels")


def _check_output(selector: Selector, data: SelectionData, labels: np.ndarray) -> np.ndarray:
    fitted = _fit(_fresh(selector), data, labels)
    scores = np.asarray(fitted.decision_function(data))
    assert scores.shape == (data.n_candidates,), f"decision_function shape {scores.shape} != ({data.n_candidates},)"
    assert np.issubdtype(scores.dtype, np.floating), "decision_function must return floats"
    chosen = np.asarray(fitted.select(data))
    assert chosen.shape == (data.n_problems,), f"select shape {chosen.shape} != ({data.n_problems},)"
    for group, row in enumerate(chosen):
        rows = np.flatnonzero(data.groups == group)
        finite = rows[~np.isnan(scores[rows])]
        if row < 0:
            assert finite.size == 0, f"problem {data.problems[group]}: abstained although some decisions are finite"
            continue
        assert data.groups[row] == group, f"problem {data.problems[group]}: chose a row of another problem"
        assert finite.size and scores[row] == scores[finite].max(), \
            f"problem {data.problems[group]}: the chosen row is not at the problem's maximum decision"
    return chosen


def check_output(selector: Selector) -> None:
    data, labels = make_data()
    _check_output(selector, data, labels)


def check_nan_rows(selector: Selector) -> None:
    data, labels = make_data(nan_share=0.3)
    scores = data.scores.copy()
    scores[:, 1] = np.nan  # a verifier that failed everywhere
    scores[0] = np.nan  # a candidate no verifier could score
    answers = data.answers.copy()
    answers[:3] = -1  # candidates without an answer
    _check_output(selector, replace(data, scores=scores, answers=answers), labels)


def check_one_candidate(selector: Selector) -> None:
    data, labels = make_data(n_problems=10, max_candidates=1)
    chosen = _check_output(selector, data, labels)
    assert np.array_equal(chosen, data.groups), "a problem with one candidate must get that candidate"


def check_ties(selector: Selector) -> None:
    data, labels = make_data(n_problems=6, max_candidates=4)
    # each problem's candidates become identical copies of its first one
    first = np.array([np.flatnonzero(data.groups == g)[0] for g in range(data.n_problems)])
    source = first[data.groups]
    tied = replace(data, scores=data.scores[source], answers=data.answers[source], texts=data.texts[source])
    tied_labels = labels[source]
    order = np.random.default_rng(1).permutation(data.n_candidates)  # the smallest index is not always first
    shuffled = tied.subset(order)
    chosen = _check_output(selector, shuffled, tied_labels[order])
    for group, row in enumerate(chosen):
        rows = np.flatnonzero(shuffled.groups == group)
        assert row == rows[np.argmin(shuffled.sample_index[rows])], \
            f"problem {shuffled.problems[group]}: identical candidates must go to the smallest sample_index"


def check_permutation(selector: Selector) -> None:
    data, labels = make_data(n_problems=15)
    before = _chosen_keys(_fresh(selector), data, labels)
    order = np.random.default_rng(2).permutation(data.n_candidates)
    after = _chosen_keys(_fresh(selector), data.subset(order), labels[order])
    changed = sorted(p for p in before if before[p] != after[p])
    assert not changed, f"shuffling the rows changed the choice for problems {changed}"


_FUNCTIONS: dict[str, Callable[[Selector], None]] = {
    "params": check_params, "unfitted": check_unfitted, "labels": check_labels, "output": check_output, "nan_rows": check_nan_rows,
    "one_candidate": check_one_candidate, "ties": check_ties, "permutation": check_permutation,
}


def check_selector(selector: Selector, skip: Iterable[str] = ()) -> None:
    """Run every conformance check on ``selector``; raise AssertionError naming the first failure.

    Args:
        selector: an (unfitted) selector instance; checks work on fresh copies built from its params.
        skip: names from ``CHECKS`` to leave out (e.g. ``ties`` and ``permutation`` for a random selector).
    """
    skip = set(skip)
    unknown = skip - set(CHECKS)
    if unknown:
        raise ValueError(f"unknown checks {sorted(unknown)}; expected some of {CHECKS}")
    for name in CHECKS:
        if name in skip:
            continue
        try:
            _FUNCTIONS[name](selector)
        except AssertionError as exc:
            raise AssertionError(f"{type(selector).__name__} fails check '{name}': {exc}") from None
