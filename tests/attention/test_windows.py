# SPDX-License-Identifier: Apache-2.0
"""Window / chunk terms of the Flex BlockMask and the flash window_size convention."""

from __future__ import annotations

import pytest
import torch
from test_masks import dense_block_causal_mask

from energon_pack.attention import LocalAttention, document_metadata, flash_attn_kwargs
from energon_pack.attention._flex import block_causal_block_mask
from energon_pack.attention._masks import document_causal_mask, flash_window_size, slot_positions

LOCALS = [
    LocalAttention(),
    LocalAttention(window=8),
    LocalAttention(window=9),
    LocalAttention(chunk=8),
    LocalAttention(chunk=5),
    LocalAttention(window=5, chunk=3),
]


def _tiles(mask: torch.Tensor, block: int) -> torch.Tensor:
    """(B, nb, nb, block, block) view of a (B, 1, L, L) mask padded to whole tiles."""
    b, _, length, _ = mask.shape
    nb = -(-length // block)
    pad = nb * block - length
    padded = torch.nn.functional.pad(mask[:, 0], (0, pad, 0, pad))
    return padded.view(b, nb, block, nb, block).transpose(2, 3)


def _selected(num: torch.Tensor, idx: torch.Tensor, nb: int) -> torch.Tensor:
    out = torch.zeros(num.shape[0], nb, nb, dtype=torch.bool)
    for b in range(num.shape[0]):
        for q in range(nb):
            out[b, q, idx[b, 0, q, : num[b, 0, q]].long()] = True
    return out


@pytest.mark.parametrize("local", LOCALS)
def test_block_mask_tiles_are_exactly_the_reachable_ones(local: LocalAttention) -> None:
    meta = document_metadata([[20, 12, 3], [9, 30]], length=40)
    dense = document_causal_mask(meta.seq_idx, local)
    tiles = _tiles(dense, 4)
    nb = tiles.shape[1]
    mask = block_causal_block_mask(meta.seq_idx, block_size=4, local=local)
    partial = _selected(mask.kv_num_blocks, mask.kv_indices, nb)
    full = _selected(mask.full_kv_num_blocks, mask.full_kv_indices, nb)
    # every tile with an allowed pair is visited, no empty tile is (tight bounds)
    assert torch.equal(partial | full, tiles.flatten(-2).any(-1))
    # a full tile skips the mask function: it must be all True (and inside the row)
    assert bool(tiles.flatten(-2).all(-1)[full].all())
    # the mask function gives the dense mask on every pair
    q = torch.arange(40)
    mm = mask.mask_mod(torch.tensor(1), torch.tensor(0), q[:, None], q[None, :])
    assert torch.equal(mm, dense[1, 0])


def test_full_local_equals_the_reference_mask() -> None:
    meta = document_metadata([[3, 2, 1]], length=8)
    assert torch.equal(
        document_causal_mask(meta.seq_idx), dense_block_causal_mask(meta.slot_lengths, 8)
    )
    assert slot_positions(meta.seq_idx).tolist() == meta.position_ids.tolist()


def test_flash_window_size_is_window_minus_one() -> None:
    # transformers keeps keys q - W < k <= q; flash-attn keeps q - left <= k <= q
    assert flash_window_size(LocalAttention(window=8)) == (7, 0)
    assert flash_window_size(LocalAttention()) == (-1, -1)
    with pytest.raises(ValueError, match="no chunked attention"):
        flash_window_size(LocalAttention(chunk=8))
    meta = document_metadata([[3, 2]])
    assert flash_attn_kwargs(meta, sliding_window=4)["window_size"] == (3, 0)
    with pytest.raises(ValueError, match="positive int"):
        LocalAttention(window=0)
