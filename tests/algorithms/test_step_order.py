# SPDX-License-Identifier: Apache-2.0
"""step_order: any ``step_packs`` consecutive packs cost about the same, whatever the offset."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import CostModel, pack_lengths
from energon_pack.algorithms._step_order import step_order


def window_sums(costs: np.ndarray, k: int) -> np.ndarray:
    """Sums of every ``k`` consecutive costs (all offsets)."""
    c = np.concatenate(([0.0], np.cumsum(costs)))
    return c[k:] - c[:-k]


def test_worked_example() -> None:
    # Sorted 9 8 7 6 | 3 2 1 0: stratum 0 from its cheap end, stratum 1 costly first.
    costs = [9, 8, 7, 6, 3, 2, 1, 0]
    order = step_order(costs, 2)
    assert order == [3, 4, 2, 5, 1, 6, 0, 7]
    assert [costs[i] for i in order] == [6, 3, 7, 2, 8, 1, 9, 0]
    # Every two in a row: 9 at even offsets, 10 at odd ones (packing order: 17 .. 1).
    assert window_sums(np.array([costs[i] for i in order], float), 2).tolist() == [
        9,
        10,
        9,
        10,
        9,
        10,
        9,
    ]


def test_ragged_tail_and_trivial_cases() -> None:
    # 10 packs, steps of 4: rows of 4, 3, 3 (placeholders dropped from the cheapest stratum).
    costs = list(range(10, 0, -1))
    order = step_order(costs, 4)
    assert sorted(order) == list(range(10))
    assert [costs[i] for i in order] == [8, 7, 2, 1, 9, 6, 3, 10, 5, 4]
    assert step_order([5, 4, 3], 4) == [0, 1, 2]  # fewer packs than a step: any order
    assert step_order([3, 1, 2], 1) == [0, 1, 2]  # one pack per step: nothing to level
    with pytest.raises(ValueError, match="step_packs=0"):
        step_order([1, 2], 0)
    with pytest.raises(ValueError, match="an int"):
        step_order([1, 2], 2.0)


@pytest.mark.parametrize("k", [2, 4, 8])
def test_steps_level_at_every_offset(k: int) -> None:
    # Pack costs of full packs differ by their attention share: spread them over [1, 2).
    rng = np.random.default_rng(k)
    for _ in range(5):
        costs = rng.uniform(1.0, 2.0, size=int(rng.integers(40, 400)))
        order = step_order(costs, k)
        assert sorted(order) == list(range(costs.size))  # a permutation
        level = window_sums(costs[order], k)
        shuffled = window_sums(rng.permutation(costs), k)
        # Windows at every offset, not only at multiples of k: far narrower than random order.
        assert level.std() < 0.5 * shuffled.std()


def test_pack_lengths_reorders_without_changing_packs() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 4096, size=600)
    plain = pack_lengths(lengths, 4096)
    stepped = pack_lengths(lengths, 4096, step_packs=4)
    assert sorted(map(tuple, stepped)) == sorted(map(tuple, plain))
    costs = CostModel().pack_costs(stepped, lengths)
    before = CostModel().pack_costs(plain, lengths)
    assert window_sums(costs, 4).std() < window_sums(before, 4).std()
