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
``C`` possible values) it halves the time for 100k lengths.
"""

from __future__ import annotations

import numpy as np

__all__ = ["best_fit_decreasing", "best_fit_groups", "sorted_groups"]

#: Below this many lengths, sorting and grouping in pure Python is cheaper than NumPy.
SMALL = 512


def sorted_groups(lengths: np.ndarray) -> tuple[list[int], list[int], list[int]]:
    """Indices sorted longest first (stable), each distinct length, and where its run starts.

    ``sorted_groups(np.array([2, 5, 2]))`` is ``([1, 0, 2], [5, 2], [0, 1, 3])``: run ``g``
    holds ``order[starts[g]:starts[g + 1]]``, all of length ``values[g]``.
    """
    n = int(lengths.size)
    if n <= SMALL:
        vals = lengths.tolist()
        order = sorted(range(n), key=lambda i: -vals[i])
        values: list[int] = []
        starts: list[int] = []
        prev = -1
        for p, i in enumerate(order):
            v = vals[i]
            if v != prev:
                values.append(v)
                starts.append(p)
                prev = v
        starts.append(n)
        return order, values, starts
    order_arr = np.argsort(-lengths, kind="stable")
    sv = lengths[order_arr]
    bounds = np.flatnonzero(sv[1:] != sv[:-1]) + 1
    starts_arr = np.concatenate(([0], bounds, [n]))
    return order_arr.tolist(), sv[starts_arr[:-1]].tolist(), starts_arr.tolist()


def best_fit_groups(
    order: list[int],
    values: list[int],
    starts: list[int],
    capacity: int,
    max_samples_per_pack: int | None,
) -> tuple[list[list[int]], list[int]]:
    """Best fit over the runs of :func:`sorted_groups`; returns the bins and each bin's room."""
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


def best_fit_decreasing(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit over the samples sorted longest first (stable)."""
    if lengths.size == 0:
        return []
    order, values, starts = sorted_groups(lengths)
    return best_fit_groups(order, values, starts, capacity, max_samples_per_pack)[0]
