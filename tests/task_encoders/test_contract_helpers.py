# SPDX-License-Identifier: Apache-2.0
"""The public contract helpers catch what they promise to catch (on hand-made packs)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from energon_pack.samples import EncodedSample, collate_packs, pack_documents
from energon_pack.testing import assert_each_sample_once, assert_same_item
from energon_pack_tools import make_document


def packs(*members: list[str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(sample_keys=m) for m in members]


def test_complete_cover_with_split_pieces_and_drops_passes() -> None:
    # a whole, b in two pieces across packs, c dropped.
    assert_each_sample_once(packs(["a", "b#0"], ["b#1"]), ["a", "b", "c"], dropped=["c"])


@pytest.mark.parametrize(
    "members, match",
    [
        ((["a", "b"], ["a"]), "more than one pack"),
        ((["a"],), "in no pack"),
        ((["a", "b#0"], ["b#2"]), "pieces"),
        ((["a", "b", "b#0"],), "both whole and split"),
        ((["a", "b", "x"],), "unknown keys"),
    ],
)
def test_violations_are_reported(members, match: str) -> None:
    with pytest.raises(AssertionError, match=match):
        assert_each_sample_once(packs(*members), ["a", "b"])


def test_batches_rows_are_flattened() -> None:
    assert_each_sample_once([SimpleNamespace(sample_keys=[["a"], ["b"]])], ["a", "b"])


def test_same_item_compares_tensors_bit_for_bit() -> None:
    assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 2])])
    with pytest.raises(AssertionError, match=r"item\[0\]: tensors differ"):
        assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 3])])
    with pytest.raises(AssertionError, match="int64"):
        assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 2], dtype=torch.int32)])


def _document(key: str, tokens: list[int], restore_key: tuple = ()) -> EncodedSample:
    return make_document(key, tokens, __restore_key__=restore_key)


def test_same_item_descends_into_two_equal_but_distinct_packs() -> None:
    a = pack_documents([_document("a", [1, 2, 3]), _document("b", [4, 5])])
    b = pack_documents([_document("a", [1, 2, 3]), _document("b", [4, 5])])
    assert a is not b and a.tokens is not b.tokens
    assert_same_item(a, b)


def test_same_item_names_the_differing_field_of_a_pack() -> None:
    a = pack_documents([_document("a", [1, 2, 3]), _document("b", [4, 5])])
    b = pack_documents([_document("a", [1, 2, 3]), _document("b", [4, 6])])
    with pytest.raises(AssertionError, match=r"pack\.tokens: tensors differ"):
        assert_same_item(a, b, what="pack")
    c = pack_documents([_document("a", [1, 2, 3]), _document("c", [4, 5])])
    with pytest.raises(AssertionError, match=r"pack\.__key__"):
        assert_same_item(a, c, what="pack")


def test_same_item_descends_into_the_batch_metadata() -> None:
    def batch() -> Any:
        docs = [_document("a", [1, 2, 3]), _document("b", [4, 5])]
        return collate_packs([pack_documents(docs)], pad_to=8)

    assert_same_item(batch(), batch())
    a, b = batch(), batch()
    meta = dataclasses.replace(b.metadata, max_seqlen=4)
    with pytest.raises(AssertionError, match=r"batch\.metadata\.max_seqlen: 3 != 4"):
        assert_same_item(a, dataclasses.replace(b, metadata=meta), what="batch")
    cu = b.metadata.cu_seqlens_padded.clone()
    cu[-1] = 7
    meta = dataclasses.replace(b.metadata, cu_seqlens_padded=cu)
    with pytest.raises(AssertionError, match=r"batch\.metadata\.cu_seqlens_padded: tensors"):
        assert_same_item(a, dataclasses.replace(b, metadata=meta), what="batch")
    assert b.position_ids.shape == b.tokens.shape  # computed: derived, so not compared
    assert_same_item(a, b, what="batch")


def test_same_item_loose_keys_compares_restore_key_shape_only() -> None:
    a = _document("a", [1, 2], restore_key=("Webdataset", 3, "MapDataset", 7))
    b = _document("a", [1, 2], restore_key=("Webdataset", 9, "MapDataset", 1))
    assert_same_item(a, b, loose_keys=True)  # indices may differ after resume
    with pytest.raises(AssertionError, match="__restore_key__"):
        assert_same_item(a, b)
    c = _document("a", [1, 2], restore_key=("Webdataset", 9, "BatchDataset", 1))
    with pytest.raises(AssertionError, match="__restore_key__"):
        assert_same_item(a, c, loose_keys=True)  # a different dataset name is a real difference
