# SPDX-License-Identifier: Apache-2.0
"""Media rows of several documents joined into one array: a document's rows are a tensor
(copied) or a :class:`RowSource` that writes itself into its slice of the pack's array, so a
light buffer's packed image is written once, into the pack (``PendingPixels`` in
``energon_pack/encoding/_pixels.py``). See docs/howto/light-media.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["RowSource", "concat_rows"]


@runtime_checkable
class RowSource(Protocol):
    """Rows that write themselves: ``shape`` ``(rows, dim)``, ``dtype``, ``write_into(out)``."""

    shape: torch.Size
    dtype: torch.dtype

    def write_into(self, out: torch.Tensor) -> None:
        """Write the rows into ``out`` (a contiguous ``shape`` tensor of ``dtype``)."""


def concat_rows(parts: Sequence[torch.Tensor | RowSource]) -> torch.Tensor:
    """``torch.cat(parts)`` where parts may be :class:`RowSource`\\ s (written in place).

    One ``(sum of rows, dim)`` tensor (see :func:`empty_rows`); tensors are copied into their
    slice, row sources write into theirs. Values and dtype are ``torch.cat``'s.
    """
    dims = {tuple(p.shape[1:]) for p in parts if p.shape[0] > 0} or {tuple(parts[0].shape[1:])}
    dtypes = {p.dtype for p in parts}
    uniform = len(dims) == 1 and len(dtypes) == 1
    if all(isinstance(p, torch.Tensor) for p in parts) and not (
        uniform and _numpy_dtype(parts[0].dtype)
    ):
        return torch.cat(list(parts))  # mixed dtypes or shapes: torch.cat's rules and errors
    if not uniform:
        raise ValueError(f"cannot join media rows of shapes {[tuple(p.shape) for p in parts]}")
    out = empty_rows((sum(int(p.shape[0]) for p in parts), *dims.pop()), dtypes.pop())
    start = 0
    for part in parts:
        end = start + int(part.shape[0])
        if isinstance(part, torch.Tensor):
            out[start:end].copy_(part)
        else:
            part.write_into(out[start:end])
        start = end
    return out


def _numpy_dtype(dtype: torch.dtype) -> bool:
    return dtype in (torch.float32, torch.float16, torch.float64, torch.int32, torch.int64)


def empty_rows(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized tensor for a pack's media rows, in memory NumPy allocates (NumPy asks
    for transparent huge pages on large arrays; see docs/benchmarks/media-buffer.md). Same
    values as ``torch.empty``; dtypes NumPy lacks use ``torch.empty``."""
    if not _numpy_dtype(dtype):
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(np.empty(shape, dtype=torch.empty(0, dtype=dtype).numpy().dtype))
