"""Select stage: run every configured selector (plus the random and oracle references)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ...core.config import ExperimentConfig, SelectorSpec
from ...core.plugins import build_plugin
from ...core.records import SELECTION_SCHEMA
from ...core.selection_data import SelectionData
from ...selection.base import SELECTORS, Selector

REFERENCE_SELECTORS = (
    SelectorSpec(name="random (pass@1)", type="random"),
    SelectorSpec(name="oracle (coverage)", type="oracle"),
)
"""Rows every report shows: the no-selection baseline and the upper bound."""


def run_select_stage(config: ExperimentConfig, data: SelectionData, labels: np.ndarray,
                     ) -> tuple[pa.Table, dict[str, dict[str, Any]]]:
    """Fit and apply each selector; returns the selections table and per-method info.

    Label-free selectors are fitted on ``data`` alone; only selectors declaring
    ``uses_labels`` receive ``labels`` (and are marked so in the report).
    """
    configured = list(config.selectors)
    names = {s.name for s in configured}
    specs = configured + [s for s in REFERENCE_SELECTORS if s.name not in names]
    tables, info = [], {}
    for index, spec in enumerate(specs):
        key_path = f"selectors[{index}]" if index < len(configured) else f"reference selector {spec.name!r}"
        selector = fit_selector(build_selector(config, spec, key_path), data, labels)
        chosen = selector.select(data)
        scores = selector.decision_function(data)
        made = chosen >= 0
        tables.append(pa.table({
            "method": [spec.name] * data.n_problems,
            "problem_id": data.problems.astype(str),
            "generator_id": np.where(made, data.generator_id[np.maximum(chosen, 0)], None).tolist(),
            "sample_index": pa.array(np.where(made, data.sample_index[np.maximum(chosen, 0)], 0).tolist(),
                                     mask=~made, type=pa.int32()),
            "score": np.where(made, scores[np.maximum(chosen, 0)], np.nan),
        }, schema=SELECTION_SCHEMA))
        info[spec.name] = {"type": spec.type, "uses_labels": bool(selector.uses_labels), "chosen": chosen,
                           "notes": selector.notes()}
        if hasattr(selector, "heldout_problems"):
            info[spec.name]["heldout"] = selector.heldout_problems(data)
    return pa.concat_tables(tables) if tables else SELECTION_SCHEMA.empty_table(), info


def build_selector(config: ExperimentConfig, spec: SelectorSpec, key_path: str) -> Selector:
    """The unfitted selector of ``spec`` (``random`` draws with the experiment's seed unless given one)."""
    options = dict(spec.options)
    if spec.type == "random":
        options.setdefault("seed", config.seed)
    return build_plugin(SELECTORS, spec.type, key_path, **options)


def fit_selector(selector: Selector, data: SelectionData, labels: np.ndarray) -> Selector:
    """Fit on ``data``; only a label-based selector is given the labels."""
    return selector.fit(data, labels) if selector.uses_labels else selector.fit(data)
