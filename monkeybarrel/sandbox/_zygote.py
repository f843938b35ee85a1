"""The warm-Python server that runs inside one bubblewrap sandbox slot (see ``warm_python.py``).

It is started as pid 1 of the slot's pid namespace (``python3 -I -S _zygote.py``) with three
capabilities of the slot's own user namespace (``CAP_SYS_ADMIN``, ``CAP_NET_ADMIN``,
``CAP_SETPCAP``: mounts, namespaces and dropping capabilities, nothing on the host), reads one JSON
request per line on fd 3 and answers one JSON line per request on fd 4; a run with sealed input also
gets its memfd on the datagram socket fd 5 (``SCM_RIGHTS``), which the server hands to the run as
fd 3 without ever reading it.

Every run gets namespaces and writable file systems of its own, so nothing one run leaves can be
seen by the next (``0 bytes`` carried, whatever it plants: links, deep trees, modes, IPC, sockets,
pid numbers). Per request the server forks a *maker* that (after the host moved it into the run's
cgroup, with ``join``: it reports ``{"forked": pid}`` and waits for ``go`` or ``abort``) enters new
mount, pid, IPC, UTS and network namespaces, mounts fresh sized tmpfs on ``/work``, ``/tmp``,
``/var/tmp``, ``/run`` and ``/dev/shm``, brings up loopback, forks the run's *init* (pid 1 of the new
pid namespace) and exits. The init mounts a fresh ``/proc`` and ``/dev/mqueue``, writes the run's
files into ``/work``, forks the *program* (pid 2), drops every capability and waits: when the
program ends it kills everything else in the run's namespace, reports the program's wait status
to the server and exits. The program drops every capability before anything else, applies the
run's rlimits, takes fresh stdin/stdout/stderr and runs the script with ``runpy`` exactly as
``python3 [-I] script args`` would (exit status, tracebacks, ``SystemExit``). When a run's last
process ends, its namespaces and mounts are gone with it; the server also kills every process of
the slot but itself after each run (``kill(-1)`` from pid 1). The slot's ``/dev`` is made read-only
at start (the only writable mounts a run has are its own). The server never runs untrusted code, is
not dumpable, and as pid 1 receives no signal it does not handle. It exits when its request pipe
closes.

Standard library only; this file is run by the sandbox's interpreter, not imported.
"""

import base64
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

# modules most test programs import, loaded once here so each run's fork starts warm
import collections, functools, itertools, math, re, string, typing, heapq, bisect, hashlib, hmac  # noqa: E401,F401
import ast, collections.abc, decimal, fractions, numbers  # noqa: E401,F401 - the checker's (kits/_code_checker.py)
import runpy
import site
import traceback

CONTROL_IN, CONTROL_OUT, CONTROL_FDS = 3, 4, 5
SEALED_FD = 3
WORKDIR = "/work"
SCRATCH = ("/tmp", "/var/tmp", "/run", "/dev/shm")
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x4000000, 0x8000000
CLONE_NEWNET, CLONE_NEWPID = 0x40000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 4, 24, 47, 4
SIOCSIFFLAGS, IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x8914, 0x1, 0x8, 0x40
LIBC = ctypes.CDLL(None, use_errno=True)


_fd_channel = [None]
BARE_PATH = list(sys.path)
"""``sys.path`` of ``python -S`` (no site-packages); ``main`` adds the site directories for the other runs."""
SITE_PATH = []


def main() -> None:
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    for directory in site.getsitepackages():  # what a fresh `python3 [-I]` has on sys.path (the server runs -S)
        if os.path.isdir(directory):
            site.addsitedir(directory)
    SITE_PATH[:] = sys.path
    _fd_channel[0] = socket.socket(fileno=CONTROL_FDS)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_IGN)
    # a mount namespace of the slot's own user namespace (bubblewrap's belongs to the one above it), in which
    # /dev - the one writable mount runs would otherwise share - becomes read-only (its locked flags kept)
    check(LIBC.unshare(CLONE_NEWNS), "a mount namespace for the server")
    check(LIBC.mount(None, b"/dev", None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags("/dev"), None),
          "making /dev read-only")
    while True:
        line = read_line()
        if line is None:
            return
        send(serve(json.loads(line)))


_pending = [b""]


def read_line():
    """The next request line from the host (None when the host is gone)."""
    while b"\n" not in _pending[0]:
        chunk = os.read(CONTROL_IN, 1 << 20)
        if not chunk:
            return None
        _pending[0] += chunk
    line, _pending[0] = _pending[0].split(b"\n", 1)
    return line


def send(message: dict) -> None:
    reply = json.dumps(message).encode() + b"\n"
    while reply:
        reply = reply[os.write(CONTROL_OUT, reply):]


def kept_flags(path: str) -> int:
    """The flags of ``path``'s mount that a remount must keep (the kernel locks them in a user namespace)."""
    have, flags = os.statvfs(path).f_flag, 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)):
        if have & st:
            flags |= ms
    return flags


