# SPDX-License-Identifier: Apache-2.0
"""cp_partition_indices: the load-balanced THD split, by hand and against a plain reference."""

from __future__ import annotations

import random

import pytest
import torch

from energon_pack.attention import cp_partition_indices


def reference_indices(cu_seqlens_padded: list[int], cp_size: int, cp_rank: int) -> list[int]:
    """Each slot cut into 2 * cp_size chunks; rank r keeps chunks r and 2 * cp_size - 1 - r."""
    out: list[int] = []
    for start, end in zip(cu_seqlens_padded, cu_seqlens_padded[1:]):
        slot = list(range(start, end))
        size = len(slot) // (2 * cp_size)
        chunks = [slot[i * size : (i + 1) * size] for i in range(2 * cp_size)]
        out += chunks[cp_rank] + chunks[2 * cp_size - 1 - cp_rank]
    return out


def test_worked_example_cp2() -> None:
    cu = torch.tensor([0, 8, 12], dtype=torch.int32)
    assert cp_partition_indices(cu, 2, 0).tolist() == [0, 1, 6, 7, 8, 11]
    assert cp_partition_indices(cu, 2, 1).tolist() == [2, 3, 4, 5, 9, 10]
    assert cp_partition_indices(cu, 1, 0).tolist() == list(range(12))


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4])
def test_matches_the_reference_and_partitions_every_position(cp_size: int) -> None:
    rng = random.Random(cp_size)
    for _ in range(20):
        slots = [2 * cp_size * rng.randint(1, 6) for _ in range(rng.randint(1, 7))]
        cu = [0]
        for s in slots:
            cu.append(cu[-1] + s)
        shares = []
        for rank in range(cp_size):
            got = cp_partition_indices(torch.tensor(cu, dtype=torch.int32), cp_size, rank)
            assert got.dtype == torch.int64
            assert got.tolist() == reference_indices(cu, cp_size, rank)
            shares += got.tolist()
        assert sorted(shares) == list(range(cu[-1]))


def test_a_slot_that_is_not_a_multiple_of_2cp_is_refused() -> None:
    with pytest.raises(ValueError, match=r"slot 1 has 6 tokens.*alignment=2 \* cp_size"):
        cp_partition_indices(torch.tensor([0, 8, 14]), 2, 0)
    with pytest.raises(ValueError, match="cp_rank"):
        cp_partition_indices(torch.tensor([0, 8]), 2, 2)
