"""Distil an experiment's Weaver ensemble into one cross-encoder and report it on held-out problems.

    python -m monkeybarrel.experiments.distill RUN_DIR --out RUN_DIR/distilled \
        [--backbone all-MiniLM-L6-v2] [--train-fraction 0.7] [--validation-fraction 0.1] \
        [--epochs 3 8] [--learning-rate 5e-5 1e-4] [--batch-size 16] [--device cpu]

1. Weaver (label-free, the run's first ``weaver`` selector, else the default) is fitted on every
   problem of the run; its posterior P(correct) per candidate is the soft label.
2. The problems are split by id before anything is trained (``split_problems``, seeded): the held-out
   (test) problems first, then the validation problems, the rest train. Held-out labels and held-out
   candidates' texts are read only at the end, by the final evaluation.
3. Every setting of the grid (the product of ``--epochs``, ``--learning-rate``, ``--batch-size``) trains a
   cross-encoder on the training problems' candidates (``verifiers.distilled.train_cross_encoder``); the
   setting with the lowest validation loss (binary cross-entropy against Weaver's posterior on the
   validation candidates: label-free, what distillation optimises) is kept, the others are deleted.
4. On the held-out problems the kept model scores every candidate alone (the ``distilled`` verifier) and
   picks the argmax per problem. ``distillation.json`` and ``distillation.md`` in ``--out`` give: the
   validation table, agreement with Weaver's choice (same candidate, same answer), selection accuracy
   beside Weaver / majority / first sample / coverage with the share of picks without a final answer and
   the cost per candidate of each, and the verdict against majority vote.

Labels are read only to report accuracy. Use the model on new runs with
``verifiers: [{name: distilled, type: distilled, options: {model: DIR}}]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core.groups import group_argmax
from ..core.intervals import paired_difference_ci
from ..core.metrics import selection_hits
from ..core.records import candidates_from_table
from ..orchestrator.experiment import Experiment
from ..orchestrator.stages.select import build_selector
from ..orchestrator.store.experiment_store import StoreError
from ..selection.majority import MajorityVote
from ..selection.weaver import WeaverSelector, problem_share_mask
from ..verifiers.distilled import DistilledVerifier, TrainingSettings, train_cross_encoder


def weaver_for(experiment: Experiment) -> WeaverSelector:
    """The run's first label-free ``weaver`` selector (its options), else ``WeaverSelector()``."""
    for index, spec in enumerate(experiment.config.selectors):
        if spec.type == "weaver":
            selector = build_selector(experiment.config, spec, f"selectors[{index}]")
            if not selector.uses_labels:
                return selector
    return WeaverSelector()


