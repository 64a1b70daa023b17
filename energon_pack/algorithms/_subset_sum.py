# SPDX-License-Identifier: Apache-2.0
"""One exact bounded subset-sum engine, shared by the repair and the balancing passes.

One Python int is the bitset of reachable totals; ``c`` copies of ``x`` are added in chunks of
1, 2, 4, ... copies. ``subset_sum([5, 3], {5: 1, 3: 3}, 9) == {3: 3}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["fill_counts", "reach_steps", "subset_sum", "walk_back"]


def subset_sum(
    values: Sequence[int],
    counts: Mapping[int, int],
    hi: int,
    *,
    lo: int = 0,
    target: int | None = None,
) -> dict[int, int] | None:
    """Copies of each value with a total in ``[lo, hi]`` nearest ``target`` (exact search).

    Args:
        values: Distinct positive lengths, in order of preference (ties take earlier ones).
        counts: Copies available of each value (``>= 1``).
        hi: Largest total allowed.
        lo: Smallest total allowed (default 0: any fill).
        target: Total wanted (default ``hi``); equally near totals prefer the smaller one.

    Returns:
        ``{value: copies}`` (empty for the total 0), or ``None`` when no total lies in
        ``[lo, hi]``. ``subset_sum([5, 3], {5: 1, 3: 2}, 9) == {5: 1, 3: 1}`` (8: the fullest).
    """
    lo = max(lo, 0)
    if hi < lo:
        return None
    goal = hi if target is None else min(max(target, lo), hi)
    reach, steps = reach_steps(values, counts, hi, goal)
    s = _nearest(reach >> lo, goal - lo)
    return None if s is None else walk_back(steps, s + lo)


def reach_steps(
    values: Sequence[int], counts: Mapping[int, int], hi: int, goal: int | None = None
) -> tuple[int, list[tuple[int, int, int]]]:
    """The bitset of totals reachable with copies of ``values`` up to ``hi``, and its steps.

    Bit ``s`` of the int is set when some choice has total ``s``; each step is ``(length,
    copies, reach before)`` for :func:`walk_back`. Stops early once ``goal`` is reachable (when
    given). ``reach_steps([5, 3], {5: 1, 3: 1}, 9)[0] == 0b100101001`` (totals 0, 3, 5, 8).
    """
    full = (2 << hi) - 1  # totals 0..hi
    reach = 1
    steps: list[tuple[int, int, int]] = []  # (length, copies, reach before)
    for x in values:
        m = counts[x]
        if m == 1:
            steps.append((x, 1, reach))
            reach = (reach | reach << x) & full
        else:
            q = hi // x
            if m > q:
                m = q
            c = 1
            while m > 0:
                if c > m:
                    c = m
                steps.append((x, c, reach))
                reach = (reach | reach << (c * x)) & full
                m -= c
                c <<= 1
        if goal is not None and reach.bit_length() > goal and (reach >> goal) & 1:
            break
    return reach, steps


def walk_back(steps: list[tuple[int, int, int]], s: int) -> dict[int, int]:
    """``{length: copies}`` with total ``s`` (a set bit of the steps' reach): each chunk whose
    total was not reachable before it is taken, so ties prefer earlier values."""
    take: dict[int, int] = {}
    for x, c, before in reversed(steps):
        if not s:
            break
        if not (before >> s) & 1:
            take[x] = take.get(x, 0) + c
            s -= c * x
    return take


def _nearest(window: int, goal: int) -> int | None:
    """The set bit of ``window`` nearest bit ``goal``; a tie takes the lower bit."""
    if not window:
        return None
    above = window >> goal
    up = goal + (above & -above).bit_length() - 1 if above else None
    down = (window & ((1 << goal) - 1)).bit_length() - 1
    if up is None or (down >= 0 and goal - down <= up - goal):
        return down
    return up


def fill_counts(values: Sequence[int], counts: Mapping[int, int], room: int) -> dict[int, int]:
    """Copies of each length to take for the largest total ``<= room``: :func:`subset_sum`.

    ``fill_counts([5, 3], {5: 1, 3: 3}, 9) == {3: 3}`` (3 + 3 + 3 = 9); ``{}`` for ``room <= 0``.
    """
    if room <= 0:
        return {}
    return subset_sum(values, counts, room) or {}
