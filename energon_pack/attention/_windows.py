# SPDX-License-Identifier: Apache-2.0
"""Document-causal masks intersected with a sliding window or with chunks (per layer type).

Models such as Mistral, Gemma 2/3, GPT-OSS or Llama 4 restrict some layers further than
causal attention. With packing, each restriction is measured *inside the document*, exactly as
transformers measures it for the document alone (``masking_utils``):

- sliding window ``W`` (``sliding_window_overlay``: ``kv_idx > q_idx - W``): a query sees itself
  and the ``W - 1`` tokens before it, never across a document border;
- chunks of ``C`` (``chunked_overlay``): query and key lie in the same chunk, chunks counted
  from the *document's* first token (``pos // C`` equal), not from the row's.

One row, slots ``[5, 3]`` (``seq_idx = 0 0 0 0 0 1 1 1``), window ``W = 2`` and chunk ``C = 2``
(1 = may attend)::

    window 2                      chunk 2
    1 . . . . . . .               1 . . . . . . .
    1 1 . . . . . .               1 1 . . . . . .
    . 1 1 . . . . .               . . 1 . . . . .
    . . 1 1 . . . .               . . 1 1 . . . .
    . . . 1 1 . . .               . . . . 1 . . .
    . . . . . 1 . .               . . . . . 1 . .
    . . . . . 1 1 .               . . . . . 1 1 .
    . . . . . . 1 1               . . . . . . . 1

flash-attn takes the window as ``window_size=(W - 1, 0)`` (keys ``q - (W - 1) .. q``), see
:func:`flash_window_size`; flash-attn has no chunked mode. The FlexAttention form is the
``mask_mod`` of :func:`local_mask_mod`, used by ``block_causal_block_mask(window=, chunk=)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = [
    "FULL_ATTENTION",
    "LAYER_TYPES",
    "LocalAttention",
    "document_causal_mask",
    "flash_window_size",
    "local_mask_mod",
    "slot_positions",
]

#: Attention layer types transformers names in ``config.layer_types`` that packing handles.
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True, slots=True)
class LocalAttention:
    """How far one attention layer type looks back inside a document.

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
    """``(B, L)`` int64 position of each token inside its slot, from ``(B, L)`` ``seq_idx``.

    ``seq_idx = [[0, 0, 0, 1, 1]] -> [[0, 1, 2, 0, 1]]`` (a slot starts where ``seq_idx``
    changes; tail padding continues its slot's count, as ``position_ids`` do).
    """
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
    q_pos: torch.Tensor,
    kv_pos: torch.Tensor,
    local: LocalAttention,
    same_block: torch.Tensor | None = None,
) -> torch.Tensor:
    """The shared predicate of the dense and the Flex form (indices broadcast):
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
    of one block and slot also see each other's later tokens. With ``LocalAttention()`` and
    no blocks this equals ``dense_block_causal_mask`` (tested). Costs ``B * L^2`` bytes; eager
    attention wants :func:`additive_mask` of it.
    """
    pos = slot_positions(seq_idx)
    index = torch.arange(seq_idx.shape[1], device=seq_idx.device)
    same_block = None if blocks is None else _same_block(blocks[:, :, None], blocks[:, None, :])
    mask = _allowed(
        seq_idx[:, :, None] == seq_idx[:, None, :],
        index[:, None],
        index[None, :],
        pos[:, :, None],
        pos[:, None, :],
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
    pos = slot_positions(seq_idx)

    def document_local(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        same = seq_idx[b, q_idx] == seq_idx[b, kv_idx]
        block = None if blocks is None else _same_block(blocks[b, q_idx], blocks[b, kv_idx])
        return _allowed(same, q_idx, kv_idx, pos[b, q_idx], pos[b, kv_idx], local, block)

    return document_local


def flash_window_size(local: LocalAttention) -> tuple[int, int]:
    """flash-attn ``window_size=(left, right)`` of a layer: ``(W - 1, 0)``, or ``(-1, -1)``.

    transformers' ``sliding_window=W`` keeps keys ``q - W < k <= q``; flash-attn's
    ``window_size=(left, right)`` keeps ``q - left <= k <= q + right``, so ``left = W - 1``
    (``right`` is moot with ``causal=True``). Varlen flash measures it inside each sequence
    of ``cu_seqlens``, i.e. inside each document. Chunked layers have no flash form: raises.
    """
    if local.chunk is not None:
        raise ValueError(
            "flash-attn has no chunked attention (Llama 4 chunked_attention layers): use sdpa, "
            "eager or flex_attention, or packs no longer than the chunk"
        )
    return (-1, -1) if local.window is None else (local.window - 1, 0)
