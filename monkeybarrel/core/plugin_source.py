"""What a plug-in accepts and refuses, read from its source without importing it.

``monkeybarrel validate`` must answer in well under a second, but a selector's module imports
scikit-learn and a sampler's imports torch (a second or more each), and scikit-learn's estimator
contract puts a selector's parameter checks in ``fit``, not in ``__init__``. So the options of such
a plug-in are checked from its source (``ast``), with the plug-in's own code as the only rules:

- the option names against its constructor's parameters (``a__b`` names a nested estimator's
  parameter ``b``, whose class is the parameter ``a``'s annotation);
- each option's value against the parameter's annotation (pydantic, where the annotation uses only
  builtins and ``typing``);
- the plug-in's own checks: the statements of ``__init__``, ``_check_params`` / ``_validate_params``
  and ``fit`` are run on the configured values (never the data: ``fit``'s arguments are not there),
  with a few safe builtins,
  the module's literal constants and numpy's type names in scope, never anything that could touch
  the disk, a model or the network. A statement that needs anything else (the data, a model,
  another module) is skipped with whatever it would assign. A ``ValueError`` or ``TypeError`` that a
  statement reading an option raises is what the plug-in would raise when built or fitted.

A plug-in whose source cannot be read (a compiled module, a base class from another package that
takes arguments) is not checked here; ``run`` builds every plug-in before anything is sampled.
"""

from __future__ import annotations

import ast
import builtins
import copy
import typing
from functools import lru_cache
from importlib.util import find_spec
from types import SimpleNamespace
from typing import Any

from .config import ConfigError
from .registry import Registry, UnknownNameError

HEAVY = frozenset({"torch", "transformers", "sklearn", "scipy", "vllm", "ray", "sentence_transformers", "pandas",
                   "matplotlib", "datasets", "triton"})
"""Packages that take a second or more to import: a plug-in whose module imports one is checked from its source."""
PARAMETERLESS_BASES = frozenset({"object", "ABC", "BaseEstimator", "ClassifierMixin", "TransformerMixin", "Generic",
                                 "Protocol"})
"""Base classes from other packages whose constructors take no arguments."""
CHECK_METHODS = ("__init__", "_check_params", "_validate_params")
"""Methods whose statements run (skipping what cannot run here), then ``fit``'s."""
SAFE_BUILTINS = {name: getattr(builtins, name) for name in (
    "abs", "all", "any", "bool", "callable", "dict", "enumerate", "float", "frozenset", "int", "isinstance", "len",
    "list", "max", "min", "range", "repr", "round", "set", "sorted", "str", "sum", "tuple", "type", "zip",
    "ValueError", "TypeError", "KeyError")}
"""All a check may call: nothing that opens a file, imports or starts anything."""
TYPING = {name: getattr(typing, name) for name in ("Any", "Callable", "Iterable", "Literal", "Mapping", "Optional",
                                                    "Sequence", "Union")}


class Source:
    """One module's syntax tree, its literal constants and the names it imports (parsed once)."""

    def __init__(self, module: str) -> None:
        spec = find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise LookupError(module)
        with open(spec.origin, encoding="utf-8") as handle:
            self.tree = ast.parse(handle.read(), spec.origin)
        self.is_package = spec.submodule_search_locations is not None
        self.module, self.package = module, module if self.is_package else module.rpartition(".")[0]
        self.constants: dict[str, Any] = {}
        self.imports: dict[str, str] = {}  # local name -> absolute module (of a from-import: "module:name")
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    self.constants[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
            elif isinstance(node, ast.Import):
                self.imports.update({(a.asname or a.name).split(".")[0]: a.name for a in node.names})
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(node)
                self.imports.update({a.asname or a.name: f"{base}:{a.name}" for a in node.names})

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = self.package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1])
        return f"{base}.{node.module}" if node.module else base

    def definition(self, name: str) -> ast.ClassDef | ast.FunctionDef | None:
        return next((n for n in self.tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name),
                    None)

    def registered(self, variable: str, name: str) -> ast.ClassDef | ast.FunctionDef | None:
        """The class or function decorated ``@variable.register("name")``."""
        for node in self.tree.body:
            for decorator in getattr(node, "decorator_list", []):
                if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                        and decorator.func.attr == "register" and isinstance(decorator.func.value, ast.Name)
                        and decorator.func.value.id == variable and decorator.args
                        and isinstance(decorator.args[0], ast.Constant) and decorator.args[0].value == name):
                    return node
        return None

    def resolve(self, name: str, depth: int = 0) -> tuple["Source", ast.ClassDef | ast.FunctionDef] | None:
        """Where the class ``name`` used in this module is defined (here, or in a module of ours it is imported
        from, following re-exports)."""
        node = self.definition(name)
        if node is not None:
            return self, node
        module, _, attr = self.imports.get(name, "").partition(":")
        other = source(module) if attr and module.split(".")[0] == self.module.split(".")[0] and depth < 8 else None
        return other.resolve(attr, depth + 1) if other is not None else None


