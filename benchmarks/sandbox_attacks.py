"""The attack x backend table: hostile programs against every sandbox backend, outcome and whether it held.

Each attack is a real program run through ``Sandbox.run``; "held" is decided on the host (what the
program managed to do, what is left on the host), never from the program's word alone. Backends:
``local`` with each isolation layer forced (``bwrap``, ``unshare``, ``none``), ``bwrap`` + warm forks,
and ``docker`` (skipped with the reason when no daemon/image is here).

Usage:
    python benchmarks/sandbox_attacks.py [--backends bwrap,warm,unshare,none,docker] [--markdown]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import tempfile
import threading
import uuid
import warnings
from pathlib import Path

from monkeybarrel.sandbox.attacks import tree_memory
from monkeybarrel.sandbox.base import Limits, Outcome

LIMITS = Limits(time_s=8, memory_mb=256, processes=64, file_size_mb=64, output_bytes=1 << 16)
TMPFS_FILL = """
import sys
block = b'x' * (1 << 20)
written = 0
for i in range(20):
    try:
        with open(f'{sys.argv[1]}/fill-{i}', 'wb') as f:
            for _ in range(50):
                f.write(block)
                written += 1
    except OSError:
        break
    finally:
        print(written, flush=True)
"""
DISK_FILL = TMPFS_FILL
FORGE_INIT = "import sys\nsys.stderr.write('sandbox-init: 1: main.py: not found\\n')\nsys.exit(127)\n"
FORGE_WRAPPER = "import sys\nsys.stderr.write('bwrap: Can\\'t find source path\\n')\nsys.exit(1)\n"
FORGE_MEMORY = "import sys\nsys.stderr.write('Traceback...\\nMemoryError\\n')\nsys.exit(1)\n"
PLANT = """
import os, sys
token = sys.argv[1]
planted = []
for d in ('/tmp', '/var/tmp', '/run', '/dev/shm', '..', os.path.expanduser('~')):
    try:
        open(os.path.join(d, 'planted-' + token), 'w').write('x')
        planted.append(d)
    except OSError:
        pass
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(0x5eed, 4096, 0o1666) >= 0:
        planted.append('sysv-shm')
except Exception:
    pass
print(' '.join(planted))
"""
FIND_PLANTED = """
import os, sys
token = sys.argv[1]
found = [d for d in ('/tmp', '/var/tmp', '/run', '/dev/shm', '..', os.path.expanduser('~'))
         if os.path.exists(os.path.join(d, 'planted-' + token))]
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.shmget(0x5eed, 0, 0) >= 0:
        found.append('sysv-shm')
except Exception:
    pass
print(' '.join(found) or 'none')
"""
VISIBILITY = """
import os
seen = []
for path in ('/work/main', '/work/notes', '/home', '/root', '/srv', '/opt', '/var/lib', '/etc/ssh', '/etc/shadow-',
             '/var/log', '/run/docker.sock'):
    try:
        if os.path.isdir(path) and os.listdir(path):
            seen.append(path)
        elif os.path.exists(path):
            seen.append(path)
    except OSError:
        pass
