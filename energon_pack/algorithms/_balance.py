# SPDX-License-Identifier: Apache-2.0
"""Compute-balanced packing: equal estimated step cost per pack at the same fill.

:class:`CostModel` estimates ``cost(doc) = token * len + attention * len**2 + image *
image_tokens``; :func:`balance_packs` keeps any algorithm's packs (same count, same fill) and
evens out their costs pair by pair (:mod:`~energon_pack.algorithms._balance_pairs`). See
docs/benchmarks/balance.md.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._balance_pairs import Packs, candidates
from energon_pack.algorithms._best_fit import best_fit_decreasing_repair

__all__ = [
    "CostModel",
    "balance_packs",
    "balanced",
    "cost_spread",
    "slowest_rank_loss",
]

#: Packs this many standard deviations below the mean cost are lifted first ("holes").
HOLE = 2.0
#: Costly partners tried per hole before it is left as it is.
HOLE_PARTNERS = 8
#: Pair attempts per pack for the holes (bounds the time).
HOLE_ATTEMPTS = 0.3


@dataclass(frozen=True)
class _Effort:
    partners: int  #: cheap partners tried per costly pack and round
    rounds: int  #: rounds at most
    min_gain: float  #: another round only if the last cut the costs' variance by this fraction
    attempts_per_pack: float  #: pair attempts per pack in all (bounds the time)


#: Calls with many packs (buffers, whole data sets).
FAST = _Effort(partners=3, rounds=6, min_gain=0.03, attempts_per_pack=3)
#: Calls with at most :data:`THOROUGH_PACKS` packs (the media budgets level a few packs): the
#: rounds go on while anything improves, at little cost in absolute time.
THOROUGH = _Effort(partners=8, rounds=12, min_gain=0.0, attempts_per_pack=20)
THOROUGH_PACKS = 64


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


def _lift_holes(st: Packs, budget: int) -> None:
    """The packs more than ``HOLE`` standard deviations below the mean cost first (best fit's
    under-filled tail): each, cheapest first, is offered to up to ``HOLE_PARTNERS`` packs
    above the mean, costliest first but those of one repeated length last (four 2048-token
    chunks can only trade whole chunks), and offered again after a move while still that low
    (the costly partner too, if the move left it that low)."""
    cost, lens = st.cost, st.lens
    arr = np.array(cost)
    mean, floor = float(arr.mean()), float(arr.mean() - HOLE * arr.std())
    donors = [h for h in np.argsort(-arr, kind="stable").tolist() if cost[h] > mean]
    mixed = [len({lens[i] for i in st.packs[h]}) > 1 for h in donors]
    donors = [h for h, x in zip(donors, mixed) if x] + [
        h for h, x in zip(donors, mixed) if not x and len(st.packs[h]) > 1
    ]
    holes = [(cost[j], j) for j in range(len(cost)) if cost[j] < floor]
    heapq.heapify(holes)
    stop = st.attempts + budget
    while holes and st.attempts < stop:
        c, low = heapq.heappop(holes)
        if c != cost[low]:
            continue  # stale: the pack has moved since
        tries = 0
        for h in donors:
            if tries >= HOLE_PARTNERS:
                break
            if cost[h] <= mean or len(st.packs[h]) < 2:
                continue  # no longer costly, or a single document left
            moved = st.try_pair(h, low)
            tries += moved is not None
            if moved:
                for j in (low, h):
                    if cost[j] < floor:
                        heapq.heappush(holes, (cost[j], j))
                break


def _round(st: Packs, budget: int, partners: int) -> bool:
    """One round: each pack above the mean cost, costliest first, is offered to up to
    ``partners`` of the cheapest packs below the mean not yet changed this round, cheapest
    first (a changed one is skipped, not taken as the end of the cheap ones). ``True`` if a
    pack moved."""
    cost, packs = st.cost, st.packs
    m = len(packs)
    order = np.argsort(np.array(cost), kind="stable").tolist()
    mean = sum(cost) / m
    cheap = [j for j in order[: m // 2] if cost[j] < mean]
    used: set[int] = set()
    first = 0  # cheap[:first] are all used
    improved = False
    for h in reversed(order[m // 2 :]):
        if cost[h] <= mean or st.attempts >= budget:
            break
        if len(packs[h]) < 2:
            continue
        while first < len(cheap) and cheap[first] in used:
            first += 1
        tries = 0
        cands = candidates(packs[h], st.lens, st.doc_cost)
        for low in itertools.islice(cheap, first, None):
            if low in used:
                continue
            if tries >= partners or cost[low] >= cost[h]:
                break
            moved = st.try_pair(h, low, cands)
            tries += moved is not None  # a pair known to fail is skipped, not counted
            if moved:
                used.add(low)
                improved = True
                break
    return improved


def balance_packs(
    bins: Sequence[Sequence[int]],
    lengths: Sequence[int] | np.ndarray,
    pack_size: int,
    *,
    cost: CostModel | None = None,
    image_tokens: Sequence[int] | None = None,
    max_samples_per_pack: int | None = None,
) -> list[list[int]]:
    """Even out the packs' costs without adding packs (see the module docstring).

    Args:
        bins: A valid packing of ``lengths`` (every index once, each pack within ``pack_size``).
        lengths: Length of each document as packed (after alignment).
        pack_size: Pack size in tokens.
        cost: The cost model (default :class:`CostModel()`).
        image_tokens: Image tokens per document, for ``CostModel.image``.
        max_samples_per_pack: Keep at most this many documents per pack.

    Returns:
        The same documents in at most ``len(bins)`` packs, each within ``pack_size``: documents
        only move between existing packs, no pack is added and a pack a move empties is left
        out, so fill never drops. Deterministic.
    """
    lens = np.asarray(lengths, dtype=np.int64)
    bins = [b for b in bins if len(b)]  # an empty pack stays empty: never filled, left out
    st = Packs(bins, lens, (cost or CostModel()).doc_costs(lens, image_tokens), pack_size)
    if max_samples_per_pack:
        st.cap_count = max_samples_per_pack
    m = len(st.packs)
    if m >= 2:
        effort = THOROUGH if m <= THOROUGH_PACKS else FAST
        budget = int(effort.attempts_per_pack * m) + 8
        _lift_holes(st, int(HOLE_ATTEMPTS * m) + 4)
        spread = float(np.var(st.cost))
        for _ in range(effort.rounds):
            if not _round(st, budget, effort.partners) or st.attempts >= budget:
                break
            before, spread = spread, float(np.var(st.cost))
            if spread > (1 - effort.min_gain) * before:
                break  # the round narrowed the spread too little to try another
    return [b for b in st.packs if b]


def balanced(
    lengths: np.ndarray, pack_size: int, max_samples_per_pack: int | None = None
) -> list[list[int]]:
    """Best-fit decreasing with repair, then :func:`balance_packs` under ``CostModel()``."""
    bins = best_fit_decreasing_repair(lengths, pack_size, max_samples_per_pack)
    return balance_packs(bins, lengths, pack_size, max_samples_per_pack=max_samples_per_pack)
