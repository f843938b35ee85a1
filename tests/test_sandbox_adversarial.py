"""Hostile programs against both sandbox backends: each is contained, reported with the right
outcome, leaves the host untouched and leaves no processes, containers or work directories behind.

The Docker cases skip with the reason when no daemon/image is available (`.ci/docker_setup.sh`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import uuid
from pathlib import Path

import pytest

from monkeybarrel.sandbox.base import Limits, Outcome
from monkeybarrel.sandbox.docker_backend import docker_unavailable_reason
from monkeybarrel.sandbox.local import LocalSandbox

LIMITS = Limits(time_s=3, memory_mb=256, processes=32, output_bytes=64 * 1024)


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _processes_of_uids(uids) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture
def work_root():
    """A work root the unprivileged sandbox uid can traverse (pytest's tmp_path is under a 0700 dir)."""
    root = Path(tempfile.mkdtemp(prefix="mb-sandbox-test-", dir="/tmp"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root)


@pytest.fixture(params=["local", "local-warm", "docker"])
def sandbox(request, work_root):
    tmp_path = work_root
    if request.param.startswith("local"):
        warm = request.param == "local-warm"
        try:
            box = LocalSandbox(limits=LIMITS, max_workers=2, work_root=str(tmp_path), warm_python=warm)
        except ValueError as exc:  # warm forks need bubblewrap
            pytest.skip(str(exc))
        yield box
        box.close()
        assert list(tmp_path.iterdir()) == [], "work directories left behind"
        if box.as_root:
            assert _processes_of_uids(box._uids) == []
    else:
        reason = docker_unavailable_reason()
        if reason is not None:
            pytest.skip(reason)
        import docker

        from monkeybarrel.sandbox.docker_backend import DockerSandbox

        box = DockerSandbox(limits=LIMITS, max_workers=2)
        yield box
        client = docker.from_env()  # this box's containers only: other runs on the same daemon are not ours
        left = client.containers.list(all=True, filters={"label": box.owner_label})
        box.close()
        client.close()
        assert left == [], "containers left behind"


def run_python(sandbox, code: str, limits: Limits = LIMITS):
    return sandbox.run({"main.py": code}, ["python3", "main.py"], limits=limits)


def test_infinite_loop_times_out_and_is_killed(sandbox):
    result = run_python(sandbox, "while True:\n    pass\n", Limits(time_s=2, memory_mb=256))
    assert result.outcome is Outcome.TIMEOUT
    assert 1.9 <= result.wall_s < 10


def test_memory_hog_hits_the_memory_limit(sandbox):
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 << 20))\n"
    result = run_python(sandbox, code, Limits(time_s=15, memory_mb=256))
    assert result.outcome is Outcome.MEMORY_LIMIT, (result.outcome, result.stderr[-500:])


def test_fork_bomb_is_capped_and_cleaned_up(sandbox):
    marker = f"forkbomb-{uuid.uuid4().hex[:8]}"
    code = ("import os, sys, time\nspawned = 0\nfailed = False\n"
            "while spawned < 10000:\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        failed = True\n        break\n"
            "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    spawned += 1\n"
            "print(spawned, failed)\nsys.stdout.flush()\nos._exit(0)\n")
    result = sandbox.run({"main.py": code}, ["python3", "main.py", marker], limits=LIMITS)
    assert result.outcome is Outcome.OK, result.stderr[-500:]
    spawned, failed = result.stdout.split()
    assert failed == "True" and int(spawned) < LIMITS.processes  # fork failed at the process limit
    assert _processes_with(marker) == []  # the sleeping children died with the run


def needs_private_filesystem(sandbox) -> None:
    if sandbox.name == "local" and "ro-root" not in sandbox.protections:
        pytest.skip(f"isolation {sandbox.isolation!r} shares the host file system (install bubblewrap)")


def test_writes_outside_the_work_dir_do_not_reach_the_host(sandbox):
    needs_private_filesystem(sandbox)
    token = uuid.uuid4().hex[:10]
    targets = [f"/tmp/mb-evil-{token}", f"/var/tmp/mb-evil-{token}", f"/dev/shm/mb-evil-{token}",
               f"/etc/mb-evil-{token}", f"/usr/local/mb-evil-{token}", f"/root/mb-evil-{token}"]
    code = ("import sys\nfor target in sys.argv[1:]:\n    try:\n        open(target, 'w').write('pwned')\n"
            "        print('wrote', target)\n    except OSError as exc:\n        print('blocked', target, exc.errno)\n"
            "open('inside.txt', 'w').write('fine')\nprint('inside ok')\n")
    result = sandbox.run({"main.py": code}, ["python3", "main.py", *targets], limits=LIMITS)
    assert result.outcome is Outcome.OK and "inside ok" in result.stdout
    for target in targets:
        assert not Path(target).exists(), f"{target} appeared on the host"


