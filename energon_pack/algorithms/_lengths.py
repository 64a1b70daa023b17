# SPDX-License-Identifier: Apache-2.0
"""Lengths as the algorithms see them: validated integers, rounded up to the alignment.

:func:`round_up` is the package's one alignment round-up: ``round_up(5, 4) == 8``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

__all__ = ["as_int_lengths", "round_up"]

T_length = TypeVar("T_length", int, np.ndarray)


def round_up(length: T_length, alignment: int) -> T_length:
    """``length`` (an int or an integer array) rounded up to a multiple of ``alignment``."""
    if alignment == 1:
        return length
    return -(-length // alignment) * alignment


def as_int_lengths(lengths: Sequence[int] | np.ndarray) -> np.ndarray:
    """``lengths`` as a new 1-D ``int64`` array; integral floats (``3.0``) are accepted.

    Raises ``ValueError`` for another shape or a non-integer value (``3.5`` is never rounded:
    a fractional token count is a measuring bug upstream).
    """
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be one-dimensional, got shape {arr.shape}.")
    if arr.size and arr.dtype.kind not in "iu":
        if arr.dtype.kind != "f" or not np.all(np.floor(arr) == arr):
            raise ValueError(
                f"lengths must be integers (token counts), got dtype {arr.dtype}; "
                "measure lengths in encode_sample and pass ints."
            )
    return arr.astype(np.int64, copy=True)
