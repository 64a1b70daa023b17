# SPDX-License-Identifier: Apache-2.0
"""Hand-worked packing scenarios: literal expected bins, each with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from energon_pack.algorithms import ALGORITHMS, lower_bound, pack_lengths
from energon_pack.algorithms._bounds import martello_toth_l2
from energon_pack.algorithms._repair import (
    DEFAULT_EFFORT,
    SEARCH_EFFORT,
    RepairEffort,
    _l2_of_list,
)
from energon_pack.algorithms._subset_sum import fill_counts, fill_room


def test_next_fit_closes_pack_when_next_sample_does_not_fit() -> None:
    # 6 | 5 (6+5=11 > 10) -> new pack; 5+3=8; 8+4=12 > 10 -> new pack.
    assert pack_lengths([6, 5, 3, 4], 10, algorithm="next_fit") == [[0], [1, 2], [3]]


def test_first_fit_reuses_the_oldest_pack_with_room() -> None:
    # 6 -> A, 5 -> B, 3 -> A (first with room, 9), 4 -> B (9).
    assert pack_lengths([6, 5, 3, 4], 10, algorithm="first_fit") == [[0, 2], [1, 3]]


def test_first_fit_decreasing_sorts_longest_first() -> None:
    # Sorted 8, 7, 3, 2: 8 -> A, 7 -> B, 3 -> A? no (11) -> B (10), 2 -> A (10).
    assert pack_lengths([2, 7, 3, 8], 10, algorithm="first_fit_decreasing") == [[3, 0], [1, 2]]


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
    assert pack_lengths(lengths, 100, algorithm="first_fit_decreasing") != pack_lengths(
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


def test_fill_room_is_exact_subset_sum() -> None:
    # 4 + 3 = 7 exactly; 5 alone would leave 2.
    assert fill_room([5, 4, 3], 7) == [1, 2]
    # Nothing fits.
    assert fill_room([9, 8], 7) == []
    # Equal lengths count once each: 3 + 3 = 6 uses the first two 3s.
    assert fill_room([3, 5, 3, 3], 6) == [0, 2]


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


@pytest.mark.parametrize("py_sort", [0, 10**6])
@pytest.mark.parametrize("small", [0, 10**6])
@pytest.mark.parametrize("seed", range(6))
def test_fast_best_fit_matches_one_by_one_reference(
    seed: int, small: int, py_sort: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both fast paths must give exactly the bins of placing samples one by one: the bitset
    # buckets with runs of equal lengths placed at once (SMALL=0), and the sorted rooms
    # (SMALL large), whether ``sorted`` or NumPy's stable argsort orders the lengths
    # (PY_SORT). Few distinct lengths make long runs and many equal rooms (the tie rule).
    monkeypatch.setattr("energon_pack.algorithms._best_fit.SMALL", small)
    monkeypatch.setattr("energon_pack.algorithms._best_fit.MIXED", small)
    monkeypatch.setattr("energon_pack.algorithms._best_fit.PY_SORT", py_sort)
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


@pytest.mark.parametrize("cap", [None, 5])
def test_mixed_sizes_same_bins_with_sorted_rooms_or_buckets(
    cap: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Between SMALL and MIXED lengths with many distinct values, the sorted rooms pack (about a
    # quarter of the lengths distinct here); the buckets (MIXED=0) must give the same bins.
    rng = np.random.default_rng(7)
    lengths = rng.choice(rng.integers(1, 4097, size=900), size=3000)
    bfd = ALGORITHMS["best_fit_decreasing"]
    rooms_bins = bfd(lengths, 4096, cap)
    monkeypatch.setattr("energon_pack.algorithms._best_fit.MIXED", 0)
    assert bfd(lengths, 4096, cap) == rooms_bins


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


@pytest.mark.parametrize("seed", range(4))
def test_python_l2_is_martello_toth_l2(seed: int) -> None:
    # The repair's pure-Python L2 (small calls) must equal the NumPy bound exactly; few
    # distinct lengths around C / 2 exercise every threshold and the ties.
    rng = np.random.default_rng(seed)
    for _ in range(300):
        cap = int(rng.choice([10, 11, 16, 100, 4096]))
        pool = rng.integers(1, cap + 1, size=6)
        lengths = rng.choice(pool, size=int(rng.integers(1, 40))).tolist()
        assert _l2_of_list(lengths, cap) == martello_toth_l2(lengths, cap), (lengths, cap)
    assert _l2_of_list([6, 6, 8, 5, 5, 9, 6], 10) == 6  # the docstring's example


@pytest.mark.parametrize("seed", range(4))
def test_repair_same_bins_with_python_or_numpy_bound(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small calls take the pure-Python bound and one re-pack of every pack; the bins must be
    # those of the NumPy bound (SMALL_BOUND=0 forces it).
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(200):
        cap = int(rng.choice([10, 37, 100]))
        lengths = rng.integers(1, cap + 1, size=int(rng.integers(1, 60)))
        cases.append((lengths, cap, None if seed % 2 else 3))
    repair = ALGORITHMS["best_fit_decreasing_repair"]
    fast = [repair(x, cap, per_pack) for x, cap, per_pack in cases]
    monkeypatch.setattr("energon_pack.algorithms._repair.SMALL_BOUND", 0)
    assert fast == [repair(x, cap, per_pack) for x, cap, per_pack in cases]
