# SPDX-License-Identifier: Apache-2.0
"""Keyword arguments that make a Hugging Face causal LM run a packed batch exactly.

``model(**batch.hf_kwargs(attn_implementation))`` works for a transformers 5.x causal LM:

- ``"sdpa"``: ``attention_mask`` = the ``(B, 1, L, L)`` bool block-causal mask (transformers
  passes any 4-D mask through unchanged; SDPA reads True as "may attend");
- ``"eager"``: the same mask as an additive float mask (0 / dtype minimum), because eager
  attention *adds* the mask to the scores;
- ``"flex_attention"``: ``attention_mask`` = the FlexAttention ``BlockMask`` (4-D, passed through);
- ``"flash_attention_2"`` / ``"flash_attention_3"``: no mask; ``cu_seq_lens_q/k`` (int32 slot
  offsets of the flattened batch) and ``max_length_q/k`` (Python int), the padding-free path.

All of them pass ``input_ids`` and the reset ``position_ids``. Labels: HF's causal-LM loss shifts
``labels`` left by one itself, so we pass our aligned targets shifted *right* by one (-100 in
column 0). Example, one row ``[5, 6, 7 | 8, 9]``::

    our labels    6  7 -100  9 -100       (target of each position)
    HF labels  -100  6    7 -100   9      (HF drops column 0 and compares logits[i] to col i+1)

HF's loss is then the mean over every target of the batch, i.e. the token-weighted mean of the
per-document losses (tested against per-document runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from energon_pack.attention import additive_mask

if TYPE_CHECKING:
    from energon_pack.samples._batch import PackedTextBatch

__all__ = ["HF_ATTENTION_IMPLEMENTATIONS", "hf_labels", "hf_kwargs"]

HF_ATTENTION_IMPLEMENTATIONS = (
    "sdpa",
    "eager",
    "flex_attention",
    "flash_attention_2",
    "flash_attention_3",
)


def hf_labels(labels: torch.Tensor) -> torch.Tensor:
    """Shift aligned targets ``(B, L)`` right by one: the ``labels`` HF's loss expects."""
    out = torch.full_like(labels, -100)
    out[:, 1:] = labels[:, :-1]
    return out


def hf_kwargs(
    batch: PackedTextBatch,
    attn_implementation: str = "sdpa",
    *,
    with_labels: bool = True,
    mask_dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """Build the kwargs (see the module docstring); ``mask_dtype`` is the eager mask's dtype."""
    kwargs: dict[str, Any] = {"input_ids": batch.tokens, "position_ids": batch.position_ids}
    if with_labels:
        kwargs["labels"] = hf_labels(batch.labels)
    if attn_implementation == "sdpa":
        kwargs["attention_mask"] = batch.dense_mask()
    elif attn_implementation == "eager":
        kwargs["attention_mask"] = additive_mask(batch.dense_mask(), mask_dtype)
    elif attn_implementation == "flex_attention":
        kwargs["attention_mask"] = batch.block_mask()
    elif attn_implementation in ("flash_attention_2", "flash_attention_3"):
        kwargs["cu_seq_lens_q"] = batch.cu_seqlens_padded
        kwargs["cu_seq_lens_k"] = batch.cu_seqlens_padded
        kwargs["max_length_q"] = batch.max_seqlen_padded
        kwargs["max_length_k"] = batch.max_seqlen_padded
    else:
        raise ValueError(
            f"unknown attn_implementation {attn_implementation!r}; "
            f"choose one of {HF_ATTENTION_IMPLEMENTATIONS}"
        )
    return kwargs
