"""A tiny name -> factory registry shared by every stage (tasks, samplers, verifiers, selectors).

Plug-ins register with a decorator; third-party packages can also expose entry points in the
group ``monkeybarrel.<kind>`` (e.g. ``monkeybarrel.verifiers``), loaded lazily on first miss.
"""

from __future__ import annotations

import pkgutil
import re
from importlib import import_module
from importlib.util import find_spec
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


_REGISTER = re.compile(r"^@(\w+)\.register\(\s*[\"']([^\"']+)[\"']\s*\)", re.MULTILINE)
"""A registering decorator with a literal name: ``@VERIFIERS.register("llm_judge")``."""


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
        package: a package whose modules register built-ins with ``@REGISTRY.register("name")``.
            Their sources are read (not imported) on the first lookup that misses, and only the
            module that registers the name asked for is imported: looking up ``majority`` never
            imports ``weaver`` or scikit-learn, and an unknown name is refused without importing
            any. (A built-in must register with that literal form to be found.)
        variable: the module-level name of this registry in those sources (default: the plural of
            ``kind`` in capitals, ``VERIFIERS`` for ``verifier``); other registries' decorators in the
            same package (``@EMBEDDERS.register`` beside the selectors) are not this one's.
    """

    def __init__(self, kind: str, lazy: dict[str, str] | None = None, package: str | None = None,
                 variable: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.variable = variable or kind.upper() + ("ES" if kind.endswith(("s", "x")) else "S")
        self._sources: dict[str, str] | None = None  # name -> module, from the package's sources
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
        self._load_entry_points()
        return sorted(set(self._entries) | set(self._lazy) | set(self._source_index()))

    def get(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``; raises UnknownNameError listing the known names."""
        if name not in self._entries and name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            factory = getattr(import_module(module), attr)
            self._entries.setdefault(name, factory)
        if name not in self._entries and name in self._source_index():
            import_module(self._source_index()[name])
        if name not in self._entries and name not in self._lazy:
            self._load_entry_points()
        if name not in self._entries and name in self._lazy:
            return self.get(name)
        if name not in self._entries:
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}; expected one of: {', '.join(self.names())}"
            )
        return self._entries[name]

    def module_of(self, name: str) -> tuple[str, str | None]:
        """Where ``name`` is defined, without importing it: ``(module, attribute)``, the attribute None
        for a built-in found by its ``@REGISTRY.register("name")`` decorator; UnknownNameError otherwise."""
        if name in self._entries:
            factory = self._entries[name]
            return factory.__module__, factory.__qualname__
        if name not in self._lazy and name in self._source_index():
            return self._source_index()[name], None
        if name not in self._lazy:
            self._load_entry_points()
        if name in self._lazy:
            module, _, attr = self._lazy[name].partition(":")
            return module, attr
        raise UnknownNameError(f"unknown {self.kind} {name!r}; expected one of: {', '.join(self.names())}")

    def create(self, name: str, **kwargs) -> T:
        """Build the entry ``name`` with keyword arguments."""
        return self.get(name)(**kwargs)

    def __contains__(self, name: str) -> bool:
        return name in self.names()

    def _modules(self) -> list[str]:
        """The package's plug-in modules (not ``base`` or private ones), without importing them."""
        spec = find_spec(self.package) if self.package else None
        if spec is None or not spec.submodule_search_locations:
            return []
        return [f"{self.package}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                if not m.name.startswith("_") and m.name != "base"]

    def _source_index(self) -> dict[str, str]:
        """``{name: module}`` for every ``@X.register("name")`` decorator in the package's sources."""
        if self._sources is None:
            self._sources = {}
            for module in self._modules():
                spec = find_spec(module)
                origin = spec.origin if spec else None
                if not origin or not origin.endswith(".py"):
                    continue
                with open(origin, encoding="utf-8") as handle:
                    for variable, name in _REGISTER.findall(handle.read()):
                        if variable == self.variable:
                            self._sources.setdefault(name, module)
        return self._sources

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=f"monkeybarrel.{self.kind}s"):
            self._lazy.setdefault(ep.name, ep.value)
