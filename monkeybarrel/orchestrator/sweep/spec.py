"""A sweep file: a base experiment config plus axes over its keys, expanded into the grid of points.

::

    name: gsm8k-temperatures          # optional; default: the file's stem
    base: experiment.yaml             # a config file (relative to this file) or an inline mapping
    axes:                             # the points are the product of these groups
      - generators[0].temperature: [0.3, 1.0]        # one key: one axis
      - zip:                                        # keys that vary together (equal lengths)
          task.name: [gsm8k, math]
          task.path: [../shared/data/gsm8k/test.jsonl, ../shared/data/math500/test.jsonl]
      - product:                                    # several keys, every combination
          generators[0].model: {small: /models/1b, large: /models/8b}   # label -> value names the points
          generators[0].num_samples: [16, 64]
    retry: {attempts: 3, wait_s: 10, max_wait_s: 300}
    ray: {num_gpus_per_worker: 1}     # options of the ray backend under --ray-address
    model_params: {/models/8b: 8.0e9} # parameters per model for the report's FLOPs proxy

A key is a dotted path with list indices (``generators[0].options.attention``). A mapping value is
merged into the base's mapping at that key; any other value replaces it. ``axes`` may also be one
mapping (one product group). Each point is a full ``ExperimentConfig``; its directory name is made
of the axis values (``temperature=0.3,task=gsm8k``) and its ``id`` is a hash of its axis values and
of the config sections that determine stored results (task, generators).
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...core.config import (ConfigError, ExperimentConfig, fingerprint, format_validation_error, read_yaml,
                            resolve_data_paths, unknown_key)
from ..store.config_guard import result_inputs

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*(\.[A-Za-z_][A-Za-z0-9_]*(\[\d+\])*)*")
_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+@=-]+")
GENERIC_LEAVES = ("name", "path", "id", "type")
"""Last key segments that say less than their parent: ``task.name=gsm8k`` is named ``task=gsm8k``."""
MAX_SLUG, MAX_NAME = 48, 140


class RetrySpec(BaseModel):
    """How often a failing point is tried again, with exponential waits between tries."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    attempts: int = Field(3, ge=1)
    """Tries per point and sweep run (1 = no retry); a later ``sweep`` run tries failed points again."""
    wait_s: float = Field(10.0, ge=0)
    """Wait before the second try; doubles each try."""
    max_wait_s: float = Field(300.0, ge=0)


class SweepFile(BaseModel):
    """The sweep YAML's top level (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = None
    base: str | dict[str, Any]
    axes: list[dict[str, Any]] | dict[str, Any] = Field(default_factory=list)
    retry: RetrySpec = Field(default_factory=RetrySpec)
    ray: dict[str, Any] = Field(default_factory=dict)
    """Options of the ``ray`` backend every generator is wrapped into under ``--ray-address``."""
    model_params: dict[str, float] = Field(default_factory=dict)
    """Model -> parameter count, for the report's FLOPs proxy (else read from the name: ``8B``, ``135m``)."""


@dataclass(frozen=True)
class Axis:
    """One key of a group, its values and their display labels (explicit or made from the values)."""

    key: str
    values: list[Any]
    labels: list[str]
    named: bool = True
    """Whether the key appears in point names (in a zip group only the first key that tells points apart)."""


@dataclass(frozen=True)
class Point:
    """One experiment of the sweep."""

    index: int
    name: str
    """Directory name under the sweep directory (readable, filesystem-safe, unique)."""
    id: str
    """Stable hash of the axis values and the result-determining config sections."""
    overrides: dict[str, Any]
    """Axis key -> value, in axis order."""
    config: ExperimentConfig


@dataclass
class Sweep:
    """A parsed sweep file and its points."""

    name: str
    source: Path | None
    spec: SweepFile
    base: dict[str, Any]
    axes: list[list[Axis]]
    points: list[Point] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The resolved sweep (base inlined) as plain data, for ``DIR/sweep.yaml``."""
        data = self.spec.model_dump(mode="json", exclude_none=True)
        return {**data, "name": self.name, "base": self.base}


def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a sweep file.

    Raises:
        ConfigError: naming the file and the key (``axes[1].zip``, ``base``), or the point and the
            config key (``point temperature=-1: generators[0].temperature: ...``).
    """
    path = Path(path)
    data = read_yaml(path, "sweep")
    if data is None:
        raise ConfigError(f"{path}: the sweep file is empty (or only comments); expected a mapping with `base:` "
                          "(a config file or mapping) and `axes:` (keys and their values)")
    return sweep_from_dict(data, source=path)


