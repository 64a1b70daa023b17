# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing, then re-pack the least-filled packs with exact subset sums.

Best-fit decreasing (BFD) usually ends one or two packs above the lower bound
``ceil(sum / C)``: its last packs hold the samples that no longer fitted anywhere, while the
slack is scattered over the other packs in pieces too small to use. The repair pass:

1. Pools the samples of the ``pool_bins`` least-filled packs, plus the ``flexible_bins`` packs
   holding the most samples (short documents make exact fills possible).
2. Re-packs the pool pack by pack: each new pack starts with the longest pooled sample and is
   topped up with the subset of the others whose sum fills the remaining room best (the exact
   bounded subset sum of :mod:`~energon_pack.algorithms._subset_sum`, shared with the balancing
   pass: :func:`fill_counts`; an exact fill found for a room is reused for the next pack with
   the same room while its samples remain).
3. Keeps the result only if it uses fewer packs than the pool came from (it gives up as soon
   as the packs made so far plus ``ceil(rest / C)`` reach the pool's count), and repeats (at most
   ``rounds`` times) while above the lower bound ``max(L1, L2)`` (Martello-Toth).

Worked example, capacity 10, lengths ``[4, 4, 3, 3, 3, 3]`` (sum 20, bound 2). BFD places
``4, 4`` together (room 2: no 3 fits), then ``3, 3, 3`` (room 1), then ``3`` alone: 3 packs.
The pool re-pack starts a pack with ``4``, fills room 6 exactly with ``3 + 3``, then the next
with ``4`` and ``3 + 3``: ``{4, 3, 3}, {4, 3, 3}``, 2 packs, the bound.

The extra work is bounded by :class:`RepairEffort` whatever the number of lengths (and skipped
when BFD already meets the bound). ``best_fit_decreasing_repair`` (the default) picks the effort
by call size: up to :data:`BUFFER_LENGTHS` lengths (energon packing buffers) it pools 128 + 32
packs for 3 rounds (:data:`BUFFER_EFFORT`, about 12 ms per 2048-sample buffer, 6 us per sample,
for packs within 0.1 points of the per-buffer bound on real text); above it, 64 + 16 packs for 2
rounds (:data:`DEFAULT_EFFORT`, a few milliseconds, so that 10k-100k offline calls stay
fast). ``best_fit_decreasing_search`` adds 160 + 40 packs and 6 rounds at every size. Every
pack stays within capacity and ``max_samples_per_pack``; the result is deterministic.

The module is over 300 lines because the array and the short-list entry points share the
repair rounds, the bounds they stop at and the pool re-pack.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._best_fit import (
    best_fit_decreasing_list,
    best_fit_decreasing_rooms,
    bin_rooms,
)
from energon_pack.algorithms._bounds import martello_toth_l2
from energon_pack.algorithms._subset_sum import fill_counts

