# SPDX-License-Identifier: Apache-2.0
"""What to do with a sample longer than the pack: the over-long policy.

The algorithms never cut a sample; the encoder (or ``simulate``) applies this policy first.
With pack size 4 and lengths ``[9, 3]``:

* ``TRUNCATE``: ``[4, 3]`` (tokens past the pack size are lost),
* ``SPLIT``: ``[4, 4, 1, 3]`` (chunks of at most the pack size, each its own document),
* ``DROP``: ``[3]`` (the sample is skipped and counted),
* ``ERROR``: ``ValueError`` naming the sample.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import numpy as np

from energon_pack.algorithms._options import as_int_lengths

__all__ = ["OverlongPolicy", "apply_overlong"]


class OverlongPolicy(str, enum.Enum):
    """How a sample longer than the pack size is handled (in ``encode_sample``)."""

    TRUNCATE = "truncate"
    SPLIT = "split"
    DROP = "drop"
    ERROR = "error"


def apply_overlong(
    lengths: Sequence[int] | np.ndarray, limit: int, policy: OverlongPolicy | str
) -> np.ndarray:
    """Apply ``policy`` to every length above ``limit``; returns a new ``int64`` array.

    ``apply_overlong([9, 3], 4, "split")`` -> ``array([4, 4, 1, 3])``.
    """
    policy = OverlongPolicy(policy)
    if limit < 1:
        raise ValueError(f"limit={limit} must be a positive pack size.")
    arr = as_int_lengths(lengths)
    over = arr > limit
    if not over.any():
        return arr.copy()
    if policy is OverlongPolicy.TRUNCATE:
        return np.minimum(arr, limit)
    if policy is OverlongPolicy.DROP:
        return arr[~over]
    if policy is OverlongPolicy.ERROR:
        i = int(np.argmax(over))
        raise ValueError(
            f"sample {i} has length {int(arr[i])} > pack size {limit}; choose the over-long "
            "policy 'truncate', 'split' or 'drop', or raise the pack size."
        )
    # SPLIT: n // limit full chunks, then the remainder (if any), in stream order.
    full = arr // limit
    rem = arr % limit
    counts = np.where(over, full + (rem > 0), 1)
    out = np.full(int(counts.sum()), limit, dtype=np.int64)
    ends = np.cumsum(counts) - 1
    out[ends] = np.where(over, np.where(rem > 0, rem, limit), arr)
    return out