def test_deleting_files_outside_the_work_dir_leaves_them_alone(sandbox):
    needs_private_filesystem(sandbox)
    token = uuid.uuid4().hex[:10]
    victims = []
    for base in ("/tmp", "/var/tmp", "/dev/shm"):
        directory = Path(base, f"mb-victim-{token}")
        directory.mkdir(mode=0o777)
        directory.chmod(0o777)
        victim = directory / "precious.txt"
        victim.write_text("keep me")
        victim.chmod(0o666)
        victims.append(victim)
    code = ("import os, shutil, sys\nfor target in sys.argv[1:]:\n"
            "    for attempt in (lambda: os.remove(target), lambda: shutil.rmtree(os.path.dirname(target)),\n"
            "                    lambda: open(target, 'w').write('')):\n"
            "        try:\n            attempt()\n        except OSError:\n            pass\n")
    try:
        result = sandbox.run({"main.py": code}, ["python3", "main.py", *map(str, victims)], limits=LIMITS)
        assert result.outcome is Outcome.OK, result.stderr[-500:]
        for victim in victims:
            assert victim.read_text() == "keep me", f"{victim} was changed"
    finally:
        for victim in victims:
            victim.unlink(missing_ok=True)
            victim.parent.rmdir()


@pytest.fixture
def listener():
    """A real TCP server on 127.0.0.1 that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    accepted, stop = [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            accepted.append(conn.recv(64))
            conn.sendall(b"secret")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


CONNECT = ("import socket, sys\ntry:\n    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
           "    s.sendall(b'hello')\n    print('connected', s.recv(16))\nexcept OSError as exc:\n"
           "    print('blocked', exc.errno)\n")


def test_connecting_to_the_host_is_blocked_without_network(sandbox, listener):
    port, accepted = listener
    result = sandbox.run({"main.py": CONNECT}, ["python3", "main.py", str(port)], limits=LIMITS)
    assert result.outcome is Outcome.OK
    assert result.stdout.startswith("blocked"), result.stdout
    assert accepted == []


def test_local_network_switch_reaches_the_listener(listener, work_root):
    """Positive control: the same program does connect when the run asks for the network."""
    port, accepted = listener
    box = LocalSandbox(limits=LIMITS, work_root=str(work_root))
    result = box.run({"main.py": CONNECT}, ["python3", "main.py", str(port)],
                     limits=Limits(time_s=5, network=True))
    assert result.stdout.startswith("connected"), result.stdout + result.stderr
    assert accepted == [b"hello"]
    assert "netns" not in result.protections


def test_hundred_megabytes_of_output_are_capped_with_a_mark(sandbox):
    code = "import sys\nblock = 'y' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(block)\nprint('done', file=sys.stderr)\n"
    result = run_python(sandbox, code, Limits(time_s=20, memory_mb=256, output_bytes=1 << 16))
    assert result.outcome is Outcome.OK
    assert result.stdout_truncated and not result.stderr_truncated
    assert result.stdout.startswith("y" * (1 << 16))
    assert f"more bytes of {100 << 20}" in result.stdout
    assert len(result.stdout) < (1 << 16) + 200
    assert result.stderr == "done\n"


def test_orphaned_background_processes_die_with_the_run(sandbox):
    marker = str(3000 + int(uuid.uuid4().int % 600))  # a distinctive `sleep` argument
    code = ("import os, subprocess, sys\n"
            "subprocess.Popen(['sleep', sys.argv[1]], start_new_session=True, stdout=subprocess.DEVNULL,\n"
            "                 stderr=subprocess.DEVNULL)\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        os.execvp('sleep', ['sleep', sys.argv[1] + '.5'])\n"
            "    os._exit(0)\nprint('parent done')\n")
    result = sandbox.run({"main.py": code}, ["python3", "main.py", marker], limits=LIMITS)
    assert result.outcome is Outcome.OK and "parent done" in result.stdout
    assert result.wall_s < LIMITS.time_s, "the run waited for its orphans instead of ending"
    assert [pid for pid in _processes_with(marker) if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes()] == []
