"""The sandbox protocol on the Docker backend (skips with the reason when no daemon/image is here)."""

from __future__ import annotations

import pytest

from monkeybarrel.sandbox.base import Limits, Outcome, build_sandbox
from monkeybarrel.sandbox.docker_backend import DEFAULT_IMAGE, docker_unavailable_reason

pytestmark = pytest.mark.docker

REASON = docker_unavailable_reason()


@pytest.fixture(scope="module")
def box():
    if REASON is not None:
        pytest.skip(REASON)
    sandbox = build_sandbox({"type": "docker", "image": DEFAULT_IMAGE, "max_workers": 2,
                             "limits": {"time_s": 20}})
    yield sandbox
    sandbox.close()


def test_files_stdin_exit_code_and_cpu_time(box):
    files = {"pkg/mod.py": "VALUE = 41\n", "main.py": "import sys\nsys.path.insert(0, 'pkg')\nfrom mod import VALUE\n"
             "print(VALUE + 1, sys.stdin.read())\nsum(range(3_000_000))\nsys.exit(4)\n"}
    result = box.run(files, ["python3", "main.py"], stdin="in")
    assert (result.outcome, result.exit_code, result.stdout) == (Outcome.ERROR_EXIT, 4, "42 in\n")
    assert result.backend == "docker" and "netns" in result.protections
    assert result.cpu_s > 0


def test_container_is_unprivileged_and_offline(box):
    code = ("import os, socket\nprint(os.getuid())\nprint(sorted(os.listdir('/sys/class/net')))\n"
            "s = socket.socket()\nprint(s.connect_ex(('1.1.1.1', 53)) != 0)\n")
    result = box.run({"main.py": code}, ["python3", "main.py"])
    assert result.stdout.split("\n")[:3] == ["65534", "['lo']", "True"], result.stdout + result.stderr


def test_run_many_in_order(box):
    from monkeybarrel.sandbox.base import Job

    results = box.run_many([Job({"m.py": f"print({i} * 2)"}, ["python3", "m.py"]) for i in range(4)])
    assert [r.stdout for r in results] == ["0\n", "2\n", "4\n", "6\n"]


def test_missing_image_is_a_clear_error():
    if REASON is not None and "image" not in REASON:
        pytest.skip(REASON)
    with pytest.raises(ValueError, match="docker_setup.sh"):
        build_sandbox({"type": "docker", "image": "monkeybarrel/no-such-image:never"})


def test_missing_command_is_a_sandbox_error(box):
    result = box.run({}, ["/nonexistent/tool"], limits=Limits(time_s=20))
    assert result.outcome is Outcome.SANDBOX_ERROR


def test_remote_daemon_paths_count_cpu_memory_and_output(monkeypatch):
    """The paths a daemon on another host takes, forced on the local one: output through the exec's stream,
    CPU from docker's stats and OOM kills from ``OOMKilled`` (the container's cgroup files unseen)."""
    if REASON is not None:
        pytest.skip(REASON)
    from monkeybarrel.sandbox import docker_backend

    monkeypatch.setattr(docker_backend.ProcessCgroup, "of", classmethod(lambda cls, pid: None))
    box = build_sandbox({"type": "docker", "max_workers": 1, "output_fifos": False})
    try:
        assert "daemon's stream" in box.layer().line()
        busy = box.run({"m.py": "x = sum(range(80_000_000))\nprint('done')\n"}, ["python3", "m.py"],
                       limits=Limits(time_s=20))
        assert busy.outcome is Outcome.OK and busy.stdout == "done\n" and busy.cpu_s > 0.2, busy
        hog = box.run({"m.py": "x = []\nwhile True:\n    x.append(b'x' * (1 << 20))\n"}, ["python3", "m.py"],
                      limits=Limits(time_s=20, memory_mb=128))
        assert hog.outcome is Outcome.MEMORY_LIMIT, hog
        loud = box.run({"m.py": "import sys\nsys.stdout.write('y' * (4 << 20))\n"}, ["python3", "m.py"],
                       limits=Limits(time_s=20, output_bytes=1 << 12))
        assert loud.stdout_truncated and f"more bytes of {4 << 20}" in loud.stdout
    finally:
        box.close()
