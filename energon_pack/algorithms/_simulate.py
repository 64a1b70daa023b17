# SPDX-License-Identifier: Apache-2.0
"""Stream lengths through energon's packing buffer, exactly as ``PackingDataset`` does.

The lengths go through the spec's over-long policy, fill the reading buffer, and each full
buffer (plus the carried samples) is packed by the spec's algorithm. See
docs/concepts/packing.md.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from energon_pack.algorithms._carry_over import plan_carry_over
from energon_pack.algorithms._lengths import as_int_lengths
from energon_pack.algorithms._media import MediaLoad
from energon_pack.algorithms._overlong import OverlongCut, OverlongPolicy, cut_lengths
from energon_pack.algorithms._pack import pack_lengths
from energon_pack.algorithms._spec import CarryOver, PackingSpec, as_spec

__all__ = ["PackingResult", "SimulationResult", "simulate", "simulate_packs"]


@dataclass(frozen=True, kw_only=True)
class PackingResult:
    """The settings and counts of one packing pass (``fill`` = real tokens / pack slots): what
    :func:`simulate` and ``energon-pack analyze`` (a real loader) both report."""

    pack_size: int
    buffer_size: int
    algorithm: str
    overlong: str
    carry_over: CarryOver | None  #: the carry-over policy (``None``: stock packing)
    samples_in: int  #: documents read (before the over-long policy)
    samples_out: int  #: documents (pieces) in packs
    dropped_overlong: int
    truncated_overlong: int  #: samples cut to the pack size (overlong="truncate")
    split_overlong: int  #: samples split into pieces (overlong="split")
    dropped_over_budget: int = 0  #: samples whose media alone exceed a media budget (dropped)
    packs: int
    tokens: int  #: real tokens in all packs (after truncation/splitting)
    fill: float
    documents_per_pack: float  #: mean documents (pieces) per pack

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (``carry_over`` as a dict of its fields, or ``None``)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["carry_over"] = dataclasses.asdict(self.carry_over) if self.carry_over else None
        return out


@dataclass(frozen=True, kw_only=True)
class SimulationResult(PackingResult):
    """One simulated pass: the :class:`PackingResult` figures, bounds and buffer behaviour."""

    samples_packed: int  #: samples after the over-long policy (split may add, drop removes)
    truncated_tokens: int  #: tokens the truncations removed (not in ``tokens``)
    #: sum over select calls of the fewest packs its emitted samples need: ceil(slots /
    #: pack_size); with ``media`` and a media budget also at least ceil(media tokens /
    #: max_media_tokens_per_pack) and ceil((images + videos) / max_media_per_pack)
    lower_bound_packs: int
    lower_bound_fill: float  #: tokens / (lower_bound_packs * pack_size)
    #: ceil(all tokens / pack_size); with ``media`` and a media budget also at least
    #: ceil(all media tokens / budget) and ceil(all images + videos / budget), as above
    global_lower_bound_packs: int
    select_calls: int
    select_seconds: float
    max_age: int  #: most times one sample was carried
    max_wait_samples: int  #: most samples read between a sample's read and its emission
    max_carried_tokens: int  #: most pack slots held by carried samples after a select
    #: most media tokens in one pack (``None``: simulated without ``media``)
    max_media_tokens_per_pack: int | None = None
    #: most images + videos in one pack (``None``: simulated without ``media``)
    max_media_per_pack: int | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Tally:
    """Running figures of one simulated pass."""

    packs: int = 0
    tokens: int = 0  #: real tokens emitted
    samples_out: int = 0
    lb_packs: int = 0  #: sum over select calls of ``_bound_packs`` of the emitted samples
    select_calls: int = 0
    select_seconds: float = 0.0
    max_age: int = 0
    max_wait: int = 0
    max_carried_slots: int = 0


class _BufferModel:
    """energon's reading buffer and queue of pending packs over one stream of samples.

    ``lengths[i]`` is sample ``i``'s real token count, ``slots[i]`` what it takes in a pack
    (rounded up to the alignment). Samples are read in index order.
    """

    def __init__(
        self,
        lengths: list[int],
        slots: list[int],
        spec: PackingSpec,
        buffer_size: int,
        media: MediaLoad | None = None,
    ) -> None:
        self.lengths, self.slots, self.spec, self.buffer_size = lengths, slots, spec, buffer_size
        self.media = media  #: media load per sample id (None: text, no media budgets)
        #: sample ids the encoder drops (media over a budget): never read into the buffer
        self.dropped = _over_budget(media, spec)
        self.reading: list[int] = []  #: sample ids read since the last select
        self.carried: list[int] = []  #: sample ids carried (outside energon's buffer count)
        self.carried_ages: list[int] = []  #: times each carried sample was carried
        self.pending: deque[list[int]] = deque()  #: selected packs not yet emitted
        self.pending_samples = 0
        self.next = 0  #: the next sample id to read
        self.tally = _Tally()
        self.packs: list[list[int]] = []  #: the emitted packs (sample ids), in order

    def read(self) -> bool:
        """Step 1: fill until ``reading + pending == buffer_size``; False at end of data."""
        while len(self.reading) + self.pending_samples < self.buffer_size:
            if self.next >= len(self.lengths):
                return False
            if self.next in self.dropped:
                self.next += 1
                continue
            self.reading.append(self.next)
            self.next += 1
        return True

    def select(self, *, final: bool) -> None:
        """Step 2: pack the carried and read samples, queue the groups, keep the carried ones."""
        pool, spec, tally = self.carried + self.reading, self.spec, self.tally
        pool_slots = [self.slots[s] for s in pool]
        media = None if self.media is None else self.media.take(pool)
        t0 = time.perf_counter()
        bins = pack_lengths(pool_slots, spec, media=media)
        emit, carry, carry_ages = bins, [], []
        if spec.carry_over is not None:
            ages = self.carried_ages + [0] * len(self.reading)
            plan = plan_carry_over(
                pool_slots,
                ages,
                spec.pack_size,
                bins,
                spec.carry_over,
                final=final,
                spec=spec,
                media=media,
            )
            emit, carry, carry_ages = plan.emit, plan.carry, plan.carry_ages.tolist()
        tally.select_seconds += time.perf_counter() - t0
        tally.select_calls += 1
        emitted: list[int] = []
        for group in emit:
            ids = [pool[i] for i in group]
            self.pending.append(ids)
            self.pending_samples += len(ids)
            emitted += ids
        load = None if self.media is None else self.media.take(emitted)
        tally.lb_packs += _bound_packs(sum(self.slots[s] for s in emitted), load, spec)
        self.reading = []
        self.carried = [pool[i] for i in carry]
        self.carried_ages = carry_ages
        tally.max_age = max([tally.max_age, *carry_ages])
        tally.max_carried_slots = max(
            tally.max_carried_slots, sum(self.slots[s] for s in self.carried)
        )

    def emit(self) -> None:
        """Step 3: one pack out of the queue."""
        ids = self.pending.popleft()
        self.packs.append(ids)
        self.pending_samples -= len(ids)
        tally = self.tally
        tally.packs += 1
        tally.samples_out += len(ids)
        tally.tokens += sum(self.lengths[s] for s in ids)
        tally.max_wait = max(tally.max_wait, self.next - min(ids))

    def flush(self) -> None:
        """Step 4, end of data: the queue, then the partial buffer (carry-over emits all)."""
        while self.pending:
            self.emit()
        if self.reading or self.carried:
            self.select(final=True)
        while self.pending:
            self.emit()

    def run(self) -> _Tally:
        """Steps 1-4 over the whole stream."""
        empty_rounds = 0
        while self.read():
            if not self.pending:
                self.select(final=False)
                if not self.pending:
                    empty_rounds += 1
                    if empty_rounds > 100:
                        raise RuntimeError("selection returned no group 100 times in a row")
                    continue
            empty_rounds = 0
            self.emit()
        self.flush()
        return self.tally


def _small_buffer_warnings(slots: np.ndarray, pack_size: int, buffer_size: int) -> list[str]:
    if not slots.size:
        return []
    mean = float(slots.sum()) / slots.size
    per_pack = pack_size / mean
    if per_pack <= buffer_size:
        return []
    return [
        f"buffer_size={buffer_size} cannot fill a pack: a {pack_size}-token pack needs "
        f"about {per_pack:.0f} samples of mean length {mean:.0f}; use "
        f"a buffer of at least {int(np.ceil(per_pack)) * 4} samples."
    ]


def _overlong_counts(cuts: list[OverlongCut], policy: OverlongPolicy) -> dict[str, int]:
    kept = [c for c in cuts if c.pieces]
    return {
        "dropped_overlong": len(cuts) - len(kept),
        "truncated_overlong": len(kept) if policy is OverlongPolicy.TRUNCATE else 0,
        "truncated_tokens": sum(c.lost for c in kept),
        "split_overlong": len(kept) if policy is OverlongPolicy.SPLIT else 0,
    }


def _bound_packs(slots: int, load: MediaLoad | None, spec: PackingSpec) -> int:
    """The fewest packs that can hold samples taking ``slots`` pack slots with media ``load``:
    ``ceil(slots / pack_size)``, and with ``load`` at least ``ceil(media tokens / budget)`` and
    ``ceil(items / budget)`` for each media budget the spec sets.

    20 slots, pack 10, 3 images of 4 tokens, ``max_media_tokens_per_pack=6``: ``max(2, 2)``
    is 2; with ``max_media_per_pack=1`` it is ``max(2, 2, 3) = 3``.
    """
    bound = -(-slots // spec.pack_size)
    if load is None:
        return bound
    for total, cap in (
        (int(load.tokens.sum()), spec.max_media_tokens_per_pack),
        (int(load.items.sum()), spec.max_media_per_pack),
    ):
        if cap is not None:
            bound = max(bound, -(-total // cap))
    return bound


def _over_budget(media: MediaLoad | None, spec: PackingSpec) -> set[int]:
    """Sample ids whose media alone exceed a budget (the encoders drop and count them)."""
    if media is None:
        return set()
    return {
        i
        for i, (t, m) in enumerate(zip(media.tokens.tolist(), media.items.tolist()))
        if spec.media_over_budget(t, m) is not None
    }


def _media_of(raw: np.ndarray, media: MediaLoad | None, spec: PackingSpec) -> MediaLoad | None:
    """``media`` checked against the documents (no over-long cut: media cuts need spans)."""
    if media is None:
        return None
    longest = int(raw.max()) if raw.size else 0
    if len(media) != raw.size or longest > spec.pack_size:
        raise ValueError(
            f"media has {len(media)} entries for {raw.size} samples (longest {longest} tokens): "
            f"with media, give one load per document as the encoder produces it, after the "
            f"over-long policy (each at most pack_size={spec.pack_size}; where the encoder "
            "cuts a document depends on its media spans)."
        )
    return media


def _checked_lengths(lengths: Sequence[int] | np.ndarray, buffer_size: int) -> np.ndarray:
    """``lengths`` as ``int64``, after the checks :func:`simulate` and :func:`simulate_packs`
    share: ``ValueError`` for ``buffer_size < 1`` or a length ``<= 0``."""
    if buffer_size < 1:
        raise ValueError(f"buffer_size={buffer_size} must be >= 1 (packing_buffer_size).")
    raw = as_int_lengths(lengths)
    if raw.size and int(raw.min()) <= 0:
        i = int(np.argmin(raw))
        raise ValueError(f"length #{i} is {int(raw[i])}: lengths must be positive token counts.")
    return raw


def simulate_packs(
    lengths: Sequence[int] | np.ndarray,
    spec: PackingSpec | int,
    buffer_size: int,
    *,
    media: MediaLoad | None = None,
    **fields: Any,
) -> list[list[int]]:
    """The packs :func:`simulate` emits, as lists of sample indices in emission order (indices
    after the spec's over-long policy, which may split or drop samples; the loader's packs
    when it reads the samples in this order). ``media``: as in :func:`simulate`.

    ``simulate_packs([3, 3, 3, 3, 3], 6, 4, algorithm="first_fit")`` ->
    ``[[0, 1], [2, 3], [4]]``.
    """
    spec = as_spec(spec, **fields)
    raw = _checked_lengths(lengths, buffer_size)
    lens, _ = cut_lengths(raw, spec.pack_size, spec.overlong)
    load = _media_of(raw, media, spec)
    model = _BufferModel(
        lens.tolist(), spec.slot_lengths(lens).tolist(), spec, buffer_size, media=load
    )
    model.run()
    return model.packs


def simulate(
    lengths: Sequence[int] | np.ndarray,
    spec: PackingSpec | int,
    buffer_size: int,
    *,
    media: MediaLoad | None = None,
    **spec_fields: Any,
) -> SimulationResult:
    """Simulate energon's packing buffer over ``lengths`` (see the module docstring).

    Args:
        lengths: Token length of each sample, in reading order (before the over-long policy).
        spec: The :class:`PackingSpec`; or the pack size with the other fields as keywords.
        buffer_size: energon's ``packing_buffer_size``.
        media: Media load of each sample (needed by the spec's media budgets; with it, the
            packs are those the encoders make from ``EncodedSample.media_load``). The lengths
            must then be documents as encoded (none over the pack size); a sample whose media
            alone exceed a budget is dropped, as the encoders do (``dropped_over_budget``).
        spec_fields: :class:`PackingSpec` fields replacing the spec's.
    """
    spec = as_spec(spec, **spec_fields)
    raw = _checked_lengths(lengths, buffer_size)
    lens, cuts = cut_lengths(raw, spec.pack_size, spec.overlong)
    slots = spec.slot_lengths(lens)
    model = _BufferModel(
        lens.tolist(), slots.tolist(), spec, buffer_size, _media_of(raw, media, spec)
    )
    tally = model.run()
    dropped = sorted(model.dropped)
    kept = np.delete(np.arange(lens.size), dropped)  # sample ids packed
    size, packs = spec.pack_size, tally.packs
    load = None if model.media is None else model.media.take(kept)
    return SimulationResult(
        pack_size=size,
        buffer_size=buffer_size,
        algorithm=spec.algorithm,
        overlong=spec.overlong.value,
        carry_over=spec.carry_over,
        samples_in=int(raw.size),
        samples_packed=int(lens.size) - len(dropped),
        samples_out=tally.samples_out,
        **_overlong_counts(cuts, spec.overlong),
        packs=packs,
        tokens=tally.tokens,
        fill=tally.tokens / (packs * size) if packs else 0.0,
        lower_bound_packs=tally.lb_packs,
        lower_bound_fill=tally.tokens / (tally.lb_packs * size) if tally.lb_packs else 0.0,
        global_lower_bound_packs=_bound_packs(int(lens[kept].sum()), load, spec),
        documents_per_pack=tally.samples_out / packs if packs else 0.0,
        select_calls=tally.select_calls,
        select_seconds=tally.select_seconds,
        max_age=tally.max_age,
        max_wait_samples=tally.max_wait,
        max_carried_tokens=tally.max_carried_slots,
        dropped_over_budget=len(dropped),
        **_media_maxima(model),
        warnings=_small_buffer_warnings(slots, size, buffer_size),
    )


def _media_maxima(model: _BufferModel) -> dict[str, int | None]:
    """The most media tokens and images + videos over the model's emitted packs (``None``
    without media)."""
    if model.media is None:
        return {"max_media_tokens_per_pack": None, "max_media_per_pack": None}
    tokens, items = model.media.tokens, model.media.items
    return {
        "max_media_tokens_per_pack": max((int(tokens[p].sum()) for p in model.packs), default=0),
        "max_media_per_pack": max((int(items[p].sum()) for p in model.packs), default=0),
    }
