"""Prediction files in the SWE-bench harness format, as candidates (each system = one generator).

A prediction file is JSONL (one ``{instance_id, model_name_or_path, model_patch}`` per line), a JSON
list of such objects, or a JSON object keyed by instance id (the harness accepts all three).
The sampler backend ``swe_predictions`` (``monkeybarrel.samplers.swe_predictions``) serves them
to the runner.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ...core.files import TaskDataError

FIELDS = ("instance_id", "model_name_or_path", "model_patch")


def read_predictions(path: str | Path) -> dict[str, list[dict]]:
    """``{instance_id: [prediction, ...]}`` in file order; errors name file, line and field.

    ``model_patch`` may be null/empty (a system that gave up): kept, it becomes an empty candidate.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskDataError(f"{path}: prediction file not found")
    text = path.read_text(encoding="utf-8")
    rows: list[tuple[str, object]] = []
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")) and not _looks_like_jsonl(stripped):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskDataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        items = data.values() if isinstance(data, dict) else data
        rows = [(f"{path}: entry {i}", item) for i, item in enumerate(items, 1)]
    else:
        for line_number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path}:{line_number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TaskDataError(f"{path}:{line_number}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    out: dict[str, list[dict]] = defaultdict(list)
    for where, row in rows:
        if not isinstance(row, dict):
            raise TaskDataError(f"{where}: expected a JSON object with fields {list(FIELDS)}")
        for field in ("instance_id", "model_name_or_path"):
            if not isinstance(row.get(field), str) or not row[field]:
                raise TaskDataError(f"{where}: field {field}: missing or not a string")
        if "model_patch" not in row or not isinstance(row["model_patch"], (str, type(None))):
            raise TaskDataError(f"{where}: field model_patch: missing or not a string")
        out[row["instance_id"]].append(row)
    return dict(out)


def _looks_like_jsonl(text: str) -> bool:
    first = text.split("\n", 1)[0].strip()
    try:
        return isinstance(json.loads(first), dict) and "\n" in text.strip()
    except json.JSONDecodeError:
        return False


def write_predictions(rows: list[dict], path: str | Path) -> Path:
    """Write harness-format JSONL (``instance_id``, ``model_name_or_path``, ``model_patch``)."""
    path = Path(path)
    path.write_text("".join(json.dumps({k: row[k] for k in FIELDS}) + "\n" for row in rows))
    return path
