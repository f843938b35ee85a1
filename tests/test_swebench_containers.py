"""Real containers (docker + the task-set image from .ci/swe_setup.sh): evaluator, hostile patches, votes."""

from __future__ import annotations

import difflib
import uuid
from pathlib import Path

import numpy as np
import pytest

from monkeybarrel.experiments.swe_taskset.build_repos import HERE as TASKSET
from monkeybarrel.kits.swebench.containers import ContainerPool, Execution, Workspace
from monkeybarrel.kits.swebench.evaluate import evaluate_patches
from monkeybarrel.kits.swebench.predictions import read_predictions
from monkeybarrel.kits.swebench.retrieval import repo_files
from monkeybarrel.kits.swebench.voting import run_vote_matrix

pytestmark = pytest.mark.docker


@pytest.fixture()
def pool(tmp_path):
    return ContainerPool(cache_dir=tmp_path / "cache", max_workers=2)


def added_file(path: str, text: str) -> str:
    body = "".join(difflib.unified_diff([], text.splitlines(True), "/dev/null", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n{body}"


def appended(path: str, original: str, text: str) -> str:
    """A patch adding ``text`` at the end of ``path`` (whose content is ``original``)."""
    lines = original.splitlines(True)
    body = "".join(difflib.unified_diff(lines, lines + text.splitlines(True), f"a/{path}", f"b/{path}", n=3))
    return f"diff --git a/{path} b/{path}\n{body}"


def test_gold_resolves_empty_and_mutant_do_not_and_results_are_cached(instances, pool):
    inst = instances["inflection__inflection-0004"]
    mutants = read_predictions(TASKSET / "predictions" / "mutants.jsonl")
    wrong = mutants[inst.instance_id][0]["model_patch"]
    results = evaluate_patches(pool, [(inst, inst.patch), (inst, None), (inst, wrong)], timeout_s=120)
    assert [r.resolved for r in results] == [True, False, False]
    assert results[0].fail_to_pass == inst.FAIL_TO_PASS and not results[0].pass_to_pass_broken
    assert results[1].fail_to_pass == ()
    assert pool.stats.containers == 3
    again = evaluate_patches(pool, [(inst, inst.patch)], timeout_s=120)
    assert again[0].resolved and pool.stats.containers == 3 and pool.stats.cache_hits == 1


def test_hostile_patches_are_contained_and_fail(instances, pool):
    inst = instances["parse__parse-0001"]
    test_file = inst.FAIL_TO_PASS[0].split("::")[0]
    original = repo_files(inst, pattern=test_file)[test_file]
    delete_tests = (f"diff --git a/{test_file} b/{test_file}\ndeleted file mode 100644\n"
                    + "".join(difflib.unified_diff(original.splitlines(True), [], f"a/{test_file}", "/dev/null", n=3)))
    marker = f"mb_escape_{uuid.uuid4().hex}"
    source = repo_files(inst, pattern="parse.py")["parse.py"]
    escape = appended("parse.py", source, f"import os\nfor d in ('/tmp', '/etc', '/root', '/'):\n    try:\n"
                                          f"        open(os.path.join(d, '{marker}'), 'w').write('x')\n"
                                          "    except OSError:\n        pass\n")
    loop = appended("parse.py", source, "while True:\n    pass\n")
    network = appended("parse.py", source, "import urllib.request\n"
                                           "urllib.request.urlopen('http://192.0.2.1', timeout=5)\n")
    traversal = ("diff --git a/../../../tmp/x b/../../../tmp/x\nnew file mode 100644\n--- /dev/null\n"
                 f"+++ b/../../../tmp/{marker}\n@@ -0,0 +1 @@\n+escaped\n")
    pairs = [(inst, p) for p in (delete_tests, escape, loop, network, traversal)]
    results = evaluate_patches(pool, pairs, timeout_s=15)
    deleted, escaped, looped, networked, traversed = results
    assert not any(r.resolved for r in results)
    assert deleted.patch_applied and set(inst.FAIL_TO_PASS) <= set(_failed(deleted.log)), "tests restored and still failing"
    assert escaped.patch_applied and not escaped.timed_out
    assert looped.timed_out
    assert networked.patch_applied and ("URLError" in networked.log or "unreachable" in networked.log.lower())
    assert not traversed.patch_applied
    for folder in ("/tmp", "/etc", "/root", "/"):
        assert not (Path(folder) / marker).exists(), "a container wrote onto the host"


def swe_forgeries(ids: list[str]) -> dict[str, str]:
    """Code (appended to the module under test, or a conftest) that tries to make every test look passed."""
    passed = "".join(f"PASSED {t}\\n" for t in ids)
    report = "{" + ", ".join(f"{t!r}: 'PASSED'" for t in ids) + "}"
    return {
        "PASSED lines to every fd, then os._exit(0)": (
            f"import os\nfor _fd in range(64):\n    try:\n        os.write(_fd, b'{passed}')\n    except OSError:\n"
            "        pass\nos._exit(0)\n"),
        "sys.exit(0) at import": "import sys\nsys.exit(0)\n",
        "SystemExit(0) and PASSED lines in an atexit hook": (
            f"import atexit, sys\natexit.register(sys.exit, 0)\natexit.register(lambda: print('{passed}'))\n"),
        "kill pytest after the PASSED lines": (
            f"import os, signal\nos.write(1, b'{passed}')\nos.kill(os.getpid(), signal.SIGKILL)\n"),
        "a guessed token with an all-passed report on every fd": (
            f"import json, os, secrets\nfor _fd in range(64):\n    try:\n"
            f"        os.write(_fd, ('\\n' + secrets.token_hex(32) + ' ' + json.dumps({report}) + '\\n').encode())\n"
            "    except OSError:\n        pass\n"),
        "conftest hook reports every test passed": "CONFTEST",
    }


CONFTEST_FORGERY = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None
"""


def test_forged_test_reports_do_not_resolve(instances, pool):
    """A wrong patch that prints pytest's summary lines, exits early, hooks the report or guesses the token
    resolves nothing: only the reporter plugin's attested verdict counts."""
    inst = instances["parse__parse-0001"]
    source = repo_files(inst, pattern="parse.py")["parse.py"]
    attacks = swe_forgeries([*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS])
    patches = {name: added_file("conftest.py", CONFTEST_FORGERY) if code == "CONFTEST" else appended("parse.py", source, code)
               for name, code in attacks.items()}
    results = evaluate_patches(pool, [(inst, inst.patch), *((inst, p) for p in patches.values())], timeout_s=60)
    assert results[0].resolved, results[0].log[-1500:]  # the control: the real fix still resolves
    forged = {name: r.fail_to_pass for name, r in zip(patches, results[1:]) if r.resolved or r.fail_to_pass}
    assert forged == {}, forged
    assert all(r.patch_applied for r in results)


def test_generated_test_votes_cannot_be_forged(instances, pool):
    """Patches that exit 0 on import, raise SystemExit(0) in the code under test, or leave a daemon that
    steals later tokens get no vote; the scripts' own exits still count."""
    inst = instances["semver__semver-0001"]
    path = "src/semver/__init__.py"
    source = repo_files(inst, pattern=path)[path]
    stealer = ("import glob, os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
               "        end = time.time() + 40\n        while time.time() < end:\n"
               "            for path in glob.glob('/tmp/.mb-sealed-*/sealed'):\n                try:\n"
               "                    token = open(path).read().split(chr(10))[0]\n                except OSError:\n"
               "                    continue\n                for out in glob.glob('/proc/[0-9]*/fd/1'):\n"
               "                    try:\n                        open(out, 'w').write(chr(10) + token + ' 0' + chr(10))\n"
               "                    except OSError:\n                        pass\n            time.sleep(0.002)\n"
               "        os._exit(0)\n    os._exit(0)\n")
    hostile = {"os._exit(0) on import": "import os\nos._exit(0)\n",
               "sys.exit(0) on import": "import sys\nsys.exit(0)\n",
               "a daemon that steals the next tokens": stealer}
    patches = [appended(path, source, code) for code in hostile.values()]
    probe = "import sys\nsys.path.insert(0, 'src')\nimport semver\nprint(semver.compare('1.0.0', '2.0.0'))\nsys.exit(2)\n"
    solved = "import sys\nsys.exit(0)\n"
    matrix = run_vote_matrix(pool, inst.image_name, inst.repo_dir, inst.base_commit, patches, [probe, probe + "\n", solved],
                             60)
    assert matrix.base_codes.tolist() == [2, 2, 0], matrix.outputs
    forged = {name: codes for name, codes in zip(hostile, matrix.codes.tolist()) if codes[:2] != [1, 1] and codes[:2] != [2, 2]}
    assert forged == {}, (forged, matrix.outputs)
    assert matrix.codes[:, 2].tolist() == [0, 0, 0]  # a script that exits 0 on its own still does
    assert matrix.votes.tolist() == [1, 1, 1]


def _failed(log: str) -> list[str]:
    return [line.split()[1] for line in log.splitlines() if line.startswith(("FAILED ", "ERROR "))]


def test_containers_have_no_network_and_bounded_time(instances, pool):
    inst = instances["parse__parse-0001"]
    ws = Workspace(inst.image_name, inst.repo_dir, inst.base_commit)
    [[net, slow]] = pool.run([(ws, [Execution("python -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\""),
                                     Execution("sleep 30", timeout_s=2)])])
    assert net.exit_code != 0 and "unreachable" in net.output.lower()
    assert slow.timed_out and slow.wall_s < 10


def test_votes_with_reproduction_tests(instances, pool):
    inst = instances["semver__semver-0001"]
    ids = " ".join(repr(t) for t in inst.FAIL_TO_PASS)
    repro = ("import subprocess, sys\n"
             f"r = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-o', 'addopts=', {', '.join(repr(t) for t in inst.FAIL_TO_PASS)}],"
             " env={'PYTHONPATH': 'src:tests', 'PATH': '/opt/venv/bin:/usr/bin:/bin'})\n"
             "sys.exit(0 if r.returncode == 0 else 2)\n")
    crash = "raise RuntimeError('broken test')\n"
    always = "import sys\nsys.exit(0)\n"
    mutants = [p["model_patch"] for p in read_predictions(TASKSET / "predictions" / "mutants.jsonl").get(inst.instance_id, [])]
    patches = [inst.patch, *mutants[:1], inst.patch]
    matrix = run_vote_matrix(pool, inst.image_name, inst.repo_dir, inst.base_commit, patches, [repro, crash, always], 60)
    assert ids and len(matrix.patches) == len(patches) - 1  # duplicates run once
    assert matrix.base_codes.tolist() == [2, 1, 0]
    assert matrix.codes[0].tolist() == [0, 1, 0] and matrix.votes[0] == 2
    if mutants:
        assert matrix.votes[1] < matrix.votes[0]
    assert np.all(matrix.applied)


class ScriptedChat:
    """Stands in for the LLM's replies only, to drive every branch of the protocol deterministically."""

    def __init__(self, replies):
        self.replies, self.seen = {k: list(v) for k, v in replies.items()}, []

    def complete(self, conversations, n=1, seed=0):
        self.seen.append(len(conversations))
        return [[self.replies[c[1]["content"].split("\n")[1]].pop(0)] for c in conversations]


def test_state_machine_protocol_in_lockstep(instances, pool):
    from monkeybarrel.kits.swebench.state_machine import SelectionJob, SelectionStateMachine

    a, b = instances["inflection__inflection-0004"], instances["parse__parse-0001"]
    wrong = read_predictions(TASKSET / "predictions" / "mutants.jsonl")[a.instance_id][0]["model_patch"]
    chat = ScriptedChat({
        a.problem_statement.split("\n")[0]: ["no tags at all", "<test>\nimport sys\nprint('probe')\nsys.exit(2)\n</test>",
                                             "<chosen_candidate_fix_id>1</chosen_candidate_fix_id>"],
        b.problem_statement.split("\n")[0]: ["<chosen_candidate_fix_id>0</chosen_candidate_fix_id>",
                                             "<test>import sys\nsys.exit(0)</test>", "<chosen_candidate_fix_id>7</chosen_candidate_fix_id>"],
    })
    machine = SelectionStateMachine(chat, pool, max_attempts=3, timeout_s=20)
    jobs = [SelectionJob(a.problem_statement, a.image_name, a.repo_dir, a.base_commit, (wrong, a.patch)),
            SelectionJob(b.problem_statement, b.image_name, b.repo_dir, b.base_commit, (b.patch, b.patch + "\n"))]
    first, second = machine.run_many(jobs)
    assert chat.seen == [2, 2, 2], "one batched LLM call per round"
    assert first.selected == 1 and first.final == 1 and first.attempts == 3
    assert [e["event"] for e in first.transcript["events"]] == ["format_error", "test", "choice"]
    runs = first.transcript["executions"][0]
    assert [r["target"] for r in runs] == ["original", "candidate 0", "candidate 1"]
    assert all(r["exit_code"] == 2 and "probe" in r["output"] for r in runs)
    assert second.selected is None and second.final == 0, "an out-of-range id is no selection"
    assert [e["event"] for e in second.transcript["events"]] == ["format_error", "test", "choice"]
    assert second.transcript["messages"][-1]["role"] == "assistant"


def test_state_machine_stops_at_max_attempts(instances, pool):
    from monkeybarrel.kits.swebench.state_machine import SelectionJob, SelectionStateMachine

    a = instances["inflection__inflection-0004"]
    chat = ScriptedChat({a.problem_statement.split("\n")[0]: ["nothing"] * 5})
    outcome = SelectionStateMachine(chat, pool, max_attempts=2).run_many(
        [SelectionJob(a.problem_statement, a.image_name, a.repo_dir, a.base_commit, (a.patch, a.patch + "\n"))])[0]
    assert outcome.attempts == 2 and outcome.selected is None and outcome.final == 0 and chat.seen == [1, 1]
