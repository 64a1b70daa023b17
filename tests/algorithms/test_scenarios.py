# SPDX-License-Identifier: Apache-2.0
"""Hand-worked packing scenarios: literal expected bins, each with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, PackingSpec, pack_lengths
from energon_pack.algorithms._bounds import lower_bound, martello_toth_l2
from energon_pack.algorithms._repair import DEFAULT_EFFORT, SEARCH_EFFORT, RepairEffort
from energon_pack.algorithms._subset_sum import fill_counts


def test_next_fit_closes_pack_when_next_sample_does_not_fit() -> None:
    # 6 | 5 (6+5=11 > 10) -> new pack; 5+3=8; 8+4=12 > 10 -> new pack.
    assert pack_lengths([6, 5, 3, 4], 10, algorithm="next_fit") == [[0], [1, 2], [3]]


def test_first_fit_reuses_the_oldest_pack_with_room() -> None:
    # 6 -> A, 5 -> B, 3 -> A (first with room, 9), 4 -> B (9).
    assert pack_lengths([6, 5, 3, 4], 10, algorithm="first_fit") == [[0, 2], [1, 3]]


def test_removed_first_fit_decreasing_names_its_replacement() -> None:
    with pytest.raises(ValueError, match="removed.*algorithm='best_fit_decreasing'"):
        PackingSpec(pack_size=10, algorithm="first_fit_decreasing")


def test_best_fit_decreasing_picks_tightest_pack() -> None:
    # Sorted 6, 5, 4, 3, 2: 6 -> A (room 4), 5 -> B (room 5), 4 -> A (tightest room >= 4 is 4),
    # 3 -> B (room 2), 2 -> B (room 0).
    assert pack_lengths([5, 4, 6, 3, 2], 10, algorithm="best_fit_decreasing") == [
        [2, 1],
        [0, 3, 4],
    ]


def test_best_fit_differs_from_first_fit() -> None:
    # Tiny inputs rarely separate them; on 200 random lengths first-fit picks the oldest pack
    # with room and best-fit the tightest, so the bins differ.
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 60, size=200)
    assert pack_lengths(lengths, 100, algorithm="first_fit") != pack_lengths(
        lengths, 100, algorithm="best_fit_decreasing"
    )


def test_repair_reaches_the_bound_where_best_fit_does_not() -> None:
    # BFD: 4+4 (room 2, no 3 fits), 3+3+3 (room 1), 3 alone: 3 packs. The bound is 20/10 = 2.
    # The repair pools the packs and fills each exactly: {4, 3, 3}, {4, 3, 3}.
    lengths = [4, 4, 3, 3, 3, 3]
    assert pack_lengths(lengths, 10, algorithm="best_fit_decreasing") == [[0, 1], [2, 3, 4], [5]]
    assert pack_lengths(lengths, 10, algorithm="best_fit_decreasing_repair") == [
        [0, 2, 3],
        [1, 4, 5],
    ]


def test_alignment_rounds_lengths_up() -> None:
    # alignment 4: [5, 8, 1] occupy [8, 8, 4]; 8 + 8 = 16 fits, 4 more does not.
    assert pack_lengths([5, 8, 1], 16, algorithm="next_fit", alignment=4) == [[0, 1], [2]]
    # Without alignment all three fit (14).
    assert pack_lengths([5, 8, 1], 16, algorithm="next_fit") == [[0, 1, 2]]


def test_max_samples_per_pack_caps_the_count() -> None:
    # Six 1-token samples, capacity 10, at most 2 per pack: 3 packs.
    bins = pack_lengths([1] * 6, 10, algorithm="first_fit", max_samples_per_pack=2)
    assert bins == [[0, 1], [2, 3], [4, 5]]


def test_empty_input_gives_no_packs() -> None:
    for name in ALGORITHMS:
        assert pack_lengths([], 10, algorithm=name) == []


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lengths": [11], "capacity": 10}, "exceeds pack_size=10"),
        ({"lengths": [9], "capacity": 10, "alignment": 4}, "alignment=4"),
        ({"lengths": [3], "capacity": 0}, "pack_size=0"),
        ({"lengths": [3, 0], "capacity": 10}, r"lengths\[1\]=0"),
        ({"lengths": [3, -2], "capacity": 10}, "not positive"),
        ({"lengths": [3], "capacity": 10, "algorithm": "magic"}, "not registered"),
        ({"lengths": [3], "capacity": 10, "max_samples_per_pack": 0}, "max_samples_per_pack"),
        ({"lengths": [3], "capacity": 10, "alignment": 0}, "alignment=0"),
    ],
)
def test_bad_input_raises_value_error_with_fix(kwargs: dict, match: str) -> None:
    lengths = kwargs.pop("lengths")
    capacity = kwargs.pop("capacity")
    with pytest.raises(ValueError, match=match):
        pack_lengths(lengths, capacity, **kwargs)


def test_bounds() -> None:
    # sum 18 over capacity 10 -> L1 = 2; all three items > 5 need their own pack -> L2 = 3.
    assert lower_bound([6, 6, 6], 10) == 2
    assert martello_toth_l2([6, 6, 6], 10) == 3
    # [5, 5, 5, 5]: L1 = L2 = 2 (pairs fill exactly).
    assert martello_toth_l2([5, 5, 5, 5], 10) == 2


def test_fill_counts_takes_copies_of_repeated_lengths() -> None:
    # 5 + 3 leaves 1; three 3s fill 9 exactly (the chunks 1 + 2 copies cover a count of 3).
    assert fill_counts([5, 3], {5: 1, 3: 3}, 9) == {3: 3}
    # Only two 3s: 5 + 3 = 8 is the fullest.
    assert fill_counts([5, 3], {5: 1, 3: 2}, 9) == {5: 1, 3: 1}
    # Room 0 takes nothing.
    assert fill_counts([5], {5: 1}, 0) == {}


def _reference_best_fit_decreasing(lengths: list[int], capacity: int, cap: int) -> list[list[int]]:
    """Slow, obviously correct BFD: longest first (stable), into the open pack with the least
    room that still fits; ties to the most recently filled pack (the fast version's rule)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    rooms: list[int] = []
    touched: list[int] = []  # when each pack last received a sample
    for step, i in enumerate(order):
        x = lengths[i]
        fits = [b for b in range(len(bins)) if rooms[b] >= x and len(bins[b]) < cap]
        if fits:
            b = min(fits, key=lambda j: (rooms[j], -touched[j]))
            bins[b].append(i)
            rooms[b] -= x
            touched[b] = step
        else:
            bins.append([i])
            rooms.append(capacity - x)
            touched.append(step)
    return bins


@pytest.mark.parametrize("seed", range(12))
def test_fast_best_fit_matches_one_by_one_reference(seed: int) -> None:
    # Few distinct lengths make long runs and many equal rooms (the tie rule).
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 700))
    values = rng.integers(1, 200, size=8)
    lengths = rng.choice(values, size=n).tolist()
    cap = int(rng.integers(2, 9)) if seed % 2 else n
    expected = _reference_best_fit_decreasing(lengths, 200, cap)
    got = pack_lengths(
        lengths,
        200,
        algorithm="best_fit_decreasing",
        max_samples_per_pack=None if cap == n else cap,
    )
    assert got == expected


def test_grouped_best_fit_fills_new_packs_with_runs() -> None:
    # Seven 3s, capacity 10: no pack has room, so each new pack takes 10 // 3 = 3 of them:
    # [0, 1, 2], [3, 4, 5], [6].
    assert pack_lengths([3] * 7, 10, algorithm="best_fit_decreasing") == [[0, 1, 2], [3, 4, 5], [6]]


def test_repair_effort_validates() -> None:
    with pytest.raises(ValueError, match="pool_bins"):
        RepairEffort(pool_bins=1)
    assert SEARCH_EFFORT.pool_bins > DEFAULT_EFFORT.pool_bins


def test_search_never_worse_than_repair() -> None:
    rng = np.random.default_rng(5)
    for _ in range(5):
        lengths = rng.integers(1, 3000, size=1500)
        repair = pack_lengths(lengths, 4096, algorithm="best_fit_decreasing_repair")
        search = pack_lengths(lengths, 4096, algorithm="best_fit_decreasing_search")
        assert len(search) <= len(repair)
