# SPDX-License-Identifier: Apache-2.0
"""A packed VLM batch as Megatron's THD micro-batch (layout ``"mrope_patch_rows"``: Qwen2/2.5/3-VL's):
the text part of :func:`~energon_pack.samples.megatron_batch`, the ``(3, 1, T)`` mRoPE rows
per document (what megatron-core's ``MultimodalRotaryEmbedding`` reads), the pixels and grids
in pack order, the image/video token masks, and the vision cost of each pack. A family says
whether its batches take a layout (``VisionFamily.megatron_layout``, carried by its documents
as ``family``); one that declares none is refused naming it. See docs/howto/trainers.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from energon_pack.attention import cp_partition_indices
from energon_pack.samples._batch import (
    PackedCaptioningBatch,
    PackedMultimodalBatch,
    refuse_bidirectional,
)
from energon_pack.samples._megatron import MegatronBatch, text_batch

__all__ = [
    "MEGATRON_VLM_LAYOUTS",
    "MegatronVLMBatch",
    "VisionCost",
    "attention_flops",
    "bridge_vlm_batch",
    "megatron_vlm_batch",
]


def attention_flops(pairs: int, hidden_size: int, num_layers: int) -> int:
    """Forward FLOPs of the attention products (``QK^T`` and ``AV``, full blocks) over
    ``pairs`` query-key pairs: ``4 * hidden_size * pairs * num_layers``. With ``pairs`` the sum
    of squared document lengths this is the packed cost (Megatron-Bridge#3839), not ``L^2``."""
    return 4 * hidden_size * pairs * num_layers


@dataclass(frozen=True, kw_only=True, slots=True)
class VisionCost:
    """What one batch costs, per pack (row), for Bridge-style accounting."""

    #: Vision patches (``sum(t * h * w)`` of the row's images and videos) per pack: the ViT's
    #: tokens before the spatial merge.
    patches: list[int]
    #: ``sum(s^2)`` over the ViT's attention sequences per pack: each temporal patch of each
    #: item attends within its ``h * w`` patches (Qwen-VL's vision ``cu_seqlens``).
    vision_attention_pairs: list[int]
    #: ``sum(len^2)`` over the documents of each pack (the language model's packed attention).
    text_attention_pairs: list[int]
    #: ``L^2`` per pack: what the row would cost as one document (unpacked accounting).
    padded_attention_pairs: list[int]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class MegatronVLMBatch(MegatronBatch):
    """:class:`MegatronBatch` with ``position_ids`` of shape ``(3, 1, T)`` and the media."""

    #: (rows, patch_dim) the batch's image patch rows in row-major pack order (whole on
    #: every CP rank: the vision tower runs before the split).
    pixel_values: torch.Tensor
    #: (num_images, 3) int64 (t, h, w) per image, in the order of ``pixel_values``.
    image_grid_thw: torch.Tensor
    #: (1, T) bool, True on image placeholder tokens (where the merged vision embeddings go).
    image_token_mask: torch.Tensor
    #: Video patch rows, grids, per-grid seconds and token mask, or None (no videos).
    pixel_values_videos: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None
    second_per_grid_ts: torch.Tensor | None = None
    video_token_mask: torch.Tensor | None = None
    #: Patches and attention pairs per pack (host ints).
    vision_cost: VisionCost


#: The Megatron VLM layouts :func:`megatron_vlm_batch` builds, by the name a VLM family
#: declares (``VisionFamily.megatron_layout``), with what such a batch holds.
MEGATRON_VLM_LAYOUTS = {
    "mrope_patch_rows": "patch rows (rows, patch_dim) with image_grid_thw and 3-row mRoPE "
    "positions, as megatron-core's MultimodalRotaryEmbedding and Megatron-Bridge's Qwen-VL "
    "models read them",
}


def _layouts() -> str:
    return "; ".join(f"{name!r} ({what})" for name, what in MEGATRON_VLM_LAYOUTS.items())


def _refuse_other_layouts(batch: PackedCaptioningBatch) -> None:
    """A batch whose family declares no Megatron layout is refused naming it; any batch
    (families' or built by hand) must hold what the layout holds and nothing it would drop."""
    refuse_bidirectional(batch, "megatron_batch()")
    family = batch.family
    if family is not None and family.megatron_layout not in MEGATRON_VLM_LAYOUTS:
        declared = (
            "declares no Megatron layout (megatron_layout=None)"
            if family.megatron_layout is None
            else f"declares Megatron layout {family.megatron_layout!r}, which is not built here"
        )
        raise ValueError(
            f"megatron_batch(): this batch's documents come from the {family.name} family, which "
            f"{declared}: Megatron's VLM micro-batch would not carry its pixels, positions or "
            f"inputs as its model reads them. Layouts built: {_layouts()}. Use "
            "batch.hf_kwargs(impl, config=model) for this family."
        )
    inputs = ("moe_mm_token_type_ids", "image_sizes", "batch_num_images")
    dropped = [f"{n} (which its model reads)" for n in inputs if getattr(batch, n) is not None]
    if batch.pixel_values.dim() != 2:
        dropped.append(f"pixel_values of shape {tuple(batch.pixel_values.shape)}, not patch rows")
    mrope = batch.mrope_position_ids
    if mrope is not None and mrope.shape[0] != 3:
        dropped.append(f"{mrope.shape[0]}-row mRoPE positions")
    if dropped:
        raise ValueError(
            f"megatron_batch(): this batch has {', '.join(dropped)}, which no Megatron VLM "
            f"layout carries (layouts built: {_layouts()}). Use batch.hf_kwargs(impl, "
            "config=model) for this batch."
        )
    if mrope is None:
        raise ValueError(
            "megatron_batch(): this batch has no mRoPE positions; build its packs with "
            "mrope=True (the encoder's mrope=True) so each document gets its 3-row positions"
        )


def _placeholder_mask(tokens: torch.Tensor, spans: torch.Tensor) -> torch.Tensor:
    """(T,) bool, True on the placeholders of the ``[start, end)`` spans of the flat ``tokens``.

    A span runs from an item's first placeholder to its last and may hold text between them: a
    Qwen3-VL video's ``<t seconds> <|vision_start|>`` between its frame groups. Only the tokens
    equal to the span's first one (its placeholder) are marked."""
    mask = torch.zeros(tokens.numel(), dtype=torch.bool, device=tokens.device)
    for start, end in spans.view(-1, 2).tolist():
        mask[start:end] = tokens[start:end] == tokens[start]
    return mask


def vision_cost(batch: PackedCaptioningBatch) -> VisionCost:
    """The :class:`VisionCost` of ``batch`` (host ints)."""
    rows, length = batch.tokens.shape
    patches, vision = [0] * rows, [0] * rows
    media = [(batch.image_spans, batch.image_grid_thw)]
    if isinstance(batch, PackedMultimodalBatch):
        media.append((batch.video_spans, batch.video_grid_thw))
    for spans, grids in media:
        for (start, _), (t, h, w) in zip(spans.view(-1, 2).tolist(), grids.view(-1, 3).tolist()):
            patches[start // length] += t * h * w
            vision[start // length] += t * (h * w) ** 2
    return VisionCost(
        patches=patches,
        vision_attention_pairs=vision,
        text_attention_pairs=[sum(n * n for n in row) for row in batch.doc_lengths],
        padded_attention_pairs=[length * length] * rows,
    )


def megatron_vlm_batch(
    batch: PackedCaptioningBatch,
    *,
    cp_size: int = 1,
    cp_rank: int = 0,
    max_documents: int | None = None,
    device: torch.device | str | None = None,
) -> MegatronVLMBatch:
    """:func:`~energon_pack.samples.megatron_batch` of a VLM batch (its arguments) whose family
    declares a layout of :data:`MEGATRON_VLM_LAYOUTS` (or built by hand in that layout)."""
    _refuse_other_layouts(batch)
    text = text_batch(batch, cp_size, cp_rank, max_documents, device)
    size, flat = batch.tokens.numel(), batch.tokens.reshape(-1)
    assert batch.mrope_position_ids is not None
    rows = {
        "position_ids": batch.mrope_position_ids.reshape(3, size),
        "image_token_mask": _placeholder_mask(flat, batch.image_spans).view(1, size),
    }
    videos = isinstance(batch, PackedMultimodalBatch) and len(batch.video_grid_thw) > 0
    if videos:
        rows["video_token_mask"] = _placeholder_mask(flat, batch.video_spans).view(1, size)
    if cp_size > 1:
        index = cp_partition_indices(batch.cu_seqlens_padded, cp_size, cp_rank)
        rows = {name: t[:, index] for name, t in rows.items()}
    out = {name: t.unsqueeze(1) for name, t in rows.items()}
    out["image_token_mask"] = rows["image_token_mask"]
    out |= {"pixel_values": batch.pixel_values, "image_grid_thw": batch.image_grid_thw}
    if videos:
        assert isinstance(batch, PackedMultimodalBatch)
        out["video_token_mask"] = rows["video_token_mask"]
        out["pixel_values_videos"] = batch.pixel_values_videos
        out["video_grid_thw"] = batch.video_grid_thw
        out["second_per_grid_ts"] = batch.video_second_per_grid
    if device is not None:
        out = {name: t.to(device, non_blocking=True) for name, t in out.items()}
    inherited = {f.name: getattr(text, f.name) for f in fields(MegatronBatch)}
    return MegatronVLMBatch(**(inherited | out), vision_cost=vision_cost(batch))


#: The media fields of Megatron-Bridge's ``GenericVisualInputs`` that a Qwen-VL batch fills.
_VISUAL_FIELDS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_values_videos",
    "video_grid_thw",
    "second_per_grid_ts",
)
#: The ``PackedSeqParams`` fields Megatron-Bridge's VLM ``get_batch`` reads as batch keys.
_PACKED_FIELDS = (
    "cu_seqlens_q",
    "cu_seqlens_kv",
    "cu_seqlens_q_padded",
    "cu_seqlens_kv_padded",
    "max_seqlen_q",
    "max_seqlen_kv",
)


def bridge_vlm_batch(
    mb: MegatronVLMBatch, visual_inputs: Callable[..., Any] = dict
) -> dict[str, Any]:
    """``mb`` as the dict Megatron-Bridge's VLM step takes from its data iterator.

    Read in megatron-bridge 0.6.2 (``training/vlm_step.py`` ``get_batch_from_iterator``; Qwen-VL
    models in ``models/qwen_vl/``): ``tokens``, ``labels``, ``loss_mask``, ``position_ids``,
    ``attention_mask`` (None: THD), the ``PackedSeqParams`` fields as keys (``cu_seqlens_q/kv``,
    ``cu_seqlens_q/kv_padded``, ``max_seqlen_q/kv``, rebuilt by its ``get_packed_seq_params``)
    and ``visual_inputs``: ``visual_inputs(pixel_values=..., image_grid_thw=..., ...)`` with the
    batch's media (pass Bridge's ``GenericVisualInputs``: its step moves the fields of that
    object to the GPU). Bridge's Qwen-VL models split the sequence for context parallelism
    themselves and recompute the mRoPE rows per document from ``tokens`` and the grids, so
    ``mb`` must be the whole batch (``cp_size=1``); a CP share is refused. Build it on the host
    (no ``device``): Bridge's step moves the tensors to the GPU itself.
    """
    params = mb.packed_seq_params
    params = params if isinstance(params, dict) else {f: getattr(params, f) for f in _PACKED_FIELDS}
    total = int(params["cu_seqlens_q_padded"][-1])
    if mb.tokens.shape[1] != total:
        raise ValueError(
            f"bridge_vlm_batch(): this micro-batch holds {mb.tokens.shape[1]} of the batch's "
            f"{total} tokens (a context-parallel share); Megatron-Bridge's VLM models split the "
            "sequence themselves: build it with megatron_batch(batch) (cp_size=1)"
        )
    media = {name: getattr(mb, name) for name in _VISUAL_FIELDS}
    return {
        "tokens": mb.tokens,
        "labels": mb.labels,
        "loss_mask": mb.loss_mask,
        "position_ids": mb.position_ids,
        "attention_mask": None,
        **{name: params[name] for name in _PACKED_FIELDS},
        "visual_inputs": visual_inputs(**{k: v for k, v in media.items() if v is not None}),
    }
