# SPDX-License-Identifier: Apache-2.0
"""transformers' flash-attention route on CPU, with a PyTorch reference in place of the kernel.

Everything between the model and the kernel stays transformers' code, so ``check_model``
proves the route (it caught GPT-J and GPT-Neo dropping ``cu_seq_lens``), not the kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["emulated_flash", "varlen_attention"]

FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3")


def _attend(q, k, v, *, scale, causal, window_size, softcap, s_aux) -> torch.Tensor:
    """One sequence: q ``(Sq, H, D)``, k / v ``(Sk, Hk, D)`` -> ``(Sq, H, Dv)``."""
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    i = torch.arange(q.shape[0])[:, None] + (k.shape[0] - q.shape[0])  # bottom-right aligned
    j = torch.arange(k.shape[0])[None, :]
    left, right = window_size
    allowed = torch.ones_like(i == j)
    if causal:
        allowed &= j <= i
    if left >= 0:
        allowed &= j >= i - left
    if right >= 0:
        allowed &= j <= i + right
    scores = scores.masked_fill(~allowed, -math.inf)
    if s_aux is not None:  # attention sinks: one extra logit per head in the denominator
        sink = s_aux.float()[:, None, None].expand(-1, q.shape[0], 1)
        probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1]
    else:
        probs = scores.softmax(-1)
    probs = torch.nan_to_num(probs)  # a query with no allowed key gives 0, as flash-attn does
    return torch.einsum("hqk,khd->qhd", probs, v.float()).to(q.dtype)


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    deterministic: bool = False,
    s_aux: torch.Tensor | None = None,
) -> torch.Tensor:
    """``flash_attn_varlen_func`` in PyTorch: q ``(total_q, H, D)``, offsets int32 ``(N + 1,)``.

    flash-attn 2's contract: causal aligned bottom-right, ``window_size`` inclusive (-1:
    unbounded), ``softcap``, sinks (``s_aux``); a sequence longer than ``max_seqlen`` raises,
    tokens no sequence covers come out NaN (the kernel leaves them unset).
    """
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    cu_q, cu_k = [int(x) for x in cu_seqlens_q], [int(x) for x in cu_seqlens_k]
    out = torch.full((*q.shape[:-1], v.shape[-1]), math.nan, dtype=q.dtype)
    for (qs, qe), (ks, ke) in zip(zip(cu_q, cu_q[1:]), zip(cu_k, cu_k[1:])):
        if qe - qs > int(max_seqlen_q) or ke - ks > int(max_seqlen_k):
            raise ValueError(
                f"flash varlen: a sequence of {qe - qs} queries / {ke - ks} keys is longer than "
                f"max_seqlen_q={int(max_seqlen_q)} / max_seqlen_k={int(max_seqlen_k)}"
            )
        out[qs:qe] = _attend(
            q[qs:qe], k[ks:ke], v[ks:ke], scale=scale, causal=causal,
            window_size=window_size, softcap=softcap, s_aux=s_aux,
        )  # fmt: skip
    return out


def _dense_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """``flash_attn_func``: ``(B, S, H, D)`` rows of equal length, each one sequence."""
    b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
    cu_q = torch.arange(b + 1, dtype=torch.int32) * sq
    cu_k = torch.arange(b + 1, dtype=torch.int32) * sk
    flat = (x.reshape(-1, *x.shape[2:]) for x in (q, k, v))
    return varlen_attention(*flat, cu_q, cu_k, sq, sk, **kw).view(b, sq, q.shape[2], -1)


@contextlib.contextmanager
def emulated_flash(
    implementation: str = "flash_attention_2", model_class: type | None = None
) -> Iterator[None]:
    """Within the block, ``implementation`` builds and runs on CPU through the reference.

    ``model_class``: its module gets transformers' ``_flash_attention_forward`` where it
    imports it only when flash-attn is installed (GPT-J, GPT-Neo, Falcon).
    """
    fa = importlib.import_module("transformers.modeling_flash_attention_utils")
    module = vars(sys.modules[model_class.__module__]) if model_class else {}
    injected = "_flash_attention_forward" not in module
    base = importlib.import_module("transformers.modeling_utils").PreTrainedModel
    integration = importlib.import_module("transformers.integrations.flash_attention")
    target_dtype = integration.get_target_dtype
    names = ["_loaded_implementation", "_flash_fn", "_flash_varlen_fn", "_flash_with_kvcache_fn"]
    names += ["_pad_fn", "_unpad_fn", "_process_flash_kwargs_fn", "_process_with_kvcache_kwargs_fn"]
    saved = {name: getattr(fa, name) for name in names}
    check = base.__dict__["_check_and_adjust_attn_implementation"]

    def adjust(self, attn_implementation, *args, **kwargs):
        if attn_implementation != implementation:
            return check(self, attn_implementation, *args, **kwargs)
        if not self._supports_flash_attn:
            raise ValueError(f"{type(self).__name__} does not support {implementation}")
        return implementation

    values = [implementation, _dense_attention, varlen_attention, None, fa._pad_input]
    values += [fa._unpad_input, fa._lazy_define_process_function(varlen_attention), dict]
    for name, value in zip(names, values):
        setattr(fa, name, value)
    base._check_and_adjust_attn_implementation = adjust
    # float32 queries: flash-attn casts them to the weights' dtype; the reference takes float32
    integration.get_target_dtype = lambda query, module: None
    if model_class and injected:
        module["_flash_attention_forward"] = fa._flash_attention_forward
    try:
        yield
    finally:
        if model_class and injected:
            del module["_flash_attention_forward"]
        base._check_and_adjust_attn_implementation = check
        integration.get_target_dtype = target_dtype
        for name, value in saved.items():
            setattr(fa, name, value)
