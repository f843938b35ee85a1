"""Each point's accuracy against k and its compute per k, read from its store without re-running selection.

A point contributes per-problem sample and correct counts (``labels.parquet``: three columns, one
group-by), its ``metrics.json`` (majority@k with intervals, each selector's accuracy against k, each
selector at all samples with its interval) and its manifest's costs (prompt and completion tokens,
GPU-seconds). Coverage intervals are bootstrapped here, for all points of a task at once with one
set of resampling weights (``core.intervals``), so intervals of different points are paired.

Compute per problem at k samples (``PointCurves.budget``):

* ``samples``: k;
* ``tokens``: k x mean completion tokens per sample (generated tokens);
* ``flops``: 2 x parameters x (mean prompt tokens + k x mean completion tokens), the forward-pass
  FLOPs proxy of Large Language Monkeys (prompt prefilled once per problem, as our engines do with
  n samples per prompt and prefix caching);
* ``gpu_s``: k x GPU-seconds per sample: the point's GPU-seconds over its samples, with engine starts
  shared equally by the points each engine served (``accounting``; in a directory without
  ``sweep.json``, the sample stage's own GPU-seconds).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...core.config import ExperimentConfig, fingerprint
from ...core.intervals import DEFAULT_RESAMPLES, bootstrap_means, percentile_interval
from ...core.metrics import default_ks, pass_at_k
from ..stages.sample import gpu_summary
from ..store.config_guard import result_inputs

BUDGETS = ("flops", "tokens", "samples", "gpu_s")
BUDGET_NAMES = {"flops": "FLOPs per problem (proxy)", "tokens": "generated tokens per problem",
                "samples": "samples per problem", "gpu_s": "GPU-seconds per problem"}
_SIZE = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)\s?([mMbBkK])(?![A-Za-z])")
_SCALE = {"k": 1e3, "m": 1e6, "b": 1e9}


@dataclass
class PointCurves:
    """One point's curves (``[K]`` arrays over ``ks``; NaN where a metric is unknown at that k)."""

    name: str
    state: str
    overrides: dict[str, Any]
    model: str
    """The generators' models, ``+``-joined (the report's colour)."""
    task: str
    """Task group key: points of one task (same data, options and seed) are compared with each other."""
    task_label: str
    ks: np.ndarray
    problem_ids: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=object))
    n: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    """``[P]`` labelled samples per problem."""
    c: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    """``[P]`` correct samples per problem."""
    curves: dict[str, np.ndarray] = field(default_factory=dict)
    intervals: dict[str, np.ndarray] = field(default_factory=dict)
    """metric -> ``[K, 2]`` 95% interval (NaN where none is stored)."""
    selectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The point's selection table at all samples (``metrics.json`` ``selection``)."""
    candidates: int = 0
    prompt_tokens: float = float("nan")
    """Mean prompt tokens per sample."""
    completion_tokens: float = float("nan")
    """Mean completion tokens per sample."""
    gpu_s_per_sample: float = float("nan")
    params: float = float("nan")
    """Parameters of the model(s) (sum when several), for the FLOPs proxy."""

    def budget(self, kind: str, ks: np.ndarray | None = None) -> np.ndarray:
        """``[K]`` compute per problem at ``ks`` (default the point's) in ``kind`` units (NaN if unknown)."""
        k = np.asarray(self.ks if ks is None else ks, dtype=np.float64)
        if kind == "samples":
            return k
        if kind == "tokens":
            return k * self.completion_tokens
        if kind == "flops":
            return 2.0 * self.params * (np.nan_to_num(self.prompt_tokens) + k * self.completion_tokens)
        if kind == "gpu_s":
            return k * self.gpu_s_per_sample
        raise ValueError(f"budget must be one of {BUDGETS}, got {kind!r}")


def model_params(model: str, known: dict[str, float]) -> float:
    """Parameters of ``model``: from ``known`` (the sweep's ``model_params``), else its name (``8B``, ``135m``)."""
    if model in known:
        return float(known[model])
    found = _SIZE.findall(Path(model).name if "/" in model else model)
    if not found:
        return float("nan")
    number, unit = found[-1]
    return float(number) * _SCALE[unit.lower()]


def read_point(directory: Path, name: str, state: str, overrides: dict[str, Any],
               known_params: dict[str, float], gpu_s: float | None = None) -> PointCurves | None:
    """The curves of the store ``directory`` (None when it has no config yet); ``gpu_s``: the point's
    GPU-seconds with engine starts shared (default: its sample stages' own)."""
    if not (directory / "config.yaml").is_file():
        return None
    config = ExperimentConfig.from_yaml(directory / "config.yaml")
    metrics = _json(directory / "metrics.json")
    manifest = _json(directory / "manifest.json")
    models = [_model_name(g.model) for g in config.generators]
    task = result_inputs(config)["task"]
    point = PointCurves(name=name, state=state, overrides=overrides, model="+".join(dict.fromkeys(models)),
                        task=fingerprint(task), task_label=_task_label(config), ks=np.zeros(0, dtype=np.int64))
    point.params = float(sum(model_params(m, known_params) for m in dict.fromkeys(models)))
    _read_counts(point, directory / "labels.parquet", [g.id for g in config.generators])
    _read_costs(point, manifest, [g.id for g in config.generators], gpu_s)
    n_max = int(point.n.max()) if point.n.size else 0
    point.ks = np.asarray(metrics.get("ks") or default_ks(n_max), dtype=np.int64)
    _read_metrics(point, metrics)
    return point


