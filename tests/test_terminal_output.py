"""What every command prints, in an 80-column terminal (a pseudo-terminal: colours, the real width) and piped:
every column and value is there (checked against the store, not by counting lines), the identifying column
is never cut, a header is never broken inside a word, no table line is wider than 80 columns.

Run with the oldest rich the project supports too: ``PYTHONPATH=<rich 13.0 copy> pytest tests/test_terminal_output.py``
(the commands run as subprocesses and inherit it)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import tiny_config
from rich.console import Console
from test_report_page import small_store

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import Problem
from monkeybarrel.experiments.precomputed import write_precomputed
from monkeybarrel.experiments.reproduce.base import Comparison, Published, Row, print_comparison
from monkeybarrel.orchestrator.experiment import Experiment
from monkeybarrel.orchestrator.report.drilldown import Drilldown
from monkeybarrel.orchestrator.runner import evaluate_and_report

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
MODES = ("terminal", "piped")
CLI = [sys.executable, "-m", "monkeybarrel.orchestrator.cli.main"]


def piped(*argv: str, columns: int = 80, status: int = 0) -> str:
    """``monkeybarrel ARGV`` with stdout a pipe and ``COLUMNS``; its stdout."""
    env = {**os.environ, "COLUMNS": str(columns)}
    done = subprocess.run([*CLI, *argv], env=env, capture_output=True, text=True)
    assert done.returncode == status, done.stderr
    assert "\x1b[" not in done.stdout  # piped: no colour codes
    return done.stdout


def terminal(*argv: str, columns: int = 80, status: int = 0) -> str:
    """``monkeybarrel ARGV`` in a pseudo-terminal ``columns`` wide (no ``COLUMNS``: rich asks the terminal);
    its output with the colour codes removed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    process = subprocess.Popen([*CLI, *argv], stdin=follower, stdout=follower, stderr=follower,
                               env={**env, "TERM": "xterm-256color"}, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 600)
        if not ready:
            process.kill()
            raise TimeoutError(argv)
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait() == status
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def output(mode: str, *argv: str, status: int = 0) -> str:
    return terminal(*argv, status=status) if mode == "terminal" else piped(*argv, status=status)


