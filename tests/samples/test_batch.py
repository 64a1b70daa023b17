# SPDX-License-Identifier: Apache-2.0
"""collate_packs and the batch adapters: layout by hand, fast paths against the dense reference."""

from __future__ import annotations

import random

import pytest
import torch

from energon_pack.samples import (
    EncodedCaptioningSample,
    EncodedSample,
    PackedTextBatch,
    collate_packs,
    pack_documents,
)
from energon_pack.samples._batch import PackedCaptioningBatch
from energon_pack_tools import make_document


def doc(key: str, n: int, start: int = 1) -> EncodedSample:
    return make_document(key, range(start, start + n))


def test_worked_example_two_packs_padded_to_six() -> None:
    p0 = pack_documents([doc("a", 3), doc("b", 2)])
    p1 = pack_documents([doc("c", 4)])
    b = collate_packs([p0, p1], pad_to=6, pad_token_id=0)
    assert isinstance(b, PackedTextBatch)
    assert b.tokens.tolist() == [[1, 2, 3, 1, 2, 0], [1, 2, 3, 4, 0, 0]]
    assert b.labels.tolist() == [[2, 3, -100, 2, -100, -100], [2, 3, 4, -100, -100, -100]]
    assert b.segment_ids.tolist() == [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0]]
    # tail padding continues the last document's positions (it joins that slot)
    assert b.position_ids.tolist() == [[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 5]]
    assert b.cu_seqlens.tolist() == [0, 3, 5, 9]
    assert b.cu_seqlens_padded.tolist() == [0, 3, 6, 12]
    assert (b.max_seqlen, b.max_seqlen_padded) == (4, 6)
    assert b.doc_lengths == [[3, 2], [4]]
    assert b.sample_keys == [["a", "b"], ["c"]]
    assert b.__key__ == ["a,b", "c"]


def test_pad_to_multiple_and_default_length() -> None:
    packs = [pack_documents([doc("a", 5)]), pack_documents([doc("b", 3)])]
    assert collate_packs(packs).tokens.shape == (2, 5)
    assert collate_packs(packs, pad_to_multiple_of=4).tokens.shape == (2, 8)
    assert collate_packs(packs, pad_to=6, pad_to_multiple_of=4).tokens.shape == (2, 8)


def test_bad_collation_raises() -> None:
    with pytest.raises(ValueError, match="pad_to=4"):
        collate_packs([pack_documents([doc("a", 5)])], pad_to=4)
    with pytest.raises(ValueError, match="no packs"):
        collate_packs([])
    # unpacked documents (energon without a packing buffer) are named, not an AttributeError
    with pytest.raises(ValueError, match="'a' is a EncodedSample.*packing_buffer_size"):
        collate_packs([doc("a", 3)])


