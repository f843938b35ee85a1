"""monkeybarrel: test-time compute and verification.

Sample many candidate solutions per problem, score every candidate with many weak verifiers,
select one answer per problem, and measure it.

    >>> import monkeybarrel as mb
    >>> config = mb.ExperimentConfig(task=mb.TaskSpec(name="arithmetic", num_problems=4))
    >>> experiment = mb.run(config, "runs/quick")          # doctest: +SKIP
    >>> experiment.metrics()["coverage"]                   # doctest: +SKIP

Importing the package loads nothing: each public name is imported on first use (PEP 562), so
``monkeybarrel --version`` and ``import monkeybarrel`` stay instant (``tests/test_startup.py``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    **dict.fromkeys(("AllocationSpec", "BudgetSpec", "ConfigError", "EvaluateSpec", "ExperimentConfig", "GeneratorSpec",
                     "SelectorSpec", "StoreSpec", "TaskSpec", "VerifierSpec"), ".core.config"),
    "Candidate": ".core.records",
    "Problem": ".core.records",
    "SelectionData": ".core.selection_data",
    "Experiment": ".orchestrator.experiment",
    "evaluate_and_report": ".orchestrator.runner",
    "run_experiment": ".orchestrator.runner",
    "run": ".orchestrator.runner:run_experiment",
}
"""Public name -> ``module`` (same attribute name) or ``module:attribute``.

``run(config, out_dir, force=False, show_progress=True) -> Experiment`` is ``run_experiment``."""

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time these come from __getattr__
    from .core.config import (AllocationSpec, BudgetSpec, ConfigError, EvaluateSpec, ExperimentConfig, GeneratorSpec,
                              SelectorSpec, StoreSpec, TaskSpec, VerifierSpec)
    from .core.records import Candidate, Problem
    from .core.selection_data import SelectionData
    from .orchestrator.experiment import Experiment
    from .orchestrator.runner import evaluate_and_report, run_experiment
    from .orchestrator.runner import run_experiment as run


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'monkeybarrel' has no attribute {name!r}")
    module, _, attribute = target.partition(":")
    value = getattr(import_module(module, __name__), attribute or name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
