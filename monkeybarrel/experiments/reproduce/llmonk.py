"""Large Language Monkeys (Brown et al., arXiv 2407.21787): coverage@k, pass@1 and the fitted
``exp(a k^b)`` laws from the released per-sample outcomes.

Two recipes of one family: ``llmonk-pythia-math`` (7 Pythia models x 128 MATH problems x 10,000
samples) and ``llmonk-codecontests`` (Gemma 2B/7B, Llama-3 8B/70B Instruct on 140 CodeContests
problems). ``--data`` takes the processed per-sample parquet or a directory of monkey_business
config files (``{TASK}_{MODEL}.json``); without it the hub configs are loaded.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..llmonk_data import SampleOutcomes, read_monkey_business, read_outcomes_parquet, stack_counts
from .base import Comparison, Published, Row

FIG5 = "arXiv 2407.21787, Fig. 5"
TEXT_22 = "arXiv 2407.21787, §2.2 (Fig. 3)"
TARGETS = (0.5, 0.9)
"""Coverage levels for which the recipe reports the samples the fitted law needs."""

# Published numbers per model (keys use the parquet spelling). Percent for coverage; a, b as printed.
PYTHIA_MATH_PAPER: dict[str, dict[str, Published]] = {
    "Pythia 70M": {"a": Published(-7.59, FIG5), "b": Published(-0.18, FIG5),
                   "error_mean": Published(0.0052, FIG5, "± 0.0071")},
    "Pythia 160M": {"pass@1": Published(0.27, TEXT_22), "coverage@10000": Published(57.0, TEXT_22)},
    "Pythia 12B": {"a": Published(-3.92, FIG5), "b": Published(-0.35, FIG5),
                   "error_mean": Published(0.0189, FIG5, "± 0.0118")},
}
CODECONTESTS_PAPER: dict[str, dict[str, Published]] = {
    "Gemma 2B": {"pass@1": Published(0.02, TEXT_22), "coverage@10000": Published(7.1, TEXT_22)},
    "Llama 3 8B Instruct": {"a": Published(-3.88, FIG5), "b": Published(-0.11, FIG5),
                            "error_mean": Published(0.002, FIG5, "± 0.0015")},
    "Llama 3 70B Instruct": {"a": Published(-2.52, FIG5), "b": Published(-0.11, FIG5),
                             "error_mean": Published(0.0056, FIG5, "± 0.0027")},
}
PYTHIA_MODELS = ("Pythia-70M", "Pythia-160M", "Pythia-410M", "Pythia-1B", "Pythia-1.4B", "Pythia-2.8B", "Pythia-6.9B",
                 "Pythia-12B")
"""The hub's Pythia MATH configs (the processed parquet holds seven of them, without 1.4B)."""
CODECONTESTS_MODELS = ("Gemma-2B", "Gemma-7B", "Llama-3-8B-Instruct", "Llama-3-70B-Instruct")


def load_blocks(data: str | None, task: str, models: tuple[str, ...]) -> tuple[list[SampleOutcomes], str]:
    """The outcome blocks of ``task`` from a parquet file, a monkey_business directory or the hub."""
    if data is not None and Path(data).is_file() and Path(data).suffix == ".parquet":
        return read_outcomes_parquet(data, benchmarks=[task]), f"{data} (processed per-sample outcomes, every model)"
    blocks = read_monkey_business(task, models, data)
    return blocks, (f"{data} (monkey_business layout)" if data else f"hub ScalingIntelligence/monkey_business {task}_*")


def coverage_laws(blocks: list[SampleOutcomes]) -> dict:
    """Coverage curves and fitted laws of every block: ``ks [K]``, ``coverage [M, K]``, ``law`` (CoverageLaw)."""
    from ...core.scaling_laws import coverage_at_k, fit_coverage_law, log_spaced_ks  # scipy: when a recipe runs

    n, c, _ = stack_counts(blocks)
    ks = log_spaced_ks(int(n.max()))
    curves = coverage_at_k(n, c, ks)
    return {"ks": ks, "coverage": curves, "law": fit_coverage_law(ks, curves), "n": n, "c": c}


