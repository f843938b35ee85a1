"""Validated experiment configuration: the YAML file and the Python API share these models.

Every model forbids unknown keys, so a typo is an error that names the key path. Stage-specific
options live in ``options`` dictionaries, validated by the plug-in that receives them.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A configuration problem, with the offending key path and what was expected."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskSpec(_Strict):
    """Which problems to run."""

    name: str = "arithmetic"
    """Task name: ``arithmetic`` (generated, no files), ``gsm8k``, ``math`` or a registered plug-in."""
    num_problems: int | None = Field(20, ge=1)
    """How many problems to take (the first N, in the source's order); null for all."""
    path: str | None = None
    """Local JSONL/Parquet file in the source's schema; when null, built-in or hub data is used."""
    split: str = "test"
    """Dataset split for hub sources."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Task-specific options, e.g. ``{difficulty: 2}`` for ``arithmetic``."""


class GeneratorSpec(_Strict):
    """One generator: a model plus its prompt and sampling settings."""

    id: str = "default"
    """Generator id recorded on every candidate (unique within an experiment)."""
    backend: str = "embedded"
    """Sampler backend: ``embedded`` (CPU transformers), ``vllm``, ``openai``, ``ray`` or a plug-in."""
    model: str = "smollm2-135m-instruct"
    """Model name, local path or hub id; ``smollm2-135m-instruct`` is the embedded default."""
    num_samples: int = Field(16, ge=1)
    """Samples per problem (can be raised later: the store then only adds the missing ones)."""
    temperature: float = Field(0.7, ge=0.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    """Maximum completion tokens per sample."""
    seed: int | None = None
    """Base seed for this generator; defaults to the experiment seed."""
    system_prompt: str | None = None
    """System message prepended to every conversation (model default when null)."""
    prompt_template: str = "{prompt}"
    """Template for the user message; ``{prompt}`` is replaced by the problem's prompt."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Backend-specific options (e.g. ``batch_size``, ``base_url``, ``tensor_parallel_size``)."""

    @field_validator("prompt_template")
    @classmethod
    def _template_has_prompt(cls, value: str) -> str:
        if "{prompt}" not in value:
            raise ValueError("must contain the placeholder {prompt}")
        return value


class VerifierSpec(_Strict):
    """One verifier to score every candidate."""

    name: str
    """Column name of its scores (unique within an experiment)."""
    type: str
    """Registered verifier type, e.g. ``llm_judge``, ``reward_model``, ``answer_frequency``."""
    options: dict[str, Any] = Field(default_factory=dict)


class SelectorSpec(_Strict):
    """One selection method to report."""

    name: str
    """Row name in the report (unique within an experiment)."""
    type: str
    """Registered selector type, e.g. ``majority``, ``weaver``, ``best_single``."""
    options: dict[str, Any] = Field(default_factory=dict)


class EvaluateSpec(_Strict):
    """What the evaluate stage reports."""

    ks: list[Annotated[int, Field(ge=1)]] | None = Field(None, min_length=1)
    """Values of k for coverage (pass@k) and majority@k, each >= 1; default 1, 2, 4, ... up to n."""
    majority_trials: int = Field(256, ge=1)
    """Random subsets per problem for the majority@k estimate at k < n; above 1,000 problems it shrinks to
    ``majority_trials * 1000 / problems`` (at least 32): the mean over problems keeps its precision."""
    selector_trials: int = Field(8, ge=0)
    """Random k-subsets of every problem's candidates on which each selector is refitted and scored for
    its accuracy against k (averaged; exact at k = n); 0 = no selector curves."""
    selector_curves: list[str] | None = None
    """Selector names (``selectors[].name``) that get an accuracy-against-k curve; default: all."""


class StoreSpec(_Strict):
    """How the store writes."""

    chunk_problems: int | None = Field(None, ge=1)
    """Problems per Parquet chunk of candidates; null: a chunk is written every ``chunk_rows`` rows
    or ``flush_seconds`` seconds, whichever comes first (few files; a killed run loses at most that)."""
    chunk_rows: int = Field(10_000, ge=1)
    """Rows (candidates or scores) per chunk at most."""
    flush_seconds: float = Field(60.0, gt=0)
    """Finished candidates and scores are written at least this often."""
    score_attempts: int = Field(3, ge=1)
    """Times the verify stage tries a candidate a verifier failed on (one try per run: a resume tries again
    what failed, e.g. while a judge server was down); then the failure is final, its reason kept."""


class BudgetSpec(_Strict):
    """Most compute each generator may spend on sampling (give one of the two)."""

    samples: int | None = Field(None, ge=1)
    """Total samples per generator over all problems."""
    tokens: int | None = Field(None, ge=1)
    """Total completion tokens per generator over all problems (a round is sized by the mean
    completion length so far, ``max_tokens`` before the first sample)."""

    @model_validator(mode="after")
    def _one_kind(self) -> "BudgetSpec":
        if (self.samples is None) == (self.tokens is None):
            raise ValueError("give exactly one of samples or tokens")
        return self


class AllocationSpec(_Strict):
    """How the sample stage spends its samples: in rounds, a policy decides who gets the next ones."""

    policy: str = "uniform"
    """``uniform`` (every problem the same), ``until_solved``, ``confident_majority``, ``difficulty``
    or a registered plug-in (see ``monkeybarrel.allocation``)."""
    checker: str | None = None
    """Verifier whose score >= ``checker_threshold`` means a sample is correct (e.g. unit tests);
    needed by ``until_solved`` and ``difficulty``. It scores each round before the policy decides."""
    checker_threshold: float = 0.5
    options: dict[str, Any] = Field(default_factory=dict)
    """Policy options, e.g. ``{threshold: 0.95, round_size: 4}`` for ``confident_majority``."""


def _default_generators() -> list[GeneratorSpec]:
    return [GeneratorSpec()]


def _default_selectors() -> list[SelectorSpec]:
    return [SelectorSpec(name="majority", type="majority")]


class ExperimentConfig(_Strict):
    """A whole experiment: sample -> verify -> select -> evaluate.

    Examples:
        >>> cfg = ExperimentConfig(name="demo", task=TaskSpec(name="arithmetic", num_problems=4))
        >>> cfg.generators[0].num_samples
        16
    """

    name: str = "experiment"
    seed: int = 0
    """Experiment seed: problem generation and every generator without its own seed."""
    task: TaskSpec = Field(default_factory=TaskSpec)
    generators: list[GeneratorSpec] = Field(default_factory=_default_generators, min_length=1)
    verifiers: list[VerifierSpec] = Field(default_factory=list)
    selectors: list[SelectorSpec] = Field(default_factory=_default_selectors)
    evaluate: EvaluateSpec = Field(default_factory=EvaluateSpec)
    store: StoreSpec = Field(default_factory=StoreSpec)
    budget: BudgetSpec | None = None
    """Sampling budget per generator; null: every problem gets ``num_samples``."""
    allocation: AllocationSpec = Field(default_factory=AllocationSpec)
    """Who gets the samples; ``generators[*].num_samples`` caps each problem."""

    @model_validator(mode="after")
    def _checker_is_a_verifier(self) -> "ExperimentConfig":
        checker = self.allocation.checker
        if checker is not None and checker not in [v.name for v in self.verifiers]:
            raise ValueError(f"allocation.checker: {checker!r} is not a configured verifier; expected one of "
                             f"{[v.name for v in self.verifiers]}")
        return self

    @model_validator(mode="after")
    def _curves_are_selectors(self) -> "ExperimentConfig":
        names = [s.name for s in self.selectors]
        unknown = [name for name in self.evaluate.selector_curves or [] if name not in names]
        if unknown:
            raise ValueError(f"evaluate.selector_curves: {unknown} are not configured selectors; expected some of "
                             f"{names}")
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> "ExperimentConfig":
        for field_name, items, attr in (
            ("generators", self.generators, "id"),
            ("verifiers", self.verifiers, "name"),
            ("selectors", self.selectors, "name"),
        ):
            names = [getattr(item, attr) for item in items]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"{field_name}: duplicate {attr} {duplicates}; each must be unique")
        return self

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> "ExperimentConfig":
        """Validate a plain dict; errors become ConfigError naming ``source`` and key paths."""
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, source, cls)) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> "ExperimentConfig":
        """Read and validate a YAML file; a relative ``task.path`` is taken from the file's folder.

        Raises:
            ConfigError: one line naming the file (and ``file:line:column`` for YAML syntax): missing,
                a directory, not UTF-8, not YAML, or invalid keys (one line per key).
        """
        path = Path(path)
        data = _experiment_mapping(read_yaml(path), path)
        if isinstance(data, dict):
            data = resolve_data_paths(data, path.parent)
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON/YAML serialisable)."""
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @property
    def uses_rounds(self) -> bool:
        """Whether sampling runs in rounds (a budget, or an allocation policy other than plain uniform)."""
        return self.budget is not None or self.allocation.policy != "uniform" or bool(self.allocation.options)

    def generator_seed(self, generator: GeneratorSpec) -> int:
        return self.seed if generator.seed is None else generator.seed


def read_yaml(path: Path, kind: str = "config") -> Any:
    """The parsed YAML document of ``path`` (a ``kind`` file: config, sweep), or ConfigError in one line naming
    the file (and ``file:line:column`` for YAML syntax)."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory, expected a YAML {kind} file")
    if not path.exists():
        raise ConfigError(f"{path}: {kind} file not found")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start}); save the {kind} as "
                          "UTF-8") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = f" ({exc.context})" if exc.context and exc.problem else ""
        raise ConfigError(f"{where}: not valid YAML: {exc.problem or exc.context}{context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None


DATA_PATH_KEYS = (("task", "path"),)
"""Config keys holding a data file: a relative one is taken from the config file's folder (``from_yaml``)."""


def resolve_data_paths(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` with each relative ``DATA_PATH_KEYS`` value joined to ``folder`` (the YAML file's folder).

    Paths given on the command line stay relative to the working directory; in a config file they mean
    "beside this file", so a config and its data can move together. ``~`` is expanded."""
    for section, key in DATA_PATH_KEYS:
        part = data.get(section)
        if isinstance(part, dict) and isinstance(part.get(key), str) and part[key]:
            value = Path(part[key]).expanduser()
            if not value.is_absolute():
                value = Path(os.path.normpath(folder / value))
            data = {**data, section: {**part, key: str(value)}}
    return data


REQUIRED_FILE_KEYS = ("task", "generators")
"""Keys every config file must give: a file without them (empty, only comments, ``{}``) describes no experiment."""


def _experiment_mapping(data: Any, path: Path) -> Any:
    """``data`` read from the config file ``path``, refused (ConfigError) when it names no task or generators."""
    if data is None:
        raise ConfigError(f"{path}: the config file is empty (or only comments); expected a mapping with at least "
                          "`task:` (e.g. {name: gsm8k, path: test.jsonl}) and `generators:` (a list, e.g. "
                          "[{id: smol, model: smollm2-135m-instruct, num_samples: 16}])")
    missing = [key for key in REQUIRED_FILE_KEYS if isinstance(data, dict) and key not in data]
    if missing:
        raise ConfigError(f"{path}: required key(s) missing: {', '.join(missing)}; a config file names at least "
                          "`task:` (which problems) and `generators:` (a list: which models sample them)")
    return data


def format_validation_error(exc: ValidationError, source: str, model: type[BaseModel] | None = None) -> str:
    """One line per error, ``source: key: what was expected (got value)``; with several, a count line first."""
    lines = []
    for err in exc.errors():
        path = _key_path(err["loc"])
        if err["type"] == "extra_forbidden":
            known = _fields_at(model, err["loc"][:-1]) if model is not None else None
            message = unknown_key(str(err["loc"][-1]), known or [])
        elif err["type"] == "missing":
            message = "required key is missing"
        else:
            message = err["msg"].removeprefix("Value error, ")
            if "input" in err and err["type"] not in ("value_error",):
                message += f" (got {err['input']!r})"
        lines.append(f"{path}: {message}" if path else message)
    if len(lines) == 1:
        return f"{source}: {lines[0]}"
    return "\n".join([f"{source}: {len(lines)} invalid keys", *(f"  - {line}" for line in lines)])


def unknown_key(key: str, known: list[str]) -> str:
    """``unknown key (did you mean 'x'?); expected one of a, b, c`` (as much of it as is known)."""
    close = difflib.get_close_matches(key, known, n=1)
    return ("unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
            + (f"; expected one of {', '.join(known)}" if known else ""))


def _fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The keys the model nested at ``loc`` (names and list indices from the top) accepts; None if not a model."""
    for step in loc:
        if isinstance(step, int):
            continue
        field = model.model_fields.get(step)
        if field is None:
            return None
        nested = [t for t in _types_in(field.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return list(model.model_fields)


def _types_in(annotation: Any) -> list[Any]:
    """``annotation`` and the types inside it (``list[X] | None`` -> X, ...)."""
    return [annotation, *(t for arg in get_args(annotation) for t in _types_in(arg))]


def _key_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def fingerprint(data: Any) -> str:
    """A stable short hash of plain data (dict keys sorted)."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