def check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def serve(request: dict) -> dict:
    limits = request["limits"]
    sealed = None
    if request.get("sealed"):
        _, fds, _, _ = socket.recv_fds(_fd_channel[0], 1, 1)
        sealed = fds[0]
    files = {rel: base64.b64decode(content) for rel, content in request["files"].items()}
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    gate_r, gate_w = os.pipe()
    status_r, status_w = os.pipe()
    stdin = os.memfd_create("stdin")
    os.write(stdin, base64.b64decode(request["stdin"]))
    os.lseek(stdin, 0, os.SEEK_SET)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the maker, then the run's init and program
        try:
            for fd in (gate_w, out_r, err_r, status_r, CONTROL_IN, CONTROL_OUT, CONTROL_FDS):
                os.close(fd)
            if request["join"] and os.read(gate_r, 1) != b"g":
                os._exit(120)
            os.close(gate_r)
            make_run(request, limits, files, stdin, out_w, err_w, status_w, sealed)
        except BaseException as exc:
            report_failure(status_w, exc)
        finally:
            os._exit(120)
    for fd in (out_w, err_w, stdin, gate_r, status_w) + ((sealed,) if sealed is not None else ()):
        os.close(fd)
    if request["join"]:
        send({"forked": pid})
        answer = read_line()
        if answer == b"go":
            os.write(gate_w, b"g")
        else:
            started = None
    os.close(gate_w)
    if started is None:  # the host could not move the run into its cgroup: it never ran
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(status_r)
        for fd in (out_r, err_r):
            os.close(fd)
        return {"aborted": True}
    return collect(started, limits, out_r, err_r, status_r)


def collect(started: float, limits: dict, out_r: int, err_r: int, status_r: int) -> dict:
    """Read the run's output (capped, counted) until it ends or its time is up; then end everything."""
    kept = {out_r: bytearray(), err_r: bytearray()}
    total = {out_r: 0, err_r: 0}
    cap = limits["output_bytes"]
    deadline = started + limits["time_s"]
    timed_out, host_gone = False, False
    open_fds = [out_r, err_r, status_r]
    report, ended_at = b"", None
    while True:
        now = time.perf_counter()
        if ended_at is None and (status_r not in open_fds or report.count(b"\n") >= 2 or b"error " in report):
            ended_at = now  # the init reported the program's end (or died): the run is over
        if ended_at is not None and (open_fds == [status_r] or not open_fds or now - ended_at > 0.2):
            break  # output closed, or something left behind holds it open (it is killed below)
        if now >= deadline:
            timed_out = True
            break
        ready, _, _ = select.select(open_fds + [CONTROL_IN], [], [], min(deadline - now, 0.02))
        if CONTROL_IN in ready:
            host_gone = True
            break
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if not data:
                open_fds.remove(fd)
            elif fd == status_r:
                report += data
            else:
                total[fd] += len(data)
                room = cap - len(kept[fd])
                if room > 0:
                    kept[fd] += data[:room]
    lines = report.split(b"\n")
    running = tree_cpu_seconds(int(lines[0])) if lines[0].isdigit() else 0.0  # what a kill would lose (timeout)
    kill_everything()
    wall = time.perf_counter() - started
    status = int(lines[1]) if len(lines) > 2 and lines[1].isdigit() else None
    cpu = 0.0
    while True:  # reap the maker, the init (reparented here) and what the init's end left to us; their CPU is the run's
        try:
            _, _, rusage = os.wait4(-1, 0)
        except ChildProcessError:
            break
        cpu += rusage.ru_utime + rusage.ru_stime
    cpu = max(cpu, running)
    for fd in (out_r, err_r, status_r):
        os.close(fd)
    if host_gone:
        os._exit(0)
    failure = next((line for line in lines if line.startswith(b"error ")), None)
    if failure is not None:
        kind, _, reason = failure[6:].decode(errors="replace").partition(" ")
        return {"failed": reason, "setup": kind == "setup"}
    if status is None:  # the run never reported (killed at its limit, or the init died): as killed
        status = signal.SIGKILL
    return {"exit_code": os.waitstatus_to_exitcode(status), "timed_out": timed_out, "wall_s": wall,
            "cpu_s": cpu,
            "stdout": base64.b64encode(bytes(kept[out_r])).decode(), "stdout_total": total[out_r],
            "stderr": base64.b64encode(bytes(kept[err_r])).decode(), "stderr_total": total[err_r]}


class FilesFailed(Exception):
    """The run's files could not be written (its own doing: too large for ``disk_mb``, ...), not the slot's."""


def report_failure(status_w: int, exc: BaseException) -> None:
    """Tell the server why the run could not be set up (before the program existed): ``error files ...`` when
    its files could not be written, ``error setup ...`` when its namespaces or mounts could not be made."""
    kind = "files" if isinstance(exc, FilesFailed) else "setup"
    try:
        os.write(status_w, f"error {kind} {type(exc).__name__}: {exc}".replace("\n", " ").encode()[:1000] + b"\n")
    except OSError:
        pass


