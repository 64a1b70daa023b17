# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing: longest first, each into the open pack it fills the most.

The open packs' distinct rooms are a sorted list searched with ``bisect``, each with its packs;
among equal rooms the most recently filled pack wins. ``[5, 4, 6, 3, 2]``, capacity 10: bins
``[[2, 1], [0, 3, 4]]``. See docs/benchmarks/algorithms.md.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence

import numpy as np

from energon_pack.algorithms._repair import (
    BUFFER_EFFORT,
    BUFFER_LENGTHS,
    DEFAULT_EFFORT,
    SEARCH_EFFORT,
    RepairEffort,
    repair_packs,
)

__all__ = [
    "best_fit_decreasing",
    "best_fit_decreasing_repair",
    "best_fit_decreasing_repair_list",
    "best_fit_decreasing_search",
]


def _best_fit(
    order: list[int], lengths: list[int], capacity: int, max_samples_per_pack: int | None
) -> tuple[list[list[int]], tuple]:
    """Best fit of ``lengths[i]`` for ``i`` in ``order``: the bins, and the open packs for
    :func:`_rooms`. The open packs' distinct rooms are a sorted list (``keys``, ending with a
    room no length fits), the most recently filled pack of each room in a parallel list
    (``tops``) and the older ones with an equal room in ``below``."""
    cap_count = max_samples_per_pack or len(order) or 1
    capped = max_samples_per_pack is not None
    end = capacity + 1
    keys: list[int] = [end]
    tops: list = [None]
    below: dict[int, list[list[int]]] = {}  # room -> older packs, the most recent last
    short: list[tuple[list[int], int]] = []  # closed by the count cap with room left
    bins: list[list[int]] = []
    find = bisect.bisect_left
    for idx in order:
        x = lengths[idx]
        k = find(keys, x)
        old = keys[k]
        if old != end:
            members = tops[k]
            members.append(idx)
            room = old - x
            if below and old in below:  # the next pack with this room comes on top
                stack = below[old]
                tops[k] = stack.pop()
                if not stack:
                    del below[old]
                if not room or capped and len(members) >= cap_count:
                    if room:
                        short.append((members, room))
                    continue
            else:
                if not room or capped and len(members) >= cap_count:
                    del keys[k], tops[k]
                    if room:
                        short.append((members, room))
                    continue
                if not k or keys[k - 1] < room:
                    keys[k] = room  # still sorted
                    continue
                del keys[k], tops[k]
        else:
            room = capacity - x
            members = [idx]
            bins.append(members)
            if not room or cap_count == 1:
                if room:
                    short.append((members, room))
                continue
        j = find(keys, room)
        if keys[j] == room:
            stack = below.get(room)
            if stack is None:
                below[room] = [tops[j]]
            else:
                stack.append(tops[j])
            tops[j] = members
        else:
            keys.insert(j, room)
            tops.insert(j, members)
    return bins, (keys, tops, below, short)


def _rooms(bins: list[list[int]], left: tuple) -> list[int]:
    """The room left in each of ``bins`` (0 in the full ones) from :func:`_best_fit`'s open
    packs ``left``."""
    keys, tops, below, short = left
    room_of = {id(m): r for m, r in short}
    room_of.update((id(m), r) for r, stack in below.items() for m in stack)
    room_of.update(zip(map(id, tops[:-1]), keys))
    return [room_of.get(id(b), 0) for b in bins]


def _decreasing(
    values: list[int],
    capacity: int,
    max_samples_per_pack: int | None,
    repair: Sequence[RepairEffort] = (),
    order: list[int] | None = None,
    total: int | None = None,
) -> list[list[int]]:
    """Best-fit decreasing of a list of ints, then the repair with each effort of ``repair``
    (``order`` and ``total``: the stable descending order and the sum, if known)."""
    n = len(values)
    total = sum(values) if total is None else total
    if order is None:
        order = sorted(range(n), key=values.__getitem__, reverse=True)  # stable
    if total <= capacity and (max_samples_per_pack or n) >= n:
        return [order] if n else []  # all in one pack, as best fit ends
    bins, left = _best_fit(order, values, capacity, max_samples_per_pack)
    if repair and len(bins) * capacity - total >= capacity:  # above ceil(sum / C)
        rooms_of = functools.partial(_rooms, bins, left)
        bins = repair_packs(bins, rooms_of, values, order, capacity, max_samples_per_pack, repair)
    return bins


def best_fit_decreasing(
    lengths: np.ndarray,
    capacity: int,
    max_samples_per_pack: int | None = None,
    *,
    repair: Sequence[RepairEffort] = (),
) -> list[list[int]]:
    """Best fit over the samples sorted longest first (stable), then the repair pass with each
    effort of ``repair`` in turn (none by default)."""
    order = _descending(lengths)
    return _decreasing(lengths.tolist(), capacity, max_samples_per_pack, repair, order)


def _descending(lengths: np.ndarray) -> list[int]:
    """The indices of ``lengths``, longest first (stable)."""
    return np.argsort(-lengths, kind="stable").tolist()


def default_repair(n: int) -> tuple[RepairEffort]:
    """The default algorithm's repair effort for a call of ``n`` lengths."""
    return (BUFFER_EFFORT if n <= BUFFER_LENGTHS else DEFAULT_EFFORT,)


def best_fit_decreasing_repair(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default: best-fit decreasing, then a repair whose effort depends on the call's size
    (:data:`~energon_pack.algorithms._repair.BUFFER_EFFORT` up to ``BUFFER_LENGTHS``)."""
    effort = default_repair(lengths.size)
    order = _descending(lengths)
    return _decreasing(lengths.tolist(), capacity, max_samples_per_pack, effort, order)


def best_fit_decreasing_search(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default's repair, then more rounds with ``SEARCH_EFFORT`` (never more packs)."""
    efforts = (*default_repair(lengths.size), SEARCH_EFFORT)
    return best_fit_decreasing(lengths, capacity, max_samples_per_pack, repair=efforts)


def best_fit_decreasing_repair_list(
    values: list, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]] | None:
    """:func:`best_fit_decreasing_repair` of a list of ints as energon passes a buffer (the same
    bins, no array), or ``None`` unless every value is an ``int`` in ``1..capacity``."""
    try:
        total = sum(values)  # an int only if every value is an int (or a bool)
    except TypeError:
        return None
    if type(total) is not int or not values:
        return None
    order = sorted(range(len(values)), key=values.__getitem__, reverse=True)  # stable
    if values[order[-1]] < 1 or values[order[0]] > capacity:
        return None
    effort = default_repair(len(values))
    return _decreasing(values, capacity, max_samples_per_pack, effort, order, total)
