# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing: longest first, each into the open pack it fills the most.

Trace for lengths ``[5, 4, 6, 3, 2]`` and capacity 10 (sorted: 6, 5, 4, 3, 2)::

    6 -> new pack A (room 4)
    5 -> no room >= 5 -> new pack B (room 5)
    4 -> rooms {A: 4, B: 5}; tightest that fits is A -> A (room 0, closed)
    3 -> B (room 2)
    2 -> B (room 0)
    bins: [[2, 1], [0, 3, 4]]

Instead of a tree over the packs, the open packs are bucketed by their remaining room (an
integer in ``1..C``) and a two-level bitset (64-bit words plus a summary of the non-empty words)
marks the non-empty buckets. "Tightest pack with room >= x" is then the lowest set bit of one
shifted word, or of the summary and one more word: O(1) small-int steps per sample instead of
O(log n) tree steps. Ties (several packs with the same room) go to the most recently filled
pack, deterministically.

Equal lengths are placed in groups, with exactly the result of placing them one by one: when
the tightest pack with room ``r >= x`` takes one sample of length ``x``, its new room ``r - x``
is tighter still, so it takes ``r // x`` of them in a row; and when no pack has room, each new
pack takes ``C // x`` of them. With lengths ``[3] * 7`` and capacity 10 that is two steps (two
packs of three, one of one) instead of seven; on real length distributions (many repeats among
``C`` possible values) it halves the time for 100k lengths. Up to ``SMALL`` lengths (up to
``MIXED`` when few repeat) a sorted list of rooms searched with ``bisect`` does the same with
less fixed work per sample.

