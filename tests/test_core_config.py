from pathlib import Path

import pytest

from monkeybarrel.core.config import ConfigError, ExperimentConfig
from monkeybarrel.orchestrator.runner import build_task


def test_unknown_key_and_wrong_type_name_the_key_path():
    with pytest.raises(ConfigError) as info:
        ExperimentConfig.from_dict({"task": {"num_problem": 3}, "generators": [{"temperature": "hot"}], "bogus": 1})
    message = str(info.value)
    assert "task.num_problem: unknown key" in message
    assert "generators[0].temperature" in message and "valid number" in message
    assert "bogus: unknown key" in message


def test_yaml_errors_name_the_file(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("task: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:2:1: not valid YAML"):
        ExperimentConfig.from_yaml(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        ExperimentConfig.from_yaml(scalar)
    with pytest.raises(ConfigError, match="not found"):
        ExperimentConfig.from_yaml(tmp_path / "missing.yaml")


def test_constraints_and_duplicates():
    with pytest.raises(ConfigError, match=r"generators\[0\].prompt_template"):
        ExperimentConfig.from_dict({"generators": [{"prompt_template": "no placeholder"}]})
    with pytest.raises(ConfigError, match=r"generators\[0\].num_samples"):
        ExperimentConfig.from_dict({"generators": [{"num_samples": 0}]})
    with pytest.raises(ConfigError, match="duplicate id"):
        ExperimentConfig.from_dict({"generators": [{"id": "a"}, {"id": "a"}]})


def test_yaml_round_trip(tmp_path: Path):
    config = ExperimentConfig.from_dict({"name": "x", "task": {"name": "gsm8k", "num_problems": 5}})
    path = tmp_path / "c.yaml"
    path.write_text(config.to_yaml())
    assert ExperimentConfig.from_yaml(path) == config


def test_unknown_task_and_task_option_are_config_errors():
    with pytest.raises(ConfigError, match="task: unknown task 'nope'; expected one of: .*arithmetic"):
        build_task(ExperimentConfig.from_dict({"task": {"name": "nope"}}))
    with pytest.raises(ConfigError, match=r"task.options: unknown option\(s\) \['difficulti'\]"):
        build_task(ExperimentConfig.from_dict({"task": {"name": "arithmetic", "options": {"difficulti": 2}}}))
    with pytest.raises(ConfigError, match="difficulty must be between 1 and 6"):
        build_task(ExperimentConfig.from_dict({"task": {"name": "arithmetic", "options": {"difficulty": 9}}}))
