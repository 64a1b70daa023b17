# SPDX-License-Identifier: Apache-2.0
"""The pair move of the balancing pass: one or two long documents of a costly pack traded for
a subset of a cheap pack's documents with about the same tokens.

Pack size 10, cost ``len**2``: ``{6, 4}`` (52) and ``{2, 2, 2, 2}`` (16) become ``{4, 2, 2, 2}``
(28) and ``{2, 6}`` (40). See docs/benchmarks/balance.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from energon_pack.algorithms._subset_sum import reach_steps, walk_back

__all__ = ["Packs", "candidates"]


def _pack_sums(
    packs: list[list[int]], lens: np.ndarray, costs: np.ndarray
) -> tuple[list[float], list[int]]:
    """Each pack's cost and tokens, by NumPy segment sums (no Python loop over documents)."""
    sizes = np.fromiter(map(len, packs), dtype=np.int64, count=len(packs))
    flat = np.fromiter(itertools.chain.from_iterable(packs), dtype=np.int64, count=sizes.sum())
    cost = np.zeros(len(packs))
    tokens = np.zeros(len(packs), dtype=np.int64)
    full = np.flatnonzero(sizes)
    if full.size:  # segment sums over the non-empty packs (their starts strictly increase)
        starts = (np.cumsum(sizes) - sizes)[full]
        cost[full] = np.add.reduceat(costs[flat], starts)
        tokens[full] = np.add.reduceat(lens[flat], starts)
    return cost.tolist(), tokens.tolist()


def candidates(pack: list[int], lens: list[int], costs: list[float]) -> list[tuple]:
    """Documents of a costly pack to move out, as ``(indices, tokens, cost)``: its three
    longest, and its two longest together."""
    top = sorted(pack, key=lambda i: (-lens[i], i))[:3]
    out = [((i,), lens[i], costs[i]) for i in top]
    if len(top) >= 2:
        a, b = top[0], top[1]
        out.append(((a, b), lens[a] + lens[b], costs[a] + costs[b]))
    return out


def _best_move(
    cands: list[tuple],
    high: list[int],
    low: list[int],
    reach: tuple[str, list[tuple[int, int, int]]],
    sums: tuple[float, float, int, int],
    lens: list[int],
    costs: list[float],
    pack_size: int,
) -> tuple[tuple[int, ...], list[int], float, int] | None:
    """Documents of ``high`` for a subset of ``low``'s that leave the pair's costs closest, if
    that narrows their gap: ``(moved out of high, moved out of low, cost moved, tokens moved)``.

    For each candidate the subset total is the reachable one nearest the candidate's own tokens
    within both rooms, so packs keep their fill (what carry-over relies on); a subset's cost is
    estimated at ``low``'s cost per token, and only the best candidate is walked back.
    """
    cost_h, cost_l, tok_h, tok_l = sums
    room_h, room_l = pack_size - tok_h, pack_size - tok_l
    gap = cost_h - cost_l
    half = gap / 2
    per_token = cost_l / tok_l if tok_l else 0.0  # to estimate a subset's cost from its total
    if room_l > 0:
        fits = [(abs(costs[i] - half), i) for i in high if lens[i] <= room_l]
        if fits:
            i = min(fits)[1]
            cands = [*cands, ((i,), lens[i], costs[i])]
    totals, steps = reach
    best, pick = gap, None  # a move must narrow the gap
    for move, x, cx in cands:
        lo = x - room_l if x > room_l else 0
        hi = x + room_h
        want = x  # the same tokens: packs keep their fill (what carry-over relies on)
        s = totals.rfind("1", lo, want + 1)  # the reachable total nearest want in [lo, hi]
        up = totals.find("1", want + 1, hi + 1)
        if up >= 0 and (s < 0 or up - want < want - s):
            s = up
        if s >= 0 and abs(gap - 2 * (cx - s * per_token)) < best:
            best, pick = abs(gap - 2 * (cx - s * per_token)), (move, x, cx, s)
    if pick is None:
        return None
    move, x, cx, s = pick
    take = walk_back(steps, s)
    chosen = []
    for i in low:
        if take.get(lens[i]):
            take[lens[i]] -= 1
            chosen.append(i)
    delta = cx - sum(costs[i] for i in chosen)
    if not abs(gap - 2 * delta) < gap * (1 - 1e-9):
        return None
    return move, chosen, delta, x - s


class Packs:
    """The packs being balanced, their costs and tokens, and the move between two of them."""

    def __init__(
        self, bins: Sequence[Sequence[int]], lens: np.ndarray, costs: np.ndarray, pack_size: int
    ) -> None:
        self.packs = [list(b) for b in bins]  #: documents of each pack
        self.cost, self.tokens = _pack_sums(self.packs, lens, costs)  #: of each pack
        self.lens, self.doc_cost = lens.tolist(), costs.tolist()  #: of each document
        self.pack_size = pack_size  #: pack size in tokens
        self.cap_count = max(int(lens.size), 1)  #: at most this many documents per pack
        #: the cheap packs' subset totals (a string, "1" at reachable totals) and steps
        self.reaches: dict[int, tuple[str, list[tuple[int, int, int]]]] = {}
        self.version = [0] * len(self.packs)  #: bumped when a pack changes
        self.failed: set[tuple[int, int, int, int]] = set()  #: (costly, cheap, versions)
        self.attempts = 0  #: pair attempts so far (the work bound)

    def try_pair(self, h: int, low: int, cands: list[tuple] | None = None) -> bool | None:
        """Move documents between costly ``h`` and cheap ``low`` if that narrows their gap:
        ``True`` if moved, ``False`` if not, ``None`` (no attempt) if the pair failed before
        and neither pack changed since."""
        key = (h, low, self.version[h], self.version[low])
        if key in self.failed:
            return None
        self.attempts += 1
        packs, lens = self.packs, self.lens
        reach = self.reaches.get(low)
        if reach is None:
            counts: dict[int, int] = {}
            for i in packs[low]:
                counts[lens[i]] = counts.get(lens[i], 0) + 1
            bits, steps = reach_steps(list(counts), counts, self.pack_size)
            reach = self.reaches[low] = (format(bits, "b")[::-1], steps)
        sums = (self.cost[h], self.cost[low], self.tokens[h], self.tokens[low])
        cands = cands or candidates(packs[h], lens, self.doc_cost)
        best = _best_move(
            cands, packs[h], packs[low], reach, sums, lens, self.doc_cost, self.pack_size
        )
        if best is not None:
            move, chosen, delta, moved_tokens = best
            grown = len(chosen) - len(move)  # documents h gains (low loses)
            if max(len(packs[h]) + grown, len(packs[low]) - grown) > self.cap_count:
                best = None
        if best is None:
            self.failed.add(key)
            return False
        out, back = set(move), set(chosen)
        packs[h] = [i for i in packs[h] if i not in out] + chosen
        packs[low] = [i for i in packs[low] if i not in back] + list(move)
        self.cost[h] -= delta
        self.cost[low] += delta
        self.tokens[h] -= moved_tokens
        self.tokens[low] += moved_tokens
        self.reaches.pop(low, None)
        self.version[h] += 1
        self.version[low] += 1
        return True
