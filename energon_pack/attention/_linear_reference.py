# SPDX-License-Identifier: Apache-2.0
"""transformers' route through the kernels of linear-attention, short-conv and Mamba2 layers, on CPU.

Gated delta-net layers (Qwen3-Next, Qwen3.5, OLMo-hybrid) and short convolutions (LFM2) keep
the documents of a packed row apart only inside their kernels: flash-linear-attention's
``chunk_gated_delta_rule`` reads ``cu_seqlens`` (transformers passes it ``cu_seq_lens_q``),
causal-conv1d's ``causal_conv1d_fn`` reads ``seq_idx``. transformers calls them through
``use_kernel_func_from_hub_with_fallback``, which binds the real kernel at import time or
falls back to a pure-PyTorch function that raises when given ``cu_seqlens`` or ``seq_idx``.

:func:`emulated_linear_kernels` wraps the PyTorch references below with transformers' own
wrapper (its refusal, its filtering of kwargs by the kernel's signature) in place of a model
module's kernels, so the route from ``model(**hf_kwargs)`` to the kernel is transformers' code.
What that proves is the route, with a reference kernel: not fla's or causal-conv1d's CUDA code.
Mamba2's scans (mamba-ssm) have their references in ``_mamba_reference.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import itertools
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "KERNELS",
    "causal_conv1d_fn",
    "chunk_gated_delta_rule",
    "emulated_linear_kernels",
    "kernel_functions",
    "missing_kernels",
]

_MAMBA = "energon_pack.attention._mamba_reference"
#: Module globals of transformers' modeling files these references replace: name ->
#: (transformers' kernel name, the package it imports, the pip distribution, the module of
#: energon-pack's reference, which exposes it under the kernel name).
KERNELS = {
    "causal_conv1d_fn": ("causal_conv1d_fn", "causal_conv1d", "causal-conv1d", __name__),
    "torch_chunk_gated_delta_rule": (
        "chunk_gated_delta_rule", "fla", "flash-linear-attention", __name__,
    ),
    "mamba2_chunk_scan": ("mamba_chunk_scan_combined", "mamba_ssm", "mamba-ssm", _MAMBA),
    "mamba2_split_conv1d_scan_combined": (
        "mamba_split_conv1d_scan_combined", "mamba_ssm", "mamba-ssm", _MAMBA,
    ),
}  # fmt: skip
#: Kernels of single-token cached decoding: never called by a training forward.
DECODE_ONLY = (
    "causal_conv1d_update",
    "torch_recurrent_gated_delta_rule",
    "mamba2_selective_state_update",
)

_ACTIVE = [0]


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    """causal-conv1d's ``causal_conv1d_fn`` in PyTorch: depthwise causal convolution of ``x``
    ``(B, D, T)`` with ``weight`` ``(D, W)``; a tap whose token has another ``seq_idx``
    ``(B, T)`` int32 than the output token contributes nothing (each sequence starts from zero
    state; ``seq_idx`` non-decreasing, as ``hf_kwargs`` gives it: each run of a value is one
    sequence, whose taps are summed within it). Like the kernel: int32 ``seq_idx`` on a
    channel-last ``x`` only, activation None or silu."""
    if activation not in (None, "silu", "swish"):
        raise NotImplementedError("causal_conv1d: activation must be None, silu, or swish")
    if initial_states is not None or return_final_states or final_states_out is not None:
        raise NotImplementedError("the reference causal_conv1d_fn keeps no states")
    if seq_idx is not None:
        if seq_idx.dtype != torch.int32 or seq_idx.shape != (x.shape[0], x.shape[2]):
            raise ValueError(f"seq_idx must be int32 of shape {(x.shape[0], x.shape[2])}")
        if x.stride(1) != 1:
            raise ValueError("seq_idx is only supported for channel last layout")
    width, (rows, length) = weight.shape[1], (x.shape[0], x.shape[2])
    taps, xt = weight.float(), x.float().transpose(1, 2)  # (B, T, D): contiguous if channel last
    out = xt * taps[:, -1]
    for row in range(rows):  # the taps ``shift`` tokens back, within each sequence
        cuts = [] if seq_idx is None else (seq_idx[row, 1:] != seq_idx[row, :-1]).nonzero()
        bounds = [0, *(int(c) + 1 for c in cuts), length]
        for start, end in itertools.pairwise(bounds):
            for shift in range(1, min(width, end - start)):
                out[row, start + shift : end].addcmul_(xt[row, start : end - shift],
                                                       taps[:, width - 1 - shift])  # fmt: skip
    if bias is not None:
        out += bias.float()
    return (F.silu(out, inplace=True) if activation else out).transpose(1, 2).to(x.dtype)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    use_qk_l2norm_in_kernel: bool = False,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """flash-linear-attention's ``chunk_gated_delta_rule`` in PyTorch: q / k ``(B, T, H, K)``,
    v ``(B, T, HV, V)``, g / beta ``(B, T, HV)``. With ``cu_seqlens`` (batch 1, as fla
    demands) each sequence starts from its own initial state (zero by default); without, each
    row is one sequence. Returns o ``(B, T, HV, V)`` and the final states ``(N, HV, K, V)``
    when asked. The sequences are cut apart and run side by side, in chunks of
    :data:`CHUNK` tokens as fla does (:func:`_chunked_delta_rule`)."""
    rows, length, heads, dim_k = k.shape
    if cu_seqlens is not None and rows != 1:
        raise ValueError(
            f"The batch size is expected to be 1 rather than {rows} when using cu_seqlens"
        )
    bounds = [int(b) for b in cu_seqlens] if cu_seqlens is not None else None
    spans = [(0, s, e) for s, e in itertools.pairwise(bounds)] if bounds else None
    spans = spans or [(r, 0, length) for r in range(rows)]
    if initial_state is not None and initial_state.shape[0] != len(spans):
        raise ValueError(f"{initial_state.shape[0]} initial states for {len(spans)} sequences")
    dtype = v.dtype
    q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    q = q * (dim_k**-0.5 if scale is None else scale)
    if v.shape[2] != heads:  # grouped values: each q/k head serves HV // H value heads
        q, k = (t.repeat_interleave(v.shape[2] // heads, dim=2) for t in (q, k))
    longest = max([e - s for _, s, e in spans] + [0])
    padded = -(-longest // CHUNK) * CHUNK  # zeros past a sequence's end: g 0, beta 0, k 0

    def side_by_side(t: torch.Tensor) -> torch.Tensor:
        out = t.new_zeros(len(spans), padded, *t.shape[2:])
        for n, (row, start, end) in enumerate(spans):
            out[n, : end - start] = t[row, start:end]
        return out

    state = torch.zeros(len(spans), v.shape[2], dim_k, v.shape[3])
    if initial_state is not None:
        state = initial_state.float()
    o, state = _chunked_delta_rule(*map(side_by_side, (q, k, v, g, beta)), state)
    out = torch.zeros(v.shape, dtype=torch.float32)
    for n, (row, start, end) in enumerate(spans):
        out[row, start:end] = o[n, : end - start]
    return out.to(dtype), state if output_final_state else None


#: Tokens per chunk of :func:`_chunked_delta_rule` (fla's chunk size).
CHUNK = 64


def _chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule of N sequences side by side: q / k ``(N, T, H, K)`` (scaled,
    grouped), v ``(N, T, H, V)``, g / beta ``(N, T, H)``, T a multiple of :data:`CHUNK`, from
    ``state`` ``(N, H, K, V)``. Per token: ``S = exp(g) S``, ``u = beta (v - k S)``,
    ``S += k ⊗ u``, ``o = q S``. Within a chunk the updates ``u`` solve a unit lower
    triangular system (the WY / UT form, as fla and transformers' ``torch_chunk_gated_delta_rule``
    compute it); from chunk to chunk the state carries over."""
    q, k, v = (t.transpose(1, 2).unflatten(2, (-1, CHUNK)) for t in (q, k, v))
    g, beta = (t.transpose(1, 2).unflatten(2, (-1, CHUNK)) for t in (g, beta))
    cum = g.cumsum(-1)  # log decay from the chunk's start: (N, H, chunks, C)
    upper = torch.ones(CHUNK, CHUNK, dtype=torch.bool).triu(1)
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(upper, float("-inf")).exp()
    k_beta = k * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * decay  # its diagonal is ignored (unit)
    solve = torch.cat([v * beta[..., None], k_beta * cum.exp()[..., None]], dim=-1)
    solved = torch.linalg.solve_triangular(system, solve, upper=False, unitriangular=True)
    values, k_decayed = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
    attn = (q @ k.transpose(-1, -2)) * decay  # within the chunk, the diagonal included
    q = q * cum.exp()[..., None]
    k = k * (cum[..., -1:] - cum).exp()[..., None]
    out = torch.empty(v.shape)
    for c in range(v.shape[2]):
        u = values[:, :, c] - k_decayed[:, :, c] @ state
        out[:, :, c] = q[:, :, c] @ state + attn[:, :, c] @ u
        state = state * cum[:, :, c, -1, None, None].exp() + k[:, :, c].transpose(-1, -2) @ u
    return out.flatten(2, 3).transpose(1, 2), state


