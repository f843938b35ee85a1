"""Which exceptions are the user's to fix (one line, exit 2) and how they read; how warnings print."""

from __future__ import annotations

import sys
import warnings

USER_ERRORS = ("monkeybarrel.core.config:ConfigError", "monkeybarrel.core.files:TaskDataError",
               "monkeybarrel.core.registry:UnknownNameError", "monkeybarrel.core.hub:DataUnavailableError",
               "monkeybarrel.orchestrator.store.config_guard:ConfigConflictError",
               "monkeybarrel.orchestrator.store.experiment_store:StoreError")
"""Errors whose message is the whole story (file, line or key, and what was expected)."""


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
