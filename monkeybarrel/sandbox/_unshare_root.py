"""Builds the minimal root of an ``unshare`` run, inside its fresh mount namespace (standard library only;
run by the host's interpreter as ``python -I -S -c <this source> SPEC command...``, not imported).

It runs as root of the run's namespaces (real root, or root of a new user namespace when the caller
is not root), before any untrusted code. SPEC (JSON) gives ``root`` (an empty host directory to build
on), ``files`` (the host directory holding the run's files), ``disk`` (bytes per writable mount),
``view`` (``[kind, source, target]`` of what the run may see: ``ro-bind``, ``ro-bind-try``,
``symlink``), ``uid`` (drop to this uid/gid; as root) or ``map_user`` (``[uid, gid]``: a nested user
namespace in which the program is that uid with no capabilities; not as root), ``seccomp`` (the
keyring filter as hex, installed last; ``seccomp.py``).

The root: a small tmpfs with read-only binds of the view, a fresh ``/proc`` of the run's pid
namespace, a minimal ``/dev``, sized tmpfs mounts ``/work`` (the run's files, copied in),
``/tmp``, ``/var/tmp``, ``/run``, ``/dev/shm``; then ``pivot_root`` into it and detach the host's
tree, so no host path (files, unix sockets, other runs' directories) can be named afterwards. ``/``
is read-only, no new privileges can be gained, and the program runs as an unprivileged uid in
``/work``. Any failure: the reason on stderr and exit status 125, before the program exists.
"""

import ctypes
import json
import os
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS = 38
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
SCRATCH = ("tmp", "var/tmp", "run", "dev/shm")
LIBC = ctypes.CDLL(None, use_errno=True)


def fail(message):
    sys.stderr.write(f"sandbox-root: {message}\n")
    sys.stderr.flush()
    os._exit(125)


def check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        fail(f"{what}: {os.strerror(error)}")


def mount(source, target, fstype, flags, data=None):
    check(LIBC.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                     flags, data.encode() if data else None), f"mount {source or fstype} on {target}")


def kept_flags(path):
    """The mount flags of ``path``'s mount that a user namespace may not drop (kept on the remount)."""
    have = os.statvfs(path).f_flag
    flags = 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)):
        if have & st:
            flags |= ms
    return flags


def bind_read_only(source, target):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept_flags(source))


def tmpfs(target, size, mode, owner=None):
    os.makedirs(target, exist_ok=True)
    options = f"size={size},mode={mode:o}" + (f",uid={owner},gid={owner}" if owner is not None else "")
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options)


def copy_files(source, target, owner):
    """The run's files (regular files in directories, written by the host) into ``target``, owned by ``owner``."""
    for root, dirs, names in os.walk(source):
        here = os.path.join(target, os.path.relpath(root, source))
        for name in dirs:
            os.mkdir(os.path.join(here, name), 0o755)
        for name in names:
            with open(os.path.join(root, name), "rb") as src, open(os.path.join(here, name), "wb") as dst:
                dst.write(src.read())
        if owner is not None:
            for name in dirs + names:
                os.lchown(os.path.join(here, name), owner, owner)


def pivot(new_root, put_old):
    number = PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        import subprocess

        subprocess.run(["pivot_root", new_root, put_old], check=True)
    else:
        check(LIBC.syscall(number, new_root.encode(), put_old.encode()), "pivot_root")


def write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def main():
    spec = json.loads(sys.argv[1])
    command = sys.argv[2:]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = spec["root"]
    mount("sandbox-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=755")
    os.chdir(root)
    for kind, source, target in spec["view"]:
        here = "." + target
        if kind == "symlink":
            os.symlink(source, here)
        elif kind == "ro-bind" or os.path.exists(source):
            bind_read_only(source, here)
    os.makedirs("proc")
    mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs("dev")
    mount("sandbox-dev", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=755")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"dev/{name}", "a").close()
            mount(f"/dev/{name}", f"dev/{name}", None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"dev/{name}")
    os.makedirs("dev/mqueue")
    if LIBC.mount(b"mqueue", b"dev/mqueue", b"mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        os.rmdir("dev/mqueue")  # not permitted in some user namespaces; the IPC namespace still separates queues
    size, owner = spec["disk"], spec.get("uid")
    for target in SCRATCH:
        tmpfs(target, size, 0o1777)
    tmpfs("work", size, 0o700, owner)
    copy_files(spec["files"], "work", owner)
    os.makedirs(".old")
    pivot(".", ".old")
    os.chdir("/")
    check(LIBC.umount2(b"/.old", MNT_DETACH), "detaching the host's root")
    os.rmdir("/.old")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/work")
    check(LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    if owner is not None:
        os.setgroups([])
        os.setresgid(owner, owner, owner)
        os.setresuid(owner, owner, owner)
    elif spec.get("map_user"):
        uid, gid = spec["map_user"]
        check(LIBC.unshare(CLONE_NEWUSER), "a user namespace for the program")
        write("/proc/self/setgroups", "deny")
        write("/proc/self/uid_map", f"{uid} 0 1")
        write("/proc/self/gid_map", f"{gid} 0 1")
    if spec.get("seccomp"):
        install_seccomp(spec["seccomp"])  # noqa: F821 - defined by seccomp.INSTALL_SOURCE in front of this source
    os.execv(command[0], command)


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # every failure before the program exists is the sandbox's
        fail(f"{type(exc).__name__}: {exc}")
