# SPDX-License-Identifier: Apache-2.0
"""First-fit: each sample, in stream order, into the first (oldest) pack that has room.

A max-segment tree over the packs' remaining rooms finds that pack in ``O(log n)``. Lengths
``[6, 5, 3, 4]``, pack size 10: 6 -> pack 0, 5 -> pack 1, 3 -> pack 0, 4 -> pack 1: bins
``[[0, 2], [1, 3]]``. See docs/concepts/packing.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["first_fit"]


def first_fit(
    lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Each sample, in stream order, into the first pack with room."""
    values = lengths.tolist()
    n = len(values)
    if n == 0:
        return []
    cap_count = max_samples_per_pack or n
    size = 1
    while size < n:
        size *= 2
    # tree[1] is the root; leaves size..2*size-1 hold each (possibly unopened) pack's room.
    tree = [pack_size] * (2 * size)
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
            left, right = tree[2 * node], tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node //= 2
    return bins
