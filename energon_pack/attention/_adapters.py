# SPDX-License-Identifier: Apache-2.0
"""Kernel adapters: :class:`DocumentMetadata` in the vocabulary of each attention kernel.

Every adapter is a function of the metadata (and of the tokens / labels where the kernel's
caller wants them); the batch types' methods (``batch.flash_attn_kwargs()``, ...) forward here.
All describe the batch flattened row-major to ``(B * L, ...)``: every token belongs to one slot
(a document, its alignment padding, and for a row's last document the row's tail padding), so
the offsets tile the flattened tensor and padding never reaches a real token.

For one row ``doc_lengths=[3, 2, 1]`` padded to ``L = 8``:

- flash-attn ``flash_attn_varlen_func`` (:func:`flash_attn_kwargs`): ``cu_seqlens_q =
  cu_seqlens_k = [0, 3, 5, 8]`` (int32 slot offsets), ``max_seqlen_q = max_seqlen_k = 3``
  (Python int, the longest slot).
- Megatron-Core ``PackedSeqParams`` (:func:`packed_seq_params`): ``qkv_format="thd"``,
  ``cu_seqlens_q = cu_seqlens_kv = [0, 3, 5, 6]`` (real lengths), ``cu_seqlens_q_padded =
  cu_seqlens_kv_padded = [0, 3, 5, 8]`` (offsets in the tensor), ``max_seqlen_q =
  max_seqlen_kv = 3`` (longest slot, an upper bound for both).
- FlexAttention (:func:`block_mask`): the document-causal ``BlockMask`` ``(B, 1, L, L)``.
- SDPA / eager reference (:func:`dense_mask`): the ``(B, 1, L, L)`` bool block-causal mask, the
  only ``L x L`` object, built on request.
- Hugging Face transformers (:func:`hf_kwargs`, given the model): ``input_ids``, the reset
  ``position_ids``, ``labels`` shifted for HF's loss, and per ``attn_implementation`` (for a
  causal full-attention model; windows, chunks, blocks: :func:`hf_model_kwargs`): ``"sdpa"`` the
  bool mask (transformers passes any 4-D mask through);
  ``"eager"`` the same as an additive float mask (0 / dtype minimum, eager *adds* the mask);
  ``"flex_attention"`` the ``BlockMask``; ``"flash_attention_2"`` / ``"flash_attention_3"`` no
  mask but ``cu_seq_lens_q/k`` (int32 slot offsets) and ``max_length_q/k`` (the padding-free
  path).

HF labels: HF's causal-LM loss shifts ``labels`` left by one itself, so we pass our aligned
targets shifted *right* by one (-100 in column 0). Example, one row ``[5, 6, 7 | 8, 9]``::

    our labels    6  7 -100  9 -100       (target of each position)
    HF labels  -100  6    7 -100   9      (HF drops column 0 and compares logits[i] to col i+1)

HF's loss is then the mean over every target of the batch, i.e. the token-weighted mean of the
per-document losses (tested against per-document runs).
"""

from __future__ import annotations

import functools
import importlib
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention._compat import ModelReport
from energon_pack.attention._documents import DocumentMetadata, bidirectional_blocks
from energon_pack.attention._flex import DEFAULT_BLOCK_SIZE, block_causal_block_mask
from energon_pack.attention._layer_masks import hf_attention_mask
from energon_pack.attention._masks import additive_mask, dense_block_causal_mask
from energon_pack.attention._windows import LocalAttention, flash_window_size

__all__ = [
    "HF_ATTENTION_IMPLEMENTATIONS",
    "block_mask",
    "dense_mask",
    "flash_attn_kwargs",
    "hf_kwargs",
    "hf_labels",
    "hf_model_kwargs",
    "packed_seq_params",
    "packed_seq_params_fields",
]


