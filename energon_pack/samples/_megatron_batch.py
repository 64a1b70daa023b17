# SPDX-License-Identifier: Apache-2.0
"""``megatron_batch``: the THD micro-batch of a packed batch, by the layout its type declares
(``megatron_layout``): text (``_megatron.py``) or a VLM's (``_megatron_vlm.py``)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from energon_pack.samples._batch import PackedTextBatch
from energon_pack.samples._megatron import MegatronBatch, text_batch
from energon_pack.samples._megatron_vlm import megatron_vlm_batch

__all__ = ["megatron_batch"]

#: ``batch.megatron_layout`` -> the function that builds its micro-batch.
_LAYOUTS: dict[str, Callable[..., MegatronBatch]] = {
    "text": text_batch,
    "vlm": megatron_vlm_batch,
}


def megatron_batch(
    batch: PackedTextBatch,
    *,
    cp_size: int = 1,
    cp_rank: int = 0,
    max_documents: int | None = None,
    device: torch.device | str | None = None,
) -> MegatronBatch:
    """The THD micro-batch of ``batch`` for CP rank ``cp_rank`` of ``cp_size``.

    Args:
        batch: a packed batch on the host; with ``cp_size > 1`` its document slots must be
            multiples of ``2 * cp_size`` (the encoder's ``alignment``).
        cp_size, cp_rank: context parallelism; each rank gets chunks ``r`` and
            ``2 * cp_size - 1 - r`` of every document (:func:`cp_partition_indices`).
        max_documents: static shapes for CUDA graphs (``cu_seqlens_*`` of
            ``max_documents + 1`` entries, ``max_seqlen_*`` = row length).
        device: where the tensors go (``non_blocking``); None: stay where they are.

    A Qwen2/2.5/3-VL batch (:class:`PackedCaptioningBatch` / :class:`PackedMultimodalBatch`
    built with ``mrope=True``) gives a :class:`MegatronVLMBatch`: (3, 1, T) mRoPE positions,
    pixels and grids, image/video token masks and the vision cost; a batch whose family
    declares no Megatron layout (``VisionFamily.megatron_layout``) is refused naming it.
    """
    build = _LAYOUTS[batch.megatron_layout]
    return build(
        batch, cp_size=cp_size, cp_rank=cp_rank, max_documents=max_documents, device=device
    )
