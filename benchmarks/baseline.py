"""Before/after in one run: a command timed on this tree and on an older commit checked out in a
temporary ``git worktree``, both with this interpreter (``PYTHONPATH`` picks the tree).

Used by ``cli_startup.py`` and ``report_scale.py``; the default older commit is where this branch
left ``main`` (pass ``--before REV`` once it is merged).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

REPO = Path(__file__).resolve().parent.parent
TREE_ONLY = "import sys\nsys.path[:] = [p for p in sys.path if p]\n"
"""Drops ``python -c``'s current directory from the path: run from a checkout, it comes before ``PYTHONPATH``
(both columns would time the checkout the script runs in)."""
CLI = TREE_ONLY + "from monkeybarrel.orchestrator.cli.main import main\nsys.exit(main())"
"""What the ``monkeybarrel`` console script runs, with the code of the tree on ``PYTHONPATH``."""


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True).stdout.strip()


def default_before() -> str:
    """The merge base of HEAD and main (the last commit before this branch's work)."""
    try:
        return git("merge-base", "HEAD", "main")
    except subprocess.CalledProcessError:
        return git("rev-parse", "HEAD~1")


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """``revision`` in a temporary detached worktree (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="mb-before-"))
    git("worktree", "add", "--detach", str(folder), revision)
    try:
        yield folder
    finally:
        git("worktree", "remove", "--force", str(folder))


def run_cli(tree: Path, argv: list[str], check: bool = False) -> tuple[float, float, float, int]:
    """``monkeybarrel ARGV`` with ``tree``'s code: (wall s, CPU s, peak RSS GB of the largest child so far, exit status)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    status = subprocess.run([sys.executable, "-c", CLI, *argv], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, check=check).returncode
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, after.ru_maxrss / 1e6, status


def machine_line() -> str:
    return f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared machine: wall times are noisy)"
