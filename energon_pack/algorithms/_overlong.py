# SPDX-License-Identifier: Apache-2.0
"""What to do with a sample longer than the pack: the over-long policy, in one place.

The algorithms never cut a sample; the encoder (per document) and ``simulate`` (per length)
apply :func:`cut_overlong` first. Pack 4, a 9-token sample: TRUNCATE keeps ``[(0, 4)]``, SPLIT
``[(0, 4), (4, 8), (8, 9)]``, DROP nothing, ERROR raises. See docs/concepts/packing.md.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from energon_pack.algorithms._lengths import as_int_lengths

__all__ = [
    "OverlongCut",
    "OverlongPolicy",
    "OverlongSampleError",
    "apply_overlong",
    "cut_lengths",
    "cut_overlong",
]


class OverlongPolicy(str, enum.Enum):
    """How a sample longer than the pack size is handled (in ``encode_sample``)."""

    TRUNCATE = "truncate"
    SPLIT = "split"
    DROP = "drop"
    ERROR = "error"


class OverlongSampleError(ValueError):
    """A sample is longer than the pack and the over-long policy does not allow cutting it."""


@dataclass(frozen=True, kw_only=True)
class OverlongCut:
    """What the policy does to one sample (token ranges into it)."""

    #: The kept pieces, ``[start, end)`` token ranges in order (``[]``: the sample is dropped).
    pieces: list[tuple[int, int]]
    #: Pieces cut (SPLIT: before target-free ones were left out; otherwise 1, or 0 if dropped).
    made: int
    #: Each kept piece's number among the ``made`` ones (the encoder keys piece ``i`` ``"k#i"``).
    ids: list[int] = field(default_factory=lambda: [0])
    #: Tokens cut off by TRUNCATE (0 otherwise).
    lost: int = 0
    #: Why the whole sample was dropped (``None``: something is kept).
    dropped: str | None = None


def _too_long(name: str, n: int, pack_size: int, policy: OverlongPolicy, why: str) -> str:
    return (
        f"sample {name} has {n} tokens > pack_size={pack_size} ({why}); over-long policy is "
        f"{policy.value!r}: choose overlong='truncate', 'split' or 'drop', or raise pack_size."
    )


def _safe_cut(no_cut: np.ndarray, cut: int) -> int:
    """Move ``cut`` back so that it falls inside no span of ``no_cut``."""
    for s, e in no_cut:
        if s < cut < e:
            cut = int(s)
    return cut


def _any_target(mask: np.ndarray | None, start: int, end: int) -> bool:
    """Whether tokens ``[start, end)`` hold a target (``mask=None``: every token is one)."""
    return end > start if mask is None else bool(mask[start:end].any())


def _split(n: int, pack_size: int, no_cut: np.ndarray, name: str) -> list[tuple[int, int]]:
    pieces: list[tuple[int, int]] = []
    start = 0
    while start < n:
        end = _safe_cut(no_cut, min(start + pack_size, n))
        if end <= start:
            why = f"an image at token {start} is longer"
            raise OverlongSampleError(_too_long(name, n, pack_size, OverlongPolicy.SPLIT, why))
        pieces.append((start, end))
        start = end
    return pieces


def cut_overlong(
    length: int,
    pack_size: int,
    policy: OverlongPolicy | str,
    *,
    no_cut: np.ndarray | None = None,
    targets: np.ndarray | None = None,
    name: str = "?",
) -> OverlongCut:
    """The pieces one sample of ``length`` tokens becomes under ``policy`` (see module doc).

    Args:
        length: Tokens in the sample.
        pack_size: The pack size.
        policy: An :class:`OverlongPolicy` or its value.
        no_cut: ``(k, 2)`` int spans ``[start, end)`` no cut may fall inside (images).
        targets: Bool loss mask of the sample (``None``: every token is a target).
        name: How messages name the sample (its key, or its index).

    ``cut_overlong(9, 4, "split").pieces`` -> ``[(0, 4), (4, 8), (8, 9)]``.
    """
    policy = OverlongPolicy(policy)
    if length <= pack_size:
        return OverlongCut(pieces=[(0, length)], made=1)
    if policy is OverlongPolicy.ERROR:
        raise OverlongSampleError(_too_long(name, length, pack_size, policy, "no cutting allowed"))
    head = f"{length} tokens > pack_size={pack_size}"
    if policy is OverlongPolicy.DROP:
        return OverlongCut(pieces=[], made=0, ids=[], dropped=f"{head} (overlong='drop')")
    spans = np.zeros((0, 2), np.int64) if no_cut is None else np.asarray(no_cut).reshape(-1, 2)
    mask = None if targets is None else np.asarray(targets, dtype=bool)
    if policy is OverlongPolicy.TRUNCATE:
        cut = _safe_cut(spans, pack_size)
        if cut <= 0:
            why = "its first image alone is too long"
            raise OverlongSampleError(_too_long(name, length, pack_size, policy, why))
        if _any_target(mask, 1, length) and not _any_target(mask, 1, cut):
            why = (
                f"{head} and truncation keeps no target token (overlong='truncate'); raise "
                "pack_size, shorten the prompt, or use overlong='split'"
            )
            return OverlongCut(pieces=[], made=0, ids=[], dropped=why)
        return OverlongCut(pieces=[(0, cut)], made=1, lost=length - cut)
    pieces = _split(length, pack_size, spans, name)
    # Only a loss mask with some targets and some non-targets can leave a piece without one
    # (a piece's first token is never predicted, hence start + 1).
    partial = mask is not None and bool(mask[1:].any()) and not bool(mask[1:].all())
    ids = [i for i, (s, e) in enumerate(pieces) if not partial or _any_target(mask, s + 1, e)]
    if not ids:
        why = (
            f"{head} and no piece of it holds a target token (overlong='split'); raise "
            "pack_size or shorten the prompt"
        )
        return OverlongCut(pieces=[], made=len(pieces), ids=[], dropped=why)
    return OverlongCut(pieces=[pieces[i] for i in ids], made=len(pieces), ids=ids)


def cut_lengths(
    lengths: Sequence[int] | np.ndarray, pack_size: int, policy: OverlongPolicy | str
) -> tuple[np.ndarray, list[OverlongCut]]:
    """:func:`cut_overlong` on every length (every token a target, no spans).

    Returns the new ``int64`` lengths (pieces in stream order) and the cut of each over-long
    length, in order: ``cut_lengths([9, 3], 4, "truncate")`` -> ``([4, 3], [cut with lost=5])``.
    """
    policy = OverlongPolicy(policy)
    if pack_size < 1:
        raise ValueError(f"pack_size={pack_size} must be a positive integer.")
    arr = as_int_lengths(lengths)
    parts: list[np.ndarray] = []
    cuts: list[OverlongCut] = []
    prev = 0
    for i in np.flatnonzero(arr > pack_size).tolist():
        cuts.append(cut_overlong(int(arr[i]), pack_size, policy, name=str(i)))
        pieces = np.array([e - s for s, e in cuts[-1].pieces], dtype=np.int64)
        parts += [arr[prev:i], pieces]
        prev = i + 1
    if not parts:
        return arr, cuts
    return np.concatenate([*parts, arr[prev:]]), cuts


def apply_overlong(
    lengths: Sequence[int] | np.ndarray, pack_size: int, policy: OverlongPolicy | str
) -> np.ndarray:
    """The lengths after ``policy`` (see :func:`cut_lengths`); a new ``int64`` array.

    ``apply_overlong([9, 3], 4, "split")`` -> ``array([4, 4, 1, 3])``.
    """
    return cut_lengths(lengths, pack_size, policy)[0]
