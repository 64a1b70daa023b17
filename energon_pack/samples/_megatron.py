# SPDX-License-Identifier: Apache-2.0
"""A packed batch as Megatron-Core's THD micro-batch (micro-batch size 1: the ``B`` rows become
one ``(1, T)`` row, ``T = B * L``, described by ``PackedSeqParams``): what ``get_batch``
returns to ``forward_step``. With context parallelism each rank gets its ``T / CP`` positions;
``PackedSeqParams`` stay global, as Transformer Engine wants. See docs/howto/trainers.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from energon_pack.attention import cp_partition_indices, packed_seq_params
from energon_pack.samples._batch import (
    PackedTextBatch,
    refuse_bidirectional,
)
from energon_pack.samples._packed import IGNORE_INDEX

__all__ = ["MegatronBatch", "text_batch"]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class MegatronBatch:
    """One THD micro-batch in Megatron's vocabulary, built on the host (no device sync)."""

    #: (1, T) int64 input ids (T / CP with context parallelism).
    tokens: torch.Tensor
    #: (1, T) int64 aligned targets; 0 where ``loss_mask`` is 0 (an in-vocabulary id).
    labels: torch.Tensor
    #: (1, T) float32, 1.0 where the position has a target.
    loss_mask: torch.Tensor
    #: (1, T) int64 positions reset per document; (3, 1, T) mRoPE rows in a
    #: :class:`MegatronVLMBatch` (what ``MultimodalRotaryEmbedding`` reads).
    position_ids: torch.Tensor
    #: (1, T) bool, True on alignment and tail padding: ``GPTModel(padding_mask=...)`` keeps
    #: it out of MoE routing.
    padding_mask: torch.Tensor
    #: Megatron-Core ``PackedSeqParams`` of the whole batch (a dict without megatron-core).
    packed_seq_params: Any
    #: Targets in this micro-batch on this rank (``loss_mask.sum()``), a Python int: the count
    #: ``calculate_per_token_loss`` sums over micro-batches and ranks.
    num_tokens: int


def text_batch(
    batch: PackedTextBatch,
    cp_size: int,
    cp_rank: int,
    max_documents: int | None,
    device: torch.device | str | None,
) -> MegatronBatch:
    """:func:`~energon_pack.samples.megatron_batch` of the text part of ``batch`` (1-row
    positions)."""
    refuse_bidirectional(batch, "megatron_batch()")
    rows = {
        "tokens": batch.tokens,
        "labels": batch.labels,
        "position_ids": batch.position_ids,
        "padding_mask": batch.segment_ids == 0,
    }
    flat = {name: t.reshape(-1) for name, t in rows.items()}
    if cp_size > 1:
        index = cp_partition_indices(batch.cu_seqlens_padded, cp_size, cp_rank)
        flat = {name: t[index] for name, t in flat.items()}
    target = flat["labels"] != IGNORE_INDEX
    out = {
        "tokens": flat["tokens"],
        "labels": torch.where(target, flat["labels"], 0),
        "loss_mask": target.to(torch.float32),
        "position_ids": flat["position_ids"],
        "padding_mask": flat["padding_mask"],
    }
    meta = batch.metadata
    if device is not None:
        out = {name: t.to(device, non_blocking=True) for name, t in out.items()}
        meta = meta.to(device, non_blocking=True)
    return MegatronBatch(
        **{name: t.unsqueeze(0) for name, t in out.items()},
        packed_seq_params=packed_seq_params(meta, max_documents=max_documents),
        num_tokens=int(target.sum()),
    )
