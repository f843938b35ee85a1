"""``core.environment.environment``: variables set or unset for a block, then as they were (also after an error)."""

from __future__ import annotations

import os

import pytest

from monkeybarrel.core.environment import environment


def test_variables_are_set_and_unset_for_the_block_then_put_back(monkeypatch):
    monkeypatch.setenv("MB_ENV_KEPT", "before")
    monkeypatch.setenv("MB_ENV_GONE", "here")
    monkeypatch.delenv("MB_ENV_NEW", raising=False)
    with environment({"MB_ENV_KEPT": "during", "MB_ENV_GONE": None, "MB_ENV_NEW": "1"}):
        assert os.environ["MB_ENV_KEPT"] == "during" and "MB_ENV_GONE" not in os.environ
        assert os.environ["MB_ENV_NEW"] == "1"
    assert os.environ["MB_ENV_KEPT"] == "before" and os.environ["MB_ENV_GONE"] == "here"
    assert "MB_ENV_NEW" not in os.environ
    with pytest.raises(RuntimeError), environment({"MB_ENV_KEPT": "x", "MB_ENV_NEW": "2"}):
        raise RuntimeError("the block failed")
    assert os.environ["MB_ENV_KEPT"] == "before" and "MB_ENV_NEW" not in os.environ