__all__ = [
    "BUFFER_EFFORT",
    "BUFFER_LENGTHS",
    "DEFAULT_EFFORT",
    "SEARCH_EFFORT",
    "RepairEffort",
    "best_fit_decreasing_repair",
    "best_fit_decreasing_repair_list",
    "best_fit_decreasing_search",
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


#: The default algorithm's effort above :data:`BUFFER_LENGTHS` lengths: a few milliseconds.
DEFAULT_EFFORT = RepairEffort(pool_bins=64, flexible_bins=16, rounds=2)
#: The default algorithm's effort for buffer-sized calls (up to :data:`BUFFER_LENGTHS`).
BUFFER_EFFORT = RepairEffort(pool_bins=128, flexible_bins=32, rounds=3)
#: Calls with at most this many lengths (energon packing buffers) get :data:`BUFFER_EFFORT`.
BUFFER_LENGTHS = 8192
#: ``best_fit_decreasing_search``: fuller packs for buffers of thousands of samples.
SEARCH_EFFORT = RepairEffort(pool_bins=160, flexible_bins=40, rounds=6)


def _repack_pool(
    pool: list[tuple[int, int]], capacity: int, cap_count: int, limit: int | None = None
) -> tuple[list[list[int]], list[int]] | None:
    """Re-pack ``(length, index)`` pairs: longest first, each pack topped up exactly.

    The pool is kept as runs of equal lengths (``runs[x]``: the indices of length ``x``, largest
    first so that ``pop()`` gives the smallest) that :func:`fill_counts` takes copies from.
    Returns the packs and each pack's room, or ``None`` as soon as the result cannot fit in
    ``limit`` packs (when given). Hot loop of the repair (runs per pool per round): kept whole.
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
        if limit is not None and len(bins) + -(-left // capacity) > limit:
            return None
        members: list[int] = []
        first_len = vals[0]
        left -= take(first_len, 1, members)
        room = capacity - first_len
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
    rooms: list[int],
    lengths: np.ndarray,
    capacity: int,
    max_samples_per_pack: int | None = None,
    effort: RepairEffort = DEFAULT_EFFORT,
) -> list[list[int]]:
    """Re-pack pools of packs while that saves packs (see the module docstring).

    ``rooms[j]`` is ``capacity`` minus the tokens of ``bins[j]``. Returns a packing of the same
    samples with at most as many packs.
    """
    return _repair_rounds(bins, rooms, lengths, capacity, max_samples_per_pack, effort)[0]


def _halves_bound(values: list[int], capacity: int) -> int:
    """Martello-Toth's ``L2`` at threshold 0 (a lower bound, ``<= L2``): each length above
    ``C / 2`` needs its own pack, and the others fill those packs' rooms before new packs.
    ``[6, 6, 6]``, ``C = 10``: 3. ``[6, 5, 5, 4]``, ``C = 10``: 1 + ceil((14 - 4) / 10) = 2."""
    big = sum(1 for x in values if 2 * x > capacity)
    rest = sum(values) - big * capacity  # the short lengths minus the big packs' rooms
    return big + max(0, -(-rest // capacity))


#: Up to this many lengths, :func:`_l2_of_list` (pure Python) beats the NumPy ``L2``.
SMALL_BOUND = 128


def _l2_of_list(values: list[int], capacity: int) -> int:
    """:func:`~energon_pack.algorithms.martello_toth_l2` in pure Python (the same value, ~3 us
    for 16 lengths instead of ~18 us): every threshold ``k`` (0 and each distinct length
    ``<= C / 2``) in one sweep over the sorted lengths. ``[6, 6, 8, 5, 5, 9, 6]``, ``C = 10``:
    at ``k = 5`` five lengths above 5 each need a pack and ``5 + 5`` a sixth: 6."""
    arr = sorted(values)
    n = len(arr)
    prefix = list(itertools.accumulate(arr, initial=0))
    half = bisect.bisect_right(arr, capacity // 2)  # arr[half:] are above C / 2
    best = -(-prefix[n] // capacity)
    j1 = n  # arr[j1:] are above C - k (k grows, so j1 only falls)
    for i_k in range(-1, half):  # i_k: how many lengths are below k
        if i_k < 0:
            k, i_k = 0, 0
        else:
            k = arr[i_k]
            if i_k and k == arr[i_k - 1]:
                continue
        while j1 > half and arr[j1 - 1] > capacity - k:
            j1 -= 1
        free = (j1 - half) * capacity - (prefix[j1] - prefix[half])  # rooms of C/2 < x <= C-k
        extra = -((free - (prefix[half] - prefix[i_k])) // capacity)
        best = max(best, n - half + max(extra, 0))
    return best


def _repair_rounds(
    bins: list[list[int]],
    rooms: list[int],
    lengths: np.ndarray | list[int],
    capacity: int,
    max_samples_per_pack: int | None,
    effort: RepairEffort,
) -> tuple[list[list[int]], list[int]]:
    """:func:`repair_packs`, returning the rooms too; ``lengths`` an array or a list of ints."""
    slack = sum(rooms)  # packs - ceil(sum / C) == slack // C: no NumPy call on the early exit
    if slack < capacity or not effort.rounds:
        return bins, rooms
    values = lengths if type(lengths) is list else lengths.tolist()
    if len(values) <= SMALL_BOUND:
        bound = _l2_of_list(values, capacity)
    elif len(bins) <= _halves_bound(values, capacity):
        return bins, rooms  # at L2 already (a cheap part of it), without NumPy calls
    else:
        bound = martello_toth_l2(lengths, capacity)  # >= ceil(sum / C) == packs - slack // C
    if len(bins) <= bound:
        return bins, rooms
    cap_count = max_samples_per_pack or len(values)
    if len(bins) <= effort.pool_bins:
        # Every pack is in the pool, and a second re-pack of the same samples would make the
        # same packs again: one re-pack decides (what the rounds below do, without NumPy).
        pool = [(values[i], i) for b in bins for i in b]
        return _repack_pool(pool, capacity, cap_count, len(bins) - 1) or (bins, rooms)
    bins = list(bins)
    room_arr = np.array(rooms, dtype=np.int64)
    count_arr = np.fromiter(map(len, bins), dtype=np.int64, count=len(bins))
    for _ in range(effort.rounds):
        if len(bins) <= bound:
            break
        tail = _pick_pool(room_arr, count_arr, effort)
        pool = [(values[i], i) for b in tail for i in bins[b]]
        repacked = _repack_pool(pool, capacity, cap_count, len(tail) - 1)
        if repacked is None:
            break
        new_bins, new_rooms = repacked
        for b in sorted(tail, reverse=True):
            del bins[b]
        bins += new_bins
        room_arr = np.concatenate((np.delete(room_arr, tail), new_rooms))
        count_arr = np.concatenate((np.delete(count_arr, tail), [len(b) for b in new_bins]))
    return bins, room_arr.tolist()


def _default_effort(n: int) -> RepairEffort:
    return BUFFER_EFFORT if n <= BUFFER_LENGTHS else DEFAULT_EFFORT


def best_fit_decreasing_repair(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit decreasing, then :func:`repair_packs` with an effort picked by the call's size.

    :data:`BUFFER_EFFORT` up to :data:`BUFFER_LENGTHS` lengths, :data:`DEFAULT_EFFORT` above.
    """
    if lengths.size == 0:
        return []
    bins, rooms = best_fit_decreasing_rooms(lengths, capacity, max_samples_per_pack)
    if sum(rooms) < capacity:
        return bins  # at ceil(sum / C) already: the common case on small buffers
    effort = _default_effort(lengths.size)
    return repair_packs(bins, rooms, lengths, capacity, max_samples_per_pack, effort)


def best_fit_decreasing_repair_list(
    values: list[int], capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]] | None:
    """:func:`best_fit_decreasing_repair` of a short Python list, without NumPy: the same bins,
    or ``None`` unless ``values`` is a non-empty list of ``int`` in ``1..capacity`` (see
    :func:`~energon_pack.algorithms._best_fit.best_fit_decreasing_list`; ``pack_lengths`` takes
    this path for short lists). ``best_fit_decreasing_repair_list([4, 4, 3, 3, 3, 3], 10)`` is
    ``[[0, 2, 3], [1, 4, 5]]``, as the worked example in the module docstring.
    """
    found = best_fit_decreasing_list(values, capacity, max_samples_per_pack)
    if found is None:
        return None
    bins, total = found
    if len(bins) * capacity - total < capacity:
        return bins  # at ceil(sum / C) already
    rooms = bin_rooms(bins, values, capacity)
    effort = _default_effort(len(values))
    return _repair_rounds(bins, rooms, values, capacity, max_samples_per_pack, effort)[0]


def best_fit_decreasing_search(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """The default repair, then more rounds with :data:`SEARCH_EFFORT` (never more packs)."""
    if lengths.size == 0:
        return []
    bins, rooms = best_fit_decreasing_rooms(lengths, capacity, max_samples_per_pack)
    for effort in (_default_effort(lengths.size), SEARCH_EFFORT):
        bins, rooms = _repair_rounds(bins, rooms, lengths, capacity, max_samples_per_pack, effort)
    return bins
