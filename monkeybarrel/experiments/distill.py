"""Distil an experiment's Weaver ensemble into one cross-encoder and report it on held-out problems.

    python -m monkeybarrel.experiments.distill RUN_DIR --out RUN_DIR/distilled \
        [--backbone all-MiniLM-L6-v2] [--train-fraction 0.7] [--epochs 3] [--device cpu]

1. Weaver (label-free, the run's first ``weaver`` selector, else the default) is fitted on every
   problem of the run; its posterior P(correct) per candidate is the soft label.
2. Problems are split by id (``train_fraction`` of them, seeded): the cross-encoder trains on the
   training problems' candidates only (``verifiers.distilled.train_cross_encoder``).
3. On the held-out problems the trained model scores every candidate alone (the ``distilled``
   verifier) and picks the argmax per problem. ``distillation.json`` and ``distillation.md`` in
   ``--out`` give: agreement with Weaver's choice (same candidate, same answer), selection accuracy
   beside Weaver / majority / first sample / coverage, and seconds per candidate of the distilled
   model against the verifier ensemble's (the run's verify-stage wall time per candidate).

Labels are read only to report accuracy. Use the model on new runs with
``verifiers: [{name: distilled, type: distilled, options: {model: DIR}}]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
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


def distill(run_dir: str | Path, out_dir: str | Path, backbone: str = "all-MiniLM-L6-v2", train_fraction: float = 0.7,
            seed: int = 0, settings: TrainingSettings | None = None) -> dict[str, Any]:
    """Train on the run's training problems, evaluate on the others; returns (and writes) the report."""
    experiment = Experiment(run_dir)
    data, labels = experiment.selection_data(), experiment.labels_array()
    if data.n_problems < 2:
        raise ValueError(f"{run_dir}: distillation needs at least 2 problems (one to train on, one to hold out)")
    candidates = candidates_from_table(experiment.candidates())
    by_id = {p.problem_id: p for p in experiment.problems()}
    weaver = weaver_for(experiment)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        weaver.fit(data)
    posterior = weaver.predict_proba(data)
    train = problem_share_mask(data, train_fraction, seed)
    if train.all():
        raise ValueError(f"train_fraction {train_fraction} leaves no held-out problem among {data.n_problems}")
    rows = np.flatnonzero(train)
    model_dir = train_cross_encoder([by_id[str(data.problem_id[r])] for r in rows], [candidates[r] for r in rows],
                                    posterior[rows], backbone, out_dir, settings,
                                    metadata={"source_run": str(Path(run_dir).resolve()), "weaver": repr(weaver),
                                              "train_problems": int(np.unique(data.groups[rows]).size)})
    held_rows = np.flatnonzero(~train)
    held = data.subset(held_rows)
    verifier = DistilledVerifier("distilled", str(model_dir),
                                 max_length=(settings or TrainingSettings()).max_length,
                                 device=(settings or TrainingSettings()).device)
    scores = np.full(held_rows.size, np.nan)
    began = time.perf_counter()
    for group in range(held.n_problems):
        local = np.flatnonzero(held.groups == group)
        problem = by_id[str(held.problems[group])]
        scores[local] = verifier.score_safely(problem, [candidates[held_rows[i]] for i in local])[0]
    seconds = time.perf_counter() - began
    report = evaluation(held, labels[held_rows], scores, weaver.decision_function(data)[held_rows],
                        _local_choice(weaver.select(data), data, held_rows, held), seed)
    verify_seconds = experiment.manifest().get("costs", {}).get("stage_wall_s", {}).get("verify")
    report["cost"] = {
        "distilled_s_per_candidate": seconds / max(held_rows.size, 1),
        "ensemble_s_per_candidate": None if verify_seconds is None else verify_seconds / max(data.n_candidates, 1),
        "ensemble_verifiers": [v.name for v in experiment.config.verifiers],
        "device": _device_name((settings or TrainingSettings()).device),
    }
    if report["cost"]["ensemble_s_per_candidate"]:
        report["cost"]["ratio"] = report["cost"]["distilled_s_per_candidate"] / report["cost"]["ensemble_s_per_candidate"]
    report["model"] = json.loads((Path(model_dir) / "distilled.json").read_text())
    Path(out_dir, "distillation.json").write_text(json.dumps(report, indent=2))
    Path(out_dir, "distillation.md").write_text(render(report))
    return report


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
    """The distillation table as markdown, with a plain verdict against majority vote and Weaver."""
    accuracy, cost, model = report["accuracy"], report["cost"], report["model"]
    lines = [f"# Weaver distilled into {model['backbone']} ({model['parameters'] / 1e6:.1f}M parameters)", "",
             f"Trained on {model['pairs']} candidates of {model['train_problems']} problems "
             f"({model['train_seconds']:.0f} s on {cost.get('device', model['settings'].get('device'))}); held out: "
             f"{report['heldout_problems']} problems, {report['heldout_candidates']} candidates.", "",
             "| method | held-out accuracy (%) |", "|---|---:|"]
    lines += [f"| {name} | {100 * value:.1f} |" for name, value in accuracy.items()]
    lines += ["", verdict(report), ""]
    agreement = report["agreement_with_weaver"]
    lines += [f"Agreement with Weaver's choice: {100 * agreement['same_candidate']:.1f} % same candidate, "
              f"{100 * agreement['same_answer']:.1f} % same answer; Spearman rank correlation of the scores "
              f"{report['rank_correlation_with_weaver']:.3f}.", ""]
    ratio = cost.get("ratio")
    lines.append(f"Cost per candidate: distilled {cost['distilled_s_per_candidate']:.4f} s; the ensemble "
                 + (f"({', '.join(cost['ensemble_verifiers'])}) {cost['ensemble_s_per_candidate']:.4f} s: "
                    f"{100 * ratio:.2f} % of it." if ratio else "time unknown (no verify-stage time in the manifest)."))
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
    parser.add_argument("--train-fraction", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--max-length", type=int, default=384)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--num-threads", type=int, default=None)
    args = parser.parse_args(argv)
    settings = TrainingSettings(epochs=args.epochs, batch_size=args.batch_size, learning_rate=args.learning_rate,
                                max_length=args.max_length, seed=args.seed, device=args.device,
                                num_threads=args.num_threads)
    try:
        report = distill(args.run_dir, args.out, args.backbone, args.train_fraction, args.seed, settings)
    except (StoreError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
