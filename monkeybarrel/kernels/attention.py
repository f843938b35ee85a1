"""Device dispatch for shared-prefix decode attention.

:func:`shared_prefix_attention` runs the Triton kernel on CUDA tensors and the PyTorch reference
elsewhere (CPU in CI). Triton is imported only on the CUDA path.
"""

from __future__ import annotations

import torch

from .reference import shared_prefix_attention_reference

__all__ = ["shared_prefix_attention", "triton_available"]


def triton_available() -> bool:
    """True when a CUDA device is visible and triton imports."""
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def shared_prefix_attention(
    q: torch.Tensor, k_prefix: torch.Tensor, v_prefix: torch.Tensor, k_suffix: torch.Tensor, v_suffix: torch.Tensor,
    suffix_lens: torch.Tensor, scale: float | None = None, *, backend: str = "auto", **kernel_kwargs,
) -> torch.Tensor:
    """One decode step of attention for B sequences sharing a prefix.

    Args:
        q: ``[B, Hq, D]``; k/v_prefix: ``[Hkv, P, D]``; k/v_suffix: ``[B, Hkv, S, D]``;
        suffix_lens: ``[B]`` integer (int32 on the device for the Triton path).
        scale: softmax scale (default ``D ** -0.5``).
        backend: ``"auto"`` (Triton on CUDA, reference otherwise), ``"triton"`` or ``"reference"``.
        kernel_kwargs: passed to :func:`monkeybarrel.kernels.hydragen_launch.hydragen_decode_attention`.

    Returns:
        ``[B, Hq, D]`` in q's dtype.
    """
    if backend not in ("auto", "triton", "reference"):
        raise ValueError(f"unknown backend {backend!r}")
    if backend == "triton" or (backend == "auto" and q.is_cuda):
        from .hydragen_launch import hydragen_decode_attention

        return hydragen_decode_attention(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, scale,
                                         **kernel_kwargs)
    return shared_prefix_attention_reference(q, k_prefix, v_prefix, k_suffix, v_suffix, suffix_lens, scale)
