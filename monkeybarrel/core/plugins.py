"""Build a registered plug-in from config options, turning bad options into ConfigErrors."""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from .config import ConfigError
from .registry import Registry, UnknownNameError

T = TypeVar("T")


def build_plugin(registry: Registry[T], name: str, key_path: str, /, **kwargs: Any) -> T:
    """``registry.create(name, **kwargs)`` with errors that name the config key.

    Args:
        registry: where ``name`` is registered.
        name: the registered name (from the config).
        key_path: the config path of the entry, e.g. ``verifiers[2]``, used in error messages.
        **kwargs: constructor arguments (the entry's fixed fields plus its ``options``); names with
            ``__`` are nested scikit-learn parameters (``model__threshold``), set with ``set_params``.

    Raises:
        ConfigError: unknown name, unknown option, or an option the constructor rejects.
    """
    try:
        factory = registry.get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"{key_path}: {exc}") from None
    nested = {k: kwargs.pop(k) for k in [k for k in kwargs if "__" in k]}
    if nested and not hasattr(factory, "set_params"):
        raise ConfigError(f"{key_path}.options: {registry.kind} {name!r} has no nested parameters "
                          f"(got {sorted(nested)})")
    signature = inspect.signature(factory)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    if not accepts_any:
        allowed = [n for n, p in signature.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ConfigError(
                f"{key_path}.options: unknown option(s) {unknown} for {registry.kind} {name!r}; "
                f"expected some of {sorted(set(allowed) - {'spec', 'seed'})}"
            )
    try:
        built = factory(**kwargs)
        return built.set_params(**nested) if nested else built
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key_path}: cannot build {registry.kind} {name!r}: {exc}") from None
