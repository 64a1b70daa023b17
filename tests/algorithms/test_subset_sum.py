# SPDX-License-Identifier: Apache-2.0
"""The subset-sum engine shared by the repair and the balancing passes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from energon_pack.algorithms._subset_sum import fill_counts, reach_steps, subset_sum, walk_back


def test_docstring_trace() -> None:
    # Totals {0, 5} -> {0, 3, 5, 8} -> (two more 3s) {0, 3, 5, 6, 8, 9}: 9 is reached by three
    # 3s; the walk back takes the chunk of two 3s, then the single 3, and never the 5.
    assert subset_sum([5, 3], {5: 1, 3: 3}, 9) == {3: 3}
    # Only two 3s: 5 + 3 = 8 is the fullest total <= 9.
    assert subset_sum([5, 3], {5: 1, 3: 2}, 9) == {5: 1, 3: 1}


def test_window_and_target() -> None:
    # Totals in [4, 7]: 5 and 6 (3 + 3); 5 is the target.
    assert subset_sum([5, 3], {5: 1, 3: 3}, 7, lo=4, target=5) == {5: 1}
    # Target 7 is out of reach: 6 (two 3s) is the nearest total in the window.
    assert subset_sum([5, 3], {5: 1, 3: 3}, 7, lo=4, target=7) == {3: 2}
    # Target 4 is 1 from both 3 and 5 (window [3, 5]): a tie takes the smaller total.
    assert subset_sum([5, 3], {5: 1, 3: 1}, 5, lo=3, target=4) == {3: 1}
    # No total in [1, 2]; an empty window.
    assert subset_sum([5, 3], {5: 1, 3: 1}, 2, lo=1) is None
    assert subset_sum([5, 3], {5: 1, 3: 1}, 4, lo=6) is None
    # lo = 0 always has the empty choice.
    assert subset_sum([5], {5: 1}, 4) == {}


def test_ties_prefer_earlier_values() -> None:
    # 6 = 6 = 3 + 3: the value listed first wins.
    assert subset_sum([6, 3], {6: 1, 3: 2}, 6) == {6: 1}
    assert subset_sum([3, 6], {6: 1, 3: 2}, 6) == {3: 2}


def test_fill_counts_of_an_empty_room() -> None:
    assert fill_counts([5], {5: 1}, 0) == {}


def _brute_best(values: list[int], counts: dict[int, int], lo: int, hi: int, target: int) -> int:
    totals = {
        sum(x * k for x, k in zip(values, ks))
        for ks in itertools.product(*(range(counts[x] + 1) for x in values))
    }
    window = [s for s in totals if lo <= s <= hi]
    if not window:
        return -1
    return min(window, key=lambda s: (abs(s - target), s))


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed: int) -> None:
    # Exact: the total returned is the brute-force nearest (tie: smaller), copies within counts.
    rng = np.random.default_rng(seed)
    values = sorted({int(v) for v in rng.integers(1, 30, size=int(rng.integers(1, 5)))})
    counts = {x: int(rng.integers(1, 5)) for x in values}
    hi = int(rng.integers(0, 80))
    lo = int(rng.integers(0, hi + 2))
    target = int(rng.integers(lo, hi + 1)) if seed % 2 and lo <= hi else hi
    best = _brute_best(values, counts, lo, hi, target)
    got = subset_sum(values, counts, hi, lo=lo, target=target)
    if best < 0:
        assert got is None
        return
    assert got is not None
    assert all(0 < k <= counts[x] for x, k in got.items())
    assert sum(x * k for x, k in got.items()) == best


def test_reach_steps_and_walk_back() -> None:
    # Totals of {5, 3} up to 9: 0, 3, 5, 8 (the docstring's bits); walking back 8 takes both.
    bits, steps = reach_steps([5, 3], {5: 1, 3: 1}, 9)
    assert bits == 0b100101001
    assert walk_back(steps, 8) == {5: 1, 3: 1}
    assert walk_back(steps, 3) == {3: 1}
    assert walk_back(steps, 0) == {}
    # Three 3s in chunks of 1 and 2: 9 is one chunk of each. With goal 6 the scan stops after
    # the 3s (6 is reachable), so no total with the 5 is set.
    bits, steps = reach_steps([3], {3: 3}, 9)
    assert bits == 0b1001001001 and walk_back(steps, 9) == {3: 3}
    assert reach_steps([3, 5], {3: 3, 5: 1}, 20, goal=6)[0] == 0b1001001001
