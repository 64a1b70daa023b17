# SPDX-License-Identifier: Apache-2.0
""":class:`PackingStats`: what one encoder did in this process (fill, documents per pack, drops,
truncations, skips), logged on ``energon_pack.stats`` every ``log_every`` packs. With workers
each process counts its own; every pack carries its worker's
:class:`~energon_pack.samples.PackingCounts` since the previous pack and every batch their sum
(``batch.counts``), so summing them gives the loader's totals. Docs: docs/howto/loss.md.

    stats.record_pack(doc_lengths=[5, 3], pack_size=8)   # fill 1.0, 2 documents
    stats.record_pack(doc_lengths=[4], pack_size=8)      # fill 0.5, 1 document
    stats.fill == 12 / 16 == 0.75; stats.documents_per_pack == 1.5
"""

from __future__ import annotations

import logging
import operator
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from energon_pack.samples import PackingCounts
from energon_pack.samples._counts import DATASET_COUNTERS, INT_COUNTERS, _add, _counts, trimmed

__all__ = ["PackingStats", "logger"]

#: The logger the encoders report to (drops, truncations, periodic summaries).
logger = logging.getLogger("energon_pack.stats")


#: The integer counters of ``PackingCounts``: ``PackingStats`` has each as an attribute.
_COUNTERS = INT_COUNTERS
_NO_DATASETS = ((),) * len(DATASET_COUNTERS)