def _model_name(model: str) -> str:
    return Path(model).name if model.startswith(("/", ".", "~")) else model


def _task_label(config: ExperimentConfig) -> str:
    task = config.task
    parts = [task.name]
    if task.path:
        parts.append("/".join(Path(task.path).parts[-2:]))
    parts += [f"{k}={v}" for k, v in sorted(task.options.items())]
    return " ".join(parts)


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def _read_counts(point: PointCurves, path: Path, generators: list[str]) -> None:
    """Per-problem samples and correct counts of the configured generators (dictionary codes, two bincounts)."""
    if not path.is_file():
        return
    table = pq.read_table(path, columns=["problem_id", "generator_id", "correct"],
                          read_dictionary=["problem_id", "generator_id"])
    problem, generator = _codes(table.column("problem_id")), _codes(table.column("generator_id"))
    wanted = np.isin(np.asarray(generator.dictionary.to_pylist(), dtype=object), generators)
    keep = wanted[generator.indices.to_numpy()] if len(generator.dictionary) else np.zeros(0, bool)
    codes = problem.indices.to_numpy()[keep]
    correct = table.column("correct").to_numpy(zero_copy_only=False)[keep].astype(bool)  # nulls are not correct
    size = len(problem.dictionary)
    n, c = np.bincount(codes, minlength=size), np.bincount(codes, weights=correct, minlength=size)
    present = np.flatnonzero(n)
    point.problem_ids = np.asarray(problem.dictionary.to_pylist(), dtype=object)[present]
    point.n, point.c = n[present].astype(np.float64), c[present]


def _codes(column: pa.ChunkedArray) -> pa.DictionaryArray:
    """One dictionary array (dictionaries unified across chunks) of a dictionary-read column."""
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column)
    return column.unify_dictionaries().combine_chunks() if column.num_chunks > 1 else column.chunk(0) \
        if column.num_chunks else pa.array([], pa.string()).dictionary_encode()


def _read_costs(point: PointCurves, manifest: dict[str, Any], generators: list[str], shared_gpu_s: float | None) -> None:
    costs = manifest.get("costs", {}).get("generators", {})
    rows = [costs[g] for g in generators if g in costs]
    candidates = sum(r.get("candidates", 0) for r in rows)
    point.candidates = int(candidates or point.n.sum())
    if candidates:
        point.prompt_tokens = sum(r.get("prompt_tokens", 0) for r in rows) / candidates
        point.completion_tokens = sum(r.get("completion_tokens", 0) for r in rows) / candidates or float("nan")
        gpu = gpu_summary(manifest.get("runs", []))
        seconds = [gpu[g] for g in generators if g in gpu]
        total = shared_gpu_s if shared_gpu_s is not None else sum(seconds)
        if seconds and total > 0:
            point.gpu_s_per_sample = total / candidates


def _read_metrics(point: PointCurves, metrics: dict[str, Any]) -> None:
    """Selector curves and intervals from ``metrics.json`` (coverage is computed from the counts)."""
    ks = point.ks
    nan_curve = np.full(ks.size, np.nan)
    point.selectors = metrics.get("selection", {})
    for name, info in point.selectors.items():
        if info.get("uses_labels") or info.get("type") == "random":
            continue  # oracle = coverage; random (pass@1) = coverage at k = 1
        stored = metrics.get("accuracy_vs_k", {}).get(name, {})
        if info.get("type") == "majority" and not stored:
            stored = metrics.get("majority", {})
        curve = np.array([_number(stored.get(str(k))) for k in ks]) if ks.size else nan_curve
        band = np.full((ks.size, 2), np.nan)
        if info.get("type") == "majority":
            for i, k in enumerate(ks):
                band[i] = metrics.get("majority_ci95", {}).get(str(k)) or (np.nan, np.nan)
        if ks.size and point.n.size and int(ks[-1]) == int(point.n.max()):  # all samples: the selection itself
            curve[-1] = _number(info.get("accuracy"))
            band[-1] = info.get("ci95") or (np.nan, np.nan)
        point.curves[name], point.intervals[name] = curve, band


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def add_coverage(points: list[PointCurves], resamples: int = DEFAULT_RESAMPLES, seed: int = 0) -> None:
    """Coverage (unbiased pass@k) and its 95% bootstrap interval at each point's ks, for points of one task.

    One ``[P, S]`` matrix of per-problem pass@k (P = the union of the points' problems, NaN where a
    point lacks a problem or has fewer than k samples; S = every point's ks) is resampled once.
    """
    points = [p for p in points if p.n.size]
    if not points:
        return
    problems = np.unique(np.concatenate([p.problem_ids for p in points]).astype(str))
    columns = []
    for point in points:
        n = np.zeros(problems.size)
        c = np.zeros(problems.size)
        where = np.searchsorted(problems, point.problem_ids.astype(str))
        n[where], c[where] = point.n, point.c
        grid = pass_at_k(n[:, None], c[:, None], point.ks[None, :].astype(np.float64))  # NaN where k > n (or absent)
        counted = (~np.isnan(grid)).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(counted > 0, np.nansum(grid, axis=0) / counted, np.nan)
        point.curves = {"coverage": mean, **point.curves}
        columns.append(grid)
    matrix = np.concatenate(columns, axis=1)
    bands = percentile_interval(bootstrap_means(matrix, resamples, seed)) if matrix.shape[0] else \
        np.full((matrix.shape[1], 2), np.nan)
    start = 0
    for point in points:
        point.intervals = {"coverage": bands[start:start + point.ks.size], **point.intervals}
        start += point.ks.size
