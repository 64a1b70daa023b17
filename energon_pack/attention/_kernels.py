# SPDX-License-Identifier: Apache-2.0
"""Document metadata in the vocabulary of varlen attention kernels (THD layout).

Both adapters describe the batch flattened row-major to ``(B * L, ...)``. Every token belongs to
one slot (a document, its alignment padding, and for a row's last document the row's tail
padding), so the offsets tile the flattened tensor and padding never reaches a real token.

For one row ``doc_lengths=[3, 2, 1]`` padded to ``L = 8``:

- flash-attn ``flash_attn_varlen_func``: ``cu_seqlens_q = cu_seqlens_k = [0, 3, 5, 8]`` (int32,
  slot offsets), ``max_seqlen_q = max_seqlen_k = 3`` (Python int).
- Megatron-Core ``PackedSeqParams``: ``qkv_format="thd"``, ``cu_seqlens_q = cu_seqlens_kv =
  [0, 3, 5, 6]`` (real lengths), ``cu_seqlens_q_padded = cu_seqlens_kv_padded = [0, 3, 5, 8]``
  (offsets in the tensor), ``max_seqlen_q = max_seqlen_kv = 3`` (longest slot, an upper bound
  for both).
"""

from __future__ import annotations

import importlib
from typing import Any

from energon_pack.attention._documents import DocumentMetadata

__all__ = ["flash_attn_kwargs", "packed_seq_params", "packed_seq_params_fields"]


def flash_attn_kwargs(meta: DocumentMetadata) -> dict[str, Any]:
    """Keyword arguments of ``flash_attn_varlen_func`` for the flattened batch.

    Returns ``cu_seqlens_q``/``cu_seqlens_k``: ``(D + 1,)`` int32 slot offsets into ``B * L``
    tokens; ``max_seqlen_q``/``max_seqlen_k``: Python int, the longest slot.
    """
    return {
        "cu_seqlens_q": meta.cu_seqlens_padded,
        "cu_seqlens_k": meta.cu_seqlens_padded,
        "max_seqlen_q": meta.max_seqlen_padded,
        "max_seqlen_k": meta.max_seqlen_padded,
    }


def packed_seq_params_fields(meta: DocumentMetadata) -> dict[str, Any]:
    """The fields of Megatron-Core's ``PackedSeqParams`` as a plain dict (see module docs)."""
    return {
        "qkv_format": "thd",
        "cu_seqlens_q": meta.cu_seqlens,
        "cu_seqlens_kv": meta.cu_seqlens,
        "cu_seqlens_q_padded": meta.cu_seqlens_padded,
        "cu_seqlens_kv_padded": meta.cu_seqlens_padded,
        "max_seqlen_q": meta.max_seqlen_padded,
        "max_seqlen_kv": meta.max_seqlen_padded,
    }


def packed_seq_params(meta: DocumentMetadata) -> Any:
    """Megatron-Core ``PackedSeqParams`` when ``megatron.core`` is importable, else the dict.

    ``cu_seqlens_*``: ``(D + 1,)`` int32; ``max_seqlen_*``: Python int.
    """
    fields = packed_seq_params_fields(meta)
    try:
        module = importlib.import_module("megatron.core.packed_seq_params")
    except ImportError:
        return fields
    return module.PackedSeqParams(**fields)
