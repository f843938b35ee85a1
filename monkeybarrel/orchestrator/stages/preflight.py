"""Check a whole configuration before anything runs: build every plug-in, find models and servers.

``monkeybarrel validate`` and ``run`` call ``preflight``; plug-in constructors are lazy (models
load on first use), so building them is cheap, and the checks below catch what building cannot:
model paths that do not exist and OpenAI-compatible servers that do not answer.
"""

from __future__ import annotations

from typing import Any

from ...core.config import ConfigError, ExperimentConfig
from ...core.files import TaskDataError
from ...core.models import model_problem
from ...core.plugins import build_plugin
from ...core.records import Problem
from ...core.sampling import SAMPLERS
from ...selection.base import SELECTORS
from ...tasks.base import TASKS, Task
from ...verifiers.base import VERIFIERS
from .allocation_rounds import configured_policy, uses_rounds

LOCAL_BACKENDS = ("embedded", "vllm")
"""Sampler backends that load ``model`` on this machine."""
REMOTE_VERIFIERS = ("openai_judge",)
"""Verifier types whose ``model`` option names a model on a server."""


def build_task(config: ExperimentConfig) -> Task:
    """The configured task (errors name ``task`` keys)."""
    spec = config.task
    return build_plugin(TASKS, spec.name, "task", path=spec.path, split=spec.split,
                        num_problems=spec.num_problems, seed=config.seed, **spec.options)


def preflight(config: ExperimentConfig, *, reach_servers: bool = True) -> tuple[Task, list[Problem]]:
    """Build the task (loading its problems), every sampler, verifier and selector; returns task and problems.

    Raises:
        ConfigError: naming the key (``generators[0].model``, ``verifiers[1].options.model``, ...).
        TaskDataError: the task's data file is unreadable or malformed (file:line).
    """
    task = build_task(config)
    problems = task.load()
    if not problems:
        where = f" ({config.task.path})" if config.task.path else ""
        raise TaskDataError(f"task.name {config.task.name!r}{where}: no problems; the dataset is empty")
    for index, spec in enumerate(config.generators):
        sampler = build_plugin(SAMPLERS, spec.backend, f"generators[{index}]", spec=spec, **spec.options)
        try:
            backend = spec.options.get("backend", "embedded") if spec.backend == "ray" else spec.backend
            if backend in LOCAL_BACKENDS:
                _check_model(spec.model, f"generators[{index}].model")
            elif spec.backend == "openai" and reach_servers:
                _check_server(getattr(sampler, "base_url", None), getattr(sampler, "api_key", None),
                              f"generators[{index}].options.base_url")
        finally:
            sampler.close()
    for index, spec in enumerate(config.verifiers):
        verifier = build_plugin(VERIFIERS, spec.type, f"verifiers[{index}]", name=spec.name, **spec.options)
        try:
            model = spec.options.get("model", getattr(verifier, "model_name", None))
            if isinstance(model, str) and spec.type not in REMOTE_VERIFIERS:
                _check_model(model, f"verifiers[{index}].options.model")
        finally:
            verifier.close()
    for index, spec in enumerate(config.selectors):
        build_plugin(SELECTORS, spec.type, f"selectors[{index}]", **spec.options)
    if uses_rounds(config):
        configured_policy(config)
    return task, problems


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
