# SPDX-License-Identifier: Apache-2.0
"""The public contract helpers catch what they promise to catch (on hand-made packs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from energon_pack.testing import assert_each_sample_once, assert_same_item


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
    a = SimpleNamespace(x=1)  # not a dataclass: compared with ==
    assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 2])])
    with pytest.raises(AssertionError, match=r"item\[0\]: tensors differ"):
        assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 3])])
    with pytest.raises(AssertionError, match="int64"):
        assert_same_item([torch.tensor([1, 2])], [torch.tensor([1, 2], dtype=torch.int32)])
    assert_same_item(a, a)
