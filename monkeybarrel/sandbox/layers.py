"""The local sandbox's isolation layers as argv prefixes: gate -> uid drop -> rlimits -> layer -> init.

A run's argv is a chain of ``exec``s, each a trusted tool, before the program:

1. the *gate* (``/bin/sh``, as the caller): writes its own pid to the run's cgroup files (so every
   descendant is inside the limits from the start), moves the wrapper's status pipe from fd 0 to
   fd 9 and opens the program's stdin; for ``none``, the gate becomes the run's *keeper*
   (``_reaper.py``, as the caller: a child subreaper that kills whatever the run started when it
   ends) and the rest of the chain is its child;
2. ``setpriv`` (as root, for ``bwrap`` and ``none``): drops to the slot's unprivileged uid/gid with
   no supplementary groups (under ``unshare`` this happens inside, after building the run's root);
3. ``prlimit``: the rlimits;
4. the layer: ``bwrap`` (a minimal read-only view, see ``view_args``), ``unshare`` (pid, network,
   IPC, UTS, mount and, when not root, user namespaces; ``_unshare_root.py`` builds the same minimal
   read-only view with sized private mounts and pivots into it), or nothing (``none``). Each layer
   (for ``none``: the keeper) installs the keyring filter (``seccomp.py``) in front of the program;
5. the *init* (``/bin/sh``, pid 1 of the run's pid namespace where there is one): writes one byte
   to fd 9 (the program is about to start: every wrapper before it worked), closes fd 9 and runs
   the command; signals sent to the program then work as usual, and when the init exits the
   kernel kills whatever is left in the namespace.

The host decides SANDBOX_ERROR only from that byte never arriving (the wrapper's stderr is then the
reason); the program never holds fd 9, so it cannot write to that channel.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .seccomp import INSTALL_SOURCE

ISOLATION_LEVELS = ("bwrap", "unshare", "none")
ISOLATION_ENV = "MONKEYBARREL_SANDBOX_ISOLATION"
"""Environment variable choosing the local layer when the constructor does not (``auto``, ``bwrap``,
``unshare``, ``none``): how CI forces each layer through the same tests."""

WORKDIR = "/work"
"""The work directory's path inside a ``bwrap`` sandbox (a tmpfs of ``Limits.disk_mb``)."""

SCRATCH = ("/tmp", "/var/tmp", "/run", "/dev/shm")
"""Private tmpfs mounts of a ``bwrap`` sandbox, each ``Limits.disk_mb`` in size."""

GATE = ('while [ "$1" != -- ]; do echo $$ >"$1" || exit 125; shift; done; shift; '
        'exec 9>&0 0<"$1"; shift; exec "$@"')
INIT = 'printf s >&9; exec 9>&-; "$@"; exit $?'
STATUS_FD = 9

_ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf", "hosts",
        "mime.types", "ssl", "ca-certificates")


@dataclass(frozen=True)
class RunSpec:
    """What the chain needs for one run (or one warm slot)."""

    isolation: str
    uid: int | None
    """The unprivileged uid to drop to (as root), or None to keep the caller's."""
    cgroup_procs: tuple[str, ...]
    stdin_path: str
    cpu_s: int
    memory_bytes: int | None
    """RLIMIT_AS in bytes; None where a memory cgroup bounds the tree instead."""
    nproc: int
    fsize_bytes: int
    nofile: int
    network: bool
    disk_bytes: int
    workdir: str
    extra_binds: tuple[str, ...] = ()
    staging: str = ""
    """``unshare``: the host directory holding the run's files and an empty ``root`` directory beside them."""
    seccomp: bytes | None = None
    """The seccomp filter program (``seccomp.keyring_filter``) installed in front of the program; None: none."""
    seccomp_fd: int | None = None
    """``bwrap``: an fd (above ``STATUS_FD``) holding ``seccomp``, which bubblewrap reads and installs."""
    caps: tuple[str, ...] = ()
    """``bwrap``: capabilities of the sandbox's own user namespace its first process keeps (a warm slot's
    server: ``WARM_SERVER_CAPS``); none for a run."""


