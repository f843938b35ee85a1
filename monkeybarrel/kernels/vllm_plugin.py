"""vLLM plugin: registers monkeybarrel's shared-prefix attention backend in every vLLM process.

vLLM runs the functions of the ``vllm.general_plugins`` entry-point group (pyproject.toml names
:func:`register`) in each process it starts, before it builds models; an engine then picks the
backend with ``attention_backend="CUSTOM"`` (the ``vllm`` sampler's ``attention: monkeybarrel`` option
does this). This module imports vLLM only inside functions, so ``import monkeybarrel.kernels`` stays
light and the plugin is harmless under vLLM versions the backend does not support (it registers
nothing there; :func:`check_vllm_version` is what makes an engine that asked for the backend fail).
"""

from __future__ import annotations

import logging
import weakref

import numpy as np

__all__ = ["SUPPORTED_VLLM", "BACKEND_PATH", "check_vllm_version", "register", "cpu_block_table"]

SUPPORTED_VLLM = (">=0.26.0", "<0.27")
"""vLLM releases the backend is built and tested against (the ``[vllm]`` extra pins the same range):
it subclasses vLLM's FlashAttention backend and reads the V1 model runner's block table."""
BACKEND_PATH = "monkeybarrel.kernels.vllm_backend.MonkeybarrelAttentionBackend"

_log = logging.getLogger(__name__)
_MIRRORS: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()


def version_supported(version: str) -> bool:
    """Whether ``version`` (e.g. ``"0.26.0+cu130"``) lies in :data:`SUPPORTED_VLLM`."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return SpecifierSet(",".join(SUPPORTED_VLLM)).contains(Version(parsed.base_version), prereleases=True)


def check_vllm_version(version: str | None = None) -> str:
    """The installed vLLM version, or a RuntimeError saying which versions the backend needs."""
    if version is None:
        try:
            import vllm
        except ImportError as exc:
            raise RuntimeError("attention: monkeybarrel needs vLLM (`pip install 'monkeybarrel[vllm]'`)") from exc
        version = str(vllm.__version__)
    if not version_supported(version):
        raise RuntimeError(
            f"attention: monkeybarrel supports vLLM {','.join(SUPPORTED_VLLM)}, but vLLM {version} is installed; "
            "install a supported vLLM (`pip install 'monkeybarrel[vllm]'`) or use vLLM's own attention "
            "(`attention: vllm`)")
    return version


def register() -> None:
    """Entry point of the ``vllm.general_plugins`` group: register the backend as ``CUSTOM``.

    Also keeps a handle on the V1 model runner's block tables, so the metadata builder can read the
    CPU copy of a step's block table instead of copying it back from the GPU (a synchronisation).
    Safe to call more than once.
    """
    try:
        check_vllm_version()
    except RuntimeError as exc:
        _log.debug("monkeybarrel attention backend not registered: %s", exc)
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    _mirror_block_tables()


def _mirror_block_tables() -> None:
    """Record every V1 ``BlockTable`` by the address of its device buffer."""
    try:
        from vllm.v1.worker.block_table import BlockTable
    except ImportError:
        return
    if getattr(BlockTable, "_monkeybarrel_mirrored", False):
        return
    original = BlockTable.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _MIRRORS[self.block_table.gpu.data_ptr()] = self

    BlockTable.__init__ = __init__
    BlockTable._monkeybarrel_mirrored = True


def cpu_block_table(device_table) -> np.ndarray | None:
    """The CPU copy (numpy, the same rows) of a block-table tensor the V1 runner passed to a
    metadata builder, or None when it is not one of the recorded tables (e.g. the V2 runner's)."""
    table = _MIRRORS.get(device_table.data_ptr())
    return None if table is None else table.block_table.np
