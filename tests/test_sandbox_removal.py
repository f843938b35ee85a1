"""Removing what a run left (``sandbox.removal.remove_tree``): every kind of entry goes, links are never
followed, nothing outside the tree changes (its parent's mode included), as root and as the tree's
unprivileged owner (for whom modes 000 and 0500 really block)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from monkeybarrel.sandbox.attacks import unprivileged_python
from monkeybarrel.sandbox.removal import remove_tree

DEPTH, LEVEL = 300, "deeper-than-path-max"


def plant_everything(top: Path, outside: Path) -> None:
    """A tree with one of every awkward entry; ``outside`` holds what links point at."""
    (outside / "dir").mkdir(parents=True, exist_ok=True)
    (outside / "dir" / "keep.txt").write_text("keep")
    (outside / "file.txt").write_text("keep")
    top.mkdir()
    (top / "plain").write_text("x")
    (top / "link-to-outside-dir").symlink_to(outside / "dir")
    (top / "link-to-outside-file").symlink_to(outside / "file.txt")
    (top / "dangling").symlink_to("/nowhere/at/all")
    (top / "relative-loop").symlink_to(".")
    os.link(outside / "file.txt", top / "hard-link-to-outside")
    os.mkfifo(top / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(top / "socket"))
    sock.close()
    (top / "name with\nnewline and data 0123456789abcdef").write_text("x")
    here = os.open(".", os.O_RDONLY)
    os.chdir(top)
    for _ in range(DEPTH):  # 6300 characters of path: more than PATH_MAX
        os.mkdir(LEVEL)
        os.chdir(LEVEL)
    Path("leaf").write_text("deep")
    os.symlink(str(outside / "dir"), "deep-link")
    os.fchdir(here)
    os.close(here)
    for name, mode in (("unreadable", 0), ("read-only", 0o500), ("no-search", 0o600)):
        (top / name / "inner").mkdir(parents=True)
        (top / name / "inner" / "f").write_text("x")
        (top / name / "inner" / "out").symlink_to(outside / "dir")
        (top / name / "inner").chmod(mode)
        (top / name).chmod(mode)
    (top / "mode-000").write_text("x")
    (top / "mode-000").chmod(0)
    (top / "sticky").mkdir()
    (top / "sticky").chmod(0o1777)
    (top / "sticky" / "f").write_text("x")
    top.chmod(0o500)


def untouched(outside: Path) -> bool:
    modes = ((outside / "dir").stat().st_mode & 0o777, (outside / "file.txt").stat().st_mode & 0o777)
    return ((outside / "dir" / "keep.txt").read_text() == "keep" and (outside / "file.txt").read_text() == "keep"
            and modes == (0o755, 0o644))


@pytest.fixture
def shared(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def test_every_kind_of_entry_goes_and_nothing_outside_changes(shared, tmp_path):
    outside = tmp_path / "outside"
    plant_everything(shared / "left-by-a-run", outside)
    (outside / "dir").chmod(0o755)
    (outside / "file.txt").chmod(0o644)
    remove_tree(str(shared / "left-by-a-run"))
    assert list(shared.iterdir()) == []
    assert untouched(outside)
    assert shared.stat().st_mode & 0o7777 == 0o1777


def test_a_link_or_file_at_the_top_is_unlinked_not_followed(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("keep")
    (tmp_path / "link").symlink_to(target)
    remove_tree(str(tmp_path / "link"))
    assert not (tmp_path / "link").is_symlink() and (target / "keep").read_text() == "keep"
    remove_tree(str(tmp_path / "missing"))  # nothing there: nothing to do


def test_as_the_trees_unprivileged_owner():
    """Modes 000 and 0500 block the owner (not root): the removal gives the tree's own directories 0700."""
    uid = 42419
    how = unprivileged_python(uid)
    if isinstance(how, str):
        pytest.skip(how)
    prefix, env = how
    base = Path("/tmp") / f"mb-removal-{os.getpid()}"  # pytest's tmp_path sits under a 0700 directory
    base.mkdir(mode=0o755)
    try:
        os.chown(base, uid, uid)
        code = ("import os, sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[1])\n"
                "from test_sandbox_removal import plant_everything, untouched\n"
                "from monkeybarrel.sandbox.removal import remove_tree\n"
                "base = Path(sys.argv[2])\nshared = base / 'shared'\nshared.mkdir()\nshared.chmod(0o1777)\n"
                "plant_everything(shared / 'tree', base / 'outside')\n"
                "(base / 'outside' / 'dir').chmod(0o755)\n(base / 'outside' / 'file.txt').chmod(0o644)\n"
                "remove_tree(str(shared / 'tree'))\n"
                "print(sorted(os.listdir(shared)), untouched(base / 'outside'), oct(shared.stat().st_mode & 0o7777))\n")
        done = subprocess.run([*prefix, "-c", code, str(Path(__file__).parent), str(base)], env=env, cwd="/",
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["[]", "True", "0o1777"], done.stdout
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_removing_a_tree_never_changes_its_parents_mode(tmp_path):
    """Regression: the clean-up's permission fix-up once chmod-ed the *parent* of a tree it could not remove,
    which for a sweep of the host's /tmp made /tmp mode 700 for every other user."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    top = shared / "left-by-a-run"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f").write_text("x")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(top)], capture_output=True).returncode:
        pytest.skip("needs root to mount a tmpfs (a directory rmtree cannot remove)")
    try:
        (top / "g").write_text("y")
        remove_tree(str(top))  # rmdir of a mount point fails: the fix-up runs on the top itself
        assert (shared.stat().st_mode & 0o7777) == 0o1777
        assert not (top / "g").exists()  # what could be removed was
    finally:
        subprocess.run(["umount", "-l", str(top)], capture_output=True)
    remove_tree(str(top))
    assert not top.exists() and (shared.stat().st_mode & 0o7777) == 0o1777
