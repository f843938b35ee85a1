"""Accuracy against k for every selector: refits on paired random k-subsets, exact at k = n."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from monkeybarrel.core.config import EvaluateSpec, ExperimentConfig, SelectorSpec, TaskSpec, VerifierSpec
from monkeybarrel.core.metrics import majority_curve, selection_accuracy
from monkeybarrel.core.selection_data import SelectionData
from monkeybarrel.orchestrator.report.accuracy_vs_k import accuracy_vs_k, pool_answer_frequency, random_k_subset
from monkeybarrel.orchestrator.report.markdown import plot_curves, render_markdown, start_lines
from monkeybarrel.orchestrator.stages.select import build_selector, fit_selector

SELECTORS = [SelectorSpec(name="majority", type="majority"), SelectorSpec(name="weaver", type="weaver"),
             SelectorSpec(name="naive", type="naive_ensemble"), SelectorSpec(name="best single", type="best_single")]


def experiment(problems: int = 60, candidates: int = 8, seed: int = 0) -> tuple[SelectionData, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = problems * candidates
    y = rng.random(n) < 0.35
    answers = np.where(y, "right", np.char.add("wrong", rng.integers(0, 3, n).astype(str)))
    scores = rng.normal(size=(n, 4)) + y[:, None] * np.array([0.4, 0.8, 1.2, 0.2])
    keys = pa.table({"problem_id": np.repeat([f"p{i:03d}" for i in range(problems)], candidates),
                     "generator_id": ["g"] * n, "sample_index": np.tile(np.arange(candidates), problems)})
    data = SelectionData.build(keys, scores, ("v0", "v1", "v2", "frequency"), list(answers))
    frequency = pool_answer_frequency(data)
    data = SelectionData.build(keys, np.column_stack([scores[:, :3], frequency]), data.verifiers, list(answers))
    return data, y


def config(**evaluate) -> ExperimentConfig:
    return ExperimentConfig(task=TaskSpec(name="arithmetic", num_problems=4), selectors=SELECTORS,
                            verifiers=[VerifierSpec(name="frequency", type="answer_frequency")],
                            evaluate=EvaluateSpec(**evaluate))


def test_random_k_subsets_are_uniform_k_subsets_of_the_problems_with_k_rows():
    groups = np.repeat([0, 1, 2], [5, 3, 5])
    rng = np.random.default_rng(0)
    seen = np.zeros(groups.size)
    for _ in range(2000):
        rows = random_k_subset(groups, 3, 4, rng)
        assert np.bincount(groups[rows], minlength=3).tolist() == [4, 0, 4]
        seen[rows] += 1
    assert np.allclose(seen[groups != 1] / 2000, 0.8, atol=0.04) and seen[groups == 1].sum() == 0


def test_curves_are_exact_at_n_paired_at_one_and_majority_matches_the_spine():
    data, y = experiment()
    ks = [1, 2, 4, 8]
    curves = accuracy_vs_k(config(selector_trials=24), data, y, ks)
    assert set(curves) == {spec.name for spec in SELECTORS}
    for index, spec in enumerate(SELECTORS):  # k = n: the selector on all samples
        full = fit_selector(build_selector(config(), spec, f"selectors[{index}]"), data, y).select(data)
        assert abs(curves[spec.name]["8"] - selection_accuracy(full, y)) < 1e-12
    # k = 1: one candidate per problem, the same for every selector (paired subsets)
    assert len({round(curve["1"], 12) for curve in curves.values()}) == 1
    assert abs(curves["majority"]["1"] - y.mean()) < 0.05
    spine = majority_curve(data.answers, y, data.groups, data.tiebreak, data.n_problems, ks, trials=256)
    for k in (2, 4):  # the selector refitted on subsets and the spine's estimate agree
        assert abs(curves["majority"][str(k)] - spine[k]) < 0.06
    # Weaver and the naive ensemble gain from more samples; coverage bounds every curve
    assert curves["weaver"]["8"] > curves["weaver"]["1"] + 0.1
    assert curves["naive"]["8"] > curves["naive"]["1"] + 0.1


def test_pool_dependent_columns_are_recomputed_on_each_subset():
    keys = pa.table({"problem_id": ["a"] * 4 + ["b"] * 2, "generator_id": ["g"] * 6, "sample_index": [0, 1, 2, 3, 0, 1]})
    data = SelectionData.build(keys, answers=["1", "1", "2", None, "x", "y"])
    assert pool_answer_frequency(data).tolist() == [0.5, 0.5, 0.25, 0.0, 0.5, 0.5]
    assert pool_answer_frequency(data.subset(np.array([0, 2, 4]))).tolist() == [0.5, 0.5, 1.0]


def test_selected_curves_only_and_the_report_shows_them(tmp_path):
    data, y = experiment(problems=20)
    cfg = config(selector_trials=2, selector_curves=["weaver", "majority"])
    curves = accuracy_vs_k(cfg, data, y, [1, 8])
    assert set(curves) == {"weaver", "majority"}
    assert accuracy_vs_k(config(selector_trials=0), data, y, [1, 8]) == {}
    metrics = {"n_problems": 20, "n_candidates": 160, "samples_per_problem": {"min": 8, "max": 8},
               "sample_accuracy": float(y.mean()), "ks": [1, 8], "coverage": {"1": 0.3, "8": 0.9},
               "majority": {"1": 0.3, "8": 0.5}, "accuracy_vs_k": curves,
               "selection": {"weaver": {"accuracy": curves["weaver"]["8"], "uses_labels": False, "abstained": 0,
                                        "notes": ["dropped v3: constant: every vote positive"],
                                        "heldout": {"problems": 5, "accuracy": 0.4}}}}
    text = render_markdown("t", metrics, {}, None)
    assert "| k | coverage (%) | majority (%) | weaver (%) |" in text
    assert "- weaver: dropped v3: constant: every vote positive" in text
    assert "- weaver: 40.0 % on the 5 problems it was not fitted on" in text
    assert plot_curves(metrics, tmp_path / "coverage.png").stat().st_size > 1000


def test_a_known_majority_curve_is_taken_not_refitted():
    """The report passes its majority@k: the majority selector's curve is that (the refit above agrees with it
    within Monte Carlo error), and only the other selectors are refitted."""
    data, y = experiment()
    ks = [1, 2, 4, 8]
    spine = majority_curve(data.answers, y, data.groups, data.tiebreak, data.n_problems, ks, trials=256)
    known = {"majority": {str(k): v for k, v in spine.items()}}
    curves = accuracy_vs_k(config(selector_trials=4), data, y, ks, known=known)
    assert curves["majority"] == known["majority"]
    assert set(curves) == {spec.name for spec in SELECTORS} and curves["weaver"] != curves["majority"]
    only = ExperimentConfig(task=TaskSpec(name="arithmetic", num_problems=4), selectors=SELECTORS[:1])
    assert accuracy_vs_k(only, data, y, ks, known=known) == known  # nothing left to refit


def test_k_equal_n_is_the_reported_accuracy_exactly_and_every_point_has_an_interval():
    from monkeybarrel.orchestrator.report.accuracy_vs_k import accuracy_vs_k_with_intervals
    from monkeybarrel.orchestrator.stages.evaluate import evaluate
    from monkeybarrel.orchestrator.stages.select import run_select_stage

    data, y = experiment(problems=40)
    specs = [*SELECTORS, SelectorSpec(name="pick at random", type="random")]
    cfg = ExperimentConfig(task=TaskSpec(name="arithmetic", num_problems=4), selectors=specs,
                           verifiers=[VerifierSpec(name="frequency", type="answer_frequency")],
                           evaluate=EvaluateSpec(selector_trials=3))
    _, info = run_select_stage(cfg, data, y)
    metrics = evaluate(cfg, data, y, info)
    curves, intervals = accuracy_vs_k_with_intervals(cfg, data, y, metrics["ks"])
    for spec in specs:  # the same number, not just close: the select stage's fit on all samples
        assert curves[spec.name]["8"] == metrics["selection"][spec.name]["accuracy"], spec.name
        for k, (low, high) in intervals[spec.name].items():
            assert low <= curves[spec.name][k] <= high
    assert curves["pick at random"]["1"] == curves["pick at random"]["8"]  # the expectation at every k


def split_answer_data(problems: int = 24, candidates: int = 6, seed: int = 5) -> tuple[SelectionData, np.ndarray]:
    """Tie-heavy problems (two or three answers over six samples) whose answers are *split*: candidates with
    the same final answer carry different labels (a right answer cut off mid-derivation, or graded on its
    reasoning), so which candidate of the winning answer is picked decides the point."""
    rng = np.random.default_rng(seed)
    ids, answers, labels = [], [], []
    for p in range(problems):
        pool = ["a", "b"] if p % 3 else ["a", "b", "c"]
        for i in range(candidates):
            ids.append(f"p{p:02d}")
            answers.append(pool[int(rng.integers(0, len(pool)))])
            labels.append(answers[-1] == "a" and rng.random() < 0.5)  # half of the "a" candidates are right
    keys = pa.table({"problem_id": ids, "generator_id": ["g"] * len(ids),
                     "sample_index": np.tile(np.arange(candidates), problems)})
    return SelectionData.build(keys, answers=answers), np.array(labels)


def exact_majority_at_k(data: SelectionData, labels: np.ndarray, k: int, any_right: bool = False) -> float:
    """Mean over problems of the majority selector's accuracy over every k-subset of the problem's candidates
    (``any_right``: the old curve's rule, an answer counted right when any of its candidates is)."""
    from itertools import combinations

    from monkeybarrel.selection.majority import MajorityVote

    per_problem = []
    for g in range(data.n_problems):
        rows = np.flatnonzero(data.groups == g)
        hits = []
        for subset in combinations(rows, k):
            subset = np.array(subset)
            chosen = subset[MajorityVote().select(data.subset(subset))[0]]
            same = subset[data.answers[subset] == data.answers[chosen]]
            hits.append(labels[same].any() if any_right else labels[chosen])
        per_problem.append(np.mean(hits))
    return float(np.mean(per_problem))


def test_one_rule_for_the_majority_curve_and_the_selector_on_split_answers_and_ties():
    """Issue #34: with split answers the curve counted an answer right when any of its candidates was (.401
    against the selector's .300 at k = 2 in the report). Now the curve (the spine's Monte Carlo estimate, and
    the refitted selector) equals exact enumeration of the selector over every k-subset."""
    from monkeybarrel.core.metrics import majority_at_k

    data, y = split_answer_data()
    cfg = ExperimentConfig(task=TaskSpec(name="arithmetic", num_problems=4), selectors=SELECTORS[:1],
                           evaluate=EvaluateSpec(selector_trials=60))
    refitted = accuracy_vs_k(cfg, data, y, [2, 3, 4], seed=1)["majority"]
    for k in (2, 3, 4):
        exact = exact_majority_at_k(data, y, k)
        old_rule = exact_majority_at_k(data, y, k, any_right=True)
        assert old_rule > exact + 0.05, (k, old_rule, exact)  # the data separates the two rules
        spine = majority_at_k(data.answers, y, data.groups, data.tiebreak, data.n_problems, k, trials=4000, seed=k)
        assert spine == pytest.approx(exact, abs=0.012), (k, spine, exact)
        assert refitted[str(k)] == pytest.approx(exact, abs=0.04), (k, refitted[str(k)], exact)
    # k = n is exact and equals the selector on all samples
    from monkeybarrel.selection.majority import MajorityVote

    at_n = majority_at_k(data.answers, y, data.groups, data.tiebreak, data.n_problems, 6)
    assert at_n == selection_accuracy(MajorityVote().select(data), y)


def test_the_report_says_where_each_engines_start_went():
    sampled = {
        "ray8b": {"wall_s": 94.4, "ray_init_s": 4.2, "workers_ready_s": 57.4, "first_worker_ready_s": 57.1,
                  "worker_actor_up_s": 2.5, "worker_init_s": 48.0, "worker_turn_wait_s": 0.0, "worker_import_s": 18.8,
                  "worker_engine_start_s": 29.2, "worker_compile_s": 17.4, "worker_cuda_graphs_s": 3.6, "gpu_s": 10.0},
        "direct": {"wall_s": 66.0, "import_s": 6.5, "engine_start_s": 29.2, "engine_weights_s": 2.0,
                   "engine_kv_cache_and_warmup_s": 9.0},
        "embedded": {"wall_s": 3.0, "gpu_s": 0.0},  # no engine start: no line
    }
    assert start_lines(sampled) == [
        "- ray8b: 57.4 (Ray 4.2, actor up 2.5, waiting for its GPU 0.0, import 18.8, engine 29.2; "
        "inside the engine: compile 17.4, cuda graphs 3.6)",
        "- direct: 35.7 (import 6.5, engine 29.2; inside the engine: weights 2.0, kv cache and warmup 9.0)"]
    text = render_markdown("t", {"n_problems": 1, "n_candidates": 1, "samples_per_problem": {"min": 1, "max": 1},
                                 "ks": [1], "coverage": {"1": 1.0}, "majority": {"1": 1.0}, "selection": {}},
                           {"costs": {"generators": {}}, "runs": [{"sampled": sampled}]}, None)
    assert "Engine starts in the last run (s):" in text and "- direct: 35.7 (import 6.5" in text
