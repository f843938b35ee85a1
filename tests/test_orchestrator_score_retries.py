"""A failed verifier score is not final: each later run tries it again, ``store.score_attempts`` tries in all,
the reason kept; ``store check`` counts what waits; the report's "failed" share is the final state.

Families: verifiers whose backend module is missing or broken at import (import errors), verifiers that
raise (whole batch), per-candidate failures, failures only the first time, failures every time (bounded,
then final with the reason), abstentions (never tried again), a verifier that reads a failed one, a
whole-problem verifier, scores of an older store; and a real judge server (``_judge_server.py``: the
embedded SmolLM2 behind HTTP on 127.0.0.1) that is down, crashes mid-run, or fails some requests.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from importlib import import_module, invalidate_caches
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pytest
from conftest import tiny_config
from test_orchestrator_verifier_records import Doubler  # noqa: F401  (registers _test_doubler, a reader)

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.core.records import SCORE_SCHEMA, Candidate, Problem, candidates_to_table
from monkeybarrel.orchestrator.cli.main import main
from monkeybarrel.orchestrator.runner import run_experiment
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore
from monkeybarrel.orchestrator.store.maintenance import check
from monkeybarrel.verifiers.base import VERIFIERS, Verifier, VerifierFailure

PROBLEMS, SAMPLES = 3, 2
SERVER = Path(__file__).with_name("_judge_server.py")


@VERIFIERS.register("_test_backend_module")
class BackendModule(Verifier):
    """Scores with ``score(text) -> float`` of a module imported at first use, as a judge imports its backend."""

    def __init__(self, name: str, module: str) -> None:
        super().__init__(name)
        self.module = module

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        invalidate_caches()
        scorer = import_module(self.module).score
        return np.array([scorer(c.text) for c in candidates], dtype=float)


@VERIFIERS.register("_test_scripted")
class Scripted(Verifier):
    """Does what ``plan`` (a JSON file the test edits between runs) says, and logs each call to ``log``.

    ``plan``: ``{"raise": "RuntimeError: text" | null, "fail": [sample indices failing with a VerifierFailure],
    "abstain": [sample indices it cannot judge], "fail_calls": n (the first n calls ever raise)}``."""

    def __init__(self, name: str, plan: str, log: str, whole_problem: bool = False) -> None:
        super().__init__(name)
        self.plan, self.log = Path(plan), Path(log)
        self.scores_whole_problem = whole_problem

    def score(self, problem: Problem, candidates: Sequence[Candidate]) -> np.ndarray:
        return self.score_detailed(problem, candidates)[0]

    def score_detailed(self, problem: Problem, candidates: Sequence[Candidate]) -> tuple[np.ndarray, list]:
        plan = json.loads(self.plan.read_text())
        calls = self.log.read_text().count("\n") if self.log.exists() else 0
        with self.log.open("a") as handle:
            handle.write(json.dumps([problem.problem_id, [c.sample_index for c in candidates]]) + "\n")
        if plan.get("raise") or calls < plan.get("fail_calls", 0):
            kind, _, text = (plan.get("raise") or "ConnectionError: judge warming up").partition(": ")
            raise {"RuntimeError": RuntimeError, "ConnectionError": ConnectionError, "KeyError": KeyError,
                   "ZeroDivisionError": ZeroDivisionError}[kind](text)
        scores = np.array([1.0 + c.sample_index for c in candidates])
        reasons: list = [None] * len(candidates)
        for row, candidate in enumerate(candidates):
            if candidate.sample_index in plan.get("fail", []):
                scores[row], reasons[row] = np.nan, VerifierFailure(f"request for sample {candidate.sample_index} failed")
            elif candidate.sample_index in plan.get("abstain", []):
                scores[row], reasons[row] = np.nan, "nothing to judge"
        return scores, reasons


def _experiment(tmp_path: Path, verifiers: list[dict], attempts: int = 3) -> tuple[ExperimentConfig, Path]:
    """A config on the arithmetic task and a store holding its candidates (a run samples nothing)."""
    config = ExperimentConfig.from_dict(tiny_config(problems=PROBLEMS, samples=SAMPLES, verifiers=verifiers,
                                                    store={"score_attempts": attempts}))
    out = tmp_path / "run"
    ExperimentStore(out).append_chunk("candidates", candidates_to_table([
        Candidate(problem_id=f"arithmetic-d1-{p:05d}", generator_id="smol", sample_index=i, text=f"The answer is {i}.",
                  finish_reason="stop") for p in range(PROBLEMS) for i in range(SAMPLES)]))
    return config, out


def _scripted(tmp_path: Path, plan: dict, **options) -> dict:
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return {"name": "v", "type": "_test_scripted",
            "options": {"plan": str(tmp_path / "plan.json"), "log": str(tmp_path / "calls.log"), **options}}


def _state(out: Path, name: str = "v") -> dict[int, tuple[float, str | None, int | None]]:
    """Per (problem number * 10 + sample index): (score, error, failed_attempts) of the newest row."""
    table = ExperimentStore(out).scores(name)
    return {int(p[-5:]) * 10 + i: (s, e, a) for p, i, s, e, a in zip(*(table.column(c).to_pylist() for c in (
        "problem_id", "sample_index", "score", "error", "failed_attempts")))}


def _failed_share(out: Path, name: str = "v") -> float:
    return json.loads((out / "metrics.json").read_text())["verifiers"][name]["failed"]


def _check_lines(out: Path, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    status = main(["store", "check", str(out)])
    return status, capsys.readouterr().out.splitlines()


def _calls(tmp_path: Path) -> list:
    log = tmp_path / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("error, attempts", [("RuntimeError: judge backend crashed", 3), ("KeyError: 'logprobs'", 2),
                                             ("ConnectionError: connection refused", 1),
                                             ("ZeroDivisionError: division by zero", 4)])
def test_a_verifier_that_always_raises_is_tried_a_bounded_number_of_times_then_final_with_its_reason(
        tmp_path: Path, capsys, error: str, attempts: int):
    config, out = _experiment(tmp_path, [_scripted(tmp_path, {"raise": error})], attempts=attempts)
    for run in range(1, attempts + 1):
        run_experiment(config, out, show_progress=False)
        state = _state(out)
        assert {a for _, _, a in state.values()} == {run} and all(np.isnan(s) for s, _, _ in state.values())
        assert all(error.split(": ")[0] in e and error.split(": ")[1] in e for _, e, _ in state.values())
        status, lines = _check_lines(out, capsys)
        if run < attempts:   # not clean while failed scores wait, and says how many
            assert status == 1 and any(f"scores/v: {PROBLEMS * SAMPLES} failed score(s) wait for a retry (tried up to "
                                       f"{run} of {attempts} times" in line for line in lines), lines
        else:                # final: clean, the reason kept
            assert status == 0 and f"scores/v: {PROBLEMS * SAMPLES} failed score(s) are final (tried up to " \
                   f"{attempts} times; {error.split(': ')[0]}" in "\n".join(lines)
    assert len(_calls(tmp_path)) == PROBLEMS * attempts     # one call per problem per run
    run_experiment(config, out, show_progress=False)        # bounded: a run after the last try asks nothing
    assert len(_calls(tmp_path)) == PROBLEMS * attempts and _failed_share(out) == 1.0


@pytest.mark.parametrize("fail_calls", [1, PROBLEMS, PROBLEMS + 1])
def test_a_verifier_that_fails_only_at_first_is_scored_on_resume_and_the_report_shows_the_final_state(
        tmp_path: Path, capsys, fail_calls: int):
    config, out = _experiment(tmp_path, [_scripted(tmp_path, {"fail_calls": fail_calls})])
    run_experiment(config, out, show_progress=False)
    failed_problems = min(fail_calls, PROBLEMS)
    assert _failed_share(out) == pytest.approx(failed_problems / PROBLEMS)
    status, lines = _check_lines(out, capsys)
    assert status == 1 and f"scores/v: {failed_problems * SAMPLES} failed score(s) wait for a retry" in "\n".join(lines)
    for _ in range(2):
        run_experiment(config, out, show_progress=False)
    retried = [problem for problem, _ in _calls(tmp_path)[PROBLEMS:]]   # only what failed was asked again
    assert retried == [f"arithmetic-d1-{p:05d}" for p in range(failed_problems)] + (
        ["arithmetic-d1-00000"] if fail_calls > PROBLEMS else [])
    state = _state(out)
    assert all(s == 1.0 + key % 10 and e is None and a is None for key, (s, e, a) in state.items())
    assert _failed_share(out) == 0.0 and _check_lines(out, capsys)[0] == 0


def test_per_candidate_failures_are_retried_alone_and_abstentions_never(tmp_path: Path, capsys):
    config, out = _experiment(tmp_path, [_scripted(tmp_path, {"fail": [0], "abstain": [1]})])
    run_experiment(config, out, show_progress=False)
    state = _state(out)
    assert {key: a for key, (_, _, a) in state.items()} == {p * 10 + i: (1 if i == 0 else None)
                                                             for p in range(PROBLEMS) for i in range(SAMPLES)}
    assert _failed_share(out) == 1.0                    # sample 0 failed, sample 1 abstained
    status, lines = _check_lines(out, capsys)
    assert status == 1 and f"scores/v: {PROBLEMS} failed score(s) wait for a retry (tried up to 1 of 3 times; " \
                           "request for sample 0 failed)" in "\n".join(lines)
    (tmp_path / "plan.json").write_text(json.dumps({"fail": [], "abstain": [1]}))   # the backend is back
    run_experiment(config, out, show_progress=False)
    assert [indices for _, indices in _calls(tmp_path)[PROBLEMS:]] == [[0]] * PROBLEMS   # not the abstentions
    state = _state(out)
    assert all(state[p * 10] == (1.0, None, None) and np.isnan(state[p * 10 + 1][0])
               and state[p * 10 + 1][1] == "nothing to judge" for p in range(PROBLEMS))
    assert _failed_share(out) == 0.5 and _check_lines(out, capsys)[0] == 0
    run_experiment(config, out, show_progress=False)
    assert len(_calls(tmp_path)) == 2 * PROBLEMS        # nothing waits: nothing is asked


def test_a_whole_problem_verifier_rescores_the_problem_and_a_reader_of_a_retried_verifier_reads_it_again(tmp_path: Path):
    verifiers = [_scripted(tmp_path, {"fail": [1]}, whole_problem=True),
                 {"name": "double", "type": "_test_doubler", "options": {"source": "v"}}]
    config, out = _experiment(tmp_path, verifiers)
    run_experiment(config, out, show_progress=False)
    double = _state(out, "double")
    assert all(np.isnan(double[p * 10 + 1][0]) and double[p * 10][0] == 2.0 for p in range(PROBLEMS))
    (tmp_path / "plan.json").write_text(json.dumps({}))
    run_experiment(config, out, show_progress=False)
    assert [indices for _, indices in _calls(tmp_path)[PROBLEMS:]] == [[0, 1]] * PROBLEMS   # the whole problem
    assert all(_state(out, "double")[p * 10 + i][0] == 2.0 * (1 + i) for p in range(PROBLEMS) for i in range(SAMPLES))
    assert not check(out).problems and not check(out).waiting


def test_backend_import_errors_are_failures_retried_once_the_module_is_installed(tmp_path: Path, capsys, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    modules = {"mb_judge_missing": None,                                             # not installed yet
               "mb_judge_broken": "def score(text):\n    return len(text\n",          # a SyntaxError at import
               "mb_judge_needs": "import mb_judge_dependency_missing\nscore = len\n"}  # its own import fails
    verifiers = [{"name": name, "type": "_test_backend_module", "options": {"module": name}} for name in modules]
    config, out = _experiment(tmp_path, verifiers)
    for name, source in modules.items():
        if source is not None:
            (site / f"{name}.py").write_text(source)
    run_experiment(config, out, show_progress=False)
    for name, error in (("mb_judge_missing", "ModuleNotFoundError"), ("mb_judge_broken", "SyntaxError"),
                        ("mb_judge_needs", "ModuleNotFoundError: No module named 'mb_judge_dependency_missing'")):
        assert all(np.isnan(s) and error in e and a == 1 for s, e, a in _state(out, name).values())
        sys.modules.pop(name, None)
        (site / f"{name}.py").write_text("def score(text):\n    return float(len(text))\n")   # installed / fixed
    status, lines = _check_lines(out, capsys)
    assert status == 1 and sum("wait for a retry" in line for line in lines) == 3
    run_experiment(config, out, show_progress=False)
    for name in modules:
        assert all(s == len("The answer is 0.") and e is None and a is None for s, e, a in _state(out, name).values())
        assert _failed_share(out, name) == 0.0
    assert _check_lines(out, capsys)[0] == 0


def test_failed_scores_of_an_older_store_stay_as_they_are(tmp_path: Path, capsys):
    config, out = _experiment(tmp_path, [_scripted(tmp_path, {})])
    older = pa.schema([f for f in SCORE_SCHEMA if f.name != "failed_attempts"])   # before the column existed
    ExperimentStore(out).append_chunk("scores/v", pa.Table.from_pylist([
        {"problem_id": f"arithmetic-d1-{p:05d}", "generator_id": "smol", "sample_index": i, "verifier": "v",
         "score": float("nan"), "error": "RuntimeError: old failure"} for p in range(PROBLEMS) for i in range(SAMPLES)],
        schema=older))
    run_experiment(config, out, show_progress=False)
    assert _calls(tmp_path) == [] and _failed_share(out) == 1.0 and _check_lines(out, capsys)[0] == 0


def test_failures_of_a_verifier_taken_out_of_the_config_wait_for_nothing(tmp_path: Path, capsys):
    config, out = _experiment(tmp_path, [_scripted(tmp_path, {"raise": "RuntimeError: down"}),
                                         {"name": "has", "type": "has_answer"}])
    run_experiment(config, out, show_progress=False)
    assert _check_lines(out, capsys)[0] == 1
    without = config.to_dict()
    without["verifiers"] = without["verifiers"][1:]
    run_experiment(ExperimentConfig.from_dict(without), out, show_progress=False)
    status, lines = _check_lines(out, capsys)
    assert status == 0 and f"scores/v: {PROBLEMS * SAMPLES} failed score(s) are final (tried up to 1 times; " \
                           "RuntimeError: down)" in lines, lines
    assert len(_calls(tmp_path)) == PROBLEMS


# ---- a real judge server -------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class JudgeServer:
    """``_judge_server.py`` in a process of its own (started, waited for, stopped)."""

    def __init__(self, port: int, *flags: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
        self.process = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), *flags], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/v1/models", timeout=1).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"judge server did not start: {self.process.stderr.read().decode()[-2000:]}")
                time.sleep(0.2)

    def requests(self) -> int:
        return json.loads(urllib.request.urlopen(f"{self.url}/stats", timeout=5).read())["requests"]

    def control(self, **mode) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/control", data=json.dumps(mode).encode(),
                                                      headers={"Content-Type": "application/json"}), timeout=5).read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)
        self.process.stderr.close()


def _judge(port: int) -> dict:
    return {"name": "judge", "type": "openai_judge", "options": {
        "model": "smollm2", "base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 0, "timeout_s": 30,
        "max_concurrency": 1}}


def _judged(out: Path) -> dict[int, tuple[float, str | None, int | None]]:
    return _state(out, "judge")


@pytest.mark.slow
def test_a_judge_server_that_is_down_then_up_crashes_mid_run_or_fails_some_requests(tmp_path: Path, capsys):
    n, port = PROBLEMS * SAMPLES, _free_port()
    down, crash, some, abstains = (_experiment(tmp_path / name, [_judge(port)])
                                   for name in ("down", "crash", "some", "abstains"))
    # down: nothing listens, every request of the first run is refused
    run_experiment(*down, show_progress=False)
    assert all(np.isnan(s) and "127.0.0.1" in e and a == 1 for s, e, a in _judged(down[1]).values())
    assert _failed_share(down[1], "judge") == 1.0
    status, lines = _check_lines(down[1], capsys)
    assert status == 1 and f"scores/judge: {n} failed score(s) wait for a retry" in "\n".join(lines)
    # crashes mid-run: the server process dies on its fourth request
    server = JudgeServer(port, "--die-after", "3")
    run_experiment(*crash, show_progress=False)
    assert server.process.wait(timeout=30) == 1
    server.stop()
    state = _judged(crash[1])
    assert sum(a == 1 for _, _, a in state.values()) == n - 3 and sum(e is None for _, e, _ in state.values()) == 3
    server = JudgeServer(port)
    try:
        # up again: the next runs score what failed, and only that
        run_experiment(*down, show_progress=False)
        assert server.requests() == n and _failed_share(down[1], "judge") == 0.0
        assert all(0 <= s <= 1 and e is None and a is None for s, e, a in _judged(down[1]).values())
        run_experiment(*crash, show_progress=False)
        assert server.requests() == n + n - 3 and all(e is None for _, e, _ in _judged(crash[1]).values())
        assert _check_lines(down[1], capsys)[0] == 0 and _check_lines(crash[1], capsys)[0] == 0
        # some requests fail (HTTP 500 for sample 1's text), the others are judged; then only those are asked again
        server.control(fail_marker="The answer is 1.")
        run_experiment(*some, show_progress=False)
        assert all((a == 1 and "500" in e) if key % 10 == 1 else (a is None and e is None)
                   for key, (_, e, a) in _judged(some[1]).items())
        assert _failed_share(some[1], "judge") == 0.5
        server.control(fail_marker=None)
        before = server.requests()
        run_experiment(*some, show_progress=False)
        assert server.requests() - before == PROBLEMS and _failed_share(some[1], "judge") == 0.0
        # a judge whose top tokens hold neither Yes nor No abstains: final at once, never asked again
        server.control(abstain=True)
        before = server.requests()
        run_experiment(*abstains, show_progress=False)
        run_experiment(*abstains, show_progress=False)
        assert server.requests() - before == n and _check_lines(abstains[1], capsys)[0] == 0
        assert all(np.isnan(s) and "neither Yes nor No" in e and a is None for s, e, a in _judged(abstains[1]).values())
    finally:
        server.stop()
