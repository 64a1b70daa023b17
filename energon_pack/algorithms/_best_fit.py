# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing: longest first, each into the open pack it fills the most.

The open packs that fit the current length are a stack, the tightest on top; the others wait,
grouped by room, until the lengths fall to their room. Among equal rooms the most recently
filled pack wins. ``[5, 4, 6, 3, 2]``, pack size 10: bins ``[[2, 1], [0, 3, 4]]``. See
docs/benchmarks/algorithms.md.
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
    order: list[int], lengths: list[int], pack_size: int, max_samples_per_pack: int | None
) -> tuple[list[list[int]], tuple]:
    """Best fit of ``lengths[i]`` for ``i`` in ``order`` (lengths non-increasing): the bins,
    and the open packs for :func:`_rooms`.

    The open packs with room for the current length are a stack, the tightest on top (``rooms``
    descending, ``packs`` parallel); the others wait by room (``waiting``: the distinct rooms
    ascending, ``tops``: each one's most recently filled pack, ``below``: its older ones) and
    join the stack, tightest last, once the lengths fall to their room."""
    cap_count = max_samples_per_pack or len(order) or 1
    capped = max_samples_per_pack is not None
    rooms: list[int] = []
    packs: list[list[int]] = []
    waiting: list[int] = []
    tops: list[list[int]] = []
    below: dict[int, list[list[int]]] | None = None
    bins: list[list[int]] = []
    top_wait = 0  # the largest waiting room (0: none)
    for idx in order:
        x = lengths[idx]
        if x <= top_wait:
            while waiting and waiting[-1] >= x:
                room = waiting.pop()
                if below and room in below:
                    older = below.pop(room)
                    rooms += [room] * len(older)
                    packs += older
                rooms.append(room)
                packs.append(tops.pop())
            top_wait = waiting[-1] if waiting else 0
        if rooms:
            members = packs[-1]
            members.append(idx)
            room = rooms[-1] - x
            if room >= x and not (capped and len(members) >= cap_count):
                rooms[-1] = room
                continue
            rooms.pop()
            packs.pop()
            if not room or capped and len(members) >= cap_count:
                continue
        else:
            room = pack_size - x
            members = [idx]
            bins.append(members)
            if not room or cap_count == 1:
                continue
            if room >= x:
                rooms.append(room)
                packs.append(members)
                continue
        if room > top_wait:
            waiting.append(room)
            tops.append(members)
            top_wait = room
            continue
        j = bisect.bisect_left(waiting, room)  # room <= top_wait: waiting[j] exists
        if waiting[j] == room:
            if below is None:
                below = {room: [tops[j]]}
            elif room in below:
                below[room].append(tops[j])
            else:
                below[room] = [tops[j]]
            tops[j] = members
        else:
            waiting.insert(j, room)
            tops.insert(j, members)
    return bins, (rooms, packs, waiting, tops, below)


def _rooms(
    bins: list[list[int]], left: tuple, values: list[int], pack_size: int, capped: bool
) -> list[int]:
    """The room left in each of ``bins``: from :func:`_best_fit`'s open packs ``left`` (the
    others are full), or summed when a count cap may have closed packs with room."""
    if capped:
        return [pack_size - sum(map(values.__getitem__, b)) for b in bins]
    rooms, packs, waiting, tops, below = left
    room_of = {id(m): r for m, r in zip(packs, rooms)}
    room_of.update(zip(map(id, tops), waiting))
    room_of.update((id(m), r) for r, stack in (below or {}).items() for m in stack)
    return [room_of.get(id(b), 0) for b in bins]


def _decreasing(
    values: list[int],
    order: list[int],
    pack_size: int,
    max_samples_per_pack: int | None,
    repair: Sequence[RepairEffort],
    total: int | None = None,
) -> list[list[int]]:
    """Best fit of ``values`` taken in ``order`` (longest first, stable), then the repair with
    each effort of ``repair`` (``total``: the sum, if known)."""
    n = len(values)
    total = sum(values) if total is None else total
    if total <= pack_size and (max_samples_per_pack or n) >= n:
        return [order] if n else []  # all in one pack, as best fit ends
    bins, left = _best_fit(order, values, pack_size, max_samples_per_pack)
    if repair and len(bins) * pack_size - total >= pack_size:  # above ceil(sum / C)
        capped = max_samples_per_pack is not None
        rooms_of = functools.partial(_rooms, bins, left, values, pack_size, capped)
        bins = repair_packs(bins, rooms_of, values, order, pack_size, max_samples_per_pack, repair)
    return bins


def best_fit_decreasing(
    lengths: np.ndarray,
    pack_size: int,
    max_samples_per_pack: int | None = None,
    *,
    repair: Sequence[RepairEffort] = (),
) -> list[list[int]]:
    """Best fit over the samples sorted longest first (stable), then the repair pass with each
    effort of ``repair`` in turn (none by default)."""
    order = np.argsort(-lengths, kind="stable").tolist()
    return _decreasing(lengths.tolist(), order, pack_size, max_samples_per_pack, repair)


def default_repair(n: int) -> tuple[RepairEffort]:
    """The default algorithm's repair effort for a call of ``n`` lengths."""
    return _BUFFER_REPAIR if n <= BUFFER_LENGTHS else _DEFAULT_REPAIR


_BUFFER_REPAIR = (BUFFER_EFFORT,)
_DEFAULT_REPAIR = (DEFAULT_EFFORT,)


def best_fit_decreasing_repair(
    lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default: best-fit decreasing, then a repair whose effort depends on the call's size
    (:data:`~energon_pack.algorithms._repair.BUFFER_EFFORT` up to ``BUFFER_LENGTHS``)."""
    effort = default_repair(lengths.size)
    return best_fit_decreasing(lengths, pack_size, max_samples_per_pack, repair=effort)


def best_fit_decreasing_search(
    lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default's repair, then more rounds with ``SEARCH_EFFORT`` (never more packs)."""
    efforts = (*default_repair(lengths.size), SEARCH_EFFORT)
    return best_fit_decreasing(lengths, pack_size, max_samples_per_pack, repair=efforts)


def best_fit_decreasing_repair_list(
    values: list, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]] | None:
    """:func:`best_fit_decreasing_repair` of a list of ints as energon passes a buffer (the same
    bins, no array), or ``None`` unless every value is an ``int`` in ``1..pack_size``."""
    try:
        total = sum(values)  # an int only if every value is an int (or a bool)
    except TypeError:
        return None
    if type(total) is not int or not values:
        return None
    order = sorted(range(len(values)), key=values.__getitem__, reverse=True)  # stable
    if values[order[-1]] < 1 or values[order[0]] > pack_size:
        return None
    effort = default_repair(len(values))
    return _decreasing(values, order, pack_size, max_samples_per_pack, effort, total)
