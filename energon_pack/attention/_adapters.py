# SPDX-License-Identifier: Apache-2.0
"""Kernel adapters: :class:`DocumentMetadata` in the vocabulary of each attention kernel.

All describe the batch flattened row-major to ``(B * L, ...)``, which the slots tile; the batch
methods (``batch.flash_attn_kwargs()``, ...) forward here. See ``docs/concepts/metadata.md``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention._compat import ModelReport
from energon_pack.attention._flex import DEFAULT_BLOCK_SIZE, block_causal_block_mask
from energon_pack.attention._masks import (
    FULL_ATTENTION,
    LocalAttention,
    document_causal_mask,
    flash_window_size,
)
from energon_pack.attention._metadata import DocumentMetadata
from energon_pack.attention._model_kwargs import hf_model_kwargs
from energon_pack.attention._mrope import model_mrope_rows
from energon_pack.attention._verify import IMPLEMENTATIONS, check_model

__all__ = [
    "block_mask",
    "dense_mask",
    "flash_attn_kwargs",
    "hf_kwargs",
    "hf_labels",
    "packed_seq_params",
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


def packed_seq_params(meta: DocumentMetadata, *, max_documents: int | None = None) -> Any:
    """Megatron-Core ``PackedSeqParams`` (or its fields as a dict without ``megatron.core``).

    ``qkv_format="thd"``; ``cu_seqlens_q/kv``: ``(D + 1,)`` int32 real lengths;
    ``cu_seqlens_q/kv_padded``: the slot offsets; ``max_seqlen_q/kv``: Python int, the longest
    slot. ``max_documents=N`` gives static shapes for CUDA graphs: every ``cu_seqlens_*`` has
    ``N + 1`` entries (the last offset repeated: empty documents) and ``max_seqlen_*`` is the
    row length ``L``.

    Where the installed ``PackedSeqParams`` has ``seq_idx`` (megatron-core 0.19), it is set:
    ``(1, B * L)`` int32, the slot of each token (``[0, 0, 0, 1, 1, 2, 2, 2]`` for slots 3, 2,
    3), with ``total_tokens = B * L``. Its Mamba layers read ``seq_idx`` and nothing else to
    keep documents apart, and megatron-core computes it only when ``total_tokens`` is passed;
    here it is the metadata's own (no device work), equal to what ``__post_init__`` computes.
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
    fields = {
        "qkv_format": "thd",
        "cu_seqlens_q": cu,
        "cu_seqlens_kv": cu,
        "cu_seqlens_q_padded": cu_padded,
        "cu_seqlens_kv_padded": cu_padded,
        "max_seqlen_q": longest,
        "max_seqlen_kv": longest,
    }
    cls = _packed_seq_params_class()
    if cls is None:
        return fields
    params = cls(**fields)
    if hasattr(params, "seq_idx"):  # set after __post_init__, which would recompute it
        params.seq_idx = meta.seq_idx.reshape(1, -1)
        params.total_tokens = meta.seq_idx.numel()
    return params


@functools.cache
def _packed_seq_params_class() -> Any:
    """Megatron-Core's ``PackedSeqParams``, or None where megatron-core is not installed;
    looked up once (not at every step). An installed megatron-core that fails to import is
    an error, not a dict: its model would not take one."""
    try:
        return importlib.import_module("megatron.core.packed_seq_params").PackedSeqParams
    except ImportError as error:
        try:
            installed = importlib.util.find_spec("megatron.core") is not None
        except ImportError:
            installed = False
        if not installed:
            return None
        raise ImportError(
            f"megatron-core is installed but megatron.core.packed_seq_params does not import "
            f"({error}); install what it names (megatron-core 0.17 and later import triton) "
            "or uninstall megatron-core to get PackedSeqParams' fields as a dict"
        ) from error


def block_mask(meta: DocumentMetadata, *, block_size: int = DEFAULT_BLOCK_SIZE) -> BlockMask:
    """FlexAttention document-causal ``BlockMask`` of shape ``(B, 1, L, L)``, O(L) memory."""
    return block_causal_block_mask(meta.seq_idx, block_size=block_size)


def dense_mask(meta: DocumentMetadata) -> torch.Tensor:
    """``(B, 1, L, L)`` bool block-causal mask (True = may attend), on the metadata's device.

    Costs ``B * L^2`` bytes. ``dense_mask(document_metadata([[2, 1]]))[0, 0]`` is
    ``[[1, 0, 0], [1, 1, 0], [0, 0, 1]]``.
    """
    return document_causal_mask(meta.seq_idx)


def hf_labels(labels: torch.Tensor) -> torch.Tensor:
    """Aligned targets ``(B, L)`` shifted right by one (-100 in column 0): HF's causal-LM loss
    shifts ``labels`` left by one itself, so it then compares each logit with our target."""
    out = torch.full_like(labels, -100)
    out[:, 1:] = labels[:, :-1]
    return out


_REQUIRED: Any = object()


