"""The warm-Python server that runs inside one bubblewrap sandbox slot (see ``warm_python.py``).

It is started as pid 1 of the slot's pid namespace (``python3 -I -S _zygote.py``), reads one JSON
request per line on fd 3 and answers one JSON line per request on fd 4; a run with sealed input also
gets its memfd on the datagram socket fd 5 (``SCM_RIGHTS``), which the server hands to the run as
fd 3 without ever reading it. Per request it writes the
run's files into ``/work`` and forks a child. With ``join``, the child waits on a pipe while the
server reports its pid (``{"forked": pid}``) and the host moves it into the run's cgroup (the host
answers ``go``, or ``abort``). The child then applies the run's rlimits, takes fresh
stdin/stdout/stderr and runs the script with ``runpy`` exactly as ``python3 [-I] script args``
would (exit status, tracebacks, ``SystemExit``). The server itself never runs untrusted code;
after each run it kills every other process in the namespace (``kill(-1, SIGKILL)`` from pid 1
spares only itself), reaps them, and wipes everything a run can write (``WIPED``, POSIX message
queues, SysV IPC objects). It is not dumpable, so a run cannot ptrace it or read its memory, and as
pid 1 it receives no signal it does not handle. It exits when its request pipe closes.

Standard library only; this file is run by the sandbox's interpreter, not imported.
"""

import base64
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time

# modules most test programs import, loaded once here so each run's fork starts warm
import collections, functools, itertools, math, re, string, typing, heapq, bisect, hashlib, hmac  # noqa: E401,F401
import runpy
import traceback

CONTROL_IN, CONTROL_OUT, CONTROL_FDS = 3, 4, 5
SEALED_FD = 3
WORKDIR = "/work"
WIPED = (WORKDIR, "/tmp", "/var/tmp", "/run", "/dev/shm", "/dev/mqueue")
IPC_RMID = 0


_fd_channel = [None]


def main() -> None:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
    _fd_channel[0] = socket.socket(fileno=CONTROL_FDS)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_IGN)
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


def write_files(files: dict) -> None:
    for rel, content in files.items():
        path = os.path.join(WORKDIR, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(base64.b64decode(content))


def serve(request: dict) -> dict:
    limits = request["limits"]
    sealed = None
    if request.get("sealed"):
        _, fds, _, _ = socket.recv_fds(_fd_channel[0], 1, 1)
        sealed = fds[0]
    write_files(request["files"])
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    gate_r, gate_w = os.pipe()
    stdin = os.memfd_create("stdin")
    os.write(stdin, base64.b64decode(request["stdin"]))
    os.lseek(stdin, 0, os.SEEK_SET)
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the run
        try:
            os.close(gate_w)
            if request["join"] and os.read(gate_r, 1) != b"g":
                os._exit(120)
            os.close(gate_r)
            child(request, limits, stdin, out_w, err_w, sealed)
        finally:
            os._exit(120)
    for fd in (out_w, err_w, stdin, gate_r) + ((sealed,) if sealed is not None else ()):
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
        wipe()
        return {"aborted": True}
    kept = {out_r: bytearray(), err_r: bytearray()}
    total = {out_r: 0, err_r: 0}
    cap = limits["output_bytes"]
    deadline = started + limits["time_s"]
    timed_out, host_gone = False, False
    open_fds = [out_r, err_r]
    exited = None
    while True:
        if exited is None:
            waited = os.wait4(pid, os.WNOHANG)
            if waited[0] == pid:
                exited = waited
                exited_at = time.perf_counter()
        now = time.perf_counter()
        if not open_fds and exited is not None:
            break
        if exited is not None and now - exited_at > 0.2:
            break  # something the run left behind holds its output open; it is killed below
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
                continue
            total[fd] += len(data)
            room = cap - len(kept[fd])
            if room > 0:
                kept[fd] += data[:room]
    kill_everything()
    if exited is None:
        exited = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    reap()
    for fd in (out_r, err_r):
        os.close(fd)
    wipe()
    if host_gone:
        os._exit(0)
    _, status, usage = exited
    return {"exit_code": os.waitstatus_to_exitcode(status), "timed_out": timed_out, "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "stdout": base64.b64encode(bytes(kept[out_r])).decode(), "stdout_total": total[out_r],
            "stderr": base64.b64encode(bytes(kept[err_r])).decode(), "stderr_total": total[err_r]}


def child(request: dict, limits: dict, stdin: int, out_w: int, err_w: int, sealed) -> None:
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
                        ("RLIMIT_NPROC", limits["processes"] + 1), ("RLIMIT_FSIZE", limits["file_size_mb"] << 20),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0)):
        if value is not None:  # no RLIMIT_AS where the run's memory cgroup bounds the whole tree
            resource.setrlimit(getattr(resource, name), (value, value))
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(WORKDIR)
    os.environ.clear()
    os.environ.update(request["env"])
    script, args = request["argv"][0], request["argv"][1:]
    sys.argv = [script, *args]
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


def reap() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def wipe() -> None:
    """Remove everything a run could leave: files in every writable mount, message queues, SysV IPC."""
    for top in WIPED:
        for root, dirs, _ in os.walk(top):  # first make every directory listable and writable again
            for name in dirs:
                try:
                    os.chmod(os.path.join(root, name), 0o700)
                except OSError:
                    pass
        for root, dirs, files in os.walk(top, topdown=False):
            for name in files:
                try:
                    os.unlink(os.path.join(root, name))
                except OSError:
                    pass
            for name in dirs:
                try:
                    os.rmdir(os.path.join(root, name))
                except OSError:
                    pass
    libc = ctypes.CDLL(None)
    for kind, remove in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                rows = table.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            remove(int(row.split()[1]), IPC_RMID, None) if kind != "sem" else remove(int(row.split()[1]), 0, IPC_RMID)


if __name__ == "__main__":
    main()
