# SPDX-License-Identifier: Apache-2.0
"""Lower bounds on the number of packs: how far from optimal a packing can be.

* ``L1 = ceil(sum / C)``: no packing can use fewer packs than the tokens need. For lengths
  ``[6, 6, 6]`` and capacity 10, ``L1 = ceil(18 / 10) = 2``.
* Martello-Toth ``L2``: items larger than ``C / 2`` can never share a pack, so for every
  threshold ``k <= C / 2`` the items above ``C - k`` each need their own pack, the items in
  ``(C / 2, C - k]`` too, and the items in ``[k, C / 2]`` must fit in what is left. For
  ``[6, 6, 6]`` and capacity 10, every item is above ``C / 2`` so ``L2 = 3`` (which is optimal),
  while ``L1`` is only 2. Always ``L2 >= L1``.

Fill is then ``sum / (packs * C)`` and the best possible fill is ``sum / (L * C)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["lower_bound", "martello_toth_l2"]


def lower_bound(lengths: Sequence[int] | np.ndarray, capacity: int) -> int:
    """``ceil(sum(lengths) / capacity)``: the fewest packs any algorithm can use."""
    if capacity < 1:
        raise ValueError(f"capacity={capacity} must be a positive integer.")
    total = int(np.sum(np.asarray(lengths, dtype=np.int64)))
    return -(-total // capacity)


def martello_toth_l2(lengths: Sequence[int] | np.ndarray, capacity: int) -> int:
    """Martello-Toth bound ``L2`` (>= :func:`lower_bound`), in O(n log n)."""
    if capacity < 1:
        raise ValueError(f"capacity={capacity} must be a positive integer.")
    arr = np.sort(np.asarray(lengths, dtype=np.int64))
    if arr.size == 0:
        return 0
    n = arr.size
    prefix = np.concatenate(([0], np.cumsum(arr)))
    # Candidate thresholds k: every distinct length <= C/2, plus 0 (all at once, vectorised).
    low = arr[2 * arr <= capacity]  # sorted, so distinct values are where it steps
    ks = np.concatenate(([0], low[:1], low[1:][low[1:] != low[:-1]]))
    # J1: items > C - k; J2: C - k >= items > C/2; J3: C/2 >= items >= k.
    i_j1 = np.searchsorted(arr, capacity - ks, side="right")
    i_half = int(np.searchsorted(arr, capacity // 2, side="right"))
    i_k = np.searchsorted(arr, ks, side="left")
    n_j2 = i_j1 - i_half
    free = n_j2 * capacity - (prefix[i_j1] - prefix[i_half])
    sum_j3 = prefix[i_half] - prefix[i_k]
    extra = np.maximum(0, -((free - sum_j3) // capacity))
    return max(lower_bound(arr, capacity), int(((n - i_j1) + n_j2 + extra).max()))
