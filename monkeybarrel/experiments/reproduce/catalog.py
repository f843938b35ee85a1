"""Every recipe's name and description: what ``monkeybarrel reproduce list`` prints, importing nothing heavy.

An entry names the function that runs it (``module:function`` in this package, called with
``(data, out, **options)``); that module (numpy, pyarrow, the store, the selectors) is imported
only when the recipe runs. The hub ids here are the ones the runners load (``tests/test_reproduce.py``
checks that they agree).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Comparison


@dataclass(frozen=True)
class Recipe:
    """A reproducible paper table.

    Attributes:
        name: CLI name (``llmonk-pythia-math``).
        title: one line: paper and what is reproduced.
        paper: citation (authors, arXiv id).
        dataset: what the released data is and where it lives (hub id / repo path).
        data_help: what ``--data`` accepts.
        runner: ``"module:function"`` of this package; ``function(data, out, **options) -> Comparison``.
        options: keyword arguments of the runner (which set of the family the recipe is).
    """

    name: str
    title: str
    paper: str
    dataset: str
    data_help: str
    runner: str
    options: dict[str, Any] = field(default_factory=dict)

    def run(self, data: str | None, out: Path) -> Comparison:
        """Run on ``data`` (a local copy, ``None`` for the hub), writing under ``out``."""
        module, _, function = self.runner.partition(":")
        return getattr(import_module(f"{__package__}.{module}"), function)(data, out, **self.options)


LLMONK_PAPER = "Brown et al., Large Language Monkeys, arXiv 2407.21787"
WEAVER_PAPER = ("Saad-Falcon et al., Shrinking the Generation-Verification Gap with Weak Verifiers (Weaver), "
                "arXiv 2506.18203")
SMOOTHIE_PAPER = "Guha et al., Smoothie: Label Free Language Model Routing, NeurIPS 2024, arXiv 2412.04692"
SMOOTHIE_HUB = "hazyresearch/smoothie_data"
CODEMONKEYS_PAPER = "Ehrlich et al., CodeMonkeys, arXiv 2501.14723"
CODEMONKEYS_REPOSITORY = "https://github.com/SWE-bench/experiments (evaluation/verified)"
WEAVER_HUB = {
    "math500-70b": "hazyresearch/MATH500_with_Llama_3.1_70B_Instruct_v1",
    "gpqa-70b": "hazyresearch/GPQA_with_Llama_3.1_70B_Instruct_v1",
    "mmlu-70b": "hazyresearch/MMLU_with_Llama_3.1_70B_Instruct_v1",
    "mmlu-pro-70b": "hazyresearch/MMLU-Pro_with_Llama_3.1_70B_Instruct_v1",
    "math500-8b": "hazyresearch/MATH-500_with_Llama_3.1_8B_Instruct_v1",
    "gpqa-8b": "hazyresearch/GPQA_with_Llama_3.1_8B_Instruct_v1",
    "mmlu-8b": "hazyresearch/MMLU_with_Llama_3.1_8B_Instruct_v1",
    "mmlu-pro-8b": "hazyresearch/MMLU-Pro_with_Llama_3.1_8B_Instruct_v1",
}
"""The released sets of the Weaver recipes (``experiments.weaver_data.HUB_DATASETS`` loads them)."""
WEAVER_LABELS = {"math500": "MATH500", "gpqa": "GPQA", "mmlu": "MMLU-College", "mmlu-pro": "MMLU-Pro"}
SWEBENCH_VERIFIED_HUB = "princeton-nlp/SWE-bench_Verified"
MATH500_HUB = "HuggingFaceH4/MATH-500"


def _llmonk(name: str, task: str, *, configs: str, title: str, parquet: str, data_help: str) -> Recipe:
    """One recipe of the family: coverage and fitted laws of ``task``'s models (``configs``: the hub
    configs it loads, a glob; ``parquet``: the processed per-sample parquet it also reads)."""
    return Recipe(name=name, title=f"Large Language Monkeys: {title}", paper=LLMONK_PAPER,
                  dataset=f"hub ScalingIntelligence/monkey_business (configs {configs}), or {parquet}",
                  data_help=data_help, runner="llmonk:run", options={"task": task})


RECIPES: list[Recipe] = [
    _llmonk("llmonk-pythia-math", "MATH", configs="MATH_Pythia-*", title="Pythia on MATH, coverage and scaling laws",
            parquet="the processed per-sample parquet (Problem Idx, Attempt Idx, Score, Benchmark, Model)",
            data_help="the processed parquet (e.g. ../shared/data/llmonk/pythia_math_individual_outcomes.parquet) "
                      "or a directory of MATH_Pythia-*.json files"),
    _llmonk("llmonk-codecontests", "CodeContests", configs="CodeContests_*", title="Gemma and Llama-3 on CodeContests",
            parquet="a parquet in the processed per-sample layout",
            data_help="a parquet in the processed per-sample layout with Benchmark 'CodeContests', or a directory "
                      "of CodeContests_{Gemma-2B,Gemma-7B,Llama-3-8B-Instruct,Llama-3-70B-Instruct}.json files"),
    *(Recipe(name=f"weaver-{dataset}-{size}", title=f"Weaver: {WEAVER_LABELS[dataset]}, Llama 3.1 {size.upper()} "
             f"generator ({'Table 1' if size == '70b' else 'Tables 20 and 3'})", paper=WEAVER_PAPER,
             dataset=f"hub {WEAVER_HUB[f'{dataset}-{size}']} (split data)",
             data_help="a local .parquet/.jsonl/.json copy of the set (columns instruction, samples, answer_correct, "
                       "extracted_answers, *_scores, *_verdicts)",
             runner="weaver:run", options={"dataset": dataset, "size": size})
      for size in ("70b", "8b") for dataset in WEAVER_LABELS),
    Recipe(name="smoothie-alpaca", title="Smoothie-Local routing on AlpacaEval (10 trials of 5 leaderboard models)",
           paper=SMOOTHIE_PAPER,
           dataset=f"hub {SMOOTHIE_HUB}: alpaca/downloaded_outputs/*.json (+ algorithm_outputs/smoothie_*)",
           data_help="a copy of the smoothie_data repo or its alpaca/ folder (downloaded_outputs/*.json)",
           runner="smoothie:run"),
    Recipe(name="codemonkeys-barrel", title="CodeMonkeys: Barrel of Monkeys over 8 SWE-bench Verified submissions",
           paper=CODEMONKEYS_PAPER,
           dataset=f"git {CODEMONKEYS_REPOSITORY}: <run>/all_preds.jsonl + <run>/results/results.json",
           data_help="a checkout of SWE-bench/experiments, or its evaluation/verified folder",
           runner="codemonkeys:run"),
    Recipe(name="swebench-verified", title="SWE-bench Verified: the 500 released instances through the swebench task",
           paper="Jimenez et al., SWE-bench, arXiv 2310.06770; OpenAI's Verified subset",
           dataset=f"hub {SWEBENCH_VERIFIED_HUB} (split test)",
           data_help="a parquet/jsonl copy of the split (e.g. ../shared/data/swebench/verified_test.parquet)",
           runner="datasets:run_swebench_verified"),
    Recipe(name="math500", title="MATH500 through the math task, plus an embedded-model sanity run (no paper table)",
           paper="Lightman et al., arXiv 2305.20050 (the subset); Hendrycks et al. (MATH)",
           dataset=f"hub {MATH500_HUB} (split test)",
           data_help="test.jsonl with problem and answer/solution (e.g. ../shared/data/math500/test.jsonl)",
           runner="datasets:run_math500"),
]
"""In the order ``reproduce list`` prints them."""