def _random_batch(seed: int) -> PackedTextBatch:
    rng = random.Random(seed)
    length = rng.randint(4, 96)
    alignment = rng.choice([1, 1, 2, 4])
    packs = []
    for r in range(rng.randint(1, 3)):
        docs, used = [], 0
        while True:
            n = rng.choice([1, rng.randint(1, length)])
            slot = -(-n // alignment) * alignment
            if used + slot > length:
                break
            docs.append(doc(f"{r}-{len(docs)}", n, start=rng.randrange(50)))
            used += slot
        if not docs:
            docs = [doc(f"{r}-0", 1)]
        packs.append(pack_documents(docs, alignment=alignment))
    return collate_packs(packs, pad_to=max(length, max(p.length for p in packs)))


@pytest.mark.parametrize("seed", range(25))
def test_fast_paths_agree_with_dense_reference(seed: int) -> None:
    b = _random_batch(seed)
    rows, length = b.tokens.shape
    dense = b.dense_mask()
    assert dense.shape == (rows, 1, length, length)
    # 1. varlen offsets: the block-diagonal mask rebuilt from cu_seqlens_padded is the reference
    from_cu = torch.zeros(rows * length, rows * length, dtype=torch.bool)
    cu = b.flash_attn_kwargs()["cu_seqlens_q"].tolist()
    for s, e in zip(cu[:-1], cu[1:]):
        from_cu[s:e, s:e] = torch.ones(e - s, e - s, dtype=torch.bool).tril()
    for r in range(rows):
        sl = slice(r * length, (r + 1) * length)
        assert torch.equal(from_cu[sl, sl], dense[r, 0])
    # 2. position ids restart exactly where a reference row's mask starts a new block
    starts = ~dense[:, 0].diagonal(offset=-1, dim1=-2, dim2=-1)
    assert torch.equal(b.position_ids[:, 1:] == 0, starts)
    assert (b.position_ids[:, 0] == 0).all()
    # 3. BlockMask expanded to tokens never skips an allowed pair; its mask_mod is exact
    bm = b.block_mask(block_size=16)
    mm = bm.mask_mod
    q = torch.arange(length).view(-1, 1)
    k = torch.arange(length).view(1, -1)
    for r in range(rows):
        assert torch.equal(mm(torch.tensor(r), 0, q, k), dense[r, 0])
    # 4. real tokens never attend padding, segment ids match the real documents
    real = b.segment_ids > 0
    assert not (dense[:, 0] & real[:, :, None] & ~real[:, None, :]).any()
    assert b.cu_seqlens[-1] == int(real.sum())


def test_hf_kwargs_per_implementation() -> None:
    b = collate_packs([pack_documents([doc("a", 3), doc("b", 2)])], pad_to=8)
    sdpa = b.hf_kwargs("sdpa", config=None)
    assert sdpa["attention_mask"].dtype == torch.bool
    expected = torch.block_diag(torch.ones(3, 3), torch.ones(5, 5)).tril().bool()
    assert torch.equal(sdpa["attention_mask"], expected[None, None])
    eager = b.hf_kwargs("eager", config=None)
    assert eager["attention_mask"].dtype == torch.float32
    assert torch.equal(eager["attention_mask"] == 0, sdpa["attention_mask"])
    flash = b.hf_kwargs("flash_attention_2", config=None)
    assert "attention_mask" not in flash
    assert flash["cu_seq_lens_q"].tolist() == flash["cu_seq_lens_k"].tolist() == [0, 3, 8]
    assert flash["max_length_q"] == flash["max_length_k"] == 5
    assert b.hf_kwargs("flex_attention", config=None)["attention_mask"].shape == (1, 1, 8, 8)
    with pytest.raises(ValueError, match="attn_implementation"):
        b.hf_kwargs("bogus", config=None)


def test_captioning_batch_spans_in_flattened_coordinates() -> None:
    def cap(key: str, n: int, span: list[int]) -> EncodedCaptioningSample:
        return EncodedCaptioningSample(
            __key__=key,
            __restore_key__=(),
            tokens=torch.arange(n),
            loss_mask=torch.ones(n, dtype=torch.bool),
            pixel_values=torch.zeros(16, 4),
            image_grid_thw=torch.tensor([[1, 4, 4]]),
            image_spans=torch.tensor([span]),
        )

    p0 = pack_documents([cap("a", 5, [1, 5])], mrope=True)
    p1 = pack_documents([cap("b", 6, [0, 4])], mrope=True)
    b = collate_packs([p0, p1], pad_to=8)
    assert isinstance(b, PackedCaptioningBatch)
    assert b.image_spans.tolist() == [[1, 5], [8, 12]]  # row 1 starts at 8
    assert b.pixel_values.shape == (32, 4)
    assert b.mrope_position_ids.shape == (3, 2, 8)
    # row 0: text 0, image at 1 (temporal 1, height/width 1..2); tail padding continues after
    # the row's largest position over the three rows (2): 3, 4, 5
    assert b.mrope_position_ids[0, 0].tolist() == [0, 1, 1, 1, 1, 3, 4, 5]
    kw = b.hf_kwargs("sdpa", config=None)
    assert kw["position_ids"].shape == (3, 2, 8) and kw["image_grid_thw"].shape == (2, 3)


def test_captioning_packs_with_and_without_mrope_do_not_collate() -> None:
    # Silently dropping the mRoPE ids of the whole batch would hand the model 1-D positions.
    def cap(key: str) -> EncodedCaptioningSample:
        return EncodedCaptioningSample(
            __key__=key,
            __restore_key__=(),
            tokens=torch.arange(5),
            loss_mask=torch.ones(5, dtype=torch.bool),
            pixel_values=torch.zeros(16, 4),
            image_grid_thw=torch.tensor([[1, 4, 4]]),
            image_spans=torch.tensor([[1, 5]]),
        )

    with_ids = pack_documents([cap("a")], mrope=True)
    without = pack_documents([cap("b")], mrope=False)
    with pytest.raises(ValueError, match="'b' has no mrope_position_ids.*mrope=True"):
        collate_packs([with_ids, without], pad_to=8)
    assert collate_packs([without, without], pad_to=8).mrope_position_ids is None


def test_to_moves_every_tensor_and_the_metadata() -> None:
    b = collate_packs([pack_documents([doc("a", 3), doc("b", 2)])], pad_to=6)
    moved = b.to("meta")
    assert type(moved) is type(b) and moved.__key__ == b.__key__
    assert moved.tokens.is_meta and moved.labels.is_meta
    assert moved.metadata.cu_seqlens_padded.is_meta and moved.position_ids.is_meta
    assert moved.metadata.doc_lengths == b.metadata.doc_lengths
    assert moved.max_seqlen_padded == b.max_seqlen_padded == 3  # ints stay ints
    assert b.tokens.device.type == "cpu"  # the original is untouched