def sweep_from_dict(data: Any, source: Path | None = None, name: str | None = None) -> Sweep:
    """A sweep from plain data: ``base`` and data paths (``task.path`` inline or on an axis) are relative to
    ``source``'s folder, else the working directory."""
    where = str(source) if source is not None else "sweep"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with 'base' and 'axes', got {type(data).__name__}")
    try:
        spec = SweepFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where, SweepFile)) from None
    base = _base(spec.base, source, where)
    sweep_name = spec.name or name or (source.stem if source is not None else "sweep")
    axes = _groups(spec.axes, base, where)
    sweep = Sweep(sweep_name, source, spec, base, axes)
    sweep.points = _points(sweep, where)
    return sweep


def _base(base: str | dict[str, Any], source: Path | None, where: str) -> dict[str, Any]:
    """The base config as a complete plain dict (every default filled in), validated."""
    if isinstance(base, str):
        path = Path(base) if source is None or Path(base).is_absolute() else source.parent / base
        try:
            config = ExperimentConfig.from_yaml(path)
        except ConfigError as exc:
            raise ConfigError(f"{where}: base: {exc}") from None
    else:
        config = ExperimentConfig.from_dict(base, source=f"{where}: base")
    return config.to_dict()


def _groups(axes: list[dict[str, Any]] | dict[str, Any], base: dict[str, Any], where: str) -> list[list[Axis]]:
    groups = [axes] if isinstance(axes, dict) else axes
    out = []
    for index, group in enumerate(groups):
        at = f"{where}: axes[{index}]"
        if not isinstance(group, dict) or not group:
            raise ConfigError(f"{at}: expected a mapping of key -> values, or {{product: ...}} / {{zip: ...}}")
        kind = "product"
        if set(group) in ({"product"}, {"zip"}):
            kind, group = next(iter(group)), next(iter(group.values()))
            at += f".{kind}"
            if not isinstance(group, dict) or not group:
                raise ConfigError(f"{at}: expected a mapping of key -> values")
        keys = [_axis(key, values, base, f"{at}.{key}") for key, values in group.items()]
        if kind == "zip":
            lengths = {a.key: len(a.values) for a in keys}
            if len(set(lengths.values())) > 1:
                raise ConfigError(f"{at}: zipped keys need equally many values, got {lengths}")
            first = next((a for a in keys if len(set(a.labels)) == len(a.labels)), None)
            keys = [Axis(a.key, a.values, a.labels, named=first is None or a is first) for a in keys]
        out.append((kind, keys))
    return [_expand(kind, keys) for kind, keys in out]


def _axis(key: str, values: Any, base: dict[str, Any], at: str) -> Axis:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ConfigError(f"{at}: not a config key; expected a dotted path such as generators[0].temperature")
    node, last = _resolve(copy.deepcopy(base), key, at)  # the key's parents exist in the base
    if isinstance(last, str) and last not in node and "options" not in _steps(key):
        raise ConfigError(f"{at}: {unknown_key(last, list(node))}")
    if isinstance(values, dict) and values:
        labels, values = [str(v) for v in values], list(values.values())
    elif isinstance(values, list) and values:
        labels = _labels(values)
    else:
        raise ConfigError(f"{at}: expected a non-empty list of values (or a mapping label -> value)")
    return Axis(key, values, labels)


def _expand(kind: str, keys: list[Axis]) -> list[Axis]:
    """A group's keys as parallel columns: a product group becomes every combination, zipped."""
    if kind == "zip" or len(keys) == 1:
        return keys
    combos = list(itertools.product(*[range(len(a.values)) for a in keys]))
    return [Axis(a.key, [a.values[c[i]] for c in combos], [a.labels[c[i]] for c in combos], a.named)
            for i, a in enumerate(keys)]