The module is a little over 300 lines because best fit's three input paths (the grouped
bitset for long runs of equal lengths, the sorted-list loop, the plain-list entry point) share
one tie rule and must stay bin-for-bin identical; they are tested against one reference.
"""

from __future__ import annotations

import bisect

import numpy as np

__all__ = [
    "best_fit_decreasing",
    "best_fit_decreasing_list",
    "best_fit_decreasing_rooms",
    "best_fit_groups",
    "best_fit_keys",
    "bin_rooms",
    "sorted_groups",
]

#: Up to this many lengths, a sorted list of rooms with bisect beats the bitset buckets
#: (less fixed work per sample: ~13 us for 64 lengths instead of ~60 us).
SMALL = 1024
#: Up to this many lengths, the sorted rooms also beat the buckets when there are at least
#: ``n / DISTINCT`` distinct lengths (few runs to place at once): 4096 manpages lengths 1.2 ms
#: instead of 3.0 ms, 2048 0.9 ms instead of 1.7 ms; 4096 short documents (6% distinct) 0.75
#: ms against the buckets' 0.43 ms, and 10,000 uniform lengths 11.9 ms against 8.5 ms.
MIXED = 4096
DISTINCT = 5
#: Up to this many lengths ``sorted`` orders them faster than NumPy's ``argsort`` (~0.6 us
#: against ~1.5 us for 16 lengths; 8.6 us against 3.9 us for 256).
PY_SORT = 48


def sorted_groups(lengths: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """Indices sorted longest first (stable), each distinct length, and where its run starts.

    ``sorted_groups(np.array([2, 5, 2]))`` is ``([1, 0, 2], [5, 2], [0, 1, 3])``: run ``g``
    holds ``order[starts[g]:starts[g + 1]]``, all of length ``values[g]``.
    """
    n = int(lengths.size)
    order_arr = np.argsort(-lengths, kind="stable")
    sv = lengths[order_arr]
    bounds = np.flatnonzero(sv[1:] != sv[:-1]) + 1
    starts_arr = np.concatenate(([0], bounds, [n]))
    return order_arr.tolist(), sv[starts_arr[:-1]].tolist(), starts_arr.tolist()


def best_fit_keys(
    order: list[int], lengths: list[int], capacity: int, max_samples_per_pack: int | None
) -> list[list[int]]:
    """Best fit of ``lengths[i]`` for ``i`` in ``order``, with the open packs' rooms in a sorted
    list of ints (``keys``) and their members in a parallel list (``packs``).

    ``bisect_left(keys, x)`` finds the tightest room ``>= x``; a new room is inserted before the
    equal ones, so among equal rooms the leftmost is the most recently filled pack: the same tie
    rule as :func:`best_fit_groups`. No tuples are built per sample (a third faster than sorted
    ``(room, -stamp, bin)`` keys on 16-2048 lengths), and the bins' rooms are left to
    :func:`bin_rooms` (most calls never need them). When the filled pack's new room is still
    above the next tighter one (always when it was the tightest), it is overwritten in place:
    one store instead of two pops, a bisect and two inserts. Rooms ``[3, 7]`` and ``x = 2``:
    ``[1, 7]`` in place; ``x = 6``: the 7 becomes 1 and moves before the 3. Hot loop, kept whole.
    """
    cap_count = max_samples_per_pack or len(order) or 1
    capped = max_samples_per_pack is not None  # uncapped, only the last sample fills the count
    keys: list[int] = []
    packs: list[list[int]] = []  # the open packs' members, parallel to keys
    bins: list[list[int]] = []
    find = bisect.bisect_left
    put_key, put_pack = keys.insert, packs.insert
    new_bin = bins.append
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
                keys[k] = room  # still sorted: where a re-insert would put it
                continue
            del keys[k], packs[k]
        else:
            room = capacity - x
            members = [idx]
            new_bin(members)
            if not room or cap_count == 1:
                continue
        k = find(keys, room)
        put_key(k, room)
        put_pack(k, members)
    return bins


def bin_rooms(bins: list[list[int]], lengths: list[int], capacity: int) -> list[int]:
    """Each bin's room: ``capacity`` minus its lengths. ``bin_rooms([[0, 2], [1]], [5, 4, 3],
    10)`` is ``[2, 6]``."""
    get = lengths.__getitem__
    return [capacity - sum(map(get, b)) for b in bins]


def best_fit_groups(
    order: list[int],
    values: list[int],
    starts: list[int],
    capacity: int,
    max_samples_per_pack: int | None,
) -> tuple[list[list[int]], list[int]]:
    """Best fit over the runs of :func:`sorted_groups`; returns the bins and each bin's room.

    Hot loop, one function on purpose: it runs once per placed run of equal lengths, and the
    bitset words, bucket dict and bins stay in locals (a helper call per step cost ~30% here).
    """
    n = len(order)
    cap_count = max_samples_per_pack or n or 1
    words = [0] * ((capacity >> 6) + 1)
    summary = 0
    buckets: dict[int, list[int]] = {}
    bins: list[list[int]] = []
    rooms: list[int] = []
    for g, x in enumerate(values):
        p = starts[g]
        end = starts[g + 1]
        while p < end:
            blk = x >> 6
            w = words[blk] >> (x & 63)
            if w:
                room = x + (w & -w).bit_length() - 1
            else:
                s = summary >> (blk + 1)
                if s:
                    blk += (s & -s).bit_length()
                    w = words[blk]
                    room = (blk << 6) + (w & -w).bit_length() - 1
                else:
                    room = 0
            if room:
                bucket = buckets[room]
                b = bucket.pop()
                if not bucket:
                    del buckets[room]
                    rb = room >> 6
                    w = words[rb] ^ (1 << (room & 63))
                    words[rb] = w
                    if not w:
                        summary ^= 1 << rb
                members = bins[b]
                m = room // x
                if m > end - p:
                    m = end - p
                if m > cap_count - len(members):
                    m = cap_count - len(members)
                if m == 1:
                    members.append(order[p])
                else:
                    members.extend(order[p : p + m])
                p += m
                room -= m * x
                rooms[b] = room
                if not room or len(members) >= cap_count:
                    continue
                bucket = buckets.get(room)
                if bucket is None:
                    buckets[room] = [b]
                    rb = room >> 6
                    w = words[rb]
                    if not w:
                        summary |= 1 << rb
                    words[rb] = w | (1 << (room & 63))
                else:
                    bucket.append(b)
                continue
            # No open pack has room: open new packs of q copies each (exactly what best fit
            # does one copy at a time, since the newest pack is then the only one with room).
            q = capacity // x
            if q > cap_count:
                q = cap_count
            first = len(bins)
            full_room = capacity - q * x
            k = (end - p) // q
            if k:
                bins.extend([order[i : i + q] for i in range(p, p + k * q, q)])
                rooms.extend([full_room] * k)
                p += k * q
                if full_room and q < cap_count:
                    new = list(range(first, first + k))
                    bucket = buckets.get(full_room)
                    if bucket is None:
                        buckets[full_room] = new
                        rb = full_room >> 6
                        w = words[rb]
                        if not w:
                            summary |= 1 << rb
                        words[rb] = w | (1 << (full_room & 63))
                    else:
                        bucket.extend(new)
            if p < end:
                r = end - p
                room = capacity - r * x
                b = len(bins)
                bins.append(order[p:end])
                rooms.append(room)
                p = end
                if room and r < cap_count:
                    bucket = buckets.get(room)
                    if bucket is None:
                        buckets[room] = [b]
                        rb = room >> 6
                        w = words[rb]
                        if not w:
                            summary |= 1 << rb
                        words[rb] = w | (1 << (room & 63))
                    else:
                        bucket.append(b)
    return bins, rooms


def _best_fit_sorted(
    order: list[int], values: list[int], total: int, capacity: int, per_pack: int | None
) -> list[list[int]]:
    """:func:`best_fit_keys` of ``values`` (summing to ``total``) in ``order`` (longest first),
    or, when they all fit one pack, that pack at once (what best fit ends with)."""
    n = len(order)
    if total <= capacity and (per_pack or n) >= n:
        return [order]
    return best_fit_keys(order, values, capacity, per_pack)


def best_fit_decreasing_rooms(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> tuple[list[list[int]], list[int]]:
    """Best-fit decreasing bins and each bin's room (the fastest path for the input size)."""
    n = int(lengths.size)
    if n <= SMALL:
        vals = lengths.tolist()
        if n <= PY_SORT:
            order = sorted(range(n), key=vals.__getitem__, reverse=True)  # stable
        else:
            order = np.argsort(-lengths, kind="stable").tolist()  # the same order
        bins = _best_fit_sorted(order, vals, sum(vals), capacity, max_samples_per_pack)
        return bins, bin_rooms(bins, vals, capacity)
    order, values, starts = sorted_groups(lengths)
    if n <= MIXED and DISTINCT * len(values) >= n:
        vals = lengths.tolist()
        bins = best_fit_keys(order, vals, capacity, max_samples_per_pack)
        return bins, bin_rooms(bins, vals, capacity)
    return best_fit_groups(order, values, starts, capacity, max_samples_per_pack)


