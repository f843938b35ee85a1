"""Terminal output at 80 columns and piped: the identifying column is never cut, no line is wider than the
terminal, and `show --problem` is one line per candidate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from test_report_page import small_store

from monkeybarrel.experiments.reproduce.base import Comparison, Published, Row, print_comparison


def cli(*argv: str, columns: int = 80) -> str:
    """``monkeybarrel ARGV`` piped (stdout is not a terminal) with ``COLUMNS``."""
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.cli.main", *argv], env=env,
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return small_store(tmp_path_factory.mktemp("terminal") / "a rather long experiment directory name", problems=10)[0]


@pytest.mark.parametrize("columns", [80, 60])
def test_show_keeps_problem_ids_and_fits(store, columns):
    out = cli("show", str(store.directory), columns=columns)
    lines = out.splitlines()
    assert lines[0] == f"{store.directory}: 10 problems"  # a path is never broken across lines
    assert all(len(line) <= columns for line in lines[1:]), max(lines[1:], key=len)
    for pid in (f"q{p:02d}" for p in range(10)):
        assert any(line.startswith(pid + " ") for line in lines), pid
    assert "M = majority" in out and "N = naive_ensemble" in out and "\x1b[" not in out  # a legend; no colour codes


def test_show_problem_is_one_line_per_candidate(store):
    out = cli("show", str(store.directory), "--problem", "q03")
    lines = out.splitlines()
    candidate_lines = [line for line in lines if line.split(" ")[0].isdigit() and "the answer is" in line]
    assert len(candidate_lines) == 8 and len(lines) <= 8 + 5 and all(len(line) <= 80 for line in lines)
    assert all("the answer is" in line for line in candidate_lines)  # a text preview on the same line
    full = cli("show", str(store.directory), "--problem", "q03", "--full")
    assert full.count("the answer is") == 16  # previews, then every text whole


def test_report_summary_fits_80_columns_piped(store):
    out = cli("report", str(store.directory))
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines if str(store.directory) not in line), max(lines, key=len)
    for method in ("random (pass@1)", "oracle (coverage)", "naive_ensemble", "best v1"):
        assert any(line.startswith(method) for line in lines), method
    assert f"report: {store.directory / 'report.md'}" in lines  # the path on one line, never wrapped


def test_reproduce_tables_keep_group_names_and_deltas_whole():
    result = Comparison("x", "Weaver: MMLU-Pro", "hub hazyresearch/...", wide=True)
    for group in ("weaver-mmlu-pro-70b", "weaver-mmlu-pro-8b", "a-very-long-group-name-from-a-released-dataset"):
        for metric, ours, paper in (("first sample", 46.59, 46.6), ("majority", 56.21, 56.4),
                                    ("weaver (1% dev labels)", 67.02, 67.2), ("pass@K", 96.62, 96.8)):
            result.rows.append(Row(group, metric, ours, Published(paper, "arXiv 2506.18203, Table 20")))
    console = Console(width=80, file=open(os.devnull, "w"), record=True, color_system=None)
    print_comparison(result, console)
    out = console.export_text()
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    for group in ("weaver-mmlu-pro-70b", "weaver-mmlu-pro-8b", "a-very-long-group-name-from-a-released-dataset"):
        assert any(line.startswith(group) for line in lines), group
    assert out.count("(56.4,") == 3 and out.count("-0.2)") == 9 and out.count("-0.0)") == 3  # every delta whole
    assert "…" not in out  # nothing is cut, only folded
