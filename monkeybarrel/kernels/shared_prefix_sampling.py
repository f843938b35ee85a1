"""n samples of one prompt, decoded together through the shared-prefix attention kernel.

The prompt is prefilled once (batch 1); its KV is kept once per layer. Each decode step runs the
model on the n newest tokens, and attention reads the prompt's KV once for all n sequences
(:mod:`monkeybarrel.kernels.hf_attention`). On CUDA the decode step can be captured in a CUDA graph
(all shapes are fixed; the growing suffix lengths live on the device).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

import torch

from .hf_attention import SharedPrefixKV, hydragen_attention_enabled

__all__ = ["SampleConfig", "SharedPrefixDecoder", "generate_shared_prefix", "teacher_forced_logits"]


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """Token selection: greedy when ``temperature == 0``; else softmax(logits / T), optional top-k."""

    temperature: float = 0.0
    top_k: int = 0
    seed: int | None = None


def select_tokens(logits: torch.Tensor, cfg: SampleConfig, generator: torch.Generator | None) -> torch.Tensor:
    """logits ``[n, V]`` -> token ids ``[n]`` int64."""
    if cfg.temperature <= 0:
        return logits.argmax(dim=-1)
    scores = logits.float() / cfg.temperature
    if cfg.top_k:
        kth = torch.topk(scores, cfg.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    return torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=generator).squeeze(-1)


class SharedPrefixDecoder:
    """Prefill once, then decode n sequences in lockstep through the shared-prefix kernel.

    Use as a context manager: inside it the model's attention implementation is the hydragen
    function (:func:`~monkeybarrel.kernels.hf_attention.hydragen_attention_enabled`).

    Args:
        model: a transformers causal LM of the Llama family (functional attention interface).
        n: sequences decoded together.
        capacity: most tokens each sequence may append (its suffix buffer size).
        cuda_graph: replay the decode step from a CUDA graph (CUDA only).
        kernel_kwargs: passed to the kernel launcher (e.g. ``config=HydragenConfig(...)``).
    """

    def __init__(self, model: torch.nn.Module, n: int, capacity: int, *, cuda_graph: bool = False,
                 kernel_kwargs: dict | None = None):
        self.model, self.n = model, n
        self.kv = SharedPrefixKV.for_model(model, n, capacity, kernel_kwargs=kernel_kwargs)
        self.device = next(model.parameters()).device
        self.cuda_graph = cuda_graph and self.device.type == "cuda"
        self._graph: torch.cuda.CUDAGraph | None = None
        self._tok = torch.zeros(n, 1, dtype=torch.long, device=self.device)
        self._logits: torch.Tensor | None = None
        self._ctx: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> SharedPrefixDecoder:
        self._ctx = hydragen_attention_enabled(self.model)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        ctx, self._ctx = self._ctx, None
        ctx.__exit__(*exc)

    def _require_active(self) -> None:
        if self._ctx is None:
            raise RuntimeError("use SharedPrefixDecoder inside a `with` block")

    @torch.no_grad()
    def prefill(self, prompt_ids: torch.Tensor) -> torch.Tensor:
        """prompt_ids ``[P]`` -> next-token logits ``[V]`` (float32). Resets the suffixes."""
        self._require_active()
        P = prompt_ids.shape[0]
        pos = torch.arange(P, device=self.device).unsqueeze(0)
        out = self.model(input_ids=prompt_ids.to(self.device).unsqueeze(0), position_ids=pos, use_cache=False,
                         logits_to_keep=1, shared_prefix_kv=self.kv.prefill_mode())
        self.kv.reset_suffix()
        self._graph = None  # positions depend on P: recapture
        return out.logits[0, -1].float()

    def _forward_step(self) -> torch.Tensor:
        kv = self.kv
        kv.begin_step()
        out = self.model(input_ids=self._tok, position_ids=kv.positions(), use_cache=False, logits_to_keep=1,
                         shared_prefix_kv=kv.decode_mode())
        kv.end_step()
        return out.logits[:, -1]

    @torch.no_grad()
    def capture(self) -> None:
        """Record one decode step in a CUDA graph (after :meth:`prefill`); the KV state is left unchanged."""
        self._require_active()
        lens0 = self.kv.lens.clone()
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # compile kernels, create library handles
                self.kv.lens.copy_(lens0)
                self._forward_step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.kv.lens.copy_(lens0)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            self._logits = self._forward_step()
        self.kv.lens.copy_(lens0)
        self._graph = g

    @torch.no_grad()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens ``[n]`` (each sequence's newest token) -> next-token logits ``[n, V]``."""
        self._require_active()
        self._tok.copy_(tokens.view(self.n, 1))
        if not self.cuda_graph:
            return self._forward_step()
        if self._graph is None:
            self.capture()
        self._graph.replay()
        return self._logits


