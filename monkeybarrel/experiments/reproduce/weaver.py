"""Weaver (Saad-Falcon et al., arXiv 2506.18203) on its released ``hazyresearch/*_with_Llama_3.1_*`` sets.

Each recipe loads one released set through ``experiments.weaver_data`` (every ``*_scores`` /
``*_verdicts`` column becomes a verifier), runs our selectors and prints them beside the paper's
Table 1 (70B generator) or Tables 20/3 (8B generator):

* first sample: mean per-sample accuracy (expected pass@1; the paper's numbers equal it);
* majority; naive ensemble (mean normalised score of all released verifiers; the paper's row
  averages the top-10 RewardBench RMs only);
* Weaver with the paper's settings (class prior and threshold set from the labels of every problem,
  transductive as in the paper's Table 1), with 1 % dev labels (§3 protocol), and label-free;
* oracle = pass@K (any correct sample).
"""

from __future__ import annotations

import time
from pathlib import Path

from ...core.config import SelectorSpec
from ...core.hub import load_hub_dataset
from ..weaver_data import HUB_DATASETS, load_weaver_dataset
from .base import Comparison, Published, Row
from .catalog import WEAVER_LABELS as LABELS

T1 = "arXiv 2506.18203, Table 1"
T20 = "arXiv 2506.18203, Table 20"
T3 = "arXiv 2506.18203, Table 3"

SELECTORS = (
    SelectorSpec(name="majority", type="majority"),
    SelectorSpec(name="naive ensemble", type="naive_ensemble"),
    SelectorSpec(name="weaver (paper settings: all labels set prior and threshold)", type="weaver",
                 options={"dev_fraction": 1.0, "model__threshold": "search", "aggregate": "candidate"}),
    SelectorSpec(name="weaver (1% dev labels)", type="weaver", options={"dev_fraction": 0.01, "model__threshold": "search"}),
    SelectorSpec(name="weaver (label-free)", type="weaver"),
)
"""The select stage adds ``random (pass@1)`` and ``oracle (coverage)`` itself."""
ROW_OF = {"majority": "majority", "naive ensemble": "naive ensemble",
          "weaver (paper settings: all labels set prior and threshold)": "weaver",
          "weaver (1% dev labels)": "weaver", "weaver (label-free)": "weaver", "oracle (coverage)": "pass@K"}

# (dataset, generator) -> metric -> Published (percent)
PUBLISHED: dict[tuple[str, str], dict[str, Published]] = {
    ("math500", "70b"): {"first sample": Published(78.0, T1), "majority": Published(83.0, T1, "Majority@100"),
                         "naive ensemble": Published(75.4, T1, "top-10 RM ensemble"), "weaver": Published(93.4, T1),
                         "pass@K": Published(98.6, T1, "Pass@100")},
    ("gpqa", "70b"): {"first sample": Published(42.9, T1), "majority": Published(47.4, T1, "44.9 in Table 3"),
                      "naive ensemble": Published(41.3, T1, "top-10 RM ensemble"),
                      "weaver": Published(72.1, T1, "72.1-73.2 across the paper's tables; 66.4 in the README"),
                      "pass@K": Published(81.0, T1, "Pass@100")},
    ("mmlu", "70b"): {"first sample": Published(82.6, T1), "majority": Published(84.1, T1),
                      "naive ensemble": Published(88.1, T1, "top-10 RM ensemble"), "weaver": Published(94.9, T1),
                      "pass@K": Published(96.0, T1, "Pass@100")},
    ("mmlu-pro", "70b"): {"first sample": Published(69.9, T1), "majority": Published(74.4, T1),
                          "naive ensemble": Published(71.4, T1, "top-10 RM ensemble"), "weaver": Published(90.2, T1),
                          "pass@K": Published(92.0, T1, "Pass@100")},
    ("math500", "8b"): {"first sample": Published(49.8, T20), "majority": Published(69.0, T20),
                        "weaver": Published(80.0, T3), "pass@K": Published(99.2, T20, "Pass@100")},
    ("gpqa", "8b"): {"first sample": Published(28.3, T20), "majority": Published(30.5, T20),
                     "weaver": Published(47.1, T3), "pass@K": Published(95.2, T20, "Pass@100")},
    ("mmlu", "8b"): {"first sample": Published(64.1, T20), "majority": Published(72.7, T20),
                     "weaver": Published(85.7, T3), "pass@K": Published(98.5, T20, "Pass@100")},
    ("mmlu-pro", "8b"): {"first sample": Published(46.6, T20), "majority": Published(56.4, T20),
                         "weaver": Published(67.2, T3), "pass@K": Published(96.8, T20, "Pass@100")},
}


def run(data: str | None, out: Path, *, dataset: str, size: str) -> Comparison:
    """One released set (``dataset`` a key of ``LABELS``, ``size`` ``70b`` or ``8b``) beside the paper's table."""
    from ...orchestrator.runner import evaluate_and_report

    short = f"{dataset}-{size}"
    where = {"type": "diamond"} if (dataset, size) == ("gpqa", "70b") else None
    published = PUBLISHED[(dataset, size)]

    began = time.perf_counter()
    if data is None:  # fail early and clearly offline; a reachable hub caches the set for the loader
        load_hub_dataset(HUB_DATASETS[short], split="data", local_hint="--data FILE (the set's parquet/jsonl in "
                                                                         "the released schema)")
    experiment = load_weaver_dataset(data or short, out / "store", where=where, selectors=SELECTORS, force=True)
    loaded = time.perf_counter()
    metrics = evaluate_and_report(experiment)
    done = time.perf_counter()
    k = max(metrics["ks"])
    result = Comparison(recipe=f"weaver-{short}", title=f"Weaver: {LABELS[dataset]} with Llama 3.1 {size.upper()} "
                        "(selection accuracy %)", data=(data or f"hub {HUB_DATASETS[short]}")
                        + (" (GPQA-Diamond rows: type == diamond)" if where else ""))
    group = f"{LABELS[dataset]} {size.upper()}"
    result.rows.append(Row(group, "first sample (mean sample accuracy)", 100 * metrics["sample_accuracy"],
                           published.get("first sample")))
    for name, info in metrics["selection"].items():
        metric = f"pass@{k} (oracle)" if name == "oracle (coverage)" else name
        result.rows.append(Row(group, metric, 100 * info["accuracy"], published.get(ROW_OF.get(name, ""))))
    result.notes += [
        f"{metrics['n_problems']} problems x {k} samples; {len(experiment.selection_data().verifiers)} released "
        "verifier columns.",
        "naive ensemble averages every released verifier (the paper's row: the top-10 RewardBench RMs only).",
        "weaver (paper settings) is the paper's per-candidate model (aggregate: candidate), transductive like its "
        "Table 1: the labels of all problems set the class prior and the threshold; '1% dev labels' (a seeded 1% "
        "of problems) and 'label-free' (none) run monkeybarrel's default, candidates pooled by final answer.",
        f"full selection report with coverage, scaling law and verifier table: {out / 'store' / 'report.md'}",
    ]
    result.timings = {"load": loaded - began, "select+evaluate": done - loaded}
    return result
