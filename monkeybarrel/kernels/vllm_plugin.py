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
it subclasses vLLM's FlashAttention backend and mirrors the V2 model runner's block table."""
BACKEND_PATH = "monkeybarrel.kernels.vllm_backend.MonkeybarrelAttentionBackend"

_log = logging.getLogger(__name__)
_MIRRORS: "weakref.WeakValueDictionary[int, _BlockTableMirror]" = weakref.WeakValueDictionary()


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

    Also mirrors the V2 model runner's block table on the CPU (:func:`cpu_block_table`), so the
    metadata builder plans a step without copying the block table back from the GPU (which would
    wait for the previous step and undo vLLM's asynchronous scheduling). Safe to call more than once.
    """
    try:
        check_vllm_version()
    except RuntimeError as exc:
        _log.debug("monkeybarrel attention backend not registered: %s", exc)
        return
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    _mirror_block_tables()


class _BlockTableMirror:
    """The CPU copy of one V2 ``BlockTables`` (KV-cache group 0): ``table [max_num_reqs, max_blocks]``
    int32 by request-state row, written with the block ids the scheduler hands to the runner, and
    ``batch``, the last prepared batch's request-state rows in batch order (``idx_mapping_np``)."""

    def __init__(self, rows: int, width: int) -> None:
        self.table = np.zeros((rows, width), dtype=np.int32)
        self.batch: np.ndarray | None = None


def _mirror_block_tables() -> None:
    """Wrap the V2 runner's ``BlockTables`` (constructor, ``append_block_ids``) and
    ``GPUModelRunner.prepare_inputs`` to keep a :class:`_BlockTableMirror`, recorded by the address of
    the input block table the runner hands to the metadata builders."""
    try:
        from vllm.v1.worker.gpu.block_table import BlockTables
        from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    except ImportError:
        return
    if getattr(BlockTables, "_monkeybarrel_mirrored", False):
        return
    init, append, prepare = BlockTables.__init__, BlockTables.append_block_ids, GPUModelRunner.prepare_inputs

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.num_kv_cache_groups == 1 and self.blocks_per_kv_block[0] == 1:
            self._monkeybarrel_mirror = _BlockTableMirror(*self.block_tables[0].gpu.shape)
            _MIRRORS[self.input_block_tables[0].data_ptr()] = self._monkeybarrel_mirror

    def append_block_ids(self, req_index, new_block_ids, overwrite):
        mirror = getattr(self, "_monkeybarrel_mirror", None)
        if mirror is not None and new_block_ids[0]:
            start = 0 if overwrite else int(self.num_blocks.np[0, req_index])
            mirror.table[req_index, start:start + len(new_block_ids[0])] = new_block_ids[0]
        return append(self, req_index, new_block_ids, overwrite)

    def prepare_inputs(self, *args, **kwargs):
        batch = prepare(self, *args, **kwargs)
        mirror = getattr(self.block_tables, "_monkeybarrel_mirror", None)
        if mirror is not None:
            mirror.batch = batch.idx_mapping_np
        return batch

    BlockTables.__init__, BlockTables.append_block_ids = __init__, append_block_ids
    GPUModelRunner.prepare_inputs = prepare_inputs
    BlockTables._monkeybarrel_mirrored = True


def cpu_block_table(device_table, rows: int, width: int) -> tuple[np.ndarray, int] | None:
    """The CPU copy of the first ``width`` columns of a step's block table ``[rows, width]`` (rows past
    the batch's requests, CUDA-graph padding, are zeros) and the number of real requests, or None when
    ``device_table`` is not a mirrored V2 table (the V1 runner's, or a batch larger than ``rows``)."""
    mirror = _MIRRORS.get(device_table.data_ptr())
    if mirror is None or mirror.batch is None or len(mirror.batch) > rows:
        return None
    n, width = len(mirror.batch), min(width, mirror.table.shape[1])
    out = np.zeros((rows, width), dtype=np.int32)
    out[:n] = mirror.table[mirror.batch, :width]
    return out, n