def above_status_fd(fd: int) -> int:
    """``fd`` moved above ``STATUS_FD`` (close-on-exec; ``pass_fds`` clears that in the child): the gate
    puts the status pipe on fd 9, so any fd handed down the chain must not be 9."""
    if fd > STATUS_FD:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, STATUS_FD + 1)
    os.close(fd)
    return high


def tool(name: str) -> str:
    """``name``'s absolute path on the caller's PATH (how a layer is found, or found missing), else ``name``."""
    return shutil.which(name) or name


def gate_argv(spec: RunSpec) -> list[str]:
    return ["/bin/sh", "-c", GATE, "sandbox-gate", *spec.cgroup_procs, "--", spec.stdin_path]


def chain(spec: RunSpec, files: list[tuple[int, str]] | None = None, init: bool = True, rlimits: bool = True,
          die_with_parent: bool = True) -> list[str]:
    """The argv up to (not including) the command. ``files``: ``(fd, path inside)`` for bwrap to copy.
    A warm slot's server takes no init and no rlimits (each of its runs sets its own)."""
    argv = gate_argv(spec)
    if spec.isolation == "none" and init:
        argv += keeper_args(spec)  # as the caller (root: out of the run's reach), before the uid drop
    if spec.uid is not None and spec.isolation in ("bwrap", "none"):
        argv += [tool("setpriv"), f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups", "--"]
    if rlimits:
        argv += [tool("prlimit"), f"--cpu={spec.cpu_s}:{spec.cpu_s + 1}", f"--nproc={spec.nproc}", f"--fsize={spec.fsize_bytes}",
                 f"--nofile={spec.nofile}", "--core=0"]
        if spec.memory_bytes is not None:
            argv.append(f"--as={spec.memory_bytes}")
        argv.append("--")
    if spec.isolation == "bwrap":
        argv += bwrap_args(spec, files or [], die_with_parent)
    elif spec.isolation == "unshare":
        argv += unshare_args(spec)
    return argv + (["/bin/sh", "-c", INIT, "sandbox-init"] if init else [])


def bwrap_args(spec: RunSpec, files: list[tuple[int, str]], die_with_parent: bool = True) -> list[str]:
    """bubblewrap's argv (up to ``--``): a minimal read-only view, sized tmpfs mounts, new namespaces.

    ``die_with_parent`` ties the sandbox to the spawning *thread* (PR_SET_PDEATHSIG): right for one
    run, wrong for a warm slot started from a pool thread.
    """
    size = str(spec.disk_bytes)
    argv = [tool("bwrap"), *view_args(spec.extra_binds), "--proc", "/proc", "--dev", "/dev", "--dir", "/var"]
    for path in SCRATCH:
        argv += ["--size", size, "--tmpfs", path]
    argv += ["--mqueue", "/dev/mqueue", "--size", size, "--perms", "0700", "--tmpfs", WORKDIR]
    made = {WORKDIR}
    for fd, path in files:
        parent = os.path.dirname(path)
        missing = []
        while parent not in made:
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            argv += ["--dir", directory]
            made.add(directory)
        argv += ["--file", str(fd), path]
    argv += ["--remount-ro", "/", "--chdir", spec.workdir,
             "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
             "--unshare-cgroup-try", "--hostname", "sandbox", "--new-session", "--as-pid-1"]
    if die_with_parent:
        argv.append("--die-with-parent")
    if spec.seccomp_fd is not None:
        argv += ["--seccomp", str(spec.seccomp_fd)]
    for cap in spec.caps:
        argv += ["--cap-add", cap]
    if not spec.network:
        argv.append("--unshare-net")
    return argv + ["--"]


UNSHARE_ROOT = INSTALL_SOURCE + Path(__file__).with_name("_unshare_root.py").read_text()
KEEPER = INSTALL_SOURCE + Path(__file__).with_name("_reaper.py").read_text()


def host_python() -> str:
    """The host's own interpreter (resolved), which runs the trusted helpers in a run's chain."""
    return os.path.realpath(sys.executable)


def keeper_args(spec: RunSpec) -> list[str]:
    """The ``none`` layer's keeper (``_reaper.py``) in front of the init: nothing the run starts outlives it."""
    keeper = {"seccomp": spec.seccomp.hex() if spec.seccomp else None}
    return [host_python(), "-I", "-S", "-c", KEEPER, json.dumps(keeper)]


def unshare_args(spec: RunSpec) -> list[str]:
    """util-linux unshare's argv: pid (with its own init), IPC, UTS, mount and (unless asked) network
    namespaces, then ``_unshare_root.py`` (the host's interpreter) builds the run's minimal root and
    pivots into it.

    As root the namespaces are made as root and the program runs as ``spec.uid``; otherwise a user
    namespace makes the builder root of the run's namespaces, and the program runs in a nested one as
    the caller's own uid with no capabilities (it never sees uid 0).
    """
    argv = [tool("unshare"), "--pid", "--fork", "--kill-child", "--ipc", "--uts", "--mount", "--propagation", "private"]
    if not spec.network:
        argv.append("--net")
    build = {"root": os.path.join(spec.staging, "root"), "files": os.path.join(spec.staging, "files"),
             "disk": spec.disk_bytes, "view": view_entries(spec.extra_binds),
             "seccomp": spec.seccomp.hex() if spec.seccomp else None}
    if spec.uid is not None:
        build["uid"] = spec.uid
    else:
        argv[1:1] = ["--user", "--map-root-user"]
        build["map_user"] = [os.getuid(), os.getgid()]
    return argv + ["--", host_python(), "-I", "-S", "-c", UNSHARE_ROOT, json.dumps(build)]


@lru_cache(maxsize=None)
def _view(extra: tuple[str, ...]) -> tuple[tuple[str, str, str], ...]:
    entries = [("ro-bind", "/usr", "/usr")]
    for path in _ROOT_DIRS:
        if os.path.islink(path):
            entries.append(("symlink", os.readlink(path), path))
        elif os.path.isdir(path):
            entries.append(("ro-bind", path, path))
    for name in _ETC:
        entries.append(("ro-bind-try", f"/etc/{name}", f"/etc/{name}"))
    for path in sorted(glob.glob("/etc/python3*")):
        entries.append(("ro-bind", path, path))
    for path in extra:
        entries.append(("ro-bind", path, path))
    return tuple(entries)


def view_entries(extra: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """What a program may see, ``(kind, source, target)`` with kind ``ro-bind``, ``ro-bind-try`` (skipped
    when missing) or ``symlink``: ``/usr`` (with ``/bin``, ``/lib*`` as on the host), a few ``/etc``
    files (``_ETC``, ``/etc/python3*``) and ``extra`` (e.g. an interpreter prefix outside ``/usr``), all
    read-only. Not ``/home``, ``/root``, ``/opt``, ``/srv``, ``/var/lib``, the host's ``/tmp`` or any
    checkout. The same view for ``bwrap`` and ``unshare``."""
    return list(_view(tuple(sorted(set(extra)))))


def view_args(extra: tuple[str, ...] = ()) -> list[str]:
    """``view_entries`` as bubblewrap arguments."""
    argv = []
    for kind, source, target in view_entries(extra):
        argv += [f"--{kind}", source, target]
    return argv


def interpreter_prefix(command0: str, path: str) -> str | None:
    """The installation prefix to bind for ``command0`` when it lives outside ``/usr`` (e.g. a conda
    or pyenv Python), else None."""
    found = shutil.which(command0, path=path) if "/" not in command0 else command0
    if found is None or not os.path.isabs(found):
        return None
    real = os.path.realpath(found)
    if real.startswith(("/usr/", "/bin/", "/sbin/", "/lib")):
        return None
    return os.path.dirname(os.path.dirname(real))


def which(command0: str, path: str, workdir_files: set[str], extra: tuple[str, ...] = ()) -> str | None:
    """Whether ``command0`` can start in the sandbox: a file of the run, or an executable on ``path``
    (checked on the host, whose ``/usr`` the sandbox sees). Returns the path to run, None if none."""
    if "/" in command0:
        if not os.path.isabs(command0):
            return command0 if os.path.normpath(command0) in workdir_files else None
        return command0 if os.access(command0, os.X_OK) else None
    return shutil.which(command0, path=path)