def hf_kwargs(
    meta: DocumentMetadata,
    tokens: torch.Tensor,
    labels: torch.Tensor | None = None,
    attn_implementation: str | None = None,
    *,
    mask_dtype: torch.dtype = torch.float32,
    config: Any = _REQUIRED,
    token_type_ids: torch.Tensor | None = None,
    moe_mm_token_type_ids: torch.Tensor | None = None,
    mrope_position_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Kwargs for ``model(**...)`` of a transformers model: ``input_ids``, ``position_ids``,
    ``labels`` (:func:`hf_labels`) and per ``attn_implementation`` a bool mask (sdpa), an
    additive one (eager), a ``BlockMask`` (flex) or flash's ``cu_seq_lens_q/k``, ``max_length_q/k``.

    Args:
        meta: the batch's document metadata.
        tokens: ``(B, L)`` int64 token ids.
        labels: ``(B, L)`` aligned targets; None: no labels.
        attn_implementation: as the model was loaded (sdpa, eager, flex_attention,
            flash_attention_2 or _3); another one than the model's is refused; None: the
            model's (sdpa with ``config=None`` or a config that names none).
        mask_dtype: dtype of the eager additive mask.
        config: required: the model (its instance is checked as it runs: loaded
            implementation, PEFT adapters, code that is not transformers' own) or
            ``model.config`` (only the transformers class it maps to is checked), checked by
            :func:`check_model`, which makes the masks and positions exact for it or raises
            :class:`PackingNotExactError`; None: the document-causal mask for every layer,
            unchecked (exact only for causal full-attention models).
        token_type_ids: ``(B, L)`` as the model's processor makes them, for models whose
            mask reads them (Gemma 3 VLM, PaliGemma); not passed on.
        moe_mm_token_type_ids: ``(B, L)`` as the model's processor makes them, passed on to
            models whose forward reads them (``ModelReport.token_inputs``; Ernie-4.5-VL's
            experts route by them): a model that reads them is refused a batch without them, a
            model that does not, a batch with them.

    Hybrid models (linear-attention or short-conv layers, ``ModelReport.state_layers``): the
    packs are laid end to end in one ``(1, B*L)`` row with ``seq_idx`` and the varlen kwargs
    (:func:`~energon_pack.attention._model_kwargs.flattened_kwargs`); the logits come back as
    ``(1, B*L, V)`` (``.view(B, L, -1)``), the loss as for ``(B, L)``. A multimodal hybrid
    (Qwen3.5-VL) gets ``position_ids`` ``(4, 1, B*L)``: the text row (positions reset per
    document, which its attention layers read) above the three mRoPE rows, as transformers'
    Qwen3.5 text model splits them.
    """
    if attn_implementation is not None and attn_implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"unknown attn_implementation {attn_implementation!r}; choose one of {IMPLEMENTATIONS}"
        )
    if config is _REQUIRED:
        raise TypeError(
            "hf_kwargs needs config=model (or model.config): the masks depend on the model "
            "(sliding windows, chunks, bidirectional blocks) and check_model refuses models "
            "packing would change; config=None gives every layer the document-causal mask, "
            "unchecked (exact only for causal full-attention models)"
        )
    if config is None:
        report = ModelReport(
            model_type="",
            attn_implementation=attn_implementation or "sdpa",
            layer_types=("full_attention",),
            local={"full_attention": FULL_ATTENTION},
            rope_types=(),
        )
    else:
        report = check_model(config, attn_implementation, pack_size=meta.seq_idx.shape[1])
    model = hf_model_kwargs(meta, tokens, report, mask_dtype, token_type_ids)
    flat = (lambda x: x.reshape(1, -1)) if report.flattened else (lambda x: x)  # hybrids
    positions = model.pop("position_ids")
    if mrope_position_ids is not None:
        rows = model_mrope_rows(mrope_position_ids, config)
        positions = _mrope_positions(rows, positions, report.flattened)
    kwargs = {"input_ids": flat(tokens), "position_ids": positions}
    kwargs.update(
        _token_inputs(report, config is None, moe_mm_token_type_ids=moe_mm_token_type_ids)
    )
    if labels is not None:
        kwargs["labels"] = flat(hf_labels(labels))
    return {**kwargs, **model}


def _token_inputs(report: ModelReport, unchecked: bool, **given: torch.Tensor | None) -> dict:
    """The per-token inputs of ``given`` the model reads (``report.token_inputs``); a missing
    one it reads, or one given that it does not read, is a ValueError naming the input and the
    model class (``unchecked``: passed as given)."""
    model = report.base_model_class or f"the {report.model_type} model"
    out = {}
    for name, value in given.items():
        if value is not None and (unchecked or name in report.token_inputs):
            out[name] = value
        elif name in report.token_inputs:
            raise ValueError(
                f"{model} reads {name} (a per-token input its processor makes for each "
                f"document), but this batch has none: without {name} its forward computes "
                f"something other than for each document alone. Pack with the model's own "
                f"processor (whose family gives each document {name}) or pass {name}=... to "
                "hf_kwargs"
            )
        elif value is not None:
            raise ValueError(
                f"this batch carries {name} (the processor it was packed with makes them), but "
                f"{model} does not read {name}: pack with this model's own processor"
            )
    return out


def _mrope_positions(mrope: torch.Tensor, text: torch.Tensor, flattened: bool) -> torch.Tensor:
    """``mrope`` ``(3 or 4, B, L)`` (the rows the model reads, :func:`model_mrope_rows`) as
    is, or, 3 rows, laid end to end under the flattened row's text positions ``(1, B*L)``:
    ``(4, 1, B*L)``."""
    if mrope.dim() != 3 or mrope.shape[0] not in (3, 4) or (flattened and mrope.shape[0] != 3):
        raise ValueError(
            f"mrope_position_ids must be (3, B, L) (or HunYuan-VL's (4, B, L) for a model that "
            f"is not a hybrid), got {tuple(mrope.shape)}"
        )
    if not flattened:
        return mrope
    rows = mrope.reshape(3, 1, -1)
    if rows.shape[-1] != text.shape[-1]:
        raise ValueError(
            f"mrope_position_ids {tuple(mrope.shape)} do not cover the batch's "
            f"{text.shape[-1]} tokens"
        )
    return torch.cat([text.reshape(1, 1, -1).to(rows.dtype), rows])
