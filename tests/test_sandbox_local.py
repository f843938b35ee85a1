"""The sandbox protocol on the local backend: files, stdin, exit codes, limits, errors, concurrency."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from monkeybarrel.core.registry import UnknownNameError
from monkeybarrel.sandbox.base import Job, Limits, Outcome, OutputBuffer, as_limits, build_sandbox
from monkeybarrel.sandbox.local import LocalSandbox


@pytest.fixture(scope="module")
def work_root():
    root = Path(tempfile.mkdtemp(prefix="mb-sandbox-test-", dir="/tmp"))
    root.chmod(0o711)
    yield str(root)
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def box(work_root):
    sandbox = LocalSandbox(limits=Limits(time_s=10), max_workers=2, work_root=work_root)
    yield sandbox
    sandbox.close()


def test_files_in_subdirectories_stdin_and_output(box):
    files = {"pkg/__init__.py": "", "pkg/mod.py": "VALUE = 41\n", "data/input.bin": b"\x00\x01",
             "main.py": "import sys\nfrom pkg.mod import VALUE\nprint(VALUE + 1, sys.stdin.read().upper())\n"
                        "print(open('data/input.bin', 'rb').read(), file=sys.stderr)\n"}
    result = box.run(files, ["python3", "main.py"], stdin="shout")
    assert result.outcome is Outcome.OK and result.exit_code == 0
    assert result.stdout == "42 SHOUT\n"
    assert result.stderr == "b'\\x00\\x01'\n"
    assert result.wall_s > 0 and result.cpu_s > 0
    assert result.backend == "local" and "rlimits" in result.protections


def test_error_exit_keeps_status_and_traceback(box):
    result = box.run({"main.py": "import sys\nprint('partial')\nsys.exit(3)\n"}, ["python3", "main.py"])
    assert (result.outcome, result.exit_code, result.stdout) == (Outcome.ERROR_EXIT, 3, "partial\n")
    failed = box.run({"main.py": "assert 1 == 2, 'nope'\n"}, ["python3", "main.py"])
    assert failed.outcome is Outcome.ERROR_EXIT and "AssertionError: nope" in failed.stderr


def test_signal_death_is_killed(box):
    result = box.run({"main.py": "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)\n"}, ["python3", "main.py"])
    assert result.outcome is Outcome.KILLED and result.exit_code == -6


def test_cpu_limit_stops_a_busy_program(box):
    result = box.run({"main.py": "while True:\n    pass\n"}, ["python3", "main.py"], limits=Limits(time_s=30, cpu_s=1))
    assert result.outcome is Outcome.TIMEOUT and result.wall_s < 25


def test_file_size_limit(box):
    code = "open('big', 'wb').write(b'x' * (3 << 20))\n"
    result = box.run({"main.py": code}, ["python3", "main.py"], limits=Limits(file_size_mb=1))
    assert result.outcome in (Outcome.KILLED, Outcome.ERROR_EXIT)
    assert result.outcome is not Outcome.OK


def test_sandbox_errors_are_results_not_exceptions(box):
    bad_path = box.run({"../escape.py": "print(1)"}, ["python3", "../escape.py"])
    assert bad_path.outcome is Outcome.SANDBOX_ERROR and "inside the work directory" in bad_path.error
    missing = box.run({}, ["/nonexistent/interpreter", "x"])
    assert missing.outcome is Outcome.SANDBOX_ERROR and "could not be run" in missing.error
    not_on_path = box.run({}, ["no-such-tool-here", "x"])
    assert not_on_path.outcome is Outcome.SANDBOX_ERROR and "sandbox PATH" in not_on_path.error
    assert box.run({}, []).outcome is Outcome.SANDBOX_ERROR


def test_run_many_keeps_order_and_bounds_concurrency(box):
    jobs = [Job({"main.py": f"import time\ntime.sleep(0.4)\nprint({i})\n"}, ["python3", "main.py"]) for i in range(4)]
    began = time.perf_counter()
    results = box.run_many(jobs)
    elapsed = time.perf_counter() - began
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert elapsed >= 0.8  # 4 runs of 0.4 s, at most 2 at a time


def test_limits_validation_and_mapping():
    assert as_limits({"time_s": 2, "network": True}) == Limits(time_s=2, network=True)
    with pytest.raises(ValueError, match="unknown key.*'timeout'"):
        as_limits({"timeout": 2})
    with pytest.raises(ValueError, match="memory_mb must be > 0"):
        Limits(memory_mb=0)
    assert Limits(time_s=2.2).cpu_seconds == 3


def test_output_buffer_marks_truncation():
    buffer = OutputBuffer(4)
    for chunk in (b"ab", b"cdef", b"gh"):
        buffer.add(chunk)
    assert buffer.truncated and buffer.text().startswith("abcd\n[... truncated: 4 more bytes of 8")


def test_build_sandbox_specs(work_root):
    box = build_sandbox({"type": "local", "work_root": work_root, "max_workers": 1})
    assert isinstance(box, LocalSandbox) and box.max_workers == 1
    box.close()
    with pytest.raises(UnknownNameError, match="unknown sandbox 'vm'.*docker.*local"):
        build_sandbox({"type": "vm"})
    with pytest.raises(ValueError, match="sandbox 'local'"):
        build_sandbox({"type": "local", "no_such_option": 1})


@pytest.mark.skipif(os.geteuid() != 0, reason="uid leases apply only when running as root")
def test_uid_leases_are_distinct_and_need_a_searchable_work_root(work_root):
    first, second = LocalSandbox(max_workers=2, work_root=work_root), LocalSandbox(max_workers=2, work_root=work_root)
    assert len(set(first._uids) | set(second._uids)) == 4
    result = first.run({"main.py": "import os\nprint(os.getuid())\n"}, ["python3", "main.py"])
    assert int(result.stdout) in first._uids
    first.close()
    second.close()
    private = tempfile.mkdtemp()  # mode 0700 parents: the sandbox uid could not reach it
    os.chmod(private, 0o700)
    with pytest.raises(ValueError, match="not searchable by other users"):
        LocalSandbox(work_root=os.path.join(private, "."))
    os.rmdir(private)


@pytest.mark.parametrize("isolation", ["unshare", "none"])
def test_weaker_isolation_levels_still_run_and_clean_up(isolation, work_root):
    try:
        box = LocalSandbox(isolation=isolation, work_root=work_root, limits=Limits(time_s=2),
                           allow_unisolated=isolation == "none")
    except ValueError as exc:
        pytest.skip(str(exc))
    code = "import socket\ns = socket.socket()\nprint(s.connect_ex(('1.1.1.1', 53)) != 0 or 'online')\n"
    result = box.run({"main.py": code}, ["python3", "main.py"])
    assert result.outcome is Outcome.OK
    if isolation == "unshare":
        assert result.stdout == "True\n" and "netns" in result.protections
    looping = box.run({"main.py": "while True:\n    pass\n"}, ["python3", "main.py"])
    assert looping.outcome is Outcome.TIMEOUT
    box.close()
    assert os.listdir(work_root) == []


@pytest.fixture(scope="module")
def warm(work_root):
    try:
        sandbox = LocalSandbox(limits=Limits(time_s=10), max_workers=2, work_root=work_root, warm_python=True)
    except ValueError as exc:
        pytest.skip(str(exc))
    yield sandbox
    sandbox.close()


def test_warm_runs_behave_like_fresh_ones(box, warm):
    code = ("import sys\nprint(__name__, sys.argv[1:], sys.stdin.read())\n"
            "def fail():\n    raise KeyError('k')\nif sys.argv[1] == 'boom':\n    fail()\nsys.exit(int(sys.argv[2]))\n")
    for args in (["ok", "0"], ["exit", "7"], ["boom", "0"]):
        fresh = box.run({"main.py": code}, ["python3", "-I", "main.py", *args], stdin="in")
        forked = warm.run({"main.py": code}, ["python3", "-I", "main.py", *args], stdin="in")
        assert "warm-python" in forked.protections and "warm-python" not in fresh.protections
        assert (forked.outcome, forked.exit_code, forked.stdout) == (fresh.outcome, fresh.exit_code, fresh.stdout)
        assert forked.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]
    traceback_text = warm.run({"main.py": code}, ["python3", "main.py", "boom", "0"]).stderr
    assert "runpy" not in traceback_text and 'File "main.py", line 6, in <module>' in traceback_text


def test_warm_slots_wipe_scratch_between_runs_and_survive_pool_threads(warm):
    jobs = [Job({"main.py": "open('/tmp/left-behind', 'w').write('x')\nprint('wrote')\n"}, ["python3", "main.py"])] * 2
    assert [r.stdout for r in warm.run_many(jobs)] == ["wrote\n", "wrote\n"]  # pool threads end here
    seen = warm.run({"main.py": "import os\nprint(os.path.exists('/tmp/left-behind'))\n"}, ["python3", "main.py"])
    assert seen.stdout == "False\n" and "warm-python" in seen.protections


def test_only_script_commands_take_the_warm_path(warm):
    inline = warm.run({}, ["python3", "-c", "print('inline')"])
    assert inline.stdout == "inline\n" and "warm-python" not in inline.protections
    shell = warm.run({}, ["sh", "-c", "echo shell"])
    assert shell.stdout == "shell\n" and "warm-python" not in shell.protections


def test_warm_slot_is_rebuilt_after_recycle_after_runs(work_root):
    try:
        sandbox = LocalSandbox(max_workers=1, work_root=work_root, warm_python=True, recycle_after=2)
    except ValueError as exc:
        pytest.skip(str(exc))
    code = "import os\nprint(os.getppid())\n"
    servers = []
    for _ in range(4):
        sandbox.run({"main.py": code}, ["python3", "main.py"])
        servers.append(next(iter(sandbox._warm.values())).process.pid)
    assert servers[0] == servers[1] != servers[2] == servers[3]
    sandbox.close()


def test_isolation_comes_from_the_environment_variable(monkeypatch, work_root):
    monkeypatch.setenv("MONKEYBARREL_SANDBOX_ISOLATION", "none")
    with pytest.raises(ValueError, match="allow_unisolated: true"):  # still only by name, with the opt-in
        LocalSandbox(work_root=work_root)
    with pytest.warns(RuntimeWarning, match="LACKS network namespace"):
        box = LocalSandbox(work_root=work_root, allow_unisolated=True)
    assert box.isolation == "none" and "pidns" not in box.protections
    box.close()
    monkeypatch.setenv("MONKEYBARREL_SANDBOX_ISOLATION", "firejail")
    with pytest.raises(ValueError, match=r"one of \('bwrap', 'unshare', 'none'\).*MONKEYBARREL_SANDBOX_ISOLATION"):
        LocalSandbox(work_root=work_root)


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal concerns running as root")
def test_root_without_a_sandbox_uid_is_refused_unless_allowed(work_root):
    with pytest.raises(ValueError, match="would run untrusted programs as root"):
        LocalSandbox(uid_base=None, isolation="none", allow_unisolated=True, work_root=work_root)
    allowed = LocalSandbox(uid_base=None, isolation="none", allow_root=True, allow_unisolated=True, work_root=work_root)
    assert allowed.run({"m.py": "import os\nprint(os.getuid())\n"}, ["python3", "m.py"]).stdout == "0\n"
    allowed.close()


def test_without_cgroups_the_protection_list_says_so(work_root):
    box = LocalSandbox(cgroups=False, work_root=work_root)
    assert not any(p.startswith("cgroup") for p in box.protections) and box.cgroup_problem
    hog = box.run({"m.py": "x = bytearray(600 << 20)\n"}, ["python3", "m.py"], limits=Limits(memory_mb=256))
    assert hog.outcome is Outcome.ERROR_EXIT and "MemoryError" in hog.stderr  # RLIMIT_AS: the program's own error
    box.close()


def test_cgroups_bound_the_tree_and_count_its_cpu(work_root):
    try:
        box = LocalSandbox(cgroups=True, work_root=work_root)
    except ValueError as exc:
        pytest.skip(str(exc))
    assert {"cgroup-memory", "cgroup-pids", "cgroup-cpu"} <= set(box.protections)
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        sum(range(4_000_000))\n        os._exit(0)\n"
            "for _ in range(3):\n    os.wait()\n")
    result = box.run({"m.py": code}, ["python3", "m.py"])
    assert result.outcome is Outcome.OK and result.cpu_s > 0.05  # the children's CPU, counted by the kernel
    box.close()
    assert box._cgroups is None
