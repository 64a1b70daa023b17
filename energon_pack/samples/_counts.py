# SPDX-License-Identifier: Apache-2.0
"""``PackingCounts``: what packing did since the worker's previous pack, carried by each pack
(``pack.counts``) and summed by each batch (``batch.counts``), so the main process sees every
worker's counts: summing ``batch.counts`` over a run gives the loader's totals. Counts are a
record of the run, not content: ``restore_sample`` rebuilds an item with zero counts. See
docs/howto/loss.md.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["PackingCounts"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PackingCounts:
    """The snapshot: counters of one stretch of packing (one pack's, or a batch's sum).

    Add them with ``+``. A worker that packs ``[5, 3]`` (pack size 8) after truncating one
    sample: ``PackingCounts(samples=3, documents=3, truncated_overlong=1, packs=1,
    pack_tokens=8, pack_documents=2, pack_slots=8)``."""

    #: Source samples given to ``encode_sample``.
    samples: int = 0
    #: Documents ``encode_sample`` emitted (a split sample emits several).
    documents: int = 0
    #: Samples cut to the pack size (``overlong="truncate"``).
    truncated_overlong: int = 0
    #: Tokens those truncations cut off.
    truncated_tokens: int = 0
    #: Samples split into several documents (``overlong="split"``).
    split_overlong: int = 0
    #: Pieces those splits made.
    split_pieces: int = 0
    #: Pieces of split samples left out because they hold no target token.
    split_pieces_dropped: int = 0
    #: Samples dropped for being longer than the pack.
    dropped_overlong: int = 0
    #: Documents dropped because they encoded to zero tokens.
    dropped_empty: int = 0
    #: Documents dropped because their media alone exceed a per-pack media budget
    #: (``max_media_tokens_per_pack`` / ``max_media_per_pack``): no pack could hold them.
    dropped_over_budget: int = 0
    #: Samples energon's error handler skipped (a corrupt image, bad UTF-8, an encoder error).
    skipped: int = 0
    #: Images with more than 8 bits per value (PIL modes ``I;16``, ``I``, ``F``): kept, but the
    #: processor clips them to 8 bits (a 16-bit scan turns nearly white); convert them to 8 bits.
    high_bit_depth_images: int = 0
    #: Packs built.
    packs: int = 0
    #: Real tokens in those packs.
    pack_tokens: int = 0
    #: Documents in those packs.
    pack_documents: int = 0
    #: Slots of those packs (``packs * pack_size``).
    pack_slots: int = 0
    #: Real tokens in those packs per dataset of a metadataset blend (index: the dataset's
    #: place in the blend); ``()`` without a blend. Trailing zeros are left out.
    dataset_tokens: tuple[int, ...] = ()
    #: Documents in those packs per blended dataset.
    dataset_documents: tuple[int, ...] = ()
    #: Loss tokens (labels other than -100) in those packs per blended dataset.
    dataset_loss_tokens: tuple[int, ...] = ()

    def __add__(self, other: PackingCounts) -> PackingCounts:
        if not isinstance(other, PackingCounts):
            return NotImplemented
        return self._combine(other, 1)

    def __sub__(self, other: PackingCounts) -> PackingCounts:
        if not isinstance(other, PackingCounts):
            return NotImplemented
        return self._combine(other, -1)

    def _combine(self, other: PackingCounts, sign: int) -> PackingCounts:
        ints = [a + sign * b for a, b in zip(_ints(self), _ints(other))]
        return _counts(ints, [_add(a, b, sign) for a, b in zip(_per(self), _per(other))])

    def dataset_shares(self, counter: str = "dataset_tokens") -> tuple[float, ...]:
        """Each blended dataset's share (0..1) of ``counter`` (``dataset_tokens``,
        ``dataset_documents`` or ``dataset_loss_tokens``): ``(0.5, 0.5)`` for a blend that
        trained as many tokens on each; ``()`` without a blend."""
        values = getattr(self, counter)
        total = sum(values)
        return tuple(v / total for v in values) if total else ()

    @classmethod
    def total(cls, counts: Iterable[PackingCounts | None]) -> PackingCounts:
        """The sum of ``counts`` (``None`` entries count as zero)."""
        present = [c for c in counts if c is not None]
        ints = [sum(column) for column in zip(*map(_ints, present))] or [0] * len(INT_COUNTERS)
        per: list[tuple[int, ...]] = [(), (), ()]
        for c in present:  # a batch of one blend's packs; () without a blend
            if any(_per(c)):
                per = [_add(a, b, 1) for a, b in zip(per, _per(c))]
        return _counts(ints, per)

    @property
    def dropped(self) -> int:
        """Samples dropped by the over-long policy, for being empty or over a media budget (not
        the skipped ones)."""
        return self.dropped_overlong + self.dropped_empty + self.dropped_over_budget

    @property
    def fill(self) -> float:
        """Real tokens / pack slots (0.0 without packs)."""
        return self.pack_tokens / self.pack_slots if self.pack_slots else 0.0

    @property
    def documents_per_pack(self) -> float:
        """Mean documents per pack (0.0 without packs)."""
        return self.pack_documents / self.packs if self.packs else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The counters plus ``fill``, ``documents_per_pack`` and ``dropped`` (for a logger)."""
        out: dict[str, Any] = dataclasses.asdict(self)
        out.update(fill=self.fill, documents_per_pack=self.documents_per_pack)
        out["dropped"] = self.dropped
        return out


#: The counters per blended dataset (tuples, indexed by the dataset's place in the blend).
DATASET_COUNTERS = ("dataset_tokens", "dataset_documents", "dataset_loss_tokens")
#: The integer counters.
INT_COUNTERS = tuple(
    f.name for f in dataclasses.fields(PackingCounts) if f.name not in DATASET_COUNTERS
)


#: Every field in declaration order, the integer counters' values of one ``PackingCounts`` (a
#: tuple) and its per-dataset tuples (``PackingCounts(**dict)`` of a frozen slots dataclass
#: with 19 fields costs about 6 us: a batch of 8 packs summed its counts in 0.2 ms).
_FIELDS = INT_COUNTERS + DATASET_COUNTERS
_ints = operator.attrgetter(*INT_COUNTERS)
_per = operator.attrgetter(*DATASET_COUNTERS)
_SETTERS = tuple(getattr(PackingCounts, name).__set__ for name in _FIELDS)


def _counts(ints: Sequence[int], per: Sequence[tuple[int, ...]]) -> PackingCounts:
    """``PackingCounts`` of the integer counters' values and the per-dataset tuples, both in
    declaration order, set through the slots (what ``__init__`` does, without the keywords)."""
    out = object.__new__(PackingCounts)
    for setter, value in zip(_SETTERS, (*ints, *per)):
        setter(out, value)
    return out


def _add(a: tuple[int, ...], b: tuple[int, ...], sign: int) -> tuple[int, ...]:
    """``a + sign * b`` element by element (the shorter padded with zeros), trailing zeros cut:
    ``_add((1, 2), (3,), 1) == (4, 2)``, ``_add((1,), (1,), -1) == ()``."""
    if not a and not b:  # no blend: nothing to add
        return ()
    n = max(len(a), len(b))
    out = [(a[i] if i < len(a) else 0) + sign * (b[i] if i < len(b) else 0) for i in range(n)]
    return trimmed(out)


def trimmed(values: Sequence[int]) -> tuple[int, ...]:
    """``values`` as a tuple without trailing zeros: ``trimmed([3, 0]) == (3,)``."""
    out = list(values)
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)
