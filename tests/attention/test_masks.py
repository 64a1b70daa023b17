# SPDX-License-Identifier: Apache-2.0
"""Dense reference mask, additive mask, and the FlexAttention BlockMask fast path."""

from __future__ import annotations

import random

import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

from energon_pack.attention import dense_mask, document_metadata
from energon_pack.attention._flex import block_causal_block_mask
from energon_pack.attention._masks import additive_mask


def dense_block_causal_mask(slot_lengths, length: int) -> torch.Tensor:
    """The slow, obviously correct reference: ``(B, 1, L, L)``, a lower triangle per slot."""
    assert all(sum(slots) == length for slots in slot_lengths)
    rows = [torch.block_diag(*(torch.ones(n, n) for n in slots)) for slots in slot_lengths]
    return torch.stack(rows).tril().bool()[:, None]


def reference_block_mask(seq_idx: torch.Tensor, block_size: int) -> BlockMask:
    """The document-causal BlockMask through ``create_block_mask`` (evaluates all L*L pairs)."""
    batch, length = seq_idx.shape
    padded = torch.nn.functional.pad(seq_idx, (0, -length % block_size), value=-1)

    def document_causal(b, h, q_idx, kv_idx):
        return (padded[b, q_idx] == padded[b, kv_idx]) & (kv_idx <= q_idx)

    return create_block_mask(
        document_causal, batch, None, length, length, device=seq_idx.device, BLOCK_SIZE=block_size
    )


def test_dense_mask_worked_example() -> None:
    # docs [3, 2, 1]: lower triangles on the diagonal blocks, nothing across documents
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [0, 0, 0, 1, 0, 0],
            [0, 0, 0, 1, 1, 0],
            [0, 0, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    for mask in (
        dense_block_causal_mask([[3, 2, 1]], 6),
        dense_mask(document_metadata([[3, 2, 1]])),
    ):
        assert mask.shape == (1, 1, 6, 6) and mask.dtype == torch.bool
        assert torch.equal(mask[0, 0], expected)


def test_additive_mask_values() -> None:
    mask = torch.tensor([[True, False]])
    out = additive_mask(mask, torch.float32)
    assert out.tolist() == [[0.0, torch.finfo(torch.float32).min]]
    with pytest.raises(ValueError, match="bool"):
        additive_mask(out)


def _random_meta(seed: int):
    rng = random.Random(seed)
    length = rng.randint(1, 300)
    rows = []
    for _ in range(rng.randint(1, 3)):
        row, left = [], length
        while left > 0 and rng.random() < 0.9:
            n = rng.randint(1, left) if rng.random() < 0.5 else rng.randint(1, min(left, 3))
            row.append(n)
            left -= n
        rows.append(row or [length])
    return document_metadata(rows, length=length)


@pytest.mark.parametrize("seed", range(12))
def test_seq_idx_equality_mask_equals_dense_reference(seed: int) -> None:
    # the closed form every fast path relies on: same slot and key <= query
    m = _random_meta(seed)
    length = m.position_ids.shape[1]
    closed = (m.seq_idx[:, :, None] == m.seq_idx[:, None, :]) & torch.ones(
        length, length, dtype=torch.bool
    ).tril()
    assert torch.equal(closed[:, None], dense_block_causal_mask(m.slot_lengths, length))


def _expand(block_dense: torch.Tensor, block_size: int, length: int) -> torch.Tensor:
    big = block_dense.repeat_interleave(block_size, -1).repeat_interleave(block_size, -2)
    return big[..., :length, :length].bool()


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("block_size", [16, 128])
def test_block_mask_equals_create_block_mask(seed: int, block_size: int) -> None:
    m = _random_meta(seed)
    fast = block_causal_block_mask(m.seq_idx, block_size=block_size)
    ref = reference_block_mask(m.seq_idx, block_size=block_size)
    assert torch.equal(fast.kv_num_blocks, ref.kv_num_blocks)
    assert torch.equal(fast.full_kv_num_blocks, ref.full_kv_num_blocks)
    # indices beyond the counts are unspecified: compare the used prefix of each row
    for num, a, b in [
        (fast.kv_num_blocks, fast.kv_indices, ref.kv_indices),
        (fast.full_kv_num_blocks, fast.full_kv_indices, ref.full_kv_indices),
    ]:
        for idx in torch.cartesian_prod(*[torch.arange(s) for s in num.shape]).view(-1, 3):
            k = int(num[tuple(idx)])
            assert torch.equal(a[tuple(idx)][:k], b[tuple(idx)][:k])
    assert fast.shape == (m.seq_idx.shape[0], 1, m.seq_idx.shape[1], m.seq_idx.shape[1])


@pytest.mark.parametrize("seed", range(6))
def test_block_mask_never_skips_an_allowed_pair(seed: int) -> None:
    # every allowed (q, k) of the dense reference lies in a tile the BlockMask visits
    m = _random_meta(seed)
    length = m.seq_idx.shape[1]
    dense = dense_block_causal_mask(m.slot_lengths, length)
    visited = _expand(block_causal_block_mask(m.seq_idx, block_size=16).to_dense(), 16, length)
    assert not (dense & ~visited).any()


@pytest.mark.parametrize(
    "rows_length", [([[7]], 7), ([[1]], 1), ([[5, 1, 30]], 40), ([[20, 20]], 40)]
)
def test_flex_attention_equals_sdpa_with_dense_mask(rows_length: tuple) -> None:
    # FlexAttention runs unfused on CPU in eager mode (torch 2.13), forward only
    rows, length = rows_length
    m = document_metadata(rows, length=length)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, length, 8, generator=gen) for _ in range(3))
    dense = dense_block_causal_mask(m.slot_lengths, length)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    out = flex_attention(q, k, v, block_mask=block_causal_block_mask(m.seq_idx, block_size=16))
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
