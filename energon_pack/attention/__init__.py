# SPDX-License-Identifier: Apache-2.0
"""Attention metadata of packed rows and its kernel adapters (torch only).

From the document lengths of each row, :func:`document_metadata` builds reset position ids,
segment ids, ``cu_seqlens`` and the rest; the adapters turn them into each kernel's arguments
(flash-attn varlen, Megatron-Core ``PackedSeqParams``, FlexAttention ``BlockMask``, a dense
mask, a transformers model's kwargs checked by :func:`check_model`, and
:func:`check_first_batch` for the real model on its first real batch). Example::

    >>> meta = document_metadata([[3, 2, 1]])
    >>> meta.cu_seqlens
    tensor([0, 3, 5, 6], dtype=torch.int32)

Conventions: ``docs/concepts/metadata.md``; kernels and models: ``docs/howto/kernels.md``.
"""

from energon_pack.attention._adapters import (
    block_mask,
    dense_mask,
    flash_attn_kwargs,
    hf_kwargs,
    packed_seq_params,
)
from energon_pack.attention._compat import ModelReport, PackingNotExactError
from energon_pack.attention._context_parallel import cp_partition_indices
from energon_pack.attention._first_batch import FirstBatchReport, check_first_batch
from energon_pack.attention._flex import DEFAULT_BLOCK_SIZE
from energon_pack.attention._masks import LocalAttention
from energon_pack.attention._metadata import (
    DocumentMetadata,
    aligned_lengths,
    document_metadata,
    position_ids_from_lengths,
)
from energon_pack.attention._mrope import (
    MROPE_LAYOUTS,
    frame_runs,
    model_mrope_rows,
    mrope_position_ids,
    xdrope_position_ids,
)
from energon_pack.attention._verify import check_model, cpu_route

__all__ = [
    "MROPE_LAYOUTS",
    "DEFAULT_BLOCK_SIZE",
    "DocumentMetadata",
    "FirstBatchReport",
    "LocalAttention",
    "ModelReport",
    "PackingNotExactError",
    "aligned_lengths",
    "block_mask",
    "check_first_batch",
    "check_model",
    "cp_partition_indices",
    "cpu_route",
    "dense_mask",
    "document_metadata",
    "flash_attn_kwargs",
    "frame_runs",
    "hf_kwargs",
    "model_mrope_rows",
    "mrope_position_ids",
    "xdrope_position_ids",
    "packed_seq_params",
    "position_ids_from_lengths",
]
