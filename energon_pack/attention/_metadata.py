# SPDX-License-Identifier: Apache-2.0
"""Per-token document metadata of packed rows (:class:`DocumentMetadata`), from lengths only.

Each document owns a *slot* (its tokens, then its alignment padding; the row's tail padding
joins the last slot), so slots tile the row; ``cu_seqlens*`` run over the row-major flattening
``(B * L,)``. Worked example and conventions: ``docs/concepts/metadata.md``.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from energon_pack.algorithms import round_up

__all__ = ["DocumentMetadata", "aligned_lengths", "document_metadata", "position_ids_from_lengths"]


@dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class DocumentMetadata:
    """Document metadata of ``B`` packed rows of length ``L`` (``D`` slots in all).

    The per-token fields (``position_ids``, ``segment_ids``, ``document_borders``,
    ``seq_idx``) are computed from the lengths when first read (on the host, then placed on
    the device of ``cu_seqlens``) and kept in :attr:`computed`: a loader worker sends only
    the lengths and ``cu_seqlens*``, and a training step computes only what its kernel reads.
    """

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
    #: The per-token fields computed so far, by name (not part of the value: derived).
    computed: dict[str, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    @property
    def position_ids(self) -> torch.Tensor:
        """(B, L) int64, position inside the slot; padding continues its slot's count."""
        return self._per_token("position_ids")

    @property
    def segment_ids(self) -> torch.Tensor:
        """(B, L) int64, 1..k per row for real tokens, 0 on alignment and tail padding."""
        return self._per_token("segment_ids")

    @property
    def document_borders(self) -> torch.Tensor:
        """(B, L) bool, True at the first token of each document and at the start of padding."""
        return self._per_token("document_borders")

    @property
    def seq_idx(self) -> torch.Tensor:
        """(B, L) int32, index of the slot in the flattened batch (0..D-1, row-major)."""
        return self._per_token("seq_idx")

    def _per_token(self, name: str) -> torch.Tensor:
        value = self.computed.get(name)
        if value is None:
            rows = len(self.slot_lengths)
            length = sum(self.slot_lengths[0]) if rows else 0
            value = _PER_TOKEN[name](_Slots.of(self), (rows, length))
            if self.cu_seqlens.device.type != "cpu":
                value = value.to(self.cu_seqlens.device)
            self.computed[name] = value
        return value

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> DocumentMetadata:
        """The same metadata with every tensor on ``device`` (ints and lengths unchanged);
        per-token fields not computed yet are computed when read and placed there."""
        return replace(
            self,
            cu_seqlens=self.cu_seqlens.to(device, non_blocking=non_blocking),
            cu_seqlens_padded=self.cu_seqlens_padded.to(device, non_blocking=non_blocking),
            computed={k: v.to(device, non_blocking=non_blocking) for k, v in self.computed.items()},
        )


def aligned_lengths(doc_lengths: Sequence[int], alignment: int) -> list[int]:
    """Round each length up to a multiple of ``alignment``: ``([3, 2, 1], 4) -> [4, 4, 4]``."""
    if alignment < 1:
        raise ValueError(f"alignment must be >= 1, got {alignment}")
    if alignment == 1:
        return list(doc_lengths)
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
    if min(real) < 1 or not all(map(operator.le, real, padded)):  # C loops; name the first
        i, n, p = next((i, n, p) for i, (n, p) in enumerate(zip(real, padded)) if n < 1 or p < n)
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
    empty: Callable[[tuple[int, ...], torch.dtype], torch.Tensor] | None = None,
) -> DocumentMetadata:
    """Build :class:`DocumentMetadata` for rows of documents.

    Args:
        doc_lengths: per row, the real length of each document (all >= 1).
        length: row length ``L``; defaults to the longest row's padded total.
        doc_lengths_padded: per row, the slot length of each document (alignment padding
            included); defaults to ``doc_lengths``.
        empty: allocates the tensors (``empty(shape, dtype)``, contiguous CPU), e.g. views of
            one buffer (:class:`~energon_pack.samples.Arena`); default ``torch.empty``.

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
    slot_rows: list[tuple[int, ...]] = []
    for r, (real, padded) in enumerate(zip(doc_lengths, padded_rows)):
        _check_row(r, real, padded, length)
        slots = list(padded)
        slots[-1] += length - sum(padded)
        slot_rows.append(tuple(slots))
        real_flat.extend(real)
        slot_flat.extend(slots)
    new = empty or _torch_empty
    cu_real = new((len(real_flat) + 1,), torch.int32)
    cu_padded = new((len(slot_flat) + 1,), torch.int32)
    cu_real.numpy()[:] = list(itertools.accumulate(real_flat, initial=0))
    cu_padded.numpy()[:] = list(itertools.accumulate(slot_flat, initial=0))
    return DocumentMetadata(
        cu_seqlens=cu_real,
        cu_seqlens_padded=cu_padded,
        max_seqlen=max(real_flat, default=0),
        max_seqlen_padded=max(slot_flat, default=0),
        doc_lengths=tuple(tuple(r) for r in doc_lengths),
        doc_lengths_padded=tuple(tuple(r) for r in padded_rows),
        slot_lengths=tuple(slot_rows),
    )


@dataclass(frozen=True)
class _Slots:
    """The flattened slots of a metadata: starts (``D + 1``, the last the total), slot and
    real lengths, and each slot's segment id (1..k in its row)."""

    starts: list[int]
    slots: list[int]
    real: list[int]
    segments: list[int]

    @classmethod
    def of(cls, meta: DocumentMetadata) -> _Slots:
        slots = [n for row in meta.slot_lengths for n in row]
        real = [n for row in meta.doc_lengths for n in row]
        segments = [k for row in meta.doc_lengths for k in range(1, len(row) + 1)]
        return cls(list(itertools.accumulate(slots, initial=0)), slots, real, segments)


def _positions(s: _Slots, shape: tuple[int, int]) -> torch.Tensor:
    return position_ids_from_lengths(s.slots).view(shape)


def _slot_index(s: _Slots, shape: tuple[int, int]) -> torch.Tensor:
    idx = np.repeat(np.arange(len(s.slots), dtype=np.int32), s.slots)
    return torch.from_numpy(idx).view(shape)


def _segments(s: _Slots, shape: tuple[int, int]) -> torch.Tensor:
    """Segment ids 1..k per row on real tokens, 0 on each slot's padding: (id, 0) pairs
    repeated over (real, padding) counts."""
    real = np.asarray(s.real, dtype=np.int64)
    pad = np.asarray(s.slots, dtype=np.int64) - real
    ids = np.stack([np.asarray(s.segments, dtype=np.int64), np.zeros_like(pad)], 1).ravel()
    return torch.from_numpy(np.repeat(ids, np.stack([real, pad], 1).ravel())).view(shape)


def _borders(s: _Slots, shape: tuple[int, int]) -> torch.Tensor:
    out = torch.zeros(shape, dtype=torch.bool)
    borders = out.numpy().reshape(-1)
    starts = np.asarray(s.starts[:-1], dtype=np.int64)
    real, slots = np.asarray(s.real, dtype=np.int64), np.asarray(s.slots, dtype=np.int64)
    borders[starts] = True
    borders[(starts + real)[real < slots]] = True  # the first padding token of a slot
    return out


_PER_TOKEN = {
    "position_ids": _positions,
    "segment_ids": _segments,
    "document_borders": _borders,
    "seq_idx": _slot_index,
}


def _torch_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)
