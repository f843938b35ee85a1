"""A tiny name -> factory registry shared by every stage (tasks, samplers, verifiers, selectors).

Plug-ins register with a decorator; third-party packages can also expose entry points in the
group ``monkeybarrel.<kind>`` (e.g. ``monkeybarrel.verifiers``), loaded lazily on first miss.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised when a registry has no entry of the requested name."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0])


class Registry(Generic[T]):
    """Maps names to factories (classes or functions) of one kind of plug-in.

    Args:
        kind: what the entries are, used in error messages and the entry-point group
            (``monkeybarrel.<kind>s``).
        lazy: optional ``name -> "module:attr"`` map of built-ins imported only when asked for.
        package: a package whose modules register built-ins with ``@register``; they are
            imported on the first lookup that misses (modules import heavy optional
            dependencies such as vllm, ray or docker inside functions, so this stays cheap).
    """

    def __init__(self, kind: str, lazy: dict[str, str] | None = None, package: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self._package_scanned = False
        self._entries: dict[str, Callable[..., T]] = {}
        self._lazy: dict[str, str] = dict(lazy or {})
        self._entry_points_loaded = False

    def register(self, name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: ``@REGISTRY.register("name")`` adds a factory under ``name``."""

        def decorate(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._entries and self._entries[name] is not factory:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = factory
            return factory

        return decorate

    def names(self) -> list[str]:
        """All known names, built-in lazy ones included, sorted."""
        self._scan_package()
        self._load_entry_points()
        return sorted(set(self._entries) | set(self._lazy))

    def get(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``; raises UnknownNameError listing the known names."""
        if name not in self._entries and name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            factory = getattr(import_module(module), attr)
            self._entries.setdefault(name, factory)
        if name not in self._entries and name not in self._lazy:
            self._scan_package()
        if name not in self._entries and name not in self._lazy:
            self._load_entry_points()
        if name not in self._entries and name in self._lazy:
            return self.get(name)
        if name not in self._entries:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; expected one of: {', '.join(self.names())}"
            )
        return self._entries[name]

    def create(self, name: str, **kwargs) -> T:
        """Build the entry ``name`` with keyword arguments."""
        return self.get(name)(**kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def _scan_package(self) -> None:
        if self._package_scanned or self.package is None:
            return
        self._package_scanned = True
        import pkgutil

        package = import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            if not module.name.startswith("_") and module.name != "base":
                import_module(f"{self.package}.{module.name}")

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=f"monkeybarrel.{self.kind}s"):
            self._lazy.setdefault(ep.name, ep.value)