def _points(sweep: Sweep, where: str) -> list[Point]:
    groups = sweep.axes
    sizes = [len(group[0].values) for group in groups]
    named = [a for group in groups for a in group if a.named]
    named = [a for a in named if len(set(a.labels)) > 1] or named  # keys with one value only when nothing varies
    short = _short_keys([a.key for a in named])
    points, names, errors = [], [], []
    for index, choice in enumerate(itertools.product(*[range(s) for s in sizes])):
        overrides, parts = {}, []
        for group, row in zip(groups, choice):
            for axis in group:
                overrides[axis.key] = axis.values[row]
                if axis in named:
                    parts.append(f"{short[axis.key]}={_safe(axis.labels[row])[:MAX_SLUG]}")
        data = copy.deepcopy(sweep.base)
        for key, value in overrides.items():
            _set(data, key, value, f"{where}: axes: {key}")
        label = ",".join(parts) or "base"
        data["name"] = f"{sweep.name}/{label}"
        if sweep.source is not None:  # data paths in a sweep file (inline base, axes) are relative to its folder
            data = resolve_data_paths(data, sweep.source.parent)
        try:
            config = ExperimentConfig.from_dict(data, source=f"point {label} ({describe(overrides)})")
        except ConfigError as exc:
            errors.append(str(exc))
            continue
        inputs = result_inputs(config)
        identity = {"overrides": overrides, **{k: v for k, v in inputs.items() if not k.startswith("verifiers[")}}
        point_id = fingerprint(identity)
        names.append(label if len(label) <= MAX_NAME else f"{label[:MAX_NAME]}-{point_id[:8]}")
        points.append(Point(index, names[-1], point_id, overrides, config))
    if errors:
        raise ConfigError(invalid_points(where, errors, len(names) + len(errors)))
    repeated = {n for n in names if names.count(n) > 1}
    return [p if p.name not in repeated else Point(p.index, f"{p.name}-{p.id[:8]}", p.id, p.overrides, p.config)
            for p in points]


def invalid_points(where: str, errors: list[str], total: int) -> str:
    """Every invalid point's message under one heading (one line when only one point is invalid)."""
    if len(errors) == 1:
        return f"{where}: {errors[0]}"
    return "\n".join([f"{where}: {len(errors)} of {total} points are invalid; nothing was run:",
                      *("  " + error.replace("\n", "\n    ") for error in errors)])


def describe(overrides: dict[str, Any]) -> str:
    """``key=value, ...`` of a point's axis values, for messages."""
    return ", ".join(f"{key}={value!r}" for key, value in overrides.items()) or "the base config"


def _labels(values: list[Any]) -> list[str]:
    """Display labels of one key's values: scalars as written, paths by their shortest distinct tail."""
    if all(isinstance(v, str) and "/" in v for v in values):
        parts = [PurePosixPath(v).parts for v in values]
        for depth in range(1, max(len(p) for p in parts) + 1):
            tails = ["-".join(p[-depth:]) for p in parts]
            if len(set(tails)) == len(set(values)):
                return tails
    return [_label(v) for v in values]


def _label(value: Any) -> str:
    if isinstance(value, dict):
        return "-".join(_label(v) for v in value.values()) or "{}"
    if isinstance(value, list):
        return "-".join(_label(v) for v in value) or "[]"
    if isinstance(value, str) and "/" in value:
        return PurePosixPath(value).name
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _safe(text: str) -> str:
    """Letters, digits and ``._+@=-`` only (a run of others becomes one ``-``); never empty."""
    return _UNSAFE.sub("-", text) or "x"


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Readable, distinct names for axis keys: the last segment (or its parent's for ``name``/``path``...)."""
    def short(key: str) -> str:
        steps = [re.sub(r"\[\d+\]", "", s) for s in key.split(".")]
        return steps[-2] if steps[-1] in GENERIC_LEAVES and len(steps) > 1 else steps[-1]

    names = {key: short(key) for key in keys}
    for key in keys:
        if list(names.values()).count(names[key]) > 1:
            names[key] = _safe(key.replace("[", "").replace("]", ""))
    return names


def _steps(key: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(key)]


def _resolve(data: Any, key: str, at: str) -> tuple[Any, str | int]:
    """The container holding ``key``'s last step, and that step.

    Parents must exist in the base, except inside free ``options`` mappings (created there) and
    sections that are null in the base (``budget``), which become mappings.
    """
    steps = _steps(key)
    node, walked = data, ""
    for depth, step in enumerate(steps):
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                size = len(node) if isinstance(node, list) else "no"
                raise ConfigError(f"{at}: index {step} out of range: the base's {walked or 'config'} has {size} entries")
        elif not isinstance(node, dict):
            raise ConfigError(f"{at}: {walked} is not a mapping in the base config")
        if depth == len(steps) - 1:
            return node, step
        if isinstance(step, str) and node.get(step) is None:
            if step not in node and "options" not in steps[:depth]:
                raise ConfigError(f"{at}: {unknown_key(step, list(node))}" + (f" under {walked}" if walked else ""))
            node[step] = {}
        node = node[step]
        walked += f"[{step}]" if isinstance(step, int) else (f".{step}" if walked else step)
    raise AssertionError("unreachable")


def _set(data: dict[str, Any], key: str, value: Any, at: str) -> None:
    """Set ``key`` in ``data``: a mapping is merged into a mapping, anything else replaces."""
    node, last = _resolve(data, key, at)
    current = node[last] if (isinstance(last, int) or last in node) else None
    node[last] = _merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else copy.deepcopy(value)


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out
