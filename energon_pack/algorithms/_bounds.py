# SPDX-License-Identifier: Apache-2.0
"""Lower bounds on the number of packs: ``L1 = ceil(sum / C)`` and Martello-Toth ``L2``.

``L2`` adds that items above ``C / 2`` never share a pack: ``[6, 6, 6]`` at pack size 10 has
``L1 = 2`` but ``L2 = 3`` (optimal). The repair pass stops at ``L2``.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

import numpy as np

__all__ = ["halves_bound", "lower_bound", "martello_toth_l2"]


def lower_bound(lengths: Sequence[int] | np.ndarray, pack_size: int) -> int:
    """``ceil(sum(lengths) / pack_size)``: the fewest packs any algorithm can use."""
    if pack_size < 1:
        raise ValueError(f"pack_size={pack_size} must be a positive integer.")
    total = int(np.sum(np.asarray(lengths, dtype=np.int64)))
    return -(-total // pack_size)


def martello_toth_l2(lengths: Sequence[int] | np.ndarray, pack_size: int) -> int:
    """Martello-Toth bound ``L2`` (>= :func:`lower_bound`), in ``O(n log n)``: for each
    threshold ``k`` (0 and each distinct length ``<= C / 2``) the lengths above ``C / 2`` each
    need a pack, and the lengths in ``[k, C / 2]`` must fit in the rooms of those ``<= C - k``
    or in new packs. ``[6, 6, 8, 5, 5, 9, 6]``, ``C = 10``: at ``k = 5``, 6."""
    if pack_size < 1:
        raise ValueError(f"pack_size={pack_size} must be a positive integer.")
    arr = sorted(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths)
    n = len(arr)
    prefix = list(itertools.accumulate(arr, initial=0))
    half = bisect.bisect_right(arr, pack_size // 2)  # arr[half:] are above C / 2
    big = n - half
    best = max(-(-prefix[n] // pack_size), big)
    k = i_k = 0  # i_k: how many lengths are below k
    j1 = n  # arr[j1:] are above C - k (k grows, so j1 only falls)
    while True:
        if j1 > half and arr[j1 - 1] > pack_size - k:
            j1 = bisect.bisect_right(arr, pack_size - k, half, j1)
        free = (j1 - half) * pack_size - (prefix[j1] - prefix[half])  # rooms of C/2 < x <= C-k
        need = prefix[half] - prefix[i_k] - free  # of the lengths in [k, C/2]
        if need > 0 and big - (-need // pack_size) > best:
            best = big - (-need // pack_size)
        if k:
            i_k = bisect.bisect_right(arr, k, i_k, half)
        if i_k >= half:
            return best
        k = arr[i_k]


def halves_bound(ascending: list[int], pack_size: int) -> int:
    """A cheap part of ``L2`` (its threshold 0) from the lengths sorted ascending: each length
    above ``C / 2`` needs its own pack, the others fill those packs' rooms before new packs.
    ``[4, 5, 5, 6]``, ``C = 10``: 2."""
    big = len(ascending) - bisect.bisect_right(ascending, pack_size // 2)
    rest = sum(ascending) - big * pack_size
    return big + max(0, -(-rest // pack_size))