def table_lines(text: str, header: str) -> list[str]:
    """The lines of the table whose header line starts with ``header``, up to the first blank or legend line."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].strip() or ":" in lines[i][:12]
                and not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def fits(lines: list[str], columns: int = 80) -> None:
    assert all(len(line) <= columns for line in lines), max(lines, key=len)


# ---- stores ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return small_store(tmp_path_factory.mktemp("terminal") / "a rather long experiment directory name", problems=10)[0]


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Experiment:
    """Long texts, three verifiers with long names, long answers, candidates without an answer."""
    rng = np.random.default_rng(1)
    config = ExperimentConfig.from_dict({
        "name": "wide", "task": {"name": "page", "num_problems": None},
        "generators": [{"id": "g", "backend": "precomputed", "model": "g", "num_samples": 6}],
        "verifiers": [{"name": name, "type": "precomputed"} for name in ("unit_tests", "reward_model", "judge")],
        "selectors": [{"name": "majority", "type": "majority"}, {"name": "naive_ensemble", "type": "naive_ensemble"}]})
    keys, texts, answers, labels, problems = [], [], [], [], []
    for p in range(4):
        pid, reference = f"problem-{p:03d}", str(p * 1234567 + 89)
        problems.append(Problem(pid, "page", prompt=f"Compute {p} * 1234567 + 89", reference_answer=reference))
        for i in range(6):
            right = bool(rng.random() < 0.4)
            answer = reference if right else (None if i in (0, 1) else str(rng.integers(10**5, 10**6)))
            keys.append((pid, "g", i))
            answers.append(answer)
            texts.append("Let us think step by step about this long problem statement. " * 6 + f"So: {answer}.")
            labels.append(right)
    truth = np.array(labels, float)
    scores = {"unit_tests": truth + rng.normal(0, .5, truth.size), "reward_model": rng.random(truth.size),
              "judge": np.where(rng.random(truth.size) < 0.2, np.nan, rng.random(truth.size))}
    experiment = write_precomputed(tmp_path_factory.mktemp("wide") / "wide", config, problems, keys, texts, answers,
                                   labels, scores=scores)
    evaluate_and_report(experiment)
    return experiment


# ---- show ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode, columns", [("terminal", 80), ("piped", 80), ("piped", 160), ("piped", 250)])
def test_show_problem_prints_every_column_of_every_candidate(wide, mode, columns):
    """rich 15 dropped every column but ``#`` and ``text`` at 80, 160 and 250 columns (a test that counted lines
    passed)."""
    view = Drilldown.load(wide)
    codes = {"majority": "M", "naive_ensemble": "N", "random (pass@1)": "R", "oracle (coverage)": "O"}
    for pid in view.problem_ids()[:2]:
        argv = ("show", str(wide.directory), "--problem", pid)
        out = terminal(*argv, columns=columns) if mode == "terminal" else piped(*argv, columns=columns)
        rows = table_lines(out, "#  answer")
        assert rows[0].split() == ["#", "answer", "ok", "unit_tests", "reward_model", "judge", "finish", "picked", "text"]
        fits(rows, columns)
        for candidate in view.candidate_rows(pid):
            line = next(line for line in rows[1:] if line.split()[0] == str(candidate["sample_index"]))
            cells = line.split()
            assert cells[1] == ("–" if candidate["answer"] is None else candidate["answer"])  # never "None"
            assert cells[2] == {True: "✓", False: "✗", None: "–"}[candidate["correct"]]
            scores = ["–" if s is None else f"{s:.3g}" for s in candidate["scores"].values()]
            assert cells[3:6] == scores
            assert cells[6] == candidate["finish_reason"]
            assert cells[7] == ("".join(codes[m] for m in candidate["picked_by"]) or "·")
            preview = line.split(None, 8)[8]
            assert preview.startswith("Let us think") and (line.endswith("…") or preview.endswith(".")), line


@pytest.mark.parametrize("mode", MODES)
def test_show_lists_every_pick_with_whole_headers(wide, mode):
    """At 80 columns "reference" was broken into "refere/nce" and a pick without an answer read "None ✗"."""
    out = output(mode, "show", str(wide.directory))
    view = Drilldown.load(wide)
    lines = out.splitlines()
    assert lines[0] == f"{wide.directory}: 4 problems"  # a path is never broken
    rows = table_lines(out, "problem ")
    assert rows[0].split() == ["problem", "samples", "correct", "reference", "M", "N", "R", "O"]
    fits(rows)
    text = "\n".join(rows)
    for pid in view.problem_ids():
        info = view.summary(pid)
        start = next(i for i, line in enumerate(rows) if line.startswith(pid + " "))
        block = " ".join([rows[start], *(r for r in rows[start + 1:] if r.startswith(" "))])
        assert block.split()[1:4] == [str(info["n"]), str(info["n_correct"]), info["reference"]]
        for method, pick in info["picks"].items():
            shown = "·" if pick["row"] < 0 else f"{pick['answer'] or '–'} {'✓' if pick['correct'] else '✗'}"
            assert shown in block or shown.replace(" ", "") in block.replace(" ", ""), (method, shown, block)
    assert "None" not in text and "refere\n" not in out
    assert "picks: M = majority, N = naive_ensemble" in out


@pytest.mark.parametrize("columns", [80, 60])
def test_show_keeps_problem_ids_and_fits(store, columns):
    out = piped("show", str(store.directory), columns=columns)
    lines = out.splitlines()
    assert lines[0] == f"{store.directory}: 10 problems"  # a path is never broken across lines
    fits(table_lines(out, "problem "), columns)
    for pid in (f"q{p:02d}" for p in range(10)):
        assert any(line.startswith(pid + " ") for line in lines), pid
    assert "M = majority" in out and "N = naive_ensemble" in out


# ---- run, report, validate, compare, export, store, reproduce ---------------------------------------------------

def summary_checks(out: str, metrics: dict, directory: Path) -> None:
    """The summary of ``run``/``demo``/``report``: every k, curve, method and verifier with its figure."""
    lines = out.splitlines()
    curves = [name for name in metrics.get("accuracy_vs_k", {}) if name != "majority"]
    header = table_lines(out, "k ")
    positions = [header[0].find(f"  {name}") for name in ["coverage", "majority", *curves]]
    assert -1 not in positions and positions == sorted(positions), header[0]  # every curve, in order
    fits(header)
    for k in metrics["ks"]:
        row = next(line.split() for line in header[1:] if line.split()[0] == str(k))
        assert row[1] == f"{100 * metrics['coverage'][str(k)]:.1f}"
    for method, info in metrics["selection"].items():
        line = next(line for line in lines if line.startswith(method + " "))
        assert f"{100 * info['accuracy']:.1f} [" in line and line.rstrip().endswith("yes" if info["uses_labels"] else "no")
    for name in metrics.get("verifiers", {}):
        assert any(line.startswith(name + " ") for line in lines), name
    assert f"report: {directory / 'report.md'}" in lines and f"page:   {directory / 'report.html'}" in lines


@pytest.mark.parametrize("mode", MODES)
def test_report_summary(store, mode):
    out = output(mode, "report", str(store.directory))
    summary_checks(out, store.metrics(), store.directory)
    for method in ("random (pass@1)", "oracle (coverage)", "naive_ensemble", "best v1"):
        assert any(line.startswith(method) for line in out.splitlines()), method


def test_run_then_its_summary_in_a_terminal_and_piped(tmp_path):
    """A real run on the embedded model (terminal), then the same command again (piped: resumes, nothing to
    sample) prints the same summary."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config(problems=2, samples=2, max_tokens=8,
                                                 verifiers=[{"name": "len", "type": "length"}],
                                                 selectors=[{"name": "majority", "type": "majority"},
                                                            {"name": "best len", "type": "best_single"}])))
    out_dir = tmp_path / "out"
    for mode in MODES:
        out = output(mode, "run", str(config), "--out", str(out_dir), "--no-progress")
        summary_checks(out, Experiment(out_dir).metrics(), out_dir)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_demo_summary(tmp_path, mode):
    out = output(mode, "demo", "--problems", "1", "--samples", "2", "--out", str(tmp_path / "demo"), "--no-progress")
    summary_checks(out, Experiment(tmp_path / "demo").metrics(), tmp_path / "demo")