@dataclass(kw_only=True)
class PackingStats:
    """The accumulator: one task encoder's running counters in one process, since its start.

    Every counter of :class:`~energon_pack.samples.PackingCounts` (``samples``, ``documents``,
    ``truncated_overlong``, ..., ``pack_slots``; declared and documented there, once) is an
    attribute read and written in place: ``stats.samples += 1``.

    Attributes:
        last_fill, last_documents: Fill and document count of the most recent pack.
        dropped_keys: ``__key__`` of the most recent dropped samples (at most 1024).
        skipped_samples: ``(key, reason)`` of the most recent skipped samples (at most 1024).
        high_bit_depth_samples: ``(key, mode)`` of the most recent images with more than 8
            bits per value (at most 1024).
        log_every: Log a summary every this many packs (0: never).
    """

    #: The counters now, by ``PackingCounts`` field name (each also an attribute, see below).
    _now: dict[str, int] = field(default_factory=lambda: dict.fromkeys(_COUNTERS, 0))
    #: The counters per blended dataset now (``dataset_tokens``, ...), as lists.
    _per_dataset: dict[str, list[int]] = field(
        default_factory=lambda: {n: [] for n in DATASET_COUNTERS}
    )
    last_fill: float = 0.0
    last_documents: int = 0
    dropped_keys: deque[str] = field(default_factory=lambda: deque(maxlen=1024))
    skipped_samples: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=1024))
    high_bit_depth_samples: deque[tuple[str, str]] = field(
        default_factory=lambda: deque(maxlen=1024)
    )
    log_every: int = 1000
    #: The counters at the last ``take_counts()`` (what the next pack's counts start from).
    _taken_ints: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(_COUNTERS, 0), repr=False
    )
    _taken_per: list[tuple[int, ...]] = field(
        default_factory=lambda: [() for _ in DATASET_COUNTERS], repr=False
    )

    # the derived figures are PackingCounts', over everything counted so far

    @property
    def dropped(self) -> int:
        """All dropped samples (over-long, empty and over a media budget)."""
        return self.counts().dropped

    @property
    def fill(self) -> float:
        """Real tokens / pack slots over all packs built so far (0.0 before the first)."""
        return self.counts().fill

    @property
    def documents_per_pack(self) -> float:
        """Mean number of documents per pack."""
        return self.counts().documents_per_pack

    def record_drop(self, key: str, reason: str, *, kind: str = "overlong") -> None:
        """Count a dropped sample in ``dropped_<kind>`` (``overlong``, ``empty`` or
        ``over_budget``) and log it at WARNING with the reason."""
        counter = f"dropped_{kind}"
        if counter not in self._now:
            raise ValueError(f"record_drop(kind={kind!r}): no counter {counter!r}.")
        self._now[counter] += 1
        self.dropped_keys.append(key)
        logger.warning("energon_pack dropped sample %r: %s", key, reason)

    def record_skip(self, key: str, reason: str) -> None:
        """Count a sample that energon's error handler skipped (the handler logs it)."""
        self.skipped += 1
        self.skipped_samples.append((key, reason))

    def record_high_bit_depth(self, key: str, modes: Sequence[str]) -> None:
        """Count images of sample ``key`` with more than 8 bits per value (``modes``: their PIL
        modes) and log a WARNING naming the sample, the mode and the fix (once per process;
        later ones at DEBUG, all kept in ``high_bit_depth_samples``)."""
        for mode in modes:
            first = self.high_bit_depth_images == 0
            self.high_bit_depth_images += 1
            self.high_bit_depth_samples.append((key, mode))
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "energon_pack sample %r has a %s image (more than 8 bits per value): the "
                "processor, like PIL's convert('RGB'), clips it to 8 bits, so most values "
                "become 255 (white); convert the dataset's images to 8 bits (e.g. scale "
                "16-bit values by 1/257). Counted in stats.high_bit_depth_images",
                key,
                mode,
            )

    def counts(self) -> PackingCounts:
        """The counters now, as a :class:`~energon_pack.samples.PackingCounts`."""
        per = {n: trimmed(v) for n, v in self._per_dataset.items()}
        return PackingCounts(**self._now, **per)

    def take_counts(self) -> PackingCounts:
        """The counts since the previous call (or since the start): what the next pack carries.

        ``stats.record_pack(doc_lengths=[5, 3], pack_size=8); stats.take_counts().packs == 1``;
        a second ``take_counts()`` right after it is all zeros.
        """
        now = self._now
        # both dicts hold every counter in one order (dict.fromkeys(_COUNTERS))
        ints = list(map(operator.sub, now.values(), self._taken_ints.values()))
        self._taken_ints = dict(now)
        if not any(self._per_dataset.values()) and not any(self._taken_per):
            return _counts(ints, _NO_DATASETS)  # no blend: nothing per dataset
        per = [trimmed(self._per_dataset[name]) for name in DATASET_COUNTERS]
        delta = [_add(a, b, -1) for a, b in zip(per, self._taken_per)]
        self._taken_per = per
        return _counts(ints, delta)

    def record_truncation(self, key: str, lost_tokens: int, pack_size: int) -> None:
        """Count a truncated sample; the first one per process is logged at WARNING, the rest
        at DEBUG (their totals are in every summary line)."""
        self.truncated_overlong += 1
        self.truncated_tokens += lost_tokens
        level = logging.WARNING if self.truncated_overlong == 1 else logging.DEBUG
        logger.log(
            level,
            "energon_pack truncated sample %r to pack_size=%d (%d tokens lost); further "
            "truncations are counted in stats.truncated_overlong",
            key,
            pack_size,
            lost_tokens,
        )

    def record_dropped_pieces(self, key: str, count: int) -> None:
        """Count ``count`` target-free pieces of split sample ``key`` that were left out; the
        first time per process is logged at WARNING, later ones at DEBUG."""
        first = self.split_pieces_dropped == 0
        self.split_pieces_dropped += count
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "energon_pack split sample %r and left out %d piece(s) without any target token "
            "(e.g. a prompt longer than pack_size); counted in stats.split_pieces_dropped",
            key,
            count,
        )

    def record_pack(
        self,
        *,
        doc_lengths: Sequence[int],
        pack_size: int,
        datasets: Sequence[int | None] = (),
        loss_tokens: Sequence[int] = (),
    ) -> None:
        """Count one pack of documents with these real lengths in a pack of ``pack_size``;
        with ``datasets`` (each document's place in a metadataset blend, or None) and
        ``loss_tokens`` (each document's), also per blended dataset."""
        for i, dataset in enumerate(datasets):
            if dataset is not None:
                self._count_dataset(dataset, doc_lengths[i], loss_tokens[i])
        tokens = int(sum(doc_lengths))
        self.packs += 1
        self.pack_tokens += tokens
        self.pack_documents += len(doc_lengths)
        self.pack_slots += pack_size
        self.last_fill = tokens / pack_size if pack_size else 0.0
        self.last_documents = len(doc_lengths)
        if self.log_every and self.packs % self.log_every == 0:
            logger.info("energon_pack stats: %s", self.summary())

    def _count_dataset(self, dataset: int, tokens: int, loss_tokens: int) -> None:
        for name, value in zip(DATASET_COUNTERS, (tokens, 1, loss_tokens)):
            counter = self._per_dataset[name]
            counter.extend([0] * (dataset + 1 - len(counter)))
            counter[dataset] += int(value)

    def as_dict(self) -> dict[str, Any]:
        """The counters and derived figures as a flat dict (for a metrics logger): every
        :class:`~energon_pack.samples.PackingCounts` field with ``fill``,
        ``documents_per_pack`` and ``dropped``, plus ``last_fill`` and ``last_documents``."""
        return {
            **self.counts().as_dict(),
            "last_fill": self.last_fill,
            "last_documents": self.last_documents,
        }

    def summary(self) -> str:
        """One line: ``packs=10 fill=97.3% docs/pack=4.20 truncated=1 split=0 dropped=2
        skipped=1``."""
        return (
            f"packs={self.packs} fill={100 * self.fill:.1f}% "
            f"docs/pack={self.documents_per_pack:.2f} truncated={self.truncated_overlong} "
            f"split={self.split_overlong} dropped={self.dropped} skipped={self.skipped}"
        )


def _counter(name: str) -> property:
    """``stats.<name>``: the counter ``name`` in ``stats._now``, read and written in place."""

    def get(self: PackingStats) -> int:
        return self._now[name]

    def set_(self: PackingStats, value: int) -> None:
        self._now[name] = value

    return property(get, set_, doc=f"The ``PackingCounts.{name}`` counter of this process.")


for _name in _COUNTERS:
    setattr(PackingStats, _name, _counter(_name))
