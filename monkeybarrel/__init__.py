"""monkeybarrel: test-time compute and verification.

Sample many candidate solutions per problem, score every candidate with many weak verifiers,
select one answer per problem, and measure it.

    >>> import monkeybarrel as mb
    >>> config = mb.ExperimentConfig(task=mb.TaskSpec(name="arithmetic", num_problems=4))
    >>> experiment = mb.run(config, "runs/quick")          # doctest: +SKIP
    >>> experiment.metrics()["coverage"]                   # doctest: +SKIP
"""

from .core.config import (
    AllocationSpec,
    BudgetSpec,
    ConfigError,
    EvaluateSpec,
    ExperimentConfig,
    GeneratorSpec,
    SelectorSpec,
    StoreSpec,
    TaskSpec,
    VerifierSpec,
)
from .core.records import Candidate, Problem
from .core.selection_data import SelectionData
from .orchestrator.experiment import Experiment
from .orchestrator.runner import evaluate_and_report, run_experiment

run = run_experiment
"""``run(config, out_dir, force=False, show_progress=True) -> Experiment``."""

__version__ = "0.1.0"

__all__ = [
    "AllocationSpec", "BudgetSpec", "Candidate", "ConfigError", "EvaluateSpec", "Experiment", "ExperimentConfig", "GeneratorSpec", "Problem",
    "SelectionData", "SelectorSpec", "StoreSpec", "TaskSpec", "VerifierSpec", "evaluate_and_report", "run",
    "run_experiment",
]
