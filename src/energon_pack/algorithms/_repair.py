# SPDX-License-Identifier: Apache-2.0
"""Best-fit decreasing, then re-pack the least-filled packs with exact subset sums.

Best-fit decreasing (BFD) usually ends one or two packs above the lower bound
``ceil(sum / C)``: its last packs hold the samples that no longer fitted anywhere, while the
slack is scattered over the other packs in pieces too small to use. The repair pass:

1. Takes the ``POOL_BINS`` least-filled packs and pools their samples.
2. Re-packs the pool pack by pack: each new pack starts with the longest pooled sample and is
   topped up with the subset of the others whose sum fills the remaining room best (an exact
   subset-sum over a bitset: one Python int of ``room + 1`` bits, ``reach |= reach << x``).
3. Keeps the result only if it uses fewer packs than the pool came from, and repeats (at most
   ``MAX_ROUNDS`` times) while above the lower bound.

Worked example, capacity 10, lengths ``[4, 4, 3, 3, 3, 3]`` (sum 20, bound 2). BFD places
``4, 4`` together (room 2: no 3 fits), then ``3, 3, 3`` (room 1), then ``3`` alone: 3 packs.
The pool re-pack starts a pack with ``4``, fills room 6 exactly with ``3 + 3``, then the next
with ``4`` and ``3 + 3``: ``{4, 3, 3}, {4, 3, 3}``, 2 packs, the bound.

The extra work is bounded (``POOL_BINS`` packs of a few samples each, ``MAX_ROUNDS`` rounds)
whatever the number of lengths, so the cost stays that of BFD plus a few milliseconds. Every
pack stays within capacity and ``max_samples_per_pack``; the result is deterministic.
"""

from __future__ import annotations

import numpy as np

from energon_pack.algorithms._best_fit import best_fit_sorted

__all__ = ["best_fit_decreasing_repair", "fill_room"]

#: How many of the least-filled packs are pooled and re-packed per round.
POOL_BINS = 64
#: At most this many re-pack rounds per call.
MAX_ROUNDS = 2


def fill_room(values: list[int], room: int) -> list[int]:
    """Positions of the subset of ``values`` with the largest sum ``<= room`` (exact).

    Ties prefer earlier positions. ``fill_room([5, 4, 3], 7) == [1, 2]`` (4 + 3 = 7).
    """
    if room <= 0:
        return []
    full = (1 << (room + 1)) - 1
    target = 1 << room
    reach = 1
    history: list[int] = []
    for x in values:
        history.append(reach)
        if x > room:
            continue
        reach = (reach | (reach << x)) & full
        if reach & target:
            break
    best = reach.bit_length() - 1
    chosen: list[int] = []
    for p in range(len(history) - 1, -1, -1):
        if best == 0:
            break
        if not (history[p] >> best) & 1:
            chosen.append(p)
            best -= values[p]
    chosen.reverse()
    return chosen


def _repack_pool(pool: list[tuple[int, int]], capacity: int, cap_count: int) -> list[list[int]]:
    """Re-pack ``(length, index)`` pairs: longest first, each pack topped up exactly."""
    pool = sorted(pool, key=lambda item: (-item[0], item[1]))
    bins: list[list[int]] = []
    while pool:
        first_len, first_idx = pool[0]
        rest = pool[1:]
        chosen: list[int] = []
        if cap_count > 1:
            chosen = fill_room([x for x, _ in rest], capacity - first_len)[: cap_count - 1]
        taken = set(chosen)
        bins.append([first_idx] + [rest[p][1] for p in chosen])
        pool = [item for p, item in enumerate(rest) if p not in taken]
    return bins


def best_fit_decreasing_repair(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit decreasing, then re-pack the least-filled packs (see the module docstring)."""
    order = np.argsort(-lengths, kind="stable")
    bins = best_fit_sorted(order.tolist(), lengths[order].tolist(), capacity, max_samples_per_pack)
    bound = -(-int(lengths.sum()) // capacity)
    cap_count = max_samples_per_pack or int(lengths.size)
    for _ in range(MAX_ROUNDS):
        if len(bins) <= bound:
            break
        sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
        flat = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(sizes.sum()))
        loads = np.add.reduceat(lengths[flat], np.concatenate(([0], np.cumsum(sizes)[:-1])))
        tail = np.argsort(loads, kind="stable")[:POOL_BINS].tolist()
        pool = [(int(lengths[i]), i) for b in tail for i in bins[b]]
        repacked = _repack_pool(pool, capacity, cap_count)
        if len(repacked) >= len(tail):
            break
        tail_set = set(tail)
        bins = [b for j, b in enumerate(bins) if j not in tail_set] + repacked
    return bins