def best_fit_decreasing_list(
    values: list[int], capacity: int, max_samples_per_pack: int | None = None
) -> tuple[list[list[int]], int] | None:
    """Best-fit decreasing of a short Python list of ints, checked here, without NumPy.

    The small-input path of ``pack_lengths`` (``select_samples_to_pack`` passes a list of ints
    per buffer): the bins of :func:`best_fit_decreasing` and the lengths' total, or ``None``
    unless ``values`` is a non-empty list of ints in ``1..capacity`` (the caller's validating
    path then names the problem). The checks cost next to nothing: the total must be an
    ``int`` (a float, a NumPy integer or a string in the list makes it something else, or
    raises), and the sort's ends are the shortest and the longest length.
    ``best_fit_decreasing_list([5, 4, 6, 3, 2], 10)`` is ``([[2, 1], [0, 3, 4]], 20)``;
    ``best_fit_decreasing_list([5, 0], 10)`` and ``([5, 2.0], 10)`` are ``None``.
    """
    try:
        total = sum(values)
    except TypeError:
        return None
    if type(total) is not int or not values:
        return None
    order = sorted(range(len(values)), key=values.__getitem__, reverse=True)  # stable
    if values[order[-1]] < 1 or values[order[0]] > capacity:
        return None
    return _best_fit_sorted(order, values, total, capacity, max_samples_per_pack), total


def best_fit_decreasing(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit over the samples sorted longest first (stable)."""
    if lengths.size == 0:
        return []
    return best_fit_decreasing_rooms(lengths, capacity, max_samples_per_pack)[0]