def flash_attn_kwargs(
    meta: DocumentMetadata, *, sliding_window: int | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``flash_attn_varlen_func`` for the flattened batch.

    Returns ``cu_seqlens_q``/``cu_seqlens_k``: ``(D + 1,)`` int32 slot offsets into ``B * L``
    tokens; ``max_seqlen_q``/``max_seqlen_k``: Python int, the longest slot. With
    ``sliding_window=W`` (transformers' meaning: the query and ``W - 1`` keys before it) also
    ``window_size=(W - 1, 0)``, which flash-attn applies inside each document.
    """
    kwargs: dict[str, Any] = {
        "cu_seqlens_q": meta.cu_seqlens_padded,
        "cu_seqlens_k": meta.cu_seqlens_padded,
        "max_seqlen_q": meta.max_seqlen_padded,
        "max_seqlen_k": meta.max_seqlen_padded,
    }
    if sliding_window is not None:
        kwargs["window_size"] = flash_window_size(LocalAttention(window=sliding_window))
    return kwargs


def packed_seq_params_fields(
    meta: DocumentMetadata, *, max_documents: int | None = None
) -> dict[str, Any]:
    """The fields of Megatron-Core's ``PackedSeqParams`` as a plain dict (see module docs).

    ``max_documents=N`` gives static shapes for CUDA graphs: every ``cu_seqlens_*`` has
    ``N + 1`` entries (the last offset repeated: empty documents) and ``max_seqlen_*`` is the
    row length ``L``. Row ``[3, 2, 1]`` of ``L = 8`` with ``N = 5``: ``cu_seqlens_q_padded =
    [0, 3, 5, 8, 8, 8]``, ``max_seqlen_q = 8``.
    """
    cu, cu_padded, longest = meta.cu_seqlens, meta.cu_seqlens_padded, meta.max_seqlen_padded
    if max_documents is not None:
        documents = len(cu) - 1
        if documents > max_documents:
            raise ValueError(
                f"the batch holds {documents} documents, more than max_documents={max_documents} "
                "(static CUDA-graph metadata); raise max_documents"
            )
        cu, cu_padded = (
            torch.cat([c, c[-1:].expand(max_documents - documents)]) for c in (cu, cu_padded)
        )
        longest = meta.seq_idx.shape[1]
    return {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "cu_seqlens_q_padded": cu_padded,
        "cu_seqlens_kv_padded": cu_padded,
        "max_seqlen_q": longest,
        "max_seqlen_kv": longest,
    }


def packed_seq_params(meta: DocumentMetadata, *, max_documents: int | None = None) -> Any:
    """Megatron-Core ``PackedSeqParams`` when ``megatron.core`` is importable, else the dict.

    ``cu_seqlens_*``: ``(D + 1,)`` int32 (``(max_documents + 1,)`` with static shapes, see
    :func:`packed_seq_params_fields`); ``max_seqlen_*``: Python int.
    """
    fields = packed_seq_params_fields(meta, max_documents=max_documents)
    cls = _packed_seq_params_class()
    return fields if cls is None else cls(**fields)


@functools.cache
def _packed_seq_params_class() -> Any:
    """Megatron-Core's ``PackedSeqParams`` or None; looked up once (a failed import costs
    ~30 us, every training step)."""
    try:
        return importlib.import_module("megatron.core.packed_seq_params").PackedSeqParams
    except ImportError:
        return None


def block_mask(meta: DocumentMetadata, *, block_size: int = DEFAULT_BLOCK_SIZE) -> BlockMask:
    """FlexAttention document-causal ``BlockMask`` of shape ``(B, 1, L, L)``, O(L) memory."""
    return block_causal_block_mask(meta.seq_idx, block_size=block_size)


def dense_mask(meta: DocumentMetadata) -> torch.Tensor:
    """``(B, 1, L, L)`` bool block-causal mask (True = may attend), on the metadata's device.

    Costs ``B * L^2`` bytes. ``dense_mask(document_metadata([[2, 1]]))[0, 0]`` is
    ``[[1, 0, 0], [1, 1, 0], [0, 0, 1]]``.
    """
    mask = dense_block_causal_mask(meta.slot_lengths, meta.seq_idx.shape[1])
    return mask.to(meta.seq_idx.device)


def hf_labels(labels: torch.Tensor) -> torch.Tensor:
    """Shift aligned targets ``(B, L)`` right by one: the ``labels`` HF's loss expects."""
    out = torch.full_like(labels, -100)
    out[:, 1:] = labels[:, :-1]
    return out


def _hf_sdpa(meta: DocumentMetadata, *, mask_dtype: torch.dtype) -> dict[str, Any]:
    return {"attention_mask": dense_mask(meta)}


def _hf_eager(meta: DocumentMetadata, *, mask_dtype: torch.dtype) -> dict[str, Any]:
    return {"attention_mask": additive_mask(dense_mask(meta), mask_dtype)}


def _hf_flex(meta: DocumentMetadata, *, mask_dtype: torch.dtype) -> dict[str, Any]:
    return {"attention_mask": block_mask(meta)}


def _hf_flash(meta: DocumentMetadata, *, mask_dtype: torch.dtype) -> dict[str, Any]:
    return {
        "cu_seq_lens_q": meta.cu_seqlens_padded,
        "cu_seq_lens_k": meta.cu_seqlens_padded,
        "max_length_q": meta.max_seqlen_padded,
        "max_length_k": meta.max_seqlen_padded,
    }


def _hf_flash_documents(meta: DocumentMetadata) -> dict[str, Any]:
    """Varlen offsets with each slot's padding as a sequence of its own: a document that
    attends both ways (``causal=False``) must not see the padding its slot holds. Slots
    ``[3, 2 + 2 pads]`` -> ``cu_seq_lens = [0, 3, 5, 7]``."""
    bounds = [0]
    for real, slots in zip(meta.doc_lengths, meta.slot_lengths):
        for n, slot in zip(real, slots):
            bounds += [bounds[-1] + n] + ([bounds[-1] + slot] if slot > n else [])
    cu = torch.tensor(bounds, dtype=torch.int32, device=meta.cu_seqlens_padded.device)
    longest = max(b - a for a, b in itertools.pairwise(bounds))
    return {
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def _model_positions(report: ModelReport, meta: DocumentMetadata, tokens: torch.Tensor) -> Any:
    """The positions the model gives each document alone: reset per slot, plus PaliGemma's
    offset 1, or RoBERTa's rule: non-pad tokens counted from ``padding_idx + 1``, pad tokens
    (and the row's padding) at ``padding_idx``. Example, RoBERTa (``padding_idx=1``), tokens
    ``[5 6 7 | 8 9 | pad]``: ``2 3 4 2 3 1``."""
    pad = report.position_padding_idx
    if pad is None:
        return meta.position_ids + report.position_offset
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
    """The attention kwargs and positions for the model of ``report`` (``check_model``'s)."""
    blocks = None
    if report.bidirectional is not None:
        blocks = bidirectional_blocks(meta.segment_ids, report.bidirectional, token_type_ids)
    mask = hf_attention_mask(report, meta.seq_idx, blocks=blocks, mask_dtype=mask_dtype)
    kwargs = {"position_ids": _model_positions(report, meta, tokens)}
    if mask is None:  # flash: transformers applies each layer's window per document
        if report.bidirectional == "document":
            return {**kwargs, **_hf_flash_documents(meta)}
        return {**kwargs, **_hf_flash(meta, mask_dtype=mask_dtype)}
    return {**kwargs, "attention_mask": mask}


#: ``attn_implementation`` -> the attention kwargs of a transformers model for it (a mask, or
#: the varlen offsets); :func:`hf_kwargs` adds ``input_ids``, ``position_ids`` and ``labels``.
_HF_ATTENTION: dict[str, Callable[..., dict[str, Any]]] = {
    "sdpa": _hf_sdpa,
    "eager": _hf_eager,
    "flex_attention": _hf_flex,
    "flash_attention_2": _hf_flash,
    "flash_attention_3": _hf_flash,
}
#: The ``attn_implementation`` values :func:`hf_kwargs` accepts.
HF_ATTENTION_IMPLEMENTATIONS = tuple(_HF_ATTENTION)
_REQUIRED: Any = object()


def hf_kwargs(
    meta: DocumentMetadata,
    tokens: torch.Tensor,
    labels: torch.Tensor | None = None,
    attn_implementation: str = "sdpa",
    *,
    mask_dtype: torch.dtype = torch.float32,
    config: Any = _REQUIRED,
    token_type_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Kwargs for ``model(**...)`` of a transformers causal LM (see the module docstring).

    ``config`` is required: the model (or ``model.config``) makes the kwargs exact for that
    architecture, checked by :func:`check_model` (cached): a mapping per layer type where the
    model takes one, a windowed or chunked mask where it takes one mask, or
    :class:`PackingNotExactError` naming the mechanism. ``config=None`` opts out: every layer
    gets the document-causal mask, unchecked, exact only for causal full-attention models (a
    sliding-window Mistral differs by ~0.2).

    Args:
        meta: the batch's document metadata.
        tokens: ``(B, L)`` int64 token ids (``input_ids``).
        labels: ``(B, L)`` aligned targets, passed shifted for HF's loss; None: no labels.
        attn_implementation: one of :data:`HF_ATTENTION_IMPLEMENTATIONS`, as the model was
            loaded.
        mask_dtype: dtype of the eager additive mask.
        config: the model or its config (None: full attention only, unchecked; see above): also
            its bidirectional blocks (encoders, Gemma 3 image tokens, PaliGemma's prefix) and
            its own positions (PaliGemma from 1, RoBERTa from ``padding_idx + 1``).
        token_type_ids: ``(B, L)`` as the model's processor makes them, for models whose
            mask reads them (Gemma 3 VLM, PaliGemma); the mask holds them, so they are not
            passed on.
    """
    attention = _HF_ATTENTION.get(attn_implementation)
    if attention is None:
        raise ValueError(
            f"unknown attn_implementation {attn_implementation!r}; "
            f"choose one of {HF_ATTENTION_IMPLEMENTATIONS}"
        )
    if config is _REQUIRED:
        raise TypeError(
            "hf_kwargs needs config=model (or model.config): the masks depend on the model "
            "(sliding windows, chunks, bidirectional blocks) and check_model refuses models "
            "packing would change; config=None gives every layer the document-causal mask, "
            "unchecked (exact only for causal full-attention models)"
        )
    kwargs: dict[str, Any] = {"input_ids": tokens, "position_ids": meta.position_ids}
    if labels is not None:
        kwargs["labels"] = hf_labels(labels)
    if config is None:
        kwargs.update(attention(meta, mask_dtype=mask_dtype))
    else:  # check_model runs an experiment built on these adapters: imported here
        from energon_pack.attention._verify import check_model

        report = check_model(config, attn_implementation, pack_size=meta.seq_idx.shape[1])
        kwargs.update(hf_model_kwargs(meta, tokens, report, mask_dtype, token_type_ids))
    return kwargs