@lru_cache(maxsize=None)
def source(module: str) -> Source | None:
    try:
        return Source(module)
    except (LookupError, OSError, SyntaxError, ImportError, ValueError):
        return None


@lru_cache(maxsize=None)
def imports_heavy(module: str) -> bool:
    """Whether importing ``module`` imports one of ``HEAVY`` (its top-level imports, ours followed)."""
    return _heavy(module, set())


def _heavy(module: str, seen: set[str]) -> bool:
    seen.add(module)
    parsed = source(module)
    if parsed is None:
        return True  # a compiled module of ours: assume the worst
    for target in set(parsed.imports.values()):
        name, _, attr = target.partition(":")
        root = name.split(".")[0]
        if root in HEAVY:
            return True
        if root != module.split(".")[0]:
            continue
        parents = [".".join(name.split(".")[:i]) for i in range(2, name.count(".") + 2)]  # packages run their __init__
        imported = source(name)
        if attr and imported is not None and imported.is_package and _exists(f"{name}.{attr}"):
            parents.append(f"{name}.{attr}")  # ``from .pkg import submodule``
        if any(m not in seen and _heavy(m, seen) for m in parents):
            return True
    return False


def _exists(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def check_options(registry: Registry, name: str, key_path: str, options: dict[str, Any],
                  given: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Refuse options plug-in ``name`` would refuse when built or fitted, without importing it (module docstring).

    Args:
        registry: where ``name`` is registered (an unknown name is refused, listing the known ones).
        key_path: the config path of the entry (``selectors[2]``), for messages.
        options: the configured options (``a__b`` for a nested estimator's parameter).
        given: other constructor arguments the stage passes (``spec``, ``name``).

    Returns:
        The constructor's parameters with their literal defaults and the given values, or None when
        the source could not be read.

    Raises:
        ConfigError: ``key_path.options.KEY: what was expected`` (one line).
    """
    try:
        module, attr = registry.module_of(name)
    except UnknownNameError as exc:
        raise ConfigError(f"{key_path}: {exc}") from None
    parsed = source(module)
    node = None if parsed is None else (parsed.definition(attr) if attr else parsed.registered(registry.variable, name))
    if node is None:
        return None
    given = dict(given or {})
    nested: dict[str, dict[str, Any]] = {}
    for key in [k for k in options if "__" in k]:
        outer, _, inner = key.partition("__")
        nested.setdefault(outer, {})[inner] = options[key]
    flat = {k: v for k, v in options.items() if "__" not in k}
    return _check(parsed, node, f"{key_path}.options.", flat, given, nested, f"{registry.kind} {name!r}")


def _check(parsed: Source, node: ast.ClassDef | ast.FunctionDef, key: str, options: dict[str, Any],
           given: dict[str, Any], nested: dict[str, dict[str, Any]], what: str) -> dict[str, Any] | None:
    """``key``: the prefix of an option's key in messages (``selectors[2].options.``, ``...options.model__``)."""
    found = _signature(parsed, node)
    if found is None:
        return None
    arguments, anything = found
    unknown = sorted((set(options) | set(nested)) - set(arguments))
    if unknown and not anything:
        head, _, prefix = key.rpartition(".")
        allowed = sorted(set(arguments) - set(given))
        raise ConfigError(f"{head}: unknown option(s) {[prefix + u for u in unknown]} for {what}; " + (
            f"expected some of {[prefix + a for a in allowed]}" if allowed else "it takes no options"))
    for name, value in options.items():
        annotation, default = arguments.get(name, (None, None))
        if annotation is not None and value != default:
            _check_type(f"{key}{name}", value, annotation)
    missing = sorted(k for k, (_, d) in arguments.items() if d is _REQUIRED and k not in options and k not in given)
    if missing:
        raise ConfigError(f"{key.rpartition('.')[0]}: {what} needs the option(s) {missing}")
    values = {k: copy.deepcopy(d) for k, (_, d) in arguments.items() if d not in (_NO_DEFAULT, _REQUIRED)}
    values.update(given)
    values.update(copy.deepcopy(options))
    if isinstance(node, ast.ClassDef):
        _run_checks(parsed, node, key, values, set(options))
        for outer, inner in nested.items():
            target = _nested_class(parsed, arguments.get(outer, (None, None))[0])
            if target is not None:
                _check(target[0], target[1], f"{key}{outer}__", inner, {}, {}, f"the {outer} of {what}")
    return values


_NO_DEFAULT = object()
"""A default that is not a literal (it is not known here)."""
_REQUIRED = object()
"""No default: the option must be given."""


def _signature(parsed: Source, node: ast.ClassDef | ast.FunctionDef, depth: int = 0
               ) -> tuple[dict[str, tuple[str | None, Any]], bool] | None:
    """``({parameter: (annotation source, literal default)}, accepts **kwargs)``, or None when unknowable."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            for base in node.bases:
                base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if base_name in PARAMETERLESS_BASES:
                    continue
                found = parsed.resolve(base_name)
                if found is None or depth > 8:
                    return None
                inherited = _signature(found[0], found[1], depth + 1)
                if inherited is None or inherited[0] or inherited[1]:
                    return inherited
            return {}, False
        node = init
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [_REQUIRED] * (len(positional) - len(args.defaults)) + [_literal(d) for d in args.defaults]
    out = {a.arg: (ast.unparse(a.annotation) if a.annotation else None, d) for a, d in zip(positional, defaults)}
    out.update({a.arg: (ast.unparse(a.annotation) if a.annotation else None, _REQUIRED if d is None else _literal(d))
                for a, d in zip(args.kwonlyargs, args.kw_defaults)})
    out.pop("self", None)
    return out, args.kwarg is not None


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _NO_DEFAULT


def _check_type(key: str, value: Any, annotation: str) -> None:
    from pydantic import TypeAdapter, ValidationError

    try:
        expected = eval(annotation, {"__builtins__": SAFE_BUILTINS}, dict(TYPING))  # noqa: S307 — an annotation
        adapter = TypeAdapter(expected)
    except Exception:  # noqa: BLE001 — names from elsewhere (a class, numpy): not checked here
        return
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        raise ConfigError(f"{key}: {exc.errors()[0]['msg']} (got {value!r}; expected {annotation})") from None


def _nested_class(parsed: Source, annotation: str | None) -> tuple[Source, ast.ClassDef] | None:
    """The class of a nested estimator parameter: the first name in its annotation defined in our code."""
    for part in (annotation or "").replace("|", " ").replace("[", " ").replace("]", " ").replace(",", " ").split():
        found = parsed.resolve(part.strip())
        if found is not None and isinstance(found[1], ast.ClassDef):
            return found
    return None


def _run_checks(parsed: Source, node: ast.ClassDef, key: str, values: dict[str, Any], options: set[str]) -> None:
    """Run the class's parameter checks on ``values`` (module docstring); raise the first that refuses an option."""
    for method in [*CHECK_METHODS, "fit"]:
        try:
            _run_method(parsed, node, method, values)
        except _Refused as refused:
            read = _reads(refused.statement) & options
            if read:
                where = f"{key}{sorted(read)[0]}" if len(read) == 1 else key.removesuffix(".")
                raise ConfigError(f"{where}: {' '.join(str(refused.error).split())}") from None


class _Refused(Exception):
    """A statement of a check raised ValueError or TypeError."""

    def __init__(self, statement: ast.stmt, error: Exception) -> None:
        super().__init__(str(error))
        self.statement, self.error = statement, error


def _run_method(parsed: Source, node: ast.ClassDef, method: str, values: dict[str, Any]) -> None:
    """Run ``method`` of ``node`` with ``self`` holding ``values`` (``__init__`` also sees them as names).

    Raises:
        _Refused: the first statement that raised ValueError or TypeError.
    """
    body = next((n.body for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
    if body is None:
        return
    scope = _Scope(parsed)
    scope.update(values if method == "__init__" else {})
    scope["self"] = _Instance(parsed, node, dict(values))
    for statement in body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        if isinstance(statement, ast.Return):
            break
        try:
            exec(compile(ast.Module([statement], []), "<check>", "exec"), {"__builtins__": SAFE_BUILTINS}, scope)  # noqa: S102
        except (ValueError, TypeError) as exc:
            raise _Refused(statement, exc) from None
        except _Refused as exc:  # from a check this statement called (``Other(...)._check_params()``)
            raise _Refused(statement, exc.error) from None
        except Exception:  # noqa: BLE001 — it needs what is not here (data, a model, another module): skip it
            _forget(statement, scope)


class _Scope(dict):
    """Names a check sees: the module's literal constants, numpy's type names, and stand-ins for the classes
    of our code it names (``Other(a, b)`` binds ``a, b`` to ``Other``'s parameters; its checks can run)."""

    def __init__(self, parsed: Source) -> None:
        super().__init__(parsed.constants)
        self.parsed = parsed
        if "np" in parsed.imports:
            import numpy

            self["np"] = SimpleNamespace(integer=numpy.integer, floating=numpy.floating, number=numpy.number,
                                         bool_=numpy.bool_, ndarray=numpy.ndarray, isfinite=numpy.isfinite,
                                         isnan=numpy.isnan, nan=numpy.nan, inf=numpy.inf)

    def __missing__(self, name: str) -> Any:
        found = self.parsed.resolve(name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            raise KeyError(name)
        return _StandIn(*found)


class _StandIn:
    """A class of our code, called in a check: binds the arguments to its parameters and runs its checks
    (a helper estimator such as a ``ScoreNormalizer`` refuses a bad ``method`` in its ``fit``); builds nothing."""

    def __init__(self, parsed: Source, node: ast.ClassDef) -> None:
        self.parsed, self.node = parsed, node

    def __call__(self, *args: Any, **kwargs: Any) -> "_Instance":
        found = _signature(self.parsed, self.node)
        if found is None:
            raise LookupError(self.node.name)
        arguments = [name for name in found[0] if name != "cls"]
        values = {k: d for k, (_, d) in found[0].items() if d not in (_NO_DEFAULT, _REQUIRED)}
        values.update(zip(arguments, args))
        values.update(kwargs)
        for method in [*CHECK_METHODS[1:], "fit"]:  # a helper estimator a plug-in builds is built to be fitted
            _run_method(self.parsed, self.node, method, values)
        return _Instance(self.parsed, self.node, values)


class _Instance(SimpleNamespace):
    """``self`` in a check: the parameters as attributes, and the class's check methods."""

    def __init__(self, parsed: Source, node: ast.ClassDef, values: dict[str, Any]) -> None:
        super().__init__(**values)
        for method in CHECK_METHODS[1:]:
            setattr(self, method, lambda method=method: _run_method(parsed, node, method, vars(self)))


def _reads(statement: ast.stmt) -> set[str]:
    """Names and ``self.`` attributes a statement reads."""
    names = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
              and isinstance(node.ctx, ast.Load)):
            names.add(node.attr)
    return names


def _forget(statement: ast.stmt, local: dict[str, Any]) -> None:
    """Drop what a skipped statement would have assigned, so later statements cannot read a stale value."""
    for node in ast.walk(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.pop(node.id, None)
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
              and isinstance(node.ctx, ast.Store) and "self" in local):
            vars(local["self"]).pop(node.attr, None)
