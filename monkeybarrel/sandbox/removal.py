"""Removing a directory tree a run wrote, whatever the run made of it.

A run may leave symlinks (to directories, to host files), hard links, fifos, sockets, directories it
made unreadable or read-only, files of mode 000, and trees deeper than ``PATH_MAX``. ``remove_tree``
walks by directory file descriptors (no path is ever longer than one name), never follows a link
(a link is unlinked, its target untouched), gives directories inside the tree mode 0700 before
entering them (never anything outside the tree, never the tree's parent) and holds one directory
open at a time (it climbs back through ``..``). It is meant for trees no process writes any more (the
run has ended); an entry that cannot be removed is skipped, and the rest still goes.
"""

from __future__ import annotations

import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _enter(name: str, parent_fd: int) -> int:
    """Open the directory ``name`` of ``parent_fd`` (not a link), after giving it mode 0700."""
    os.chmod(name, 0o700, dir_fd=parent_fd)  # lstat said directory: chmod does not go through a link here
    return os.open(name, _DIR_FLAGS, dir_fd=parent_fd)


def remove_tree(top: str) -> None:
    """Remove ``top`` (a file, a link or a directory tree) without following links; missing is fine."""
    top = os.path.abspath(top)
    parent_fd = os.open(os.path.dirname(top) or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        name = os.path.basename(top)
        try:
            info = os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=parent_fd)
            return
        _remove_directory(name, parent_fd)
    finally:
        os.close(parent_fd)


def _remove_directory(name: str, parent_fd: int) -> None:
    current = _enter(name, parent_fd)
    path = [name]
    stuck: set[tuple[int, int]] = set()
    while True:
        child = None
        for entry in os.listdir(current):
            try:
                info = os.lstat(entry, dir_fd=current)
            except FileNotFoundError:
                continue
            if (info.st_dev, info.st_ino) in stuck:
                continue
            if stat.S_ISDIR(info.st_mode):
                child = (entry, info)
                break
            try:
                os.unlink(entry, dir_fd=current)
            except OSError:
                stuck.add((info.st_dev, info.st_ino))
        if child is not None:
            entry, info = child
            try:
                inner = _enter(entry, current)
            except OSError:
                stuck.add((info.st_dev, info.st_ino))
                continue
            os.close(current)
            current, path = inner, path + [entry]
            continue
        if len(path) == 1:
            os.close(current)
            try:
                os.rmdir(name, dir_fd=parent_fd)
            except OSError:
                pass
            return
        up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=current)
        info = os.fstat(current)
        os.close(current)
        try:
            os.rmdir(path.pop(), dir_fd=up)
        except OSError:
            stuck.add((info.st_dev, info.st_ino))
        current = up
