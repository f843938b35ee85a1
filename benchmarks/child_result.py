"""How a benchmark's child process hands its result to the parent: one ``RESULT <json>`` line on its stdout,
among whatever vLLM and the rest print there."""

from __future__ import annotations

import json
from typing import Any

PREFIX = "RESULT "


def emit(result: Any) -> None:
    """Print ``result`` (JSON-serialisable) as the child's result line."""
    print(PREFIX + json.dumps(result), flush=True)


def parse(stdout: str) -> Any | None:
    """The first result line's value in a child's ``stdout``, or None if it printed none (it failed first)."""
    line = next((x for x in stdout.splitlines() if x.startswith(PREFIX)), None)
    return None if line is None else json.loads(line[len(PREFIX):])
