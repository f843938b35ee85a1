"""Which exceptions are the user's to fix (one line, exit 2) and how they read; how warnings print."""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

USER_ERRORS = ("monkeybarrel.core.config:ConfigError", "monkeybarrel.core.files:TaskDataError",
               "monkeybarrel.core.registry:UnknownNameError",
               "monkeybarrel.orchestrator.store.config_guard:ConfigConflictError",
               "monkeybarrel.orchestrator.store.experiment_store:StoreError")
"""Errors whose message is the whole story (file, line or key, and what was expected); a hub dataset that
cannot be loaded (``core.hub.DataUnavailableError``) is a ``TaskDataError``."""


def _loaded(reference: str) -> type | None:
    """The class ``module:name`` if its module was imported (an exception of a class never imported was not raised)."""
    module, _, name = reference.partition(":")
    return getattr(sys.modules.get(module), name, None)


def user_message(exc: BaseException) -> str | None:
    """The one-line message for an error in the user's input or environment; None for a bug."""
    if isinstance(exc, tuple(filter(None, map(_loaded, USER_ERRORS)))):
        return str(exc)
    if isinstance(exc, UnicodeDecodeError):
        where = getattr(exc, "filename", None)
        return f"{where or 'input'}: not UTF-8 text ({exc.reason} at byte {exc.start})"
    if isinstance(exc, OSError):  # missing files, permissions, full disks, models that cannot load
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        return f"{where}{exc.strerror or exc}"
    return None


def route_warnings() -> None:
    """No FutureWarning / DeprecationWarning of a dependency in normal output (ours still show), and every
    warning shown as one line, ``warning: message``, on stderr (not Python's ``file:line: Category: message``
    followed by the source line that raised it)."""
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module=r"monkeybarrel(\.|$)")
    warnings.showwarning = show_warning


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` of the command line: ``warning: <message>`` (the category when it says more)."""
    kind = "" if category in (UserWarning, RuntimeWarning) else f"{category.__name__}: "
    text = " ".join(str(message).split())
    try:
        (file or sys.stderr).write(f"warning: {kind}{text}\n")
    except (OSError, ValueError):  # stderr gone (a closed pipe): the warning has nowhere to go
        pass


@contextmanager
def naming(path: Path) -> Iterator[None]:
    """Config errors raised inside (a plug-in's key, a model's directory) start with the config file's name."""
    from ...core.config import ConfigError

    try:
        yield
    except ConfigError as exc:
        if str(exc).startswith(f"{path}:"):
            raise
        raise ConfigError(f"{path}: {exc}") from None
