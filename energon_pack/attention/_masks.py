# SPDX-License-Identifier: Apache-2.0
"""Document-causal masks, optionally within a sliding window or chunks (one per layer type).

Windows and chunks are measured inside the document, as transformers measures them for the
document alone: dense, FlexAttention ``mask_mod`` and flash-attn forms. See
``docs/howto/kernels.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "FULL_ATTENTION",
    "LAYER_TYPES",
    "LocalAttention",
    "additive_mask",
    "document_causal_mask",
    "flash_window_size",
    "local_mask_mod",
    "slot_positions",
]

#: Attention layer types transformers names in ``config.layer_types`` that packing handles.
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True, slots=True)
class LocalAttention:
    """How far one attention layer type looks inside a document.

    ``LocalAttention()`` is full (document-causal) attention; ``LocalAttention(window=4096)``
    a sliding-window layer; ``LocalAttention(chunk=8192)`` a Llama 4 chunked layer.
    """

    #: Sliding window ``W`` in transformers' sense (the query and ``W - 1`` keys before it).
    window: int | None = None
    #: Chunk size ``C``: query and key must share ``position // C`` inside their document.
    chunk: int | None = None
    #: The window also bounds keys *after* the query (``|q - k| < W``), as in models whose
    #: whole documents are bidirectional (Gemma 3 ``use_bidirectional_attention``).
    both_ways: bool = False

    def __post_init__(self) -> None:
        for name in ("window", "chunk"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int or None, got {value!r}")

    @property
    def is_full(self) -> bool:
        """True when neither a window nor chunks restrict the layer."""
        return self.window is None and self.chunk is None


#: Full (document-causal) attention: no window, no chunks.
FULL_ATTENTION = LocalAttention()


def slot_positions(seq_idx: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` int64 position of each token inside its slot, from ``(B, L)`` ``seq_idx``:
    ``[[0, 0, 0, 1, 1]] -> [[0, 1, 2, 0, 1]]`` (tail padding continues its slot's count)."""
    if seq_idx.dim() != 2:
        raise ValueError(f"seq_idx must have shape (B, L), got {tuple(seq_idx.shape)}")
    index = torch.arange(seq_idx.shape[1], device=seq_idx.device).expand_as(seq_idx)
    start = torch.ones_like(seq_idx, dtype=torch.bool)
    start[:, 1:] = seq_idx[:, 1:] != seq_idx[:, :-1]
    slot_start = torch.where(start, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - slot_start


def _allowed(
    same_slot: torch.Tensor,
    q_idx: torch.Tensor,
    kv_idx: torch.Tensor,
    q_pos: torch.Tensor | None,
    kv_pos: torch.Tensor | None,
    local: LocalAttention,
    same_block: torch.Tensor | None = None,
) -> torch.Tensor:
    """The predicate of the dense and the Flex form (indices broadcast):
    ``same slot & (causal | same bidirectional block) & window & chunk``."""
    forward = kv_idx <= q_idx
    if same_block is not None:
        forward = forward | same_block
    out = same_slot & forward
    if local.window is not None:
        # inside one slot index distance == position distance
        out = out & (q_idx - kv_idx < local.window)
        if local.both_ways:
            out = out & (kv_idx - q_idx < local.window)
    if local.chunk is not None:
        out = out & (q_pos // local.chunk == kv_pos // local.chunk)
    return out


def _same_block(q_block: torch.Tensor, kv_block: torch.Tensor) -> torch.Tensor:
    return (q_block == kv_block) & (q_block > 0)


def document_causal_mask(
    seq_idx: torch.Tensor,
    local: LocalAttention = FULL_ATTENTION,
    blocks: torch.Tensor | None = None,
) -> torch.Tensor:
    """``(B, 1, L, L)`` bool mask (True = may attend): document-causal, within ``local``.

    ``seq_idx``: ``(B, L)`` slot index per token (``DocumentMetadata.seq_idx``). ``blocks``:
    ``(B, L)`` int64 bidirectional blocks (``bidirectional_blocks``; 0 = causal token): tokens
    of one block and slot also see each other's later tokens. Costs ``B * L^2`` bytes.
    """
    pos = slot_positions(seq_idx) if local.chunk is not None else None
    index = torch.arange(seq_idx.shape[1], device=seq_idx.device)
    same_block = None if blocks is None else _same_block(blocks[:, :, None], blocks[:, None, :])
    mask = _allowed(
        seq_idx[:, :, None] == seq_idx[:, None, :],
        index[:, None],
        index[None, :],
        None if pos is None else pos[:, :, None],
        None if pos is None else pos[:, None, :],
        local,
        same_block,
    )
    return mask[:, None]


def local_mask_mod(
    seq_idx: torch.Tensor,
    local: LocalAttention = FULL_ATTENTION,
    blocks: torch.Tensor | None = None,
) -> Callable[..., torch.Tensor]:
    """FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` of :func:`document_causal_mask`.

    ``seq_idx`` (and ``blocks``) may be padded past ``L`` (``-1``, ``0``) so the kernel can
    index its last tile.
    """
    pos = slot_positions(seq_idx) if local.chunk is not None else None

    def document_local(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        same = seq_idx[b, q_idx] == seq_idx[b, kv_idx]
        block = None if blocks is None else _same_block(blocks[b, q_idx], blocks[b, kv_idx])
        q_pos, kv_pos = (None, None) if pos is None else (pos[b, q_idx], pos[b, kv_idx])
        return _allowed(same, q_idx, kv_idx, q_pos, kv_pos, local, block)

    return document_local


def flash_window_size(local: LocalAttention) -> tuple[int, int]:
    """flash-attn ``window_size=(left, right)`` of a layer: ``(W - 1, 0)``, or ``(-1, -1)``.

    flash-attn keeps keys ``q - left <= k <= q + right`` inside each varlen sequence (each
    document); it has no chunked mode: raises for chunks.
    """
    if local.chunk is not None:
        raise ValueError(
            "flash-attn has no chunked attention (Llama 4 chunked_attention layers): use sdpa, "
            "eager or flex_attention, or packs no longer than the chunk"
        )
    return (-1, -1) if local.window is None else (local.window - 1, 0)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive float mask eager attention expects of a bool mask: ``True -> 0.0``,
    ``False -> torch.finfo(dtype).min``; same shape."""
    if mask.dtype != torch.bool:
        raise ValueError(f"expected a bool mask, got dtype {mask.dtype}")
    out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return out.masked_fill_(~mask, torch.finfo(dtype).min)
