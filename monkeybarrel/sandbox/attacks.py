"""Hostile programs for checking a sandbox backend: run them through ``Sandbox.run`` and decide on the
host whether the backend held.

Shared by the adversarial tests (``tests/test_sandbox_adversarial.py``) and the attack x backend table
(``benchmarks/sandbox_attacks.py``), so both measure the same attack.
"""

from __future__ import annotations

__all__ = ["tree_memory"]


def tree_memory(block_mb: int, children: int = 12, wait_s: float = 8) -> str:
    """A Python program that forks ``children`` processes, each touching ``block_mb`` MB and then sleeping.

    A memory limit per process (``RLIMIT_AS``) lets every child through; a limit on the whole tree
    (a cgroup) kills them. After up to ``wait_s`` seconds of waiting for the children to report, the
    program prints how many of those that reported are still alive, i.e. held their block at once.
    """
    return f"""
import os, select, sys, time
r, w = os.pipe()
pids = []
for index in range({children}):
    pid = os.fork()
    if pid == 0:
        try:
            block = bytearray({block_mb} << 20)
            for i in range(0, len(block), 4096):
                block[i] = 1
            os.write(w, bytes([index]))
            time.sleep(30)
        finally:
            os._exit(0)
    pids.append(pid)
os.close(w)
reported, deadline = set(), time.time() + {wait_s}
while len(reported) < {children} and time.time() < deadline:
    if select.select([r], [], [], 0.2)[0]:
        got = os.read(r, 64)
        if not got:
            break
        reported.update(got)
alive = [i for i in reported if os.waitpid(pids[i], os.WNOHANG) == (0, 0)]
print(len(alive), flush=True)
"""
