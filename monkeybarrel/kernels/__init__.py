"""GPU kernels for test-time compute: shared-prefix ("Hydragen") decode attention.

Import-light: importing this package imports neither triton nor transformers. Submodules:

- ``reference``        pure-PyTorch math (CPU/CI): decomposition, LSE merge, replicated baseline
- ``attention``        :func:`shared_prefix_attention`, dispatching to Triton on CUDA
- ``hydragen_triton``  the Triton kernels (imports triton)
- ``hydragen_launch``  their launcher and tiling (imports triton)
- ``hf_attention``     transformers AttentionInterface hook and the shared-prefix KV state
- ``shared_prefix_sampling``  n samples of one prompt decoded through the kernel

See docs/kernels.md.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["shared_prefix_attention", "shared_prefix_attention_reference"]

_LAZY = {
    "shared_prefix_attention": "attention",
    "shared_prefix_attention_reference": "reference",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
