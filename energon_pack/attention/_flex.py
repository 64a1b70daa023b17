# SPDX-License-Identifier: Apache-2.0
"""FlexAttention ``BlockMask`` of packed rows, from tile-level bounds (no ``L x L`` object).

Slot indices never decrease along a row, so each tile's first and last slot tell which tiles
hold a pair (or only pairs: "full"). Equal to ``create_block_mask`` (tested); see
``docs/concepts/metadata.md``.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask

from energon_pack.attention._masks import (
    FULL_ATTENTION,
    LocalAttention,
    local_mask_mod,
    slot_positions,
)

__all__ = ["DEFAULT_BLOCK_SIZE", "block_causal_block_mask"]

DEFAULT_BLOCK_SIZE = 128


def _padded_seq_idx(seq_idx: torch.Tensor, block_size: int, value: int = -1) -> torch.Tensor:
    if seq_idx.dim() != 2:
        raise ValueError(f"seq_idx must have shape (B, L), got {tuple(seq_idx.shape)}")
    length = seq_idx.shape[1]
    pad = -length % block_size
    # kernels may call the mask function on the last tile's out-of-range indices
    return torch.nn.functional.pad(seq_idx, (0, pad), value=value) if pad else seq_idx


def _padded_blocks(blocks: torch.Tensor | None, block_size: int) -> torch.Tensor | None:
    return None if blocks is None else _padded_seq_idx(blocks, block_size, value=0)


def _later_tiles(blocks: torch.Tensor, block_size: int) -> torch.Tensor:
    """(B, nb_q, nb_kv) bool: a bidirectional block has tokens in the query tile and in a
    *later* key tile. Block ids never decrease along a row (0s aside), so that block is the
    query tile's largest id and the key tile's smallest non-zero id."""
    tiles = _padded_blocks(blocks, block_size)
    tiles = tiles.view(tiles.shape[0], -1, block_size)
    largest = tiles.max(-1).values
    big = torch.iinfo(tiles.dtype).max
    smallest = torch.where(tiles > 0, tiles, big).min(-1).values
    nb = tiles.shape[1]
    later = torch.arange(nb, device=blocks.device)
    later = later.view(1, nb) > later.view(nb, 1)
    return later & (largest[:, :, None] == smallest[:, None, :]) & (largest[:, :, None] > 0)


def block_causal_block_mask(
    seq_idx: torch.Tensor,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    local: LocalAttention = FULL_ATTENTION,
    blocks: torch.Tensor | None = None,
) -> BlockMask:
    """The document-causal ``BlockMask`` of shape ``(B, 1, L, L)``.

    Args:
        seq_idx: ``(B, L)`` slot index per token, non-decreasing along each row.
        block_size: FlexAttention tile size.
        local: a sliding window or chunks inside each document.
        blocks: ``(B, L)`` bidirectional blocks (``bidirectional_blocks``): key tiles after
            the query tile are visited where one block reaches them.
    """
    length = seq_idx.shape[1]
    padded = _padded_seq_idx(seq_idx, block_size)
    nb = padded.shape[1] // block_size
    device = seq_idx.device
    tile_starts = torch.arange(nb, device=device) * block_size
    tile_ends = torch.clamp(tile_starts + block_size, max=length) - 1
    first = seq_idx[:, tile_starts]  # (B, nb) first slot of each tile
    last = seq_idx[:, tile_ends]  # (B, nb) last slot of each tile
    qb = torch.arange(nb, device=device).view(nb, 1)
    kb = torch.arange(nb, device=device).view(1, nb)
    # (B, nb_q, nb_kv)
    any_pair = (kb <= qb) & (last[:, None, :] >= first[:, :, None])
    if blocks is not None:
        any_pair = any_pair | _later_tiles(blocks, block_size)
    # a tile cut by the row end is never full: its out-of-range queries match nothing
    single_slot = (first == last) & (tile_starts + block_size <= length)
    full = (
        (kb < qb)
        & single_slot[:, :, None]
        & single_slot[:, None, :]
        & (first[:, :, None] == first[:, None, :])
    )
    if not local.is_full:
        any_pair, full = _restrict_tiles(
            seq_idx, any_pair, full, (tile_starts, tile_ends), block_size, local
        )
    partial = any_pair & ~full

    def to_blocks(sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        num = sel.sum(-1, dtype=torch.int32)
        # stable sort puts the selected tiles first, in increasing kv order
        idx = torch.argsort((~sel).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return num[:, None], idx[:, None]

    kv_num, kv_idx = to_blocks(partial)
    full_num, full_idx = to_blocks(full)
    return BlockMask.from_kv_blocks(
        kv_num,
        kv_idx,
        full_num,
        full_idx,
        BLOCK_SIZE=block_size,
        mask_mod=local_mask_mod(padded, local, _padded_blocks(blocks, block_size)),
        seq_lengths=(length, length),
    )


def _restrict_tiles(
    seq_idx: torch.Tensor,
    any_pair: torch.Tensor,
    full: torch.Tensor,
    tiles: tuple[torch.Tensor, torch.Tensor],
    block_size: int,
    local: LocalAttention,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut the document-causal tiles down to a window / chunks.

    A pair may attend only if ``q - k < reach`` (window, or chunk: same chunk of one slot),
    so a tile whose closest pair is ``>= reach`` apart is skipped. A full tile must have its
    farthest pair inside the window and its first key and last query in one chunk.
    """
    starts, ends = tiles  # (nb,) first and last token of each tile
    nb = starts.shape[0]
    qb = torch.arange(nb, device=seq_idx.device).view(nb, 1)
    kb = qb.view(1, nb)
    reach = min(x for x in (local.window, local.chunk) if x is not None)
    # (nb, nb): q tile start - k tile end (both ways: the distance to the nearer end)
    gap = (qb - kb).abs() if local.both_ways else qb - kb
    nearest = (gap - 1) * block_size + 1
    farthest = (qb - kb + 1) * block_size - 1
    any_pair = any_pair & (nearest < reach)
    if local.window is not None:
        full = full & (farthest < local.window)
    if local.chunk is not None:
        pos = slot_positions(seq_idx)
        chunk_first = pos[:, starts] // local.chunk  # (B, nb): chunk of each tile's first
        chunk_last = pos[:, ends] // local.chunk
        full = full & (chunk_last[:, :, None] == chunk_first[:, None, :])
        # a pair shares the slot of the query tile's first and the key tile's last token,
        # so a later chunk there means no pair
        same = seq_idx[:, starts][:, :, None] == seq_idx[:, ends][:, None, :]
        any_pair = any_pair & ~(same & (chunk_first[:, :, None] > chunk_last[:, None, :]))
        # a later key tile (bidirectional blocks): the query tile's last and the key tile's
        # first token lie in the pair's slot
        same = seq_idx[:, ends][:, :, None] == seq_idx[:, starts][:, None, :]
        later = (kb > qb) & (~same | (chunk_last[:, :, None] < chunk_first[:, None, :]))
        any_pair = any_pair & ~later
    return any_pair, full & any_pair
