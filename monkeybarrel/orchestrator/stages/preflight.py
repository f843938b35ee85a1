"""Check a whole configuration before anything runs: its data, every plug-in's options, models and servers.

``monkeybarrel validate``, ``run`` and a sweep's validation call ``preflight``. Every plug-in's
options are checked against its own constructor and parameter checks (``core.plugin_source``: also
the checks a scikit-learn-style selector makes only in ``fit``, such as Weaver's ``train_fraction``);
a plug-in whose module is light is also built. With ``build=False`` (``validate``) a plug-in whose
module imports torch, transformers or scikit-learn is checked from its source only, so a config
validates in a fraction of a second; ``run`` builds every plug-in. Building cannot catch model paths
that do not exist, model directories whose ``config.json`` a loader refuses, and OpenAI-compatible
servers that do not answer: the checks below do.
"""

from __future__ import annotations

from typing import Any

from ...core.config import ConfigError, ExperimentConfig
from ...core.files import TaskDataError
from ...core.models import model_problem
from ...core.plugin_source import check_options, imports_heavy
from ...core.plugins import build_plugin
from ...core.records import Problem
from ...core.registry import Registry
from ...core.sampling import SAMPLERS
from ...core.selection_data import SELECTORS
from ...tasks.base import TASKS, Task
from ...verifiers.base import VERIFIERS

LOCAL_BACKENDS = ("embedded", "vllm")
"""Sampler backends that load ``model`` on this machine."""
REMOTE_VERIFIERS = ("openai_judge",)
"""Verifier types whose ``model`` option names a model on a server."""
VERIFIER_OPTIONS = ("verifier", "verifiers")
"""Selector options that name verifier columns (one name, or a list)."""


def build_task(config: ExperimentConfig) -> Task:
    """The configured task (errors name ``task`` keys)."""
    spec = config.task
    given = {"path": spec.path, "split": spec.split, "num_problems": spec.num_problems, "seed": config.seed}
    _not_given(spec.options, given, "task.options")
    return build_plugin(TASKS, spec.name, "task", **given, **spec.options)


def preflight(config: ExperimentConfig, *, reach_servers: bool = True, build: bool = True) -> tuple[Task, list[Problem]]:
    """Load the task's problems and check every sampler, verifier and selector; returns task and problems.

    Args:
        reach_servers: ask each OpenAI-compatible server whether it answers.
        build: build every plug-in (``run``); False builds only those whose modules are light and checks
            the others from their source (``validate``: no torch or scikit-learn import).

    Raises:
        ConfigError: naming the key (``generators[0].model``, ``selectors[2].options.train_fraction``, ...).
        TaskDataError: the task's data file is unreadable or malformed (file:line), or the hub cannot be reached.
    """
    task = build_task(config)
    problems = task.load()
    if not problems:
        where = f" ({config.task.path})" if config.task.path else ""
        raise TaskDataError(f"task.name {config.task.name!r}{where}: no problems; the dataset is empty")
    for index, spec in enumerate(config.generators):
        key = f"generators[{index}]"
        inner = spec.options.get("backend", "embedded") if spec.backend == "ray" else None
        if inner is not None:
            check_options(SAMPLERS, inner, f"{key}.options.backend_options", spec.options.get("backend_options") or {},
                          {"spec": spec})
        sampler, _ = _plugin(SAMPLERS, spec.backend, key, spec.options, {"spec": spec}, build)
        if (inner or spec.backend) in LOCAL_BACKENDS:
            _check_model(spec.model, f"{key}.model")
        elif spec.backend == "openai" and reach_servers and sampler is not None:
            _check_server(getattr(sampler, "base_url", None), getattr(sampler, "api_key", None),
                          f"{key}.options.base_url")
        if sampler is not None:
            sampler.close()
    verifiers = [spec.name for spec in config.verifiers]
    for index, spec in enumerate(config.verifiers):
        key = f"verifiers[{index}]"
        verifier, params = _plugin(VERIFIERS, spec.type, key, spec.options, {"name": spec.name}, build)
        try:
            model = spec.options.get("model", getattr(verifier, "model_name", params.get("model")))
            if isinstance(model, str) and spec.type not in REMOTE_VERIFIERS:
                _check_model(model, f"{key}.options.model")
        finally:
            if verifier is not None:
                verifier.close()
    for index, spec in enumerate(config.selectors):
        _plugin(SELECTORS, spec.type, f"selectors[{index}]", spec.options, {}, build)
        _check_verifier_names(spec.options, verifiers, f"selectors[{index}].options")
    if config.uses_rounds:
        from .allocation_rounds import configured_policy  # the allocation policies load only when used

        configured_policy(config)
    return task, problems


def _plugin(registry: Registry, name: str, key: str, options: dict[str, Any], given: dict[str, Any],
            build: bool) -> tuple[Any, dict[str, Any]]:
    """Check the options of plug-in ``name`` from its source; returns the plug-in, built when ``build`` or when
    its module is light (else None), and its parameters as far as the source tells them."""
    _not_given(options, given, f"{key}.options")
    params = check_options(registry, name, key, options, given) or {}
    module, _ = registry.module_of(name)  # known: check_options refuses an unknown name
    if build or not imports_heavy(module):
        return build_plugin(registry, name, key, **given, **options), params
    return None, params


def _not_given(options: dict[str, Any], given: dict[str, Any], key: str) -> None:
    """An option may not repeat what the config sets elsewhere (the verifier's ``name``, the task's ``seed``)."""
    for name in sorted(set(options) & set(given)):
        raise ConfigError(f"{key}.{name}: set by the config itself, not an option; remove it from options")


def _check_verifier_names(options: dict[str, Any], verifiers: list[str], key: str) -> None:
    """A selector's ``verifier`` / ``verifiers`` option names configured verifiers (else it fails after sampling)."""
    for option in VERIFIER_OPTIONS:
        names = options.get(option)
        names = [names] if isinstance(names, str) else names if isinstance(names, list) else []
        unknown = [name for name in names if name not in verifiers]
        if unknown:
            raise ConfigError(f"{key}.{option}: {unknown} {'is' if len(unknown) == 1 else 'are'} not a configured "
                              f"verifier; expected some of {verifiers}")


def _check_model(model: str, key: str) -> None:
    problem = model_problem(model)
    if problem is not None:
        raise ConfigError(f"{key}: {problem}")


def _check_server(base_url: str | None, api_key: Any, key: str, timeout_s: float = 5.0) -> None:
    import httpx

    if not base_url:
        return
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        httpx.get(f"{base_url}/models", headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise ConfigError(f"{key}: server {base_url} does not answer ({type(exc).__name__}: {exc})") from None