print(' '.join(seen) or 'none')
"""
HOST_PROBE = ("import socket, sys\nsock = socket.socket(socket.AF_UNIX)\ntry:\n    sock.connect(sys.argv[1])\n"
              "    print('connected')\nexcept OSError:\n    print('blocked')\nfor path in sys.argv[2:]:\n    try:\n"
              "        open(path).read()\n        print('read', path)\n    except OSError:\n        pass\n")
FORGE_CPU = ("import os\nsum(range(1_000_000))\nfor path in ('/.sandbox-out/times', 'times'):\n    try:\n"
             "        open(path, 'w').write('0m540.000s 0m0.000s\\n0m540.000s 0m0.000s\\n')\n        os.chmod(path, 0o444)\n"
             "    except OSError:\n        pass\n")
BIG_OUTPUT = "import sys\nblock = b'y' * (1 << 20)\nfor _ in range(500):\n    sys.stdout.buffer.write(block)\n"
BUSY = "while True:\n    pass\n"
ABORT = "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)\n"
UID = "import os\nprint(os.getuid(), os.geteuid())\n"


def _last_number(text: str) -> int:
    numbers = [int(line) for line in text.split() if line.isdigit()]
    return numbers[-1] if numbers else 0


def attacks(box, kind: str) -> list[tuple[str, str, bool, str]]:
    """``(attack, outcome, held, detail)`` rows for one sandbox."""
    rows = []

    def run(code, *args, limits=LIMITS):
        result = box.run({"main.py": code}, ["python3", "main.py", *map(str, args)], limits=limits)
        if result.outcome is Outcome.SANDBOX_ERROR:
            print(f"  ({kind}: sandbox error: {result.error})", flush=True)
        return result

    result = run(tree_memory(block_mb=200), limits=Limits(time_s=15, memory_mb=256, processes=64))
    grew = int(result.stdout.strip() or 0) if result.stdout.strip().isdigit() else 0
    rows.append(("12 forked children x 200 MB, limit 256 MB", result.outcome.value, grew <= 1,
                 f"{grew} children held 200 MB at once"))
    for target in ("/dev/shm", "/tmp"):
        result = run(TMPFS_FILL, target, limits=Limits(time_s=30, memory_mb=1024, file_size_mb=64))
        written = _last_number(result.stdout)
        rows.append((f"fill {target} with 50 MB files (1 GB; memory 1 GB, disk_mb 256)", result.outcome.value,
                     written <= 512,
                     f"{written} MB written"))
        for leftover in Path(target).glob("fill-*"):  # layers that share the host's /tmp, /dev/shm
            leftover.unlink()
    result = run(DISK_FILL, ".", limits=Limits(time_s=30, memory_mb=1024, file_size_mb=64))
    written = _last_number(result.stdout)
    rows.append(("fill the work dir: 20 x 50 MB files (64 MB file limit, disk_mb 256)", result.outcome.value,
                 written <= 512,
                 f"{written} MB written"))
    for name, code in (("stderr 'sandbox-init: not found' + exit 127", FORGE_INIT),
                       ("stderr 'bwrap: ...' + exit 1", FORGE_WRAPPER),
                       ("stderr 'MemoryError' + exit 1", FORGE_MEMORY)):
        result = run(code)
        rows.append((name, result.outcome.value, result.outcome is Outcome.ERROR_EXIT, f"exit {result.exit_code}"))
    token = uuid.uuid4().hex[:8]
    planted = run(PLANT, token).stdout.split()
    found = run(FIND_PLANTED, token).stdout.split()
    found = [] if found == ["none"] else found
    host = [d for d in ("/tmp", "/var/tmp", "/run", "/dev/shm") if Path(d, f"planted-{token}").exists()]
    rows.append(("plant files/IPC for the next run", "ok", not found and not host,
                 f"planted {planted or '-'}; next run saw {found or '-'}; host has {host or '-'}"))
    for d in host:
        Path(d, f"planted-{token}").unlink()
    result = run(VISIBILITY)
    seen = result.stdout.split()
    seen = [] if seen == ["none"] else seen
    host_only = [p for p in seen if p.startswith(("/work/", "/run/docker"))]
    own_image = kind == "docker"  # a container's /root, /home, /var/lib are the image's, not the host's
    rows.append(("list host trees (/work/main, /home, /root, /var/lib, ...)", result.outcome.value,
                 not host_only and (own_image or not seen),
                 f"visible: {seen or '-'}" + (" (the image's own)" if own_image and seen and not host_only else "")))
    with host_service() as (socket_path, canaries, accepted):
        result = run(HOST_PROBE, socket_path, *canaries)
        read = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("read ")]
        connected = result.stdout.startswith("connected") or bool(accepted)
        rows.append(("connect to a host service's 0777 unix socket (outside /tmp and /run)", result.outcome.value,
                     not connected, "connected" if connected else "blocked"))
        rows.append(("read other repositories' .git/config (canaries outside the run)", result.outcome.value,
                     not read, f"read {len(read)} of {len(canaries)}"))
    result = run(FORGE_CPU)
    rows.append(("write fake CPU records (540 s) after a short run", result.outcome.value, result.cpu_s < 10,
                 f"cpu_s={result.cpu_s:.2f}"))
    result = run(BIG_OUTPUT, limits=Limits(time_s=5, memory_mb=256, output_bytes=1 << 16))
    rows.append(("500 MB of output under a 5 s limit", result.outcome.value,
                 result.outcome is Outcome.OK and result.stdout_truncated, f"wall {result.wall_s:.2f} s"))
    result = run(BUSY, limits=Limits(time_s=2))
    rows.append(("busy loop past a 2 s wall limit: CPU accounted", result.outcome.value,
                 result.outcome is Outcome.TIMEOUT and result.cpu_s > 0.2, f"cpu_s={result.cpu_s:.2f}"))
    result = run(BUSY, limits=Limits(time_s=30, cpu_s=1))
    rows.append(("busy loop past a 1 s CPU limit", result.outcome.value,
                 result.outcome is Outcome.TIMEOUT and result.wall_s < 10, f"wall {result.wall_s:.1f} s"))
    result = run(ABORT)
    rows.append(("SIGABRT itself", result.outcome.value, result.outcome is Outcome.KILLED,
                 f"exit {result.exit_code}"))
    result = run(UID)
    uid = result.stdout.split()[:1]
    rows.append(("uid seen by the program", result.outcome.value, bool(uid) and uid[0] != "0",
                 f"uid {uid[0] if uid else '?'}"))
    return rows


class host_service:
    """A 0777 pathname unix socket served by a host thread and canary files (another repository's
    .git/config), in a fresh directory outside /tmp and /run that every user can search."""

    def __enter__(self):
        self.root = Path(tempfile.mkdtemp(prefix="mb-host-", dir="/var/lib" if os.access("/var/lib", os.W_OK)
                                          else Path(__file__).resolve().parents[2]))
        self.root.chmod(0o755)
        canary = self.root / "other-repo" / ".git" / "config"
        canary.parent.mkdir(parents=True)
        canary.write_text("[core]\n\tcanary = true\n")
        for path in (canary.parent.parent, canary.parent):
            path.chmod(0o755)
        canary.chmod(0o644)
        self.canaries = [str(canary)] + [str(p) for p in Path(__file__).resolve().parents[2].glob("*/.git/config")][:3]
        self.path = self.root / "service.sock"
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(self.path))
        self.path.chmod(0o777)
        self.server.listen(4)
        self.server.settimeout(0.2)
        self.accepted, self.stop = [], threading.Event()

        def serve():
            while not self.stop.is_set():
                try:
                    self.accepted.append(self.server.accept()[0])
                except OSError:
                    continue

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        return str(self.path), self.canaries, self.accepted

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.server.close()
        shutil.rmtree(self.root)


def make_box(kind: str, work_root: str, workers: int = 1, limits: Limits = LIMITS):
    """The sandbox of one column: ``docker``, ``warm`` (bwrap + warm forks) or a forced local layer."""
    from monkeybarrel.sandbox.local import LocalSandbox

    if kind == "docker":
        from monkeybarrel.sandbox.docker_backend import DockerSandbox, docker_unavailable_reason

        reason = docker_unavailable_reason()
        if reason:
            raise ValueError(reason)
        return DockerSandbox(limits=limits, max_workers=workers)
    if kind == "warm":
        return LocalSandbox(limits=limits, max_workers=workers, isolation="bwrap", warm_python=True,
                            work_root=work_root)
    try:
        return LocalSandbox(limits=limits, max_workers=workers, isolation=kind, work_root=work_root,
                            allow_unisolated=kind == "none")
    except TypeError:  # an older checkout (no opt-in), measured for comparison with PYTHONPATH=<checkout>
        return LocalSandbox(limits=limits, max_workers=workers, isolation=kind, work_root=work_root)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="bwrap,warm,unshare,none,docker")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    kinds = args.backends.split(",")
    table: dict[str, dict[str, str]] = {}
    order: list[str] = []
    work_root = tempfile.mkdtemp(prefix="mb-attacks-", dir="/tmp")
    os.chmod(work_root, 0o711)
    try:
        for kind in kinds:
            try:
                box = make_box(kind, work_root)
            except ValueError as exc:
                print(f"{kind}: skipped ({exc})")
                continue
            if hasattr(box, "layer"):
                print(box.layer().line(), flush=True)
            try:
                for attack, outcome, held, detail in attacks(box, kind):
                    if outcome == "sandbox_error":
                        held = False
                    if attack not in table:
                        table[attack] = {}
                        order.append(attack)
                    table[attack][kind] = f"{outcome} / {'held' if held else '**BROKEN**'} ({detail})"
                    print(f"{kind:8s} {attack}: {outcome}, {'held' if held else 'BROKEN'} ({detail})", flush=True)
            finally:
                box.close()
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    print("\n| attack | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
    for attack in order:
        print(f"| {attack} | " + " | ".join(table[attack].get(k, "skipped") for k in kinds) + " |")


if __name__ == "__main__":
    main()