@torch.no_grad()
def generate_shared_prefix(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    n: int,
    max_new_tokens: int,
    *,
    sample: SampleConfig = SampleConfig(),
    first_tokens: torch.Tensor | None = None,
    cuda_graph: bool = False,
    kernel_kwargs: dict | None = None,
    timings: dict | None = None,
) -> torch.Tensor:
    """Decode ``n`` continuations of one prompt.

    Args:
        model: transformers causal LM (Llama family).
        prompt_ids: ``[P]`` token ids of the shared prompt.
        n: number of samples.
        max_new_tokens: tokens generated per sample (no early stop; post-process at EOS).
        sample: greedy by default.
        first_tokens: optional ``[n]`` forced first continuation token of each sample (they then
            differ from the first step on; used by the parity tests).
        cuda_graph: replay the decode step from a CUDA graph.
        timings: if given, filled with ``prefill_s``, ``capture_s`` (graph capture, 0 without) and
            ``decode_s`` (device-synchronised wall time).

    Returns:
        ``[n, max_new_tokens]`` int64 generated ids (the forced first token included when given).
    """
    device = next(model.parameters()).device
    gen = None
    if sample.seed is not None:
        gen = torch.Generator(device=device)
        gen.manual_seed(sample.seed)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with SharedPrefixDecoder(model, n, max_new_tokens, cuda_graph=cuda_graph, kernel_kwargs=kernel_kwargs) as dec:
        result, t = _run(dec, prompt_ids, n, max_new_tokens, sample, first_tokens, gen, sync)
    if timings is not None:
        timings.update(t)
    return result


def _run(dec: SharedPrefixDecoder, prompt_ids: torch.Tensor, n: int, max_new_tokens: int, sample: SampleConfig,
         first_tokens: torch.Tensor | None, gen: torch.Generator | None, sync) -> tuple[torch.Tensor, dict]:
    """Prefill, optional graph capture, then ``max_new_tokens - 1`` decode steps; returns (ids, timings)."""
    device = dec.device
    sync()
    t0 = time.perf_counter()
    logits = dec.prefill(prompt_ids)
    if first_tokens is not None:
        tok = first_tokens.to(device=device, dtype=torch.long)
    else:
        tok = select_tokens(logits.unsqueeze(0).expand(n, -1), sample, gen)
    sync()
    t1 = time.perf_counter()
    if dec.cuda_graph:
        dec.capture()
        sync()
    t2 = time.perf_counter()
    out = [tok]
    for _ in range(max_new_tokens - 1):
        tok = select_tokens(dec.step(tok), sample, gen)
        out.append(tok)
    result = torch.stack(out, dim=1)
    sync()
    return result, dict(prefill_s=t1 - t0, capture_s=t2 - t1, decode_s=time.perf_counter() - t2)


@torch.no_grad()
def teacher_forced_logits(model: torch.nn.Module, prompt_ids: torch.Tensor, tokens: torch.Tensor, *,
                          cuda_graph: bool = False, kernel_kwargs: dict | None = None) -> torch.Tensor:
    """Next-token logits along given continuations (scoring, or parity checks against another engine).

    Args:
        prompt_ids: ``[P]`` the shared prompt.
        tokens: ``[n, T]`` one continuation per sequence.

    Returns:
        ``[n, T, V]`` float32: ``[:, t]`` is the distribution of ``tokens[:, t]`` given the prompt and
        ``tokens[:, :t]`` (``[:, 0]`` is the prompt's next-token distribution, the same for all n).
    """
    n, T = tokens.shape
    with SharedPrefixDecoder(model, n, max(T - 1, 1), cuda_graph=cuda_graph, kernel_kwargs=kernel_kwargs) as dec:
        first = dec.prefill(prompt_ids)
        out = [first.unsqueeze(0).expand(n, -1)]
        for t in range(T - 1):
            out.append(dec.step(tokens[:, t]).float())
    return torch.stack(out, dim=1)