def kernel_functions(model_class: type) -> dict[str, Callable[..., Any]]:
    """The module globals of ``model_class``'s modeling file that transformers routes to an
    optional kernel package (``use_kernel_func_from_hub_with_fallback``), by name."""
    module = sys.modules.get(model_class.__module__)
    found = {}
    for name, value in vars(module).items() if module else ():
        code = getattr(value, "__code__", None)
        if hasattr(value, "__wrapped__") and code and code.co_filename.endswith("hub_kernels.py"):
            found[name] = value
    return found


def missing_kernels(model_class: type) -> list[str]:
    """pip distributions of the kernels ``model_class``'s layers need that are not installed
    (none while :func:`emulated_linear_kernels` is active)."""
    if _ACTIVE[0]:
        return []
    needed = [KERNELS[n] for n in kernel_functions(model_class) if n in KERNELS]
    return sorted({dist for _, pkg, dist, _ in needed if importlib.util.find_spec(pkg) is None})


@contextlib.contextmanager
def emulated_linear_kernels(model_class: type | None) -> Iterator[None]:
    """Within the block, ``model_class``'s module calls the references above through
    transformers' own kernel wrapper, as it would call fla and causal-conv1d."""
    hub = importlib.import_module("transformers.integrations.hub_kernels")
    module = vars(sys.modules[model_class.__module__]) if model_class else {}
    saved = (
        {n: f for n, f in kernel_functions(model_class).items() if n in KERNELS}
        if model_class
        else {}
    )
    for name, original in saved.items():
        kernel, _, _, reference = KERNELS[name]
        importlib.import_module(reference)
        wrap = hub.use_kernel_func_from_hub_with_fallback(kernel, reference)
        module[name] = wrap(original.__wrapped__)
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1
        module.update(saved)
