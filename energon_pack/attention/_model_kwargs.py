# SPDX-License-Identifier: Apache-2.0
"""The attention kwargs and positions a transformers model needs, given its ``ModelReport``.

One mask (with the blocks that attend both ways), or a mapping per layer type where the
forward takes one, or flash's varlen offsets; positions as the model makes them for a document
alone. See ``docs/howto/kernels.md``.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention._compat import ModelReport
from energon_pack.attention._implementations import implementation
from energon_pack.attention._masks import LocalAttention
from energon_pack.attention._metadata import DocumentMetadata

__all__ = [
    "BIDIRECTIONAL",
    "bidirectional_blocks",
    "flattened_kwargs",
    "hf_attention_mask",
    "hf_model_kwargs",
]

#: What a model lets attend both ways inside a document, by the name ``bidirectional_blocks``
#: takes: the whole document (encoders, Gemma 3 ``use_bidirectional_attention``), each run of
#: image tokens (``token_type_ids == 1``, Gemma 3 VLM), the prefix (``token_type_ids == 0``,
#: PaliGemma's image + prompt).
BIDIRECTIONAL = ("document", "image_tokens", "prefix")

Mask = torch.Tensor | BlockMask


def bidirectional_blocks(
    segment_ids: torch.Tensor, kind: str, token_type_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, L)`` int64 bidirectional blocks: 0 = causal token, tokens of one block ``k > 0``
    see each other both ways (ids never decrease along a row; never on padding).

    ``segment_ids``: ``(B, L)`` (``DocumentMetadata.segment_ids``); ``kind``: one of
    :data:`BIDIRECTIONAL`; ``token_type_ids``: ``(B, L)`` as the model's processor makes them
    (needed by ``"image_tokens"`` and ``"prefix"``). Example, two documents ``[t i i t | i t]``
    (``i``: ``token_type_ids == 1``) and a pad: ``"image_tokens"`` gives ``0 1 1 0 2 0 0``,
    ``"prefix"`` ``1 0 0 1 0 2 0``, ``"document"`` ``1 1 1 1 2 2 0``. A run of image tokens
    never crosses a document border, as it cannot when each document is run alone.
    """
    if kind not in BIDIRECTIONAL:
        raise ValueError(f"unknown bidirectional kind {kind!r}; choose one of {BIDIRECTIONAL}")
    real = segment_ids > 0
    if kind == "document":
        return segment_ids.clone()
    if token_type_ids is None or token_type_ids.shape != segment_ids.shape:
        got = None if token_type_ids is None else tuple(token_type_ids.shape)
        raise ValueError(
            f"bidirectional {kind!r} blocks need token_type_ids of shape "
            f"{tuple(segment_ids.shape)}, got {got}: give each document the token_type_ids "
            "its processor returns (EncodedSample.token_type_ids)"
        )
    if kind == "prefix":
        return torch.where(real & (token_type_ids == 0), segment_ids, 0)
    image = real & (token_type_ids == 1)
    continues = torch.zeros_like(image)
    continues[:, 1:] = image[:, :-1] & (segment_ids[:, 1:] == segment_ids[:, :-1])
    ids = torch.cumsum(image & ~continues, dim=1)
    return torch.where(image, ids, 0)


def hf_attention_mask(
    report: ModelReport,
    seq_idx: torch.Tensor,
    *,
    blocks: torch.Tensor | None = None,
    mask_dtype: torch.dtype = torch.float32,
) -> Mask | dict[str, Mask] | None:
    """The ``attention_mask`` kwarg for the model of ``report``: per layer type a bool mask
    (sdpa), an additive one in ``mask_dtype`` (eager) or a ``BlockMask`` (flex); one mask, or a
    mapping per layer type where they differ (layer types of one restriction share one
    object); None for flash."""
    impl = implementation(report.attn_implementation)
    if impl.varlen:
        return None
    built: dict[LocalAttention, Mask] = {}
    for local in report.local.values():
        if local not in built:
            built[local] = impl.attention_mask(seq_idx, local, blocks, mask_dtype)
    if not report.needs_mapping:
        return next(iter(built.values()))
    return {layer_type: built[local] for layer_type, local in report.local.items()}


