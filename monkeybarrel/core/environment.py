"""Environment variables changed for the length of a block, then put back as they were."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Mapping

__all__ = ["environment"]


@contextlib.contextmanager
def environment(changes: Mapping[str, str | None]) -> Iterator[None]:
    """Set each variable of ``changes`` (None: unset it) while the block runs; afterwards every one has its
    earlier value again, or is unset if it had none. For what a child process or a library reads at start-up."""
    saved = {name: os.environ.get(name) for name in changes}
    try:
        _apply(changes)
        yield
    finally:
        _apply(saved)


def _apply(values: Mapping[str, str | None]) -> None:
    """``os.environ`` with each of ``values`` set, or unset where None."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
