"""Loading data from the Hugging Face hub (tasks' datasets, paper recipes' released data), with one clear
error when it cannot be reached or the package that loads it is missing.

Before a download, one TCP connection to the hub's endpoint (``HF_ENDPOINT``, else huggingface_hub's
default) must open within ``CONNECT_TIMEOUT_S``; otherwise the load is refused at once instead of
after the libraries' retries. In offline mode (``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``) nothing
is dialled and the libraries read their cache. With an HTTP(S) proxy configured the libraries are
left to reach the hub through it.
"""

from __future__ import annotations

import importlib
import os
import socket
from typing import Any, Callable
from urllib.parse import urlsplit

from .files import TaskDataError

CONNECT_TIMEOUT_S = 3.0


class DataUnavailableError(TaskDataError):
    """A hub dataset could not be loaded (offline, missing package, unknown name); the message names the
    dataset and how to pass a local copy instead."""


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def hub_endpoint() -> str:
    """The hub URL the libraries use: ``HF_ENDPOINT``, else huggingface_hub's default."""
    if os.environ.get("HF_ENDPOINT"):
        return os.environ["HF_ENDPOINT"]
    from huggingface_hub import constants

    return constants.ENDPOINT


def check_hub_reachable(label: str, local_hint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise ``DataUnavailableError`` at once when the hub cannot be reached (see the module docstring)."""
    if _offline() or any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return
    endpoint = hub_endpoint()
    url = urlsplit(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise DataUnavailableError(f"{label}: the hub {endpoint} cannot be reached ({reason} within {timeout_s:g} s). "
                                   f"Pass a local copy: {local_hint}; or set HF_HUB_OFFLINE=1 to use a cached "
                                   "copy") from None


def load_hub_dataset(name: str, config: str | None = None, split: str = "test", *, local_hint: str) -> Any:
    """``datasets.load_dataset(name, config, split=split)``, or ``DataUnavailableError``.

    Args:
        name: hub id, e.g. ``ScalingIntelligence/monkey_business`` (or a local folder ``datasets`` can load).
        config: the dataset's config name (``None`` for the default).
        split: split to load.
        local_hint: how to pass a local copy instead (shown in the error), e.g. ``"--data PATH"``.
    """
    label = f"hub dataset {name}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    return _from_hub(label, "datasets", local_hint, lambda datasets: datasets.load_dataset(name, config, split=split),
                     local=os.path.exists(name))


def download_hub_files(repo_id: str, patterns: list[str], *, local_hint: str, repo_type: str = "dataset") -> str:
    """``huggingface_hub.snapshot_download`` of the files matching ``patterns``; returns the local folder,
    or raises ``DataUnavailableError`` (offline, missing package)."""
    return _from_hub(f"hub repository {repo_id} ({', '.join(patterns)})", "huggingface_hub", local_hint,
                     lambda hub: hub.snapshot_download(repo_id, repo_type=repo_type, allow_patterns=patterns))


def _from_hub(what: str, package: str, local_hint: str, fetch: Callable[[Any], Any], local: bool = False) -> Any:
    """Import ``package``, check the hub answers (not for a ``local`` dataset folder), then ``fetch(package)``;
    each failure one ``DataUnavailableError`` naming ``what`` and how to pass a local copy."""
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise DataUnavailableError(f"{what}: the `{package}` package is missing "
                                   f"(pip install 'monkeybarrel[hub]'); or pass a local copy: {local_hint}") from exc
    if not local:
        check_hub_reachable(what, local_hint)
    try:
        return fetch(module)
    except Exception as exc:  # offline, gated, unknown config or repository: all end the same way for the user
        raise DataUnavailableError(f"could not load {what}: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}; "
                                   f"download it where the hub is reachable, then pass the local copy: {local_hint}") from exc
