# SPDX-License-Identifier: Apache-2.0
"""Options every packing algorithm honours, and the validation of the lengths it receives.

Two options change what a valid pack is:

* ``alignment``: each length is rounded up to a multiple before packing (context parallelism
  needs every document padded to a multiple of ``2 * CP``). With ``alignment=4`` the lengths
  ``[5, 8, 1]`` occupy ``[8, 8, 4]`` slots, so a pack of capacity 16 holds ``5`` and ``8`` but not
  all three (8 + 8 + 4 = 20 > 16).
* ``max_samples_per_pack``: a cap on the number of documents in one pack (some kernels, such as
  TransformerEngine's THD attention, bound the number of segments per sequence).

Algorithms themselves see only the already-aligned, validated ``int64`` array; the public entry
point :func:`energon_pack.algorithms.pack_lengths` calls :func:`prepare_lengths` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PackOptions", "as_int_lengths", "prepare_lengths"]


@dataclass(frozen=True, kw_only=True)
class PackOptions:
    """Options shared by every algorithm.

    Attributes:
        max_samples_per_pack: At most this many samples in one pack (``None``: no cap).
        alignment: Each length is rounded up to a multiple of this before packing (1: none).
    """

    max_samples_per_pack: int | None = None
    alignment: int = 1

    def __post_init__(self) -> None:
        if self.max_samples_per_pack is not None and self.max_samples_per_pack < 1:
            raise ValueError(
                f"max_samples_per_pack={self.max_samples_per_pack} must be >= 1 "
                "(or None for no cap)."
            )
        if self.alignment < 1:
            raise ValueError(
                f"alignment={self.alignment} must be >= 1 (use 1 for no alignment, "
                "2 * context_parallel_size for context parallelism)."
            )


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


def prepare_lengths(
    lengths: Sequence[int] | np.ndarray, capacity: int, alignment: int = 1
) -> np.ndarray:
    """Validate ``lengths`` against ``capacity`` and round them up to ``alignment``.

    Returns a new 1-D ``int64`` array. Raises ``ValueError`` naming the offending value and what
    to do: a non-positive capacity, a non-positive length, or a length that exceeds the capacity
    (after alignment). Over-long samples are the encoder's business (truncate, split or drop
    them there); the algorithms never cut a sample.
    """
    if not isinstance(capacity, (int, np.integer)) or isinstance(capacity, bool) or capacity < 1:
        raise ValueError(
            f"capacity={capacity!r} must be a positive integer (the pack size in tokens)."
        )
    if alignment < 1:
        raise ValueError(f"alignment={alignment} must be >= 1 (use 1 for no alignment).")
    arr = as_int_lengths(lengths)
    if arr.size == 0:
        return arr
    low = int(arr.min())
    if low <= 0:
        i = int(np.argmin(arr))
        raise ValueError(
            f"lengths[{i}]={low} is not positive: every sample needs at least one token; "
            "drop empty samples before packing."
        )
    if alignment > 1:
        arr += (-arr) % alignment
    high = int(arr.max())
    if high > capacity:
        i = int(np.argmax(arr))
        aligned = (
            f" (after rounding up to a multiple of alignment={alignment})" if alignment > 1 else ""
        )
        raise ValueError(
            f"lengths[{i}]={high}{aligned} exceeds capacity={capacity}: truncate, split or drop "
            "over-long samples before packing (see OverlongPolicy), or raise the pack size."
        )
    return arr
