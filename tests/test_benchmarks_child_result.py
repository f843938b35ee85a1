"""The benchmarks' child-process result line (benchmarks/child_result.py): found among other output, or None."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from child_result import parse  # noqa: E402


def test_a_child_result_line_is_found_among_other_output_and_a_failed_child_has_none():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from child_result import emit; "
            "print('INFO engine starting'); emit({'tok_s': 1.5, 'jobs': [[8, 128]]}); print('RESULT is a word here')")
    out = subprocess.run([sys.executable, "-c", code, str(BENCHMARKS)], capture_output=True, text=True, check=True)
    assert parse(out.stdout) == {"tok_s": 1.5, "jobs": [[8, 128]]}
    assert parse("INFO engine starting\nTraceback (most recent call last):\n") is None
