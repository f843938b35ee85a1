"""The keeper of a ``none`` run: nothing the run starts outlives it (standard library only; run by the
host's interpreter as ``python -I -S -c <install_seccomp + this source> SPEC command...``, not imported).

``none`` has no pid namespace, so a program's daemon (double fork, new session) would otherwise be
reparented to the host's init and live on, as the caller's own uid when the caller is not root, and
rewrite or read later runs. The keeper makes itself the *child subreaper* of the run: every process
the run starts that loses its parent is reparented to the keeper, wherever it moved its session or
process group. The keeper is not dumpable (no ptrace, no ``/proc/<pid>/mem``), starts the command
(the init shell, then the program) with no new privileges and the seccomp filter of ``SPEC``, waits
for it, and then SIGKILLs its descendants until none is left. It exits with the command's status
(``128 + N`` for death by signal N, as the init shell reports it), or, at SIGTERM (the host's
timeout), kills everything at once and exits 128 + 9.

What it cannot stop: a program of the same uid (a non-root caller's) can kill the keeper itself. The
host sees the keeper end by a signal and then looks for what the run left (``unisolated.py``).
"""

import ctypes
import json
import os
import signal
import sys

PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 4, 36
CAUGHT = (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class Ended(Exception):
    """The host asked for the run to end (SIGTERM)."""


def children():
    """This process's live children (pids), from ``/proc`` (``task/*/children`` where the kernel has it)."""
    me = os.getpid()
    try:
        return [int(pid) for pid in open(f"/proc/{me}/task/{me}/children").read().split()]
    except OSError:
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    stat = open(f"/proc/{name}/stat").read()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == me:
                    found.append(int(name))
        return found


def reap():
    """Collect every child that has ended, without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_descendants():
    """SIGKILL children until none is left: the children of a killed one come to this subreaper next."""
    while True:
        reap()
        alive = children()
        if not alive:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
            continue
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def end(*_):
    raise Ended


def main():
    spec = json.loads(sys.argv[1])
    command = sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.stderr.write(f"sandbox-keeper: prctl: {os.strerror(ctypes.get_errno())}\n")
        os._exit(125)
    for number in CAUGHT:
        signal.signal(number, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, end)
    pid = os.fork()
    if pid == 0:
        try:
            for number in (*CAUGHT, signal.SIGTERM):
                signal.signal(number, signal.SIG_DFL)
            if spec.get("seccomp"):
                install_seccomp(spec["seccomp"])  # noqa: F821 - defined by seccomp.INSTALL_SOURCE in front
            os.execv(command[0], command)
        except BaseException as exc:
            sys.stderr.write(f"sandbox-keeper: {type(exc).__name__}: {exc}\n")
        finally:
            os._exit(125)
    os.close(9)  # the status pipe is the init's (the host reads "started" from it)
    status = None
    try:
        while status is None:
            done, code = os.waitpid(-1, 0)
            if done == pid:
                status = code
    except Ended:
        status = 9  # as if killed by SIGKILL
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_descendants()
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
