# SPDX-License-Identifier: Apache-2.0
"""Next-fit: keep one open pack, close it as soon as the next sample does not fit.

Stream order is kept (torchtune's and energon's documentation's baseline). Lengths
``[6, 5, 3, 4]``, pack size 10: bins ``[[0], [1, 2], [3]]``. See docs/concepts/packing.md.
"""

from __future__ import annotations

import numpy as np

__all__ = ["next_fit"]


def next_fit(
    lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Pack in stream order into one open pack at a time."""
    cap_count = max_samples_per_pack or len(lengths) or 1
    bins: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, x in enumerate(lengths.tolist()):
        if current and (used + x > pack_size or len(current) >= cap_count):
            bins.append(current)
            current = []
            used = 0
        current.append(i)
        used += x
    if current:
        bins.append(current)
    return bins