@pytest.mark.parametrize("mode", MODES)
def test_validate_prints_the_resolved_config(tmp_path, mode):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(selectors=[{"name": "w", "type": "weaver",
                                                             "options": {"model__threshold": 0.6}}])))
    out = output(mode, "validate", str(config))
    lines = out.splitlines()
    assert yaml.safe_load("\n".join(lines[:-1]))["selectors"][0]["options"] == {"model__threshold": 0.6}
    assert lines[-1] == "# ok: 3 problems; every generator, verifier and selector checks out"


@pytest.mark.parametrize("mode", MODES)
def test_compare_prints_every_metric_and_interval(store, tmp_path_factory, mode):
    other = small_store(tmp_path_factory.mktemp("compare") / "other", problems=10, seed=3)[0]
    out = output(mode, "compare", str(store.directory), str(other.directory))
    rows = table_lines(out, "metric ")
    assert rows[0].split() == ["metric", "first", "%", "second", "%", "delta", "95%", "interval"]
    fits(rows)
    for method in ("sample accuracy", "coverage@1", "majority", "naive_ensemble", "best v1", "oracle (coverage)"):
        line = next(line for line in rows if line.startswith(method))
        assert re.search(r"[+-]\d+\.\d  \s*\[[+-]\d+\.\d, [+-]\d+\.\d\]$", line), line
    assert "identical" in out  # the same config


@pytest.mark.parametrize("mode", MODES)
def test_export_and_store_check(store, tmp_path, mode):
    target = tmp_path / f"export-{mode}.csv"
    assert output(mode, "export", str(store.directory), "--out", str(target)).strip() == f"wrote {target}"
    out = output(mode, "store", "check", str(store.directory))
    assert "candidates: 80 rows in" in out and "no problems found" in out


@pytest.mark.parametrize("mode", MODES)
def test_reproduce_list_names_every_recipe_and_fits(mode):
    from monkeybarrel.experiments.reproduce import all_recipes

    out = output(mode, "reproduce", "list")
    lines = out.splitlines()
    fits(lines)
    for name, recipe in all_recipes().items():
        line = next(line for line in lines if line.startswith(name + "  "))
        assert recipe.title.split()[0] in line
    assert out.count("  paper: ") == len(all_recipes()) and out.count("  --data: ") == len(all_recipes())


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
    fits(lines)
    for group in ("weaver-mmlu-pro-70b", "weaver-mmlu-pro-8b", "a-very-long-group-name-from-a-released-dataset"):
        assert any(line.startswith(group) for line in lines), group
    assert out.count("(56.4,") == 3 and out.count("-0.2)") == 9 and out.count("-0.0)") == 3  # every delta whole
    assert "…" not in out  # nothing is cut, only folded


# ---- sweep -----------------------------------------------------------------------------------------------------

def write_sweep(path: Path, axes: dict) -> Path:
    base = tiny_config(problems=1, samples=2, max_tokens=6)
    path.write_text(yaml.safe_dump({"name": "tiny-sweep", "base": base, "axes": axes}, sort_keys=False))
    return path


