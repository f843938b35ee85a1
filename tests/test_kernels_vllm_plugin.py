"""The vLLM plugin and the sampler's ``attention`` option, on CPU without a supported vLLM.

The backend itself (monkeybarrel.kernels.vllm_backend) imports vLLM 0.26 and runs on the GPU machine:
benchmarks/vllm_backend.py and benchmarks/vllm_device_run.sh (docs/kernels.md has the results).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest

from monkeybarrel.core.config import GeneratorSpec
from monkeybarrel.kernels import vllm_plugin
from monkeybarrel.samplers.vllm_offline import VLLMSampler


@pytest.mark.parametrize("version,ok", [("0.26.0", True), ("0.26.3+cu130", True), ("0.26.0rc1", True),
                                        ("0.25.2", False), ("0.27.0", False), ("0.32.0", False), ("dev", False)])
def test_supported_vllm_range(version, ok):
    assert vllm_plugin.version_supported(version) is ok


def test_unsupported_version_fails_with_the_range_and_the_way_out():
    with pytest.raises(RuntimeError) as err:
        vllm_plugin.check_vllm_version("0.32.0")
    message = str(err.value)
    assert "0.32.0" in message and ">=0.26.0" in message and "attention: vllm" in message
    assert vllm_plugin.check_vllm_version("0.26.0") == "0.26.0"


def test_plugin_is_registered_for_vllm_processes():
    names = {e.value for e in importlib.metadata.entry_points(group="vllm.general_plugins")}
    assert "monkeybarrel.kernels.vllm_plugin:register" in names


def test_importing_the_kernels_package_stays_light():
    import subprocess
    import sys

    code = ("import sys, monkeybarrel.kernels, monkeybarrel.kernels.vllm_plugin, monkeybarrel.kernels.prefix_groups;"
            "print(sorted(m for m in ('vllm', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_block_table_mirror_gives_the_batch_rows_in_batch_order():
    import numpy as np
    import torch

    device_table = torch.zeros(8, 5, dtype=torch.int32)  # stands for the runner's input block table
    mirror = vllm_plugin._BlockTableMirror(6, 4)
    mirror.table[:] = np.arange(24).reshape(6, 4)
    vllm_plugin._MIRRORS[device_table.data_ptr()] = mirror
    assert vllm_plugin.cpu_block_table(device_table, 8, 3) is None  # no batch prepared yet
    mirror.batch = np.array([4, 0, 2], dtype=np.int32)
    table, n = vllm_plugin.cpu_block_table(device_table, 5, 9)  # 2 padded rows; width clamped to 4
    assert n == 3 and table.shape == (5, 4)
    assert table[:3].tolist() == [[16, 17, 18, 19], [0, 1, 2, 3], [8, 9, 10, 11]] and not table[3:].any()
    assert vllm_plugin.cpu_block_table(device_table, 2, 4) is None  # more requests than rows: not this table
    assert vllm_plugin.cpu_block_table(torch.zeros(3, dtype=torch.int32), 3, 4) is None


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_sampler_without_vllm_fails_at_start_with_a_clear_message():
    sampler = VLLMSampler(GeneratorSpec(backend="vllm"), attention="monkeybarrel")
    with pytest.raises(ImportError, match="needs vLLM"):
        sampler.load()
    assert vllm_plugin.register() is None  # the entry point never breaks a process without a supported vLLM
