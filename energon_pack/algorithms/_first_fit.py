# SPDX-License-Identifier: Apache-2.0
"""First-fit (stream order) and first-fit decreasing (longest first).

Each sample goes into the first (oldest) pack that still has room. A max-segment tree over the
packs' remaining capacities finds that pack in O(log n), so the whole run is O(n log n).
Trace of first-fit for lengths ``[6, 5, 3, 4]`` and capacity 10::

    6 -> pack 0 (6)      5 -> pack 1 (5)      3 -> pack 0 (9)      4 -> pack 1 (9)
    bins: [[0, 2], [1, 3]]

First-fit decreasing sorts longest first (stable, so equal lengths keep stream order) and then
runs first-fit: for ``[2, 7, 3, 8]`` and capacity 10 it sees ``8, 7, 3, 2`` and returns
``[[3, 0], [1, 2]]`` (8 + 2 and 7 + 3).
"""

from __future__ import annotations

import numpy as np

__all__ = ["first_fit", "first_fit_decreasing"]


def _first_fit_sorted(
    values: list[int], capacity: int, max_samples_per_pack: int | None
) -> list[list[int]]:
    """First-fit over ``values`` in the given order; bins hold positions into ``values``."""
    n = len(values)
    if n == 0:
        return []
    cap_count = max_samples_per_pack or n
    size = 1
    while size < n:
        size *= 2
    # tree[1] is the root; leaves size..2*size-1 hold each (possibly unopened) pack's room.
    tree = [capacity] * (2 * size)
    bins: list[list[int]] = []
    for pos, x in enumerate(values):
        node = 1
        while node < size:
            node *= 2
            if tree[node] < x:
                node += 1
        b = node - size
        if b == len(bins):
            bins.append([pos])
        else:
            bins[b].append(pos)
        room = tree[node] - x
        if len(bins[b]) >= cap_count:
            room = -1  # full by count: never chosen again
        tree[node] = room
        node //= 2
        while node:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node //= 2
    return bins


def first_fit(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Each sample, in stream order, into the first pack with room."""
    return _first_fit_sorted(lengths.tolist(), capacity, max_samples_per_pack)


def first_fit_decreasing(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """First-fit over the samples sorted longest first (stable)."""
    order = np.argsort(-lengths, kind="stable")
    bins = _first_fit_sorted(lengths[order].tolist(), capacity, max_samples_per_pack)
    order_list = order.tolist()
    return [[order_list[p] for p in b] for b in bins]