FAMILIES = {
    "MATH": ("llmonk-pythia-math", PYTHIA_MODELS, PYTHIA_MATH_PAPER, "Pythia on MATH"),
    "CodeContests": ("llmonk-codecontests", CODECONTESTS_MODELS, CODECONTESTS_PAPER, "CodeContests"),
}
"""Task -> (recipe name, models, published numbers, what the table is about)."""


def run(data: str | None, out: Path, *, task: str) -> Comparison:
    """The recipe of ``task`` (a key of ``FAMILIES``): coverage and fitted laws beside the published numbers."""
    from ...orchestrator.report.coverage_plot import plot_coverage_laws

    name, models, paper, table_title = FAMILIES[task]
    title = f"Large Language Monkeys: {table_title} (coverage, pass@1, exp(a k^b) fits)"
    began = time.perf_counter()
    blocks, origin = load_blocks(data, task, models)
    loaded = time.perf_counter()
    fit = coverage_laws(blocks)
    fitted = time.perf_counter()
    ks, curves, law = fit["ks"], fit["coverage"], fit["law"]
    result = Comparison(recipe=name, title=title, data=origin, wide=True)
    k_top = int(ks[-1])
    needed = {t: law.samples_for(t) for t in TARGETS}
    per_model = {}
    for m, block in enumerate(blocks):
        published = paper.get(block.model, {})
        at_1, at_top = 100 * curves[m, 0], 100 * curves[m, -1]
        result.rows += [
            Row(block.model, "pass@1", at_1, published.get("pass@1"), digits=2),
            Row(block.model, f"coverage@{k_top}", at_top, published.get(f"coverage@{k_top}")),
            Row(block.model, "fit a", float(law.a[m]), published.get("a"), unit="", digits=2),
            Row(block.model, "fit b", float(law.b[m]), published.get("b"), unit="", digits=3),
            Row(block.model, "fit error", float(law.error_mean[m]), published.get("error_mean"),
                unit="", digits=4),
        ]
        result.rows += [Row(block.model, f"k for {int(100 * t)}% (fit)", float(needed[t][m]),
                            unit="", digits=0) for t in TARGETS]
        per_model[block.model] = {"problems": int(block.problem_ids.size), "samples": int(block.n_samples.max()),
                                  "pass@1": float(curves[m, 0]), f"coverage@{k_top}": float(curves[m, -1]),
                                  **law.row(m), **{f"samples_for_{t}": float(needed[t][m]) for t in TARGETS}}
    figure = plot_coverage_laws(ks, curves, law, [b.model for b in blocks], out / "coverage_laws.png",
                                title=f"{task}: coverage and exp(a k^b) fits")
    result.figures.append(str(figure))
    shape = {(int(b.problem_ids.size), int(b.n_samples.max())) for b in blocks}
    result.notes += [
        f"{len(blocks)} models; problems x samples per model: {', '.join(f'{p} x {s}' for p, s in sorted(shape))}.",
        "coverage = mean unbiased pass@k (Chen et al.); the law is fitted to log c = a k^b at "
        f"{ks.size} values of k evenly spaced in log k (1..{k_top}); the fit error is mean ± std of |c - fit| there "
        "(the paper's Fig. 5 measure).",
        "fit error std (ours): " + ", ".join(f"{b.model} {law.error_std[m]:.4f}" for m, b in enumerate(blocks)) + ".",
        "paper '–': the paper prints that number for other models only (Fig. 5 fits: Pythia-70M and -12B on MATH; "
        "Llama-3-8B/70B-Instruct on CodeContests; §2.2: Pythia-160M MATH, Gemma-2B CodeContests).",
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage_laws.json").write_text(json.dumps(
        {"ks": ks.tolist(), "models": per_model,
         "coverage": {b.model: curves[m].tolist() for m, b in enumerate(blocks)}}, indent=1))
    result.timings = {"load": loaded - began, "coverage+fit": fitted - loaded,
                      "total": time.perf_counter() - began}
    return result
