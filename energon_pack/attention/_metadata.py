# SPDX-License-Identifier: Apache-2.0
"""Per-token document metadata of packed rows (:class:`DocumentMetadata`), from lengths only.

Each document owns a *slot* (its tokens, then its alignment padding; the row's tail padding
joins the last slot), so slots tile the row; ``cu_seqlens*`` run over the row-major flattening
``(B * L,)``. Worked example and conventions: ``docs/concepts/metadata.md``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
import torch

from energon_pack.algorithms import round_up

__all__ = ["DocumentMetadata", "aligned_lengths", "document_metadata", "position_ids_from_lengths"]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class DocumentMetadata:
    """Document metadata of ``B`` packed rows of length ``L`` (``D`` slots in all)."""

    #: (B, L) int64, position inside the slot; padding continues its slot's count.
    position_ids: torch.Tensor
    #: (B, L) int64, 1..k per row for real tokens, 0 on alignment and tail padding.
    segment_ids: torch.Tensor
    #: (B, L) bool, True at the first token of each document and at the start of padding.
    document_borders: torch.Tensor
    #: (B, L) int32, index of the slot in the flattened batch (0..D-1, row-major).
    seq_idx: torch.Tensor
    #: (D + 1,) int32, cumulative real document lengths, starting at 0.
    cu_seqlens: torch.Tensor
    #: (D + 1,) int32, slot offsets in the flattened (B * L,) batch; last entry == B * L.
    cu_seqlens_padded: torch.Tensor
    #: Longest real document (Python int).
    max_seqlen: int
    #: Longest slot (Python int); the ``max_seqlen`` that goes with ``cu_seqlens_padded``.
    max_seqlen_padded: int
    #: Per row: real document lengths.
    doc_lengths: tuple[tuple[int, ...], ...]
    #: Per row: document lengths after alignment padding (without the row's tail padding).
    doc_lengths_padded: tuple[tuple[int, ...], ...]
    #: Per row: slot lengths (alignment padding included, tail padding in the last slot).
    slot_lengths: tuple[tuple[int, ...], ...]

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> DocumentMetadata:
        """The same metadata with every tensor on ``device`` (ints and lengths unchanged)."""
        return replace(
            self,
            **{
                f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
                for f in fields(self)
                if isinstance(getattr(self, f.name), torch.Tensor)
            },
        )


def aligned_lengths(doc_lengths: Sequence[int], alignment: int) -> list[int]:
    """Round each length up to a multiple of ``alignment``: ``([3, 2, 1], 4) -> [4, 4, 4]``."""
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    return [round_up(n, alignment) for n in doc_lengths]


def position_ids_from_lengths(slot_lengths: Sequence[int]) -> torch.Tensor:
    """``(sum(slot_lengths),)`` int64 positions restarting at 0 per slot: ``[3, 2] -> 0 1 2 0 1``."""
    if len(slot_lengths) <= 16:  # slices of one ramp: one copy, cheapest for few slots
        ramp = _ramp(max(slot_lengths, default=0))
        return torch.from_numpy(np.concatenate([ramp[:k] for k in slot_lengths] or [ramp[:0]]))
    n = sum(slot_lengths)
    starts = np.fromiter(itertools.accumulate(slot_lengths, initial=0), np.int64)[:-1]
    return torch.from_numpy(_ramp(n)[:n] - np.repeat(starts, slot_lengths))


_RAMP = np.zeros(0, dtype=np.int64)


def _ramp(n: int) -> np.ndarray:
    """``0..n-1`` or longer, read-only (one array grown on demand, shared by every caller)."""
    global _RAMP
    if len(_RAMP) < n:
        _RAMP = np.arange(max(n, 2 * len(_RAMP), 1 << 14), dtype=np.int64)
        _RAMP.flags.writeable = False
    return _RAMP


def _check_row(row: int, real: Sequence[int], padded: Sequence[int], length: int) -> None:
    if len(real) == 0:
        raise ValueError(f"row {row} has no document; every packed row needs at least one")
    if len(real) != len(padded):
        raise ValueError(
            f"row {row}: {len(real)} doc_lengths but {len(padded)} doc_lengths_padded; "
            "give one padded length per document"
        )
    for i, (n, p) in enumerate(zip(real, padded)):
        if n < 1 or p < n:
            raise ValueError(
                f"row {row}, document {i}: length {n}, padded length {p}; lengths must be "
                ">= 1 and padded lengths >= lengths (drop empty documents before packing)"
            )
    total = sum(padded)
    if total > length:
        raise ValueError(
            f"row {row}: documents fill {total} tokens but the row length is {length}; "
            "raise pad_to / length or pack fewer tokens"
        )


def document_metadata(
    doc_lengths: Sequence[Sequence[int]],
    *,
    length: int | None = None,
    doc_lengths_padded: Sequence[Sequence[int]] | None = None,
) -> DocumentMetadata:
    """Build :class:`DocumentMetadata` for rows of documents.

    Args:
        doc_lengths: per row, the real length of each document (all >= 1).
        length: row length ``L``; defaults to the longest row's padded total.
        doc_lengths_padded: per row, the slot length of each document (alignment padding
            included); defaults to ``doc_lengths``.

    Example: ``document_metadata([[3, 2, 1]], length=8).cu_seqlens_padded`` is
    ``tensor([0, 3, 5, 8], dtype=torch.int32)``.
    """
    padded_rows = doc_lengths if doc_lengths_padded is None else doc_lengths_padded
    if len(padded_rows) != len(doc_lengths):
        raise ValueError(
            f"{len(doc_lengths)} rows of doc_lengths but {len(padded_rows)} rows of "
            "doc_lengths_padded"
        )
    if length is None:
        length = max((sum(p) for p in padded_rows), default=0)
    real_flat: list[int] = []
    slot_flat: list[int] = []
    seg_flat: list[int] = []
    slot_rows: list[tuple[int, ...]] = []
    for r, (real, padded) in enumerate(zip(doc_lengths, padded_rows)):
        _check_row(r, real, padded, length)
        slots = list(padded)
        slots[-1] += length - sum(padded)
        slot_rows.append(tuple(slots))
        real_flat.extend(real)
        slot_flat.extend(slots)
        seg_flat.extend(range(1, len(real) + 1))
    num_rows = len(doc_lengths)
    n = num_rows * length
    # one NumPy expansion per field, then zero-copy to torch
    slots_np = np.asarray(slot_flat, dtype=np.int64)
    real_np = np.asarray(real_flat, dtype=np.int64)
    cu_padded = np.zeros(len(slot_flat) + 1, dtype=np.int64)
    np.cumsum(slots_np, out=cu_padded[1:])
    slot_of_token = np.repeat(np.arange(len(slot_flat), dtype=np.int32), slots_np)
    # positions 0..slot-1 per slot (padding continues the count)
    pos = position_ids_from_lengths(slot_flat).numpy()
    # segment ids 1..k per row on real tokens, 0 on each slot's padding: (id, 0) pairs repeated
    seg = np.repeat(
        np.stack([np.asarray(seg_flat, dtype=np.int64), np.zeros_like(real_np)], 1).ravel(),
        np.stack([real_np, slots_np - real_np], 1).ravel(),
    )
    # borders: each slot's first token, and its first padding token (where it has padding)
    borders = np.zeros(n, dtype=bool)
    borders[cu_padded[:-1]] = True
    pad_start = cu_padded[:-1] + real_np
    borders[pad_start[real_np < slots_np]] = True
    cu_real = np.zeros(len(real_flat) + 1, dtype=np.int32)
    np.cumsum(real_flat, out=cu_real[1:])
    shape = (num_rows, length)
    return DocumentMetadata(
        position_ids=torch.from_numpy(pos.reshape(shape)),
        segment_ids=torch.from_numpy(seg.reshape(shape)),
        document_borders=torch.from_numpy(borders.reshape(shape)),
        seq_idx=torch.from_numpy(slot_of_token.reshape(shape)),
        cu_seqlens=torch.from_numpy(cu_real),
        cu_seqlens_padded=torch.from_numpy(cu_padded.astype(np.int32)),
        max_seqlen=max(real_flat, default=0),
        max_seqlen_padded=max(slot_flat, default=0),
        doc_lengths=tuple(tuple(r) for r in doc_lengths),
        doc_lengths_padded=tuple(tuple(r) for r in padded_rows),
        slot_lengths=tuple(slot_rows),
    )
