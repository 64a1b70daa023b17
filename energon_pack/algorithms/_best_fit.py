# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing: longest first, each into the open pack it fills the most.

Lengths ``[5, 4, 6, 3, 2]``, capacity 10 (sorted 6, 5, 4, 3, 2): 6 opens A (room 4), 5 opens
B (room 5), 4 -> A (the tightest room that fits; A closes), 3 -> B, 2 -> B: bins
``[[2, 1], [0, 3, 4]]``. The open packs' rooms are a sorted list searched with ``bisect``; among
equal rooms the most recently filled pack wins. The default and ``_search`` add the repair
pass of :mod:`~energon_pack.algorithms._repair`. See docs/benchmarks/algorithms.md.
"""

from __future__ import annotations

import bisect
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
) -> list[list[int]]:
    """Best fit of ``lengths[i]`` for ``i`` in ``order``: the open packs' rooms in a sorted
    list (``keys``), their members in a parallel list (``packs``). A new room goes before the
    equal ones, so ``bisect_left`` finds the most recently filled of the tightest rooms; a room
    still above the next tighter one is overwritten in place."""
    cap_count = max_samples_per_pack or len(order) or 1
    capped = max_samples_per_pack is not None
    keys: list[int] = []
    packs: list[list[int]] = []
    bins: list[list[int]] = []
    find = bisect.bisect_left
    for idx in order:
        x = lengths[idx]
        k = find(keys, x)
        if k < len(keys):
            room = keys[k] - x
            members = packs[k]
            members.append(idx)
            if not room or capped and len(members) >= cap_count:
                del keys[k], packs[k]
                continue
            if not k or keys[k - 1] < room:
                keys[k] = room  # still sorted
                continue
            del keys[k], packs[k]
        else:
            room = capacity - x
            members = [idx]
            bins.append(members)
            if not room or cap_count == 1:
                continue
        k = find(keys, room)
        keys.insert(k, room)
        packs.insert(k, members)
    return bins


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
    bins = _best_fit(order, values, capacity, max_samples_per_pack)
    if repair and len(bins) * capacity - total >= capacity:  # above ceil(sum / C)
        bins = repair_packs(bins, values, capacity, max_samples_per_pack, repair)
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
    return _decreasing(lengths.tolist(), capacity, max_samples_per_pack, repair)


def default_repair(n: int) -> tuple[RepairEffort]:
    """The default algorithm's repair effort for a call of ``n`` lengths."""
    return (BUFFER_EFFORT if n <= BUFFER_LENGTHS else DEFAULT_EFFORT,)


def best_fit_decreasing_repair(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default: best-fit decreasing, then a repair whose effort depends on the call's size
    (:data:`~energon_pack.algorithms._repair.BUFFER_EFFORT` up to ``BUFFER_LENGTHS``)."""
    values = lengths.tolist()
    return _decreasing(values, capacity, max_samples_per_pack, default_repair(len(values)))


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
