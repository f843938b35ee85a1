"""Which exceptions are the user's to fix (one line, exit 2) and how they read; quiet dependency warnings."""

from __future__ import annotations

import sys
import warnings

USER_ERRORS = ("monkeybarrel.core.config:ConfigError", "monkeybarrel.core.files:TaskDataError",
               "monkeybarrel.core.registry:UnknownNameError", "monkeybarrel.orchestrator.store.config_guard:ConfigConflictError",
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


def quiet_dependency_warnings() -> None:
    """No FutureWarning / DeprecationWarning of a dependency in normal output (ours still show)."""
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module=r"monkeybarrel(\.|$)")