def _flash(cu: torch.Tensor, longest: int) -> dict[str, Any]:
    return {
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def _flash_documents(meta: DocumentMetadata) -> dict[str, Any]:
    """Varlen offsets with each slot's padding as a sequence of its own: a document that
    attends both ways must not see its slot's padding. Slots ``[3, 2 + 2 pads]`` ->
    ``cu_seq_lens = [0, 3, 5, 7]``."""
    bounds = [0]
    for real, slots in zip(meta.doc_lengths, meta.slot_lengths):
        for n, slot in zip(real, slots):
            bounds += [bounds[-1] + n] + ([bounds[-1] + slot] if slot > n else [])
    cu = torch.tensor(bounds, dtype=torch.int32, device=meta.cu_seqlens_padded.device)
    return _flash(cu, max(b - a for a, b in itertools.pairwise(bounds)))


def _model_positions(report: ModelReport, meta: DocumentMetadata, tokens: torch.Tensor) -> Any:
    """The positions the model gives each document alone: reset per slot, plus PaliGemma's
    offset 1, or RoBERTa's rule: non-pad tokens counted from ``padding_idx + 1``, pad tokens
    (and the row's padding) at ``padding_idx``. Example, RoBERTa (``padding_idx=1``), tokens
    ``[5 6 7 | 8 9 | pad]``: ``2 3 4 2 3 1``."""
    pad = report.position_padding_idx
    if pad is None:
        offset = report.position_offset
        return meta.position_ids + offset if offset else meta.position_ids
    counted = ((tokens != pad) & (meta.segment_ids > 0)).to(torch.int64)
    running = counted.cumsum(dim=1)
    # the count before each slot's first token, carried along the slot (it never decreases)
    start = torch.where(meta.position_ids == 0, running - counted, 0).cummax(dim=1).values
    return (running - start) * counted + pad


def hf_model_kwargs(
    meta: DocumentMetadata,
    tokens: torch.Tensor,
    report: ModelReport,
    mask_dtype: torch.dtype = torch.float32,
    token_type_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """``position_ids`` and the attention kwargs (a mask, or flash's varlen offsets) for the
    model of ``report``; for hybrid models (``report.flattened``) see :func:`flattened_kwargs`."""
    if report.flattened:
        return flattened_kwargs(meta, tokens, report, mask_dtype)
    blocks = None
    if report.bidirectional is not None:
        blocks = bidirectional_blocks(meta.segment_ids, report.bidirectional, token_type_ids)
    mask = hf_attention_mask(report, meta.seq_idx, blocks=blocks, mask_dtype=mask_dtype)
    kwargs = {"position_ids": _model_positions(report, meta, tokens)}
    if mask is not None:
        return {**kwargs, "attention_mask": mask}
    if report.bidirectional == "document":
        return {**kwargs, **_flash_documents(meta)}
    return {**kwargs, **_flash(meta.cu_seqlens_padded, meta.max_seqlen_padded)}


def flattened_kwargs(
    meta: DocumentMetadata,
    tokens: torch.Tensor,
    report: ModelReport,
    mask_dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """The batch's packs laid end to end in one ``(1, B*L)`` row, as linear-attention and
    short-conv kernels need it (fla's ``cu_seqlens`` wants batch 1): ``position_ids``
    ``(1, B*L)``, ``seq_idx`` ``(1, B*L)`` int32 (causal-conv1d), ``cu_seq_lens_q/k`` (each
    slot a sequence, a pack's tail padding in its last slot) and ``max_length_q/k`` (fla's
    delta rule, flash attention), and the attention layers' mask over the whole row (sdpa,
    eager, flex; flash: none). Tokens, labels and outputs take the same ``(1, B*L)`` shape.
    Example, packs ``[[3, 2], [4]]`` of 5: ``cu_seq_lens_q = [0, 3, 5, 10]``, ``seq_idx = 0 0 0
    1 1 2 2 2 2 2``."""
    if report.bidirectional is not None:
        raise ValueError("flattened rows are built for causal hybrid models only")
    seq_idx = meta.seq_idx.reshape(1, -1)
    positions = _model_positions(report, meta, tokens).reshape(1, -1)
    impl = implementation(report.attn_implementation)
    kwargs = {"position_ids": positions, "seq_idx": seq_idx.to(torch.int32)}
    kwargs.update(_flash(meta.cu_seqlens_padded, meta.max_seqlen_padded))
    if not impl.varlen:
        built: dict[LocalAttention, Mask] = {}
        for local in report.local.values():
            if local not in built:
                built[local] = impl.attention_mask(seq_idx, local, None, mask_dtype)
        masks = {t: built[x] for t, x in report.local.items()}
        masks.update(dict.fromkeys(report.state_layers))  # those layers take no mask
        one = len(set(report.local.values())) == 1
        kwargs["attention_mask"] = next(iter(built.values())) if one else masks
    return kwargs
