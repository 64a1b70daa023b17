# SPDX-License-Identifier: Apache-2.0
"""Attention metadata of packed rows (torch only; megatron-core is imported lazily, if at all).

From the document lengths of each row this package builds reset position ids, segment ids,
``cu_seqlens`` (int32, from 0), ``cu_seqlens_padded``, ``max_seqlen`` (Python int), document
borders, ``seq_idx``, the dense block-causal reference mask, a FlexAttention ``BlockMask`` and
Qwen2-VL-style mRoPE positions; the kernel adapters (flash-attn varlen, Megatron-Core
``PackedSeqParams``, Hugging Face kwargs, ``BlockMask``, dense mask) turn that metadata into each
kernel's arguments. Example::

    >>> meta = document_metadata([[3, 2, 1]])
    >>> meta.position_ids
    tensor([[0, 1, 2, 0, 1, 0]])
    >>> meta.cu_seqlens
    tensor([0, 3, 5, 6], dtype=torch.int32)

See ``docs/concepts/metadata.md`` for the conventions.
"""

from energon_pack.attention._adapters import (
    HF_ATTENTION_IMPLEMENTATIONS,
    block_mask,
    dense_mask,
    flash_attn_kwargs,
    hf_kwargs,
    hf_labels,
    packed_seq_params,
    packed_seq_params_fields,
)
from energon_pack.attention._compat import ModelReport, PackingNotExactError
from energon_pack.attention._context_parallel import cp_partition_indices
from energon_pack.attention._documents import (
    BIDIRECTIONAL,
    DocumentMetadata,
    aligned_lengths,
    bidirectional_blocks,
    document_metadata,
    position_ids_from_lengths,
)
from energon_pack.attention._flex import (
    DEFAULT_BLOCK_SIZE,
    block_causal_block_mask,
    reference_block_mask,
)
from energon_pack.attention._layer_masks import hf_attention_mask, local_attention_mask
from energon_pack.attention._masks import additive_mask, dense_block_causal_mask
from energon_pack.attention._mrope import frame_runs, mrope_position_ids
from energon_pack.attention._verify import check_model
from energon_pack.attention._windows import (
    LAYER_TYPES,
    LocalAttention,
    document_causal_mask,
    flash_window_size,
    local_mask_mod,
    slot_positions,
)

__all__ = [
    "BIDIRECTIONAL",
    "DEFAULT_BLOCK_SIZE",
    "HF_ATTENTION_IMPLEMENTATIONS",
    "LAYER_TYPES",
    "DocumentMetadata",
    "LocalAttention",
    "ModelReport",
    "PackingNotExactError",
    "additive_mask",
    "aligned_lengths",
    "bidirectional_blocks",
    "block_causal_block_mask",
    "block_mask",
    "check_model",
    "cp_partition_indices",
    "dense_block_causal_mask",
    "dense_mask",
    "document_causal_mask",
    "document_metadata",
    "flash_attn_kwargs",
    "flash_window_size",
    "frame_runs",
    "hf_attention_mask",
    "hf_kwargs",
    "hf_labels",
    "local_attention_mask",
    "local_mask_mod",
    "mrope_position_ids",
    "packed_seq_params",
    "packed_seq_params_fields",
    "position_ids_from_lengths",
    "reference_block_mask",
    "slot_positions",
]