def split_problems(data, train_fraction: float, validation_fraction: float, seed: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``[n]`` bool masks (train, validation, held-out) of whole problems, drawn by sorted problem id: the
    held-out share (1 - train - validation) first, then the validation share of the rest (at least one
    problem each when the share is positive; nothing here reads scores, texts or labels)."""
    if train_fraction + validation_fraction >= 1:
        raise ValueError(f"train_fraction {train_fraction} + validation_fraction {validation_fraction} >= 1 leaves no "
                         "held-out problem")
    if not (0 < train_fraction and 0 <= validation_fraction):
        raise ValueError(f"train_fraction must be > 0 and validation_fraction >= 0, got {train_fraction} and "
                         f"{validation_fraction}")
    held = problem_share_mask(data, 1 - train_fraction - validation_fraction, seed)
    rest = np.flatnonzero(~held)
    if rest.size == 0:
        raise ValueError(f"train_fraction {train_fraction} leaves no training problem among {data.n_problems}")
    validation = np.zeros(data.n_candidates, dtype=bool)
    if validation_fraction > 0:
        share = validation_fraction / (train_fraction + validation_fraction)
        validation[rest[problem_share_mask(data.subset(rest), share, seed + 1)]] = True
    train = ~held & ~validation
    if not train.any():
        raise ValueError(f"train_fraction {train_fraction} leaves no training problem among {data.n_problems}")
    if held.all() or not held.any():
        raise ValueError(f"train_fraction {train_fraction} leaves no held-out problem among {data.n_problems}")
    return train, validation, held


def settings_grid(base: TrainingSettings, epochs: list[int], learning_rates: list[float], batch_sizes: list[int]
                  ) -> list[TrainingSettings]:
    """Every combination of the listed epochs, learning rates and batch sizes (the rest from ``base``)."""
    return [replace(base, epochs=e, learning_rate=lr, batch_size=b)
            for e, lr, b in itertools.product(epochs, learning_rates, batch_sizes)]


def distill(run_dir: str | Path, out_dir: str | Path, backbone: str = "all-MiniLM-L6-v2", train_fraction: float = 0.7,
            seed: int = 0, settings: TrainingSettings | list[TrainingSettings] | None = None,
            validation_fraction: float = 0.1) -> dict[str, Any]:
    """Train every setting on the run's training problems, keep the best on the validation problems, evaluate
    it on the held-out ones; returns (and writes) the report."""
    experiment = Experiment(run_dir)
    data = experiment.selection_data()
    if data.n_problems < 2:
        raise ValueError(f"{run_dir}: distillation needs at least 2 problems (one to train on, one to hold out)")
    grid = settings if isinstance(settings, list) else [settings or TrainingSettings()]
    if len(grid) > 1 and validation_fraction <= 0:
        raise ValueError("several settings need validation problems to choose between them (validation_fraction > 0)")
    train, validation, held_out = split_problems(data, train_fraction, validation_fraction, seed)
    candidates = candidates_from_table(experiment.candidates())
    by_id = {p.problem_id: p for p in experiment.problems()}
    weaver = weaver_for(experiment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weaver.fit(data)
    posterior = weaver.predict_proba(data)
    rows = np.flatnonzero(train)
    out_dir = Path(out_dir)
    trials = []
    for index, setting in enumerate(grid):
        model_dir = train_cross_encoder(
            [by_id[str(data.problem_id[r])] for r in rows], [candidates[r] for r in rows], posterior[rows], backbone,
            out_dir / f"setting-{index}" if len(grid) > 1 else out_dir, setting,
            metadata={"source_run": str(Path(run_dir).resolve()), "weaver": repr(weaver),
                      "train_problems": int(np.unique(data.groups[rows]).size)})
        trial = {"settings": setting.__dict__, "model_dir": model_dir}
        if validation.any():
            scores, _ = _score(model_dir, setting, data, np.flatnonzero(validation), candidates, by_id)
            trial.update(_validation_figures(scores, posterior[validation], weaver.decision_function(data)[validation]))
        trials.append(trial)
    chosen = min(range(len(trials)), key=lambda i: trials[i].get("loss", 0.0))
    model_dir = _keep(trials, chosen, out_dir)
    setting = grid[chosen]
    held_rows = np.flatnonzero(held_out)
    held = data.subset(held_rows)
    scores, seconds = _score(model_dir, setting, data, held_rows, candidates, by_id)
    labels = experiment.labels_array()  # read now: the split and the setting are fixed
    report = evaluation(held, labels[held_rows], scores, weaver.decision_function(data)[held_rows],
                        _local_choice(weaver.select(data), data, held_rows, held), seed)
    report["validation"] = {
        "problems": int(np.unique(data.groups[validation]).size), "candidates": int(validation.sum()),
        "criterion": "binary cross-entropy against Weaver's posterior on the validation candidates (label-free)",
        "settings": [{k: v for k, v in t.items() if k != "model_dir"} for t in trials], "chosen": chosen}
    verify_seconds = experiment.manifest().get("costs", {}).get("stage_wall_s", {}).get("verify")
    report["cost"] = {
        "distilled_s_per_candidate": seconds / max(held_rows.size, 1),
        "ensemble_s_per_candidate": None if verify_seconds is None else verify_seconds / max(data.n_candidates, 1),
        "ensemble_verifiers": [v.name for v in experiment.config.verifiers],
        "device": _device_name(setting.device),
    }
    if report["cost"]["ensemble_s_per_candidate"]:
        report["cost"]["ratio"] = report["cost"]["distilled_s_per_candidate"] / report["cost"]["ensemble_s_per_candidate"]
    report["model"] = json.loads((Path(model_dir) / "distilled.json").read_text())
    Path(out_dir, "distillation.json").write_text(json.dumps(report, indent=2))
    Path(out_dir, "distillation.md").write_text(render(report))
    return report


def _score(model_dir: Path, setting: TrainingSettings, data, rows: np.ndarray, candidates, by_id
           ) -> tuple[np.ndarray, float]:
    """``([len(rows)] distilled scores, seconds)`` of the candidates at ``rows``, problem by problem."""
    verifier = DistilledVerifier("distilled", str(model_dir), max_length=setting.max_length, device=setting.device)
    part = data.subset(rows)
    scores = np.full(rows.size, np.nan)
    began = time.perf_counter()
    for group in range(part.n_problems):
        local = np.flatnonzero(part.groups == group)
        scores[local] = verifier.score_safely(by_id[str(part.problems[group])], [candidates[rows[i]] for i in local])[0]
    return scores, time.perf_counter() - began


def _validation_figures(scores: np.ndarray, posterior: np.ndarray, weaver: np.ndarray) -> dict[str, float]:
    """Validation loss (BCE of the distilled logits against Weaver's posterior) and rank correlation."""
    finite = np.isfinite(scores)
    logits = np.clip(scores[finite], -30, 30)
    target = np.clip(posterior[finite], 0.0, 1.0)
    loss = np.mean(np.logaddexp(0.0, logits) - target * logits)  # BCE with logits
    return {"loss": float(loss), "spearman_with_weaver": _spearman(scores, weaver)}


def _keep(trials: list[dict], chosen: int, out_dir: Path) -> Path:
    """Move the chosen setting's model to ``out_dir`` and delete the others; returns ``out_dir``."""
    if len(trials) == 1:
        return Path(trials[0]["model_dir"])
    for index, trial in enumerate(trials):
        if index == chosen:
            shutil.copytree(trial["model_dir"], out_dir, dirs_exist_ok=True)
        shutil.rmtree(trial["model_dir"], ignore_errors=True)
    return out_dir


def evaluation(held, labels: np.ndarray, distilled: np.ndarray, weaver: np.ndarray, weaver_choice: np.ndarray | None = None,
               seed: int = 0) -> dict[str, Any]:
    """Held-out comparison of the distilled scores with Weaver's, majority and the first sample.

    Args:
        held: the held-out candidates; ``labels`` their correctness; ``distilled`` / ``weaver``: ``[n]`` scores.
        weaver_choice: ``[P]`` Weaver selector's own picks (rows of ``held``); default the argmax of ``weaver``.
        seed: bootstrap seed of the paired intervals (distilled minus majority / Weaver, over problems).
    """
    chosen = {
        "distilled": group_argmax(distilled, held.groups, held.n_problems, held.tiebreak),
        "weaver": (group_argmax(weaver, held.groups, held.n_problems, held.tiebreak) if weaver_choice is None
                   else weaver_choice),
        "majority": MajorityVote().select(held),
        "first sample": group_argmax(np.zeros(held.n_candidates), held.groups, held.n_problems, held.tiebreak),
    }
    same = chosen["distilled"] == chosen["weaver"]
    answers = held.answers
    unanswered = {name: float(np.mean((rows < 0) | (answers[np.maximum(rows, 0)] < 0))) for name, rows in chosen.items()}
    same_answer = same | ((chosen["distilled"] >= 0) & (chosen["weaver"] >= 0)
                          & (answers[np.maximum(chosen["distilled"], 0)] == answers[np.maximum(chosen["weaver"], 0)])
                          & (answers[np.maximum(chosen["weaver"], 0)] >= 0))
    coverage = float(np.bincount(held.groups, weights=labels.astype(float), minlength=held.n_problems).astype(bool).mean())
    hits = {name: selection_hits(rows, labels).astype(np.float64) for name, rows in chosen.items()}
    return {
        "heldout_problems": held.n_problems,
        "heldout_candidates": held.n_candidates,
        "accuracy": {name: float(h.mean()) for name, h in hits.items()} | {"coverage": coverage},
        "difference_ci95": {f"distilled - {other}": list(paired_difference_ci(hits[other], hits["distilled"], seed=seed))
                            for other in ("majority", "weaver", "first sample")},
        "unanswered_picks": unanswered,
        "agreement_with_weaver": {"same_candidate": float(same.mean()), "same_answer": float(same_answer.mean())},
        "rank_correlation_with_weaver": _spearman(distilled, weaver),
    }


def _local_choice(chosen: np.ndarray, data, held_rows: np.ndarray, held) -> np.ndarray:
    """``[held.n_problems]`` rows of ``held`` of a selector's picks on all of ``data`` (-1 where none)."""
    made = chosen[chosen >= 0]
    position = np.searchsorted(held_rows, made)
    inside = (position < held_rows.size) & (held_rows[np.minimum(position, held_rows.size - 1)] == made)
    out = np.full(held.n_problems, -1, dtype=np.int64)
    out[held.groups[position[inside]]] = position[inside]
    return out


def _device_name(device: str) -> str:
    """The torch device in words (the GPU's name on CUDA)."""
    if device.startswith("cuda"):
        import torch

        return f"{device} ({torch.cuda.get_device_name(torch.device(device))})"
    return f"{device} ({os.cpu_count()} cores)"


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    finite = np.isfinite(a) & np.isfinite(b)
    return float(spearmanr(a[finite], b[finite]).statistic) if finite.sum() > 2 else float("nan")


def render(report: dict[str, Any]) -> str:
    """The distillation tables as markdown, with a plain verdict against majority vote and Weaver."""
    accuracy, cost, model = report["accuracy"], report["cost"], report["model"]
    unanswered = report.get("unanswered_picks", {})
    ensemble = cost.get("ensemble_s_per_candidate")
    per_candidate = {"distilled": f"{cost['distilled_s_per_candidate']:.4f}",
                     "weaver": f"{ensemble:.4f} (verifiers: {', '.join(cost['ensemble_verifiers'])})" if ensemble
                     else "unknown (no verify-stage time in the manifest)",
                     "majority": "0 (final answers only)", "first sample": "0", "coverage": "-"}
    lines = [f"# Weaver distilled into {model['backbone']} ({model['parameters'] / 1e6:.1f}M parameters)", "",
             f"Trained on {model['pairs']} candidates of {model['train_problems']} problems "
             f"({model['train_seconds']:.0f} s on {cost.get('device', model['settings'].get('device'))}); held out: "
             f"{report['heldout_problems']} problems, {report['heldout_candidates']} candidates.", ""]
    validation = report.get("validation")
    if validation and len(validation["settings"]) > 1:
        lines += [f"Setting chosen on {validation['problems']} validation problems ({validation['candidates']} "
                  f"candidates) by {validation['criterion']}; the held-out problems were not read until then:", "",
                  "| epochs | learning rate | batch | validation loss | Spearman with Weaver | chosen |",
                  "|---:|---:|---:|---:|---:|:---:|"]
        lines += [f"| {t['settings']['epochs']} | {t['settings']['learning_rate']:g} | {t['settings']['batch_size']} | "
                  f"{t['loss']:.4f} | {t['spearman_with_weaver']:.3f} | {'yes' if i == validation['chosen'] else ''} |"
                  for i, t in enumerate(validation["settings"])]
        lines.append("")
    lines += ["| method | held-out accuracy (%) | picks without a final answer (%) | seconds per candidate |",
              "|---|---:|---:|---:|"]
    lines += [f"| {name} | {100 * value:.1f} | "
              f"{'-' if name not in unanswered else f'{100 * unanswered[name]:.1f}'} | {per_candidate.get(name, '-')} |"
              for name, value in accuracy.items()]
    lines += ["", verdict(report), ""]
    agreement = report["agreement_with_weaver"]
    lines += [f"Agreement with Weaver's choice: {100 * agreement['same_candidate']:.1f} % same candidate, "
              f"{100 * agreement['same_answer']:.1f} % same answer; Spearman rank correlation of the scores "
              f"{report['rank_correlation_with_weaver']:.3f}.", ""]
    ratio = cost.get("ratio")
    lines.append(f"Cost per candidate: distilled {cost['distilled_s_per_candidate']:.4f} s; the ensemble "
                 + (f"({', '.join(cost['ensemble_verifiers'])}) {cost['ensemble_s_per_candidate']:.4f} s: "
                    f"the distilled model costs {ratio:.3g}x the ensemble." if ratio else
                    "time unknown (no verify-stage time in the manifest)."))
    return "\n".join(lines) + "\n"


def verdict(report: dict[str, Any]) -> str:
    """One sentence: the distilled verifier against majority vote and Weaver, with paired 95 % intervals."""
    accuracy, ci = report["accuracy"], report.get("difference_ci95", {})

    def gap(other: str) -> str:
        low, high = ci.get(f"distilled - {other}", (float("nan"), float("nan")))
        return f"{100 * (accuracy['distilled'] - accuracy[other]):+.1f} points (95 % CI {100 * low:+.1f} to {100 * high:+.1f})"

    if accuracy["distilled"] < accuracy["majority"]:
        head = f"**Below majority vote**: the distilled verifier selects {gap('majority')} against majority vote"
    else:
        head = f"The distilled verifier selects {gap('majority')} against majority vote"
    return f"{head} and {gap('weaver')} against the Weaver ensemble it was trained to imitate."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--backbone", default="all-MiniLM-L6-v2")
    parser.add_argument("--train-fraction", type=float, default=0.7, help="share of problems trained on")
    parser.add_argument("--validation-fraction", type=float, default=0.1,
                        help="share of problems that choose the setting (the rest is held out)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, nargs="+", default=[3], help="one or more (a grid)")
    parser.add_argument("--batch-size", type=int, nargs="+", default=[16], help="one or more (a grid)")
    parser.add_argument("--learning-rate", type=float, nargs="+", default=[5e-5], help="one or more (a grid)")
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-threads", type=int, default=None)
    args = parser.parse_args(argv)
    base = TrainingSettings(max_length=args.max_length, seed=args.seed, device=args.device, num_threads=args.num_threads)
    grid = settings_grid(base, args.epochs, args.learning_rate, args.batch_size)
    try:
        report = distill(args.run_dir, args.out, args.backbone, args.train_fraction, args.seed, grid,
                         args.validation_fraction)
    except (StoreError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