@pytest.mark.parametrize("mode", MODES)
def test_sweep_dry_run_plan(tmp_path, mode):
    """"(embedded)" was wrapped away from its model at 80 columns."""
    sweep = write_sweep(tmp_path / "s.yaml", {"task.options.difficulty": [1, 2],
                                              "generators[0].temperature": [0.4, 1.0]})
    out = output(mode, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--dry-run")
    rows = table_lines(out, "point ")
    fits(rows)
    for difficulty in (1, 2):
        for temperature in (0.4, 1.0):
            assert f"difficulty={difficulty},temperature={temperature}  pending  smollm2-135m-instruct (embedded)" \
                in out
    assert out.splitlines()[-1] == "# ok: 4 points; every point validates (nothing was run)"


def fake_sweep(directory: Path, error: str) -> None:
    """A sweep directory as a driver leaves it: one point done, one failed with ``error`` (no stores needed)."""
    directory.mkdir()
    points = [{"id": "a1", "name": "model=smollm2-135m-instruct,temperature=0.3", "index": 0, "state": "done",
               "tries": 1, "attempts": 1, "error": None, "overrides": {}},
              {"id": "b2", "name": "model=broken-model,temperature=0.3", "index": 1, "state": "failed",
               "tries": 2, "attempts": 2, "error": error, "overrides": {}, "expected_candidates": 8}]
    (directory / "sweep.json").write_text(json.dumps({
        "format": 1, "name": "models", "points": points,
        "engines": {"smollm2-135m-instruct (embedded)": {"starts": 1, "points": [points[0]["name"]]}}}))


@pytest.mark.parametrize("mode", MODES)
def test_sweep_status_prints_the_whole_last_error(tmp_path, mode):
    """The last error was cut to ~26 characters at 80 columns."""
    error = ("ModelNotFoundError: /models/broken-model: cannot load (StrictDataclassFieldValidationError: Validation "
             "error for field 'hidden_size': TypeError: Field 'hidden_size' expected int, got str (value: 'big'))")
    fake_sweep(tmp_path / "sweep", error)
    out = output(mode, "sweep", "status", str(tmp_path / "sweep"))
    rows = table_lines(out, "point ")
    fits(rows)
    assert rows[0].split() == ["point", "state", "cands", "err", "GPU-s"]
    assert any(r.startswith("model=smollm2-135m-instruct,temperature=0.3  done") for r in rows)
    assert any(r.startswith("model=broken-model,temperature=0.3") and "failed (2)" in r and "0/8" in r for r in rows)
    after = out.split("last errors:", 1)[1]
    assert " ".join(after.split()).startswith(f"model=broken-model,temperature=0.3: {error}")  # whole, cause included
    assert "engine smollm2-135m-instruct (embedded): 1 start for 1 point" in out


@pytest.mark.parametrize("mode", MODES)
def test_sweep_report_summary(tmp_path_factory, mode):
    from test_sweep_report import PYTHIA

    from monkeybarrel.experiments.llmonk_data import read_outcomes_parquet
    from monkeybarrel.experiments.llmonk_sweep import truncate, write_llmonk_sweep

    if not PYTHIA.is_file():
        pytest.skip(f"{PYTHIA} (shared data) not present")
    directory = write_llmonk_sweep([truncate(b, 16) for b in read_outcomes_parquet(PYTHIA)],
                                   tmp_path_factory.mktemp("pythia") / "sweep")
    out = output(mode, "sweep", "report", str(directory))
    report = json.loads((directory / "report.json").read_text())
    assert out.splitlines()[0] == f"math: best configuration per budget ({report['budget_name']})"
    rows = table_lines(out, "flops ≤")
    fits(rows)
    for row in report["tasks"][0]["frontier"]["coverage"]["table"]:
        best = row["best"]
        assert any(f"{best['point']} (k={best['k']})" in line for line in rows), best
    assert f"plot:   {directory / 'report.png'}" in out.splitlines()


def test_sweep_run_reports_events_status_and_weaver_warnings_as_lines(tmp_path):
    """A real two-point sweep: events one per line, the status table, Weaver's warnings as ``warning:`` lines
    without their source line."""
    sweep = write_sweep(tmp_path / "s.yaml", {"generators[0].temperature": [0.4, 1.0]})
    data = yaml.safe_load(sweep.read_text())
    data["base"]["verifiers"] = [{"name": "len", "type": "length"}]
    data["base"]["selectors"] = [{"name": "weaver", "type": "weaver"}]
    sweep.write_text(yaml.safe_dump(data, sort_keys=False))
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([*CLI, "sweep", str(sweep), "--out", str(tmp_path / "out"), "--no-progress"], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "[1/2] temperature=0.4  (smollm2-135m-instruct (embedded))" in done.stdout
    rows = table_lines(done.stdout, "point ")
    fits(rows)
    assert sum(" done " in r for r in rows) == 2
    warnings = done.stderr.splitlines()
    assert warnings and all(line.startswith("warning: ") for line in warnings), done.stderr
    assert any("verifier" in line for line in warnings) and "warnings.warn(" not in done.stderr
    assert "weaver.py" not in done.stderr  # no source file and line
