"""Loading released data from the Hugging Face hub, with one clear error when it cannot be reached."""

from __future__ import annotations

from typing import Any


class DataUnavailableError(RuntimeError):
    """A released dataset could not be loaded (offline, missing package, unknown name); the message
    names the dataset and how to pass a local copy instead."""


def load_hub_dataset(name: str, config: str | None = None, split: str = "test", *, local_hint: str) -> Any:
    """``datasets.load_dataset(name, config, split=split)``, or ``DataUnavailableError``.

    Args:
        name: hub id, e.g. ``ScalingIntelligence/monkey_business``.
        config: the dataset's config name (``None`` for the default).
        split: split to load.
        local_hint: how to pass a local copy instead (shown in the error), e.g. ``"--data PATH"``.
    """
    label = f"{name}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise DataUnavailableError(f"hub dataset {label}: the `datasets` package is missing "
                                   f"(pip install 'monkeybarrel[hub]'); or pass a local copy: {local_hint}") from exc
    try:
        return load_dataset(name, config, split=split)
    except Exception as exc:  # offline, gated, unknown config: all end the same way for the user
        raise DataUnavailableError(f"could not load hub dataset {label}: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}\n"
                                   f"Download it where the hub is reachable, then pass the local copy: {local_hint}") from exc


def download_hub_files(repo_id: str, patterns: list[str], *, local_hint: str, repo_type: str = "dataset") -> str:
    """``huggingface_hub.snapshot_download`` of the files matching ``patterns``; returns the local folder,
    or raises ``DataUnavailableError`` (offline, missing package)."""
    label = f"{repo_id} ({', '.join(patterns)})"
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise DataUnavailableError(f"hub repository {label}: the `huggingface_hub` package is missing "
                                   f"(pip install 'monkeybarrel[hub]'); or pass a local copy: {local_hint}") from exc
    try:
        return snapshot_download(repo_id, repo_type=repo_type, allow_patterns=patterns)
    except Exception as exc:  # offline, gated, unknown repository
        raise DataUnavailableError(f"could not download hub repository {label}: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}\n"
                                   f"Download it where the hub is reachable, then pass the local copy: {local_hint}") from exc