def tree_cpu_seconds(root: int) -> float:
    """User+system CPU seconds of ``root`` and its live descendants, what each has reaped included (from /proc)."""
    parents, spent, tick = {}, {}, os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as handle:
                    text = handle.read()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2:].split()
            parents[int(name)], spent[int(name)] = int(fields[1]), sum(int(v) for v in fields[11:15]) / tick
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(spent.get(pid, 0.0) for pid in tree)


def make_run(request, limits, files, stdin, out_w, err_w, status_w, sealed) -> None:
    """In the maker: fresh namespaces and mounts for one run, then fork its init and exit."""
    check(LIBC.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET), "unshare")
    check(LIBC.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "making mounts private")
    size = limits["disk_bytes"]
    for path, mode in ((WORKDIR, 0o700),) + tuple((p, 0o755) for p in SCRATCH):
        check(LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                         f"size={size},mode={mode:o}".encode()), f"mounting {path}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
    init = os.fork()
    if init == 0:
        try:
            run_init(request, limits, files, stdin, out_w, err_w, status_w, sealed)
        except BaseException as exc:
            report_failure(status_w, exc)
        finally:
            os._exit(120)
    os.write(status_w, f"{init}\n".encode())
    os._exit(0)


def run_init(request, limits, files, stdin, out_w, err_w, status_w, sealed) -> None:
    """Pid 1 of the run: its /proc, message queues and files; then the program, and its end."""
    for number in range(1, signal.NSIG):
        if number not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            try:
                signal.signal(number, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
    check(LIBC.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "mounting /proc")
    check(LIBC.mount(b"mqueue", b"/dev/mqueue", b"mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
          "mounting /dev/mqueue")
    try:
        for rel, content in files.items():
            path = os.path.join(WORKDIR, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(content)
    except OSError as exc:
        raise FilesFailed(f"writing the run's files: {exc}") from None
    program = os.fork()
    if program == 0:
        try:
            os.close(status_w)
            drop_capabilities()
            run_program(request, limits, stdin, out_w, err_w, sealed)
        finally:
            os._exit(120)
    for fd in (stdin, out_w, err_w) + ((sealed,) if sealed is not None else ()):
        os.close(fd)
    drop_capabilities()
    status = None
    while status is None:
        try:
            done, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if done == program:
            status = code
    kill_everything()
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    os.write(status_w, f"{status if status is not None else signal.SIGKILL}\n".encode())
    os._exit(0)


def drop_capabilities() -> None:
    """Give up every capability for good (bounding set, ambient set, then the process's own sets)."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())
    for cap in range(last + 1):
        LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this thread
    check(LIBC.capset(header, bytes(24)), "dropping capabilities")
    with open("/proc/self/status") as status:
        if any(line.startswith(("CapEff:", "CapPrm:", "CapBnd:", "CapAmb:")) and int(line.split()[1], 16)
               for line in status):
            os._exit(121)  # fail closed: no untrusted code with a capability


def run_program(request: dict, limits: dict, stdin: int, out_w: int, err_w: int, sealed) -> None:
    os.setsid()
    os.dup2(stdin, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    if sealed is not None:
        os.dup2(sealed, SEALED_FD)
        request["env"]["MONKEYBARREL_SEALED"] = f"fd:{SEALED_FD}"
    os.closerange(3 if sealed is None else SEALED_FD + 1, 1 << 16)
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU at the limit, SIGKILL a second later
    for name, value in (("RLIMIT_AS", limits["memory_bytes"]),
                        ("RLIMIT_NPROC", limits["processes"] + 2), ("RLIMIT_FSIZE", limits["file_size_mb"] << 20),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0)):
        if value is not None:  # no RLIMIT_AS where the run's memory cgroup bounds the whole tree
            resource.setrlimit(getattr(resource, name), (value, value))
    for number in range(1, signal.NSIG):  # as a fresh interpreter has them (SIGXFSZ ignored, SIGINT raises)
        if number not in (signal.SIGKILL, signal.SIGSTOP):
            try:
                signal.signal(number, signal.SIG_IGN if number == signal.SIGXFSZ else signal.SIG_DFL)
            except (OSError, ValueError):
                pass
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(WORKDIR)
    os.environ.clear()
    os.environ.update(request["env"])
    script, args = request["argv"][0], request["argv"][1:]
    sys.argv = [script, *args]
    sys.path[:] = SITE_PATH if request.get("site", True) else BARE_PATH
    if not request["isolated"]:
        sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", buffering=1 if request["env"].get("PYTHONUNBUFFERED") else -1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exit_status(exc)
    except BaseException as exc:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != script:  # hide this server's frames
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        code = code or 120
    os._exit(code)


def exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def kill_everything() -> None:
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    main()
