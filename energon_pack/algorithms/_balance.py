# SPDX-License-Identifier: Apache-2.0
"""Compute-balanced packing: equal estimated step cost per pack at the same fill.

A training step waits for the slowest data-parallel rank. Two packs of 8192 tokens can cost
very different times: attention grows with the square of each document's length, and image
tokens load the vision tower. :class:`CostModel` estimates a document's cost as::

    cost(doc) = token * len + attention * len**2 + image * image_tokens

and a pack's cost is the sum over its documents. The default weights are the forward FLOPs of
a ``d = 4096`` decoder layer divided by its per-token linear FLOPs: ``24 d**2`` per token for
the projections and MLP, ``2 d`` per causal token pair for attention (``len**2 / 2`` pairs of
``4 d``), hence ``attention = 2 d / (24 d**2) = 1 / (12 d) = 1 / 49152``.

:func:`balance_packs` keeps the packs of any algorithm (same number of packs, hence the same
fill) and evens out their costs pair by pair. Each round sorts the packs by cost and offers
every pack of the costlier half to up to ``PARTNERS`` packs of the cheaper half, cheapest
first; for a pair it tries two moves and keeps the one that narrows the pair's gap most:

* exchange: one or two documents of the costly pack for a subset of the cheap pack's documents
  with the same token count (within the two packs' free room, found by the exact subset sum
  the repair uses too, :func:`~energon_pack.algorithms._subset_sum.subset_positions`).
  Long documents out, short ones in: the token counts stay, ``sum(len**2)`` drops;
* re-split: pool both packs and split again, long documents greedily to the cheaper side, then
  the shortest ones (up to half a pack) by an exact subset sum that fills the token room.

A pack that no partner helps is marked stuck (its cost has a floor, e.g. one full-length
document). Rounds repeat while something improves, within ``ATTEMPTS_PER_PACK`` attempts per
pack in all, so the time is bounded (about 0.3 s per 4096-sample buffer at pack size 8192).

Worked example, capacity 10, cost ``len**2`` (``CostModel(token=0, attention=1)``), lengths
``[6, 4, 2, 2, 2, 2]``. Best-fit decreasing packs ``{6, 4}`` (cost 52) and ``{2, 2, 2, 2}``
(16): a gap of 36, so the ideal move shifts 18. Exchanges: the ``6`` for three ``2`` s moves
``36 - 12 = 24`` (packs ``{4, 2, 2, 2}`` = 28 and ``{2, 6}`` = 40, gap 12); the ``4`` for two
``2`` s moves ``16 - 8 = 8`` (44 and 24, gap 20); both together (10 tokens) cannot be matched.
The first wins; the re-split finds no better split (``{6}`` alone would leave 12 tokens for
the other pack), so the result is 40 / 28 with the same two packs of 8 and 10 tokens.

Balance has a floor: a pack that holds one document of the full pack size costs what it costs,
so when many documents are split at the pack size the spread cannot fall below what those
packs impose (the benchmark ``tests/benchmarks/balance.py`` prints that floor).

The module is over 300 lines because the cost model, the two moves and the rounds that
bound them are one algorithm; the subset sums it needs are in ``_subset_sum``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._repair import best_fit_decreasing_repair
from energon_pack.algorithms._subset_sum import subset_positions

__all__ = [
    "CostModel",
    "balance_packs",
    "balanced",
    "cost_spread",
    "slowest_rank_loss",
]

#: Rounds at most (each round pairs every costly pack with a cheap one).
MAX_ROUNDS = 12
#: Cheap partners tried per costly pack and round before it is given up as stuck.
PARTNERS = 4
#: At most this many pair attempts per pack in all (bounds the time: ~0.1-0.4 ms per attempt).
ATTEMPTS_PER_PACK = 8


@dataclass(frozen=True, kw_only=True)
class CostModel:
    """Estimated compute cost of a document (and, summed, of a pack).

    Attributes:
        token: Weight of each token (projections and MLP: cost linear in length).
        attention: Weight of ``len**2`` per document (causal attention). Default ``1 / (12 d)``
            with ``d = 4096``: the attention FLOPs of a document relative to its linear FLOPs.
        image: Weight of each image token (vision tower), counted on top of ``token``.
    """

    token: float = 1.0
    attention: float = 1.0 / 49152.0
    image: float = 0.0

    def __post_init__(self) -> None:
        for name in ("token", "attention", "image"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0:
                raise ValueError(f"CostModel.{name}={value!r} must be a finite number >= 0.")
        if self.token == 0 and self.attention == 0 and self.image == 0:
            raise ValueError("CostModel needs at least one positive weight (token, attention).")

    def doc_costs(
        self, lengths: Sequence[int] | np.ndarray, image_tokens: Sequence[int] | None = None
    ) -> np.ndarray:
        """Cost of each document as a ``float64`` array: ``doc_costs([2, 4])`` with
        ``CostModel(token=1, attention=0.5)`` is ``[4.0, 12.0]``."""
        lens = np.asarray(lengths, dtype=np.float64)
        out = self.token * lens + self.attention * lens * lens
        if image_tokens is not None and self.image:
            img = np.asarray(image_tokens, dtype=np.float64)
            if img.shape != lens.shape:
                raise ValueError(
                    f"image_tokens has shape {img.shape} but lengths has {lens.shape}: give one "
                    "image-token count per document (0 for text)."
                )
            out = out + self.image * img
        return out

    def pack_costs(
        self,
        bins: Sequence[Sequence[int]],
        lengths: Sequence[int] | np.ndarray,
        image_tokens: Sequence[int] | None = None,
    ) -> np.ndarray:
        """Cost of each pack (sum of its documents' costs), ``float64`` of shape ``(packs,)``."""
        costs = self.doc_costs(lengths, image_tokens)
        return np.array([float(costs[list(b)].sum()) for b in bins], dtype=np.float64)


def cost_spread(costs: Sequence[float] | np.ndarray) -> float:
    """Coefficient of variation (std / mean) of per-pack costs; 0 for fewer than 2 packs."""
    arr = np.asarray(costs, dtype=np.float64)
    if arr.size < 2 or arr.mean() == 0:
        return 0.0
    return float(arr.std() / arr.mean())


def slowest_rank_loss(
    costs: Sequence[float] | np.ndarray, ranks: int = 8, draws: int = 20000, seed: int = 0
) -> float:
    """Expected step-time loss from waiting for the slowest of ``ranks`` ranks.

    ``E[max of ranks packs' cost] / mean - 1``, estimated by drawing ``draws`` steps of ``ranks``
    packs each (with replacement, seeded): 0 when every pack costs the same; for costs
    ``[1, 3]`` and 2 ranks, ``E[max] = 0.25 * 1 + 0.75 * 3 = 2.5``, a loss of ``2.5 / 2 - 1``.
    """
    arr = np.asarray(costs, dtype=np.float64)
    if arr.size == 0:
        return 0.0
    if ranks < 1 or draws < 1:
        raise ValueError(f"ranks={ranks} and draws={draws} must be >= 1.")
    picks = np.random.default_rng(seed).choice(arr, size=(draws, ranks))
    return float(picks.max(axis=1).mean() / arr.mean() - 1.0)


def _resplit(
    pool: list[int], lens: list[int], costs: list[float], capacity: int, cap_count: int
) -> tuple[list[int], list[int]] | None:
    """Split ``pool`` into two packs that fit, with costs as close as possible (heuristic)."""
    by_len = sorted(pool, key=lambda i: (lens[i], i))
    small: list[int] = []
    small_tokens = 0
    for i in by_len:  # the shortest documents, up to half a pack, are the exact-fill reserve
        if small_tokens + lens[i] > capacity // 2:
            break
        small.append(i)
        small_tokens += lens[i]
    big = sorted(by_len[len(small) :], key=lambda i: (-costs[i], i))
    sides: tuple[list[int], list[int]] = ([], [])
    tok = [0, 0]
    cost = [0.0, 0.0]
    for i in big:
        first = 0 if cost[0] <= cost[1] else 1
        for s in (first, 1 - first):
            if tok[s] + lens[i] <= capacity:
                sides[s].append(i)
                tok[s] += lens[i]
                cost[s] += costs[i]
                break
        else:
            return None
    small_cost = sum(costs[i] for i in small)
    # Side 0 takes a subset of the short documents with token sum in [lo, hi].
    lo = tok[1] + small_tokens - capacity
    hi = capacity - tok[0]
    want_cost = (cost[1] + small_cost - cost[0]) / 2
    target = round(want_cost * small_tokens / small_cost) if small_cost > 0 else lo
    chosen = subset_positions([lens[i] for i in small], min(hi, small_tokens), lo=lo, target=target)
    if chosen is None:
        return None
    taken = set(chosen)
    a = sides[0] + [small[p] for p in chosen]
    b = sides[1] + [i for p, i in enumerate(small) if p not in taken]
    if len(a) > cap_count or len(b) > cap_count:
        return None
    return a, b


def _exchange(
    high: list[int],
    low: list[int],
    lens: list[int],
    costs: list[float],
    capacity: int,
    cap_count: int,
) -> tuple[list[int], list[int]] | None:
    """Best swap of one or two documents of ``high`` for a subset of ``low`` (same tokens,
    within the rooms).

    Moving a long document out and several short ones with the same token count in lowers the
    attention cost of ``high`` by ``attention * (x**2 - sum(y**2))`` while both packs stay full.
    """
    room_h = capacity - sum(lens[i] for i in high)
    room_l = capacity - sum(lens[i] for i in low)
    half = (sum(costs[i] for i in high) - sum(costs[i] for i in low)) / 2
    low_lens = [lens[i] for i in low]
    longest = sorted(range(len(high)), key=lambda q: (-lens[high[q]], q))
    moves: list[tuple[int, ...]] = [(p,) for p in longest]
    top = longest[:4]
    moves += [(a, b) for n, a in enumerate(top) for b in top[n + 1 :]]
    best: tuple[float, tuple[int, ...], list[int]] | None = None
    seen: set[tuple[int, float]] = set()
    for move in moves:
        x = sum(lens[high[p]] for p in move)
        cx = sum(costs[high[p]] for p in move)
        if (x, cx) in seen:
            continue
        seen.add((x, cx))
        chosen = subset_positions(low_lens, x + room_h, lo=x - room_l, target=x)
        if chosen is None:
            continue
        moved = cx - sum(costs[low[q]] for q in chosen)
        if not 0 < moved < 2 * half:
            continue
        score = abs(moved - half)
        if best is None or score < best[0]:
            best = (score, move, chosen)
    if best is None:
        return None
    _, move, chosen = best
    taken = set(chosen)
    new_high = [i for q, i in enumerate(high) if q not in move] + [low[q] for q in chosen]
    new_low = [i for q, i in enumerate(low) if q not in taken] + [high[p] for p in move]
    if len(new_high) > cap_count or len(new_low) > cap_count:
        return None
    return new_high, new_low


def _better_split(
    high: list[int],
    low: list[int],
    lens: list[int],
    costs: list[float],
    capacity: int,
    cap_count: int,
) -> tuple[tuple[list[int], float], tuple[list[int], float]] | None:
    """The re-split or exchange of two packs that narrows their cost gap most, or ``None``."""
    gap = sum(costs[i] for i in high) - sum(costs[i] for i in low)
    best = None
    best_gap = gap * (1 - 1e-9)
    for make in (_exchange, _resplit_pair):
        cand = make(high, low, lens, costs, capacity, cap_count)
        if cand is None:
            continue
        ca = sum(costs[i] for i in cand[0])
        cb = sum(costs[i] for i in cand[1])
        if abs(ca - cb) < best_gap:
            best_gap = abs(ca - cb)
            best = ((cand[0], ca), (cand[1], cb)) if ca >= cb else ((cand[1], cb), (cand[0], ca))
        if best_gap <= gap / 4:
            break  # good enough: skip the costlier re-split
    return best


def _resplit_pair(
    high: list[int],
    low: list[int],
    lens: list[int],
    costs: list[float],
    capacity: int,
    cap_count: int,
) -> tuple[list[int], list[int]] | None:
    return _resplit(high + low, lens, costs, capacity, cap_count)


def balance_packs(
    bins: Sequence[Sequence[int]],
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    *,
    cost: CostModel | None = None,
    image_tokens: Sequence[int] | None = None,
    max_samples_per_pack: int | None = None,
) -> list[list[int]]:
    """Even out the packs' costs without adding packs (see the module docstring).

    Args:
        bins: A valid packing of ``lengths`` (every index once, each pack within ``capacity``).
        lengths: Length of each document as packed (after alignment).
        capacity: Pack size in tokens.
        cost: The cost model (default :class:`CostModel()`).
        image_tokens: Image tokens per document, for ``CostModel.image``.
        max_samples_per_pack: Keep at most this many documents per pack.

    Returns:
        The same documents in at most ``len(bins)`` packs, each within ``capacity``: documents
        only move between existing packs, no pack is added and a pack a move empties is left
        out, so fill never drops. Deterministic.
    """
    model = cost or CostModel()
    lens = np.asarray(lengths, dtype=np.int64).tolist()
    doc_cost = model.doc_costs(lengths, image_tokens).tolist()
    packs = [list(b) for b in bins]
    cap_count = max_samples_per_pack or max(len(lens), 1)
    pack_cost = [sum(doc_cost[i] for i in b) for b in packs]
    stuck: set[int] = set()
    budget = ATTEMPTS_PER_PACK * len(packs)
    for _ in range(MAX_ROUNDS):
        order = sorted(range(len(packs)), key=lambda j: (pack_cost[j], j))
        cheap = order[: len(order) // 2]
        used: set[int] = set()
        improved = False
        for h in reversed(order[len(order) // 2 :]):
            if h in stuck or budget <= 0:
                continue
            tries = 0
            for low in cheap:
                if tries >= PARTNERS or pack_cost[low] >= pack_cost[h]:
                    break
                if low in used:
                    continue
                tries += 1
                budget -= 1
                split = _better_split(packs[h], packs[low], lens, doc_cost, capacity, cap_count)
                if split is None:
                    continue
                (packs[h], pack_cost[h]), (packs[low], pack_cost[low]) = split
                used.add(low)
                improved = True
                break
            else:
                stuck.add(h)  # no cheap partner helps: its cost floor is high
        if not improved or budget <= 0:
            break
    return [b for b in packs if b]


def balanced(
    lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit decreasing with repair, then :func:`balance_packs` under ``CostModel()``."""
    bins = best_fit_decreasing_repair(lengths, capacity, max_samples_per_pack)
    return balance_packs(bins, lengths, capacity, max_samples_per_pack=max_samples_per_pack)
