# SPDX-License-Identifier: Apache-2.0
"""The repair pass of best-fit decreasing: re-pack the least-filled packs with exact subset sums.

Each round re-packs a pool of the least-filled packs and the packs with the most samples, each
new pack topped up exactly (:func:`fill_counts`); kept only if it saves a pack, stopping at the
Martello-Toth bound ``L2``. ``[4, 4, 3, 3, 3, 3]``, pack size 10: ``{4, 4}, {3, 3, 3}, {3}``
becomes ``{4, 3, 3}, {4, 3, 3}``. See docs/benchmarks/algorithms.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._bounds import halves_bound, martello_toth_l2
from energon_pack.algorithms._subset_sum import fill_counts

__all__ = [
    "BUFFER_EFFORT",
    "BUFFER_LENGTHS",
    "DEFAULT_EFFORT",
    "SEARCH_EFFORT",
    "RepairEffort",
    "repair_packs",
]


@dataclass(frozen=True, kw_only=True)
class RepairEffort:
    """How hard the repair pass tries (deterministic work bounds, not a time limit).

    Attributes:
        pool_bins: Least-filled packs pooled and re-packed per round.
        flexible_bins: Packs with the most samples added to the pool (short documents).
        rounds: At most this many re-pack rounds.
    """

    pool_bins: int = 64
    flexible_bins: int = 16
    rounds: int = 2

    def __post_init__(self) -> None:
        if self.pool_bins < 2 or self.flexible_bins < 0 or self.rounds < 0:
            raise ValueError(
                f"RepairEffort(pool_bins={self.pool_bins}, flexible_bins={self.flexible_bins}, "
                f"rounds={self.rounds}): need pool_bins >= 2, flexible_bins >= 0, rounds >= 0."
            )


#: The default algorithm's effort above :data:`BUFFER_LENGTHS` lengths.
DEFAULT_EFFORT = RepairEffort(pool_bins=64, flexible_bins=16, rounds=2)
#: The default algorithm's effort for calls of at most :data:`BUFFER_LENGTHS` lengths
#: (energon packing buffers: fuller packs there, see docs/benchmarks/algorithms.md).
BUFFER_EFFORT = RepairEffort(pool_bins=128, flexible_bins=32, rounds=3)
BUFFER_LENGTHS = 8192
#: ``best_fit_decreasing_search``'s extra rounds.
SEARCH_EFFORT = RepairEffort(pool_bins=160, flexible_bins=40, rounds=6)


def _repack_pool(
    pool: list[tuple[int, int]], pack_size: int, cap_count: int, limit: int | None = None
) -> tuple[list[list[int]], list[int]] | None:
    """Re-pack ``(length, index)`` pairs: longest first, each pack topped up exactly.

    The pool is kept as runs of equal lengths (``runs[x]``: the indices of length ``x``, largest
    first so that ``pop()`` gives the smallest) that :func:`fill_counts` takes copies from.
    Returns the packs and each pack's room, or ``None`` as soon as the result cannot fit in
    ``limit`` packs (when given).
    """
    pool = sorted(pool, key=lambda item: (-item[0], -item[1]))
    runs: dict[int, list[int]] = {}
    for x, i in pool:
        run = runs.get(x)
        if run is None:
            runs[x] = [i]
        else:
            run.append(i)
    counts = {x: len(run) for x, run in runs.items()}
    vals = list(runs)  # distinct lengths, longest first
    neg = [-x for x in vals]  # ascending, for bisect
    left = sum(x for x, _ in pool)
    bins: list[list[int]] = []
    rooms: list[int] = []
    exact: dict[int, list[tuple[int, int]]] = {}  # room -> a fill that met it exactly

    def take(x: int, count: int, members: list[int]) -> int:
        run = runs[x]
        members.extend(run[-1 : -count - 1 : -1])
        del run[-count:]
        if run:
            counts[x] = len(run)
        else:
            del runs[x], counts[x]
            g = bisect.bisect_left(neg, -x)
            del vals[g], neg[g]
        return count * x

    while vals:
        if limit is not None and len(bins) + -(-left // pack_size) > limit:
            return None
        members: list[int] = []
        first_len = vals[0]
        left -= take(first_len, 1, members)
        room = pack_size - first_len
        if cap_count > 1 and room > 0 and vals:
            fill = exact.get(room)
            if fill is None or any(counts.get(x, 0) < t for x, t in fill):
                k = bisect.bisect_left(neg, -room)  # first length that fits the room
                fill = sorted(fill_counts(vals[k:], counts, room).items(), reverse=True)
                if sum(x * t for x, t in fill) == room:
                    exact[room] = fill
            slots = cap_count - 1
            for x, t in fill:
                if slots:
                    t = min(t, slots)
                    slots -= t
                    left -= take(x, t, members)
                    room -= t * x
        bins.append(members)
        rooms.append(room)
    return bins, rooms


def _top(keys: np.ndarray, count: int) -> list[int]:
    """Positions of the ``count`` largest ``keys``, largest first, ties to the lower position."""
    n = int(keys.size)
    unique = keys * n + (n - 1 - np.arange(n, dtype=np.int64))  # no ties: stable order
    if count < n:
        part = np.argpartition(-unique, count - 1)[:count]
        return part[np.argsort(-unique[part])].tolist()
    return np.argsort(-unique).tolist()


def _pick_pool(rooms: np.ndarray, counts: np.ndarray, effort: RepairEffort) -> list[int]:
    """The least-filled packs, then the packs with the most samples (no pack twice)."""
    pool = _top(rooms, effort.pool_bins)
    if effort.flexible_bins and rooms.size > len(pool):
        taken = set(pool)
        extra = _top(counts, min(rooms.size, len(pool) + effort.flexible_bins))
        pool += [j for j in extra if j not in taken][: effort.flexible_bins]
    return pool


def repair_packs(
    bins: list[list[int]],
    rooms_of: Callable[[], list[int]],
    values: list[int],
    order: list[int],
    pack_size: int,
    max_samples_per_pack: int | None,
    efforts: Sequence[RepairEffort],
) -> list[list[int]]:
    """Re-pack pools of ``bins`` while that saves packs, with each effort in turn (see the
    module docstring). ``rooms_of()``: the room left in each of ``bins``; ``order``: the samples
    longest first. Returns a packing of the same samples with at most as many packs."""
    ascending = [values[i] for i in reversed(order)]
    if len(bins) <= halves_bound(ascending, pack_size):
        return bins  # at L2 already (a cheap part of it)
    bound = martello_toth_l2(ascending, pack_size)
    if len(bins) <= bound:
        return bins
    rooms = rooms_of()
    for effort in efforts:
        bins, rooms = _repair_rounds(
            bins, rooms, bound, values, pack_size, max_samples_per_pack, effort
        )
    return bins


def _repair_rounds(
    bins: list[list[int]],
    rooms: list[int],
    bound: int,
    values: list[int],
    pack_size: int,
    max_samples_per_pack: int | None,
    effort: RepairEffort,
) -> tuple[list[list[int]], list[int]]:
    """One effort's rounds of :func:`repair_packs` down to ``bound`` packs, returning the rooms
    too."""
    if len(bins) <= bound or not effort.rounds:
        return bins, rooms
    cap_count = max_samples_per_pack or len(values)
    if len(bins) <= effort.pool_bins:
        # Every pack is in the pool, and a second re-pack of the same samples would make the
        # same packs: one re-pack decides, as the rounds below would.
        pool = [(values[i], i) for b in bins for i in b]
        return _repack_pool(pool, pack_size, cap_count, len(bins) - 1) or (bins, rooms)
    bins = list(bins)
    room_arr = np.array(rooms, dtype=np.int64)
    count_arr = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
    for _ in range(effort.rounds):
        if len(bins) <= bound:
            break
        tail = _pick_pool(room_arr, count_arr, effort)
        pool = [(values[i], i) for b in tail for i in bins[b]]
        repacked = _repack_pool(pool, pack_size, cap_count, len(tail) - 1)
        if repacked is None:
            break
        new_bins, new_rooms = repacked
        for b in sorted(tail, reverse=True):
            del bins[b]
        bins += new_bins
        room_arr = np.concatenate((np.delete(room_arr, tail), new_rooms))
        count_arr = np.concatenate((np.delete(count_arr, tail), [len(b) for b in new_bins]))
    return bins, room_arr.tolist()
