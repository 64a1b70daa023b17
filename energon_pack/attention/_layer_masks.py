# SPDX-License-Identifier: Apache-2.0
"""The ``attention_mask`` a transformers model needs for a packed batch, per layer type.

transformers uses a given 4-D mask (or ``BlockMask``) as is for every layer, so a model with
sliding-window or chunked layers must be handed the restricted masks itself:

- all attention layers alike (Llama: full; Mistral / Phi3 / Starcoder2: all sliding): one mask;
- mixed layer types (Gemma 2/3, Cohere2, GPT-OSS, Qwen2/3 with ``use_sliding_window``,
  Llama 4): a mapping ``{"full_attention": ..., "sliding_attention": ...}``, which those
  models accept in place of ``attention_mask`` (checked by ``check_model``);
- flash-attn: no mask (``None``); transformers applies each layer's window inside each
  document of ``cu_seq_lens``.

Example (Gemma 2, window 8, sdpa)::

    report = check_model(model, "sdpa", pack_size=batch.tokens.shape[1])
    masks = hf_attention_mask(report, batch.seq_idx)
    sorted(masks)               # ['full_attention', 'sliding_attention']
    masks["sliding_attention"]  # (B, 1, L, L) bool, document-causal and inside the window
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention._compat import ModelReport
from energon_pack.attention._flex import DEFAULT_BLOCK_SIZE, block_causal_block_mask
from energon_pack.attention._masks import additive_mask
from energon_pack.attention._windows import (
    FULL_ATTENTION,
    LocalAttention,
    document_causal_mask,
)

__all__ = ["hf_attention_mask", "local_attention_mask"]

Mask = torch.Tensor | BlockMask


def local_attention_mask(
    seq_idx: torch.Tensor,
    attn_implementation: str,
    local: LocalAttention = FULL_ATTENTION,
    *,
    blocks: torch.Tensor | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    mask_dtype: torch.dtype = torch.float32,
) -> Mask:
    """One layer type's mask in the form ``attn_implementation`` reads.

    ``"sdpa"``: ``(B, 1, L, L)`` bool; ``"eager"``: the same, additive in ``mask_dtype``;
    ``"flex_attention"``: a ``BlockMask`` built from tiles (no ``L x L`` object). ``blocks``:
    the bidirectional blocks (``bidirectional_blocks``), None for a causal model.
    """
    if attn_implementation == "flex_attention":
        return block_causal_block_mask(seq_idx, block_size=block_size, local=local, blocks=blocks)
    mask = document_causal_mask(seq_idx, local, blocks)
    if attn_implementation == "eager":
        return additive_mask(mask, mask_dtype)
    if attn_implementation == "sdpa":
        return mask
    raise ValueError(
        f"no dense or Flex mask for attn_implementation {attn_implementation!r}; "
        "flash-attn takes cu_seq_lens instead"
    )


def hf_attention_mask(
    report: ModelReport,
    seq_idx: torch.Tensor,
    *,
    blocks: torch.Tensor | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    mask_dtype: torch.dtype = torch.float32,
) -> Mask | dict[str, Mask] | None:
    """The ``attention_mask`` kwarg for the model of ``report`` (see the module docstring).

    ``seq_idx``: ``(B, L)`` slot index per token; ``blocks``: the bidirectional blocks of
    ``report.bidirectional`` (``bidirectional_blocks``). Layer types sharing one restriction
    share one mask object.
    """
    impl = report.attn_implementation
    if impl.startswith("flash_attention"):
        return None
    built: dict[LocalAttention, Mask] = {}
    for local in report.local.values():
        if local not in built:
            built[local] = local_attention_mask(
                seq_idx, impl, local, blocks=blocks, block_size=block_size, mask_dtype=mask_dtype
            )
    if not report.needs_mapping:
        return next(iter(built.values()))
    return {layer_type: built[local] for layer_type, local in report.local.items()}
