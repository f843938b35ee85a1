"""Adapter to the official SWE-bench harness (``pip install monkeybarrel[swebench]``).

The harness evaluates one prediction per instance per run, so many candidates per instance are
split into rounds: round r holds the r-th distinct patch of every instance, written as a
harness-format predictions file with ``model_name_or_path = "{prefix}-r{r}"``. Each round is one
``swebench.harness.run_evaluation.main`` call (it pulls/builds the ``sweb.eval.*`` images, so it needs
docker and a registry); the per-instance ``report.json`` files give ``resolved``.

Verdicts: the official harness grades from the printed test output of the run (a patch that prints
a test's ``PASSED`` line can make it count), unlike the local evaluator (``evaluate.py``), whose
verdict is attested by a reporter holding a sealed token. Labels that must hold against hostile
patches come from the local evaluator.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Sequence

from .predictions import write_predictions
from .schema import SWEInstance


def rounds(pairs: Sequence[tuple[SWEInstance, str]], prefix: str = "mb") -> list[list[dict[str, str]]]:
    """Split ``(instance, patch)`` pairs into harness runs with at most one patch per instance each.

    Equal patches of one instance are evaluated once. Returns the prediction rows of each round.
    """
    seen: dict[str, list[str]] = {}
    for instance, patch in pairs:
        patches = seen.setdefault(instance.instance_id, [])
        if patch not in patches:
            patches.append(patch)
    depth = max((len(v) for v in seen.values()), default=0)
    return [[{"instance_id": iid, "model_name_or_path": f"{prefix}-r{r}", "model_patch": patches[r]}
             for iid, patches in seen.items() if r < len(patches)] for r in range(depth)]


def read_reports(log_root: str | Path, run_id: str, model: str) -> dict[str, bool]:
    """``{instance_id: resolved}`` from ``{log_root}/{run_id}/{model}/{instance_id}/report.json``."""
    out = {}
    for report in Path(log_root, run_id, model).glob("*/report.json"):
        for instance_id, entry in json.loads(report.read_text()).items():
            out[instance_id] = bool(entry.get("resolved", False))
    return out


def evaluate_with_harness(pairs: Sequence[tuple[SWEInstance, str]], dataset_name: str = "princeton-nlp/SWE-bench_Lite",
                          split: str = "test", run_id: str = "monkeybarrel", max_workers: int = 4, timeout: int = 1800,
                          workdir: str | Path = ".", log_root: str | Path = "logs/run_evaluation",
                          **harness_kwargs: Any) -> list[bool]:
    """Resolved flags of ``(instance, patch)`` pairs, from the official harness.

    Args:
        pairs: what to evaluate (instances must come from ``dataset_name``/``split``).
        dataset_name, split, max_workers, timeout: passed to the harness.
        run_id: prefix of the harness run ids (one per round).
        workdir: where prediction files are written (the harness writes logs under its cwd).
        **harness_kwargs: further ``run_evaluation.main`` arguments (``cache_level``, ``namespace``, ...).
    """
    try:
        from swebench.harness.run_evaluation import main as run_evaluation
    except ImportError as exc:
        raise ImportError("evaluator 'harness' needs `pip install monkeybarrel[swebench]` (the swebench package), "
                          "docker, and access to the harness images") from exc
    accepted = set(inspect.signature(run_evaluation).parameters)
    results: dict[tuple[str, str], bool] = {}
    for r, rows in enumerate(rounds(pairs, prefix=run_id)):
        model = rows[0]["model_name_or_path"]
        path = write_predictions(rows, Path(workdir) / f"{model}.predictions.jsonl")
        kwargs = dict(dataset_name=dataset_name, split=split, instance_ids=[row["instance_id"] for row in rows],
                      predictions_path=str(path), max_workers=max_workers, run_id=model, timeout=timeout,
                      force_rebuild=False, cache_level="env", clean=False, open_file_limit=4096,
                      rewrite_reports=False, modal=False, namespace=None, instance_image_tag="latest",
                      report_dir=str(workdir), **harness_kwargs)
        run_evaluation(**{k: v for k, v in kwargs.items() if k in accepted})
        resolved = read_reports(log_root, model, model)
        for row in rows:
            results[(row["instance_id"], row["model_patch"])] = resolved.get(row["instance_id"], False)
    return [results[(instance.instance_id, patch)] for instance, patch in pairs]
