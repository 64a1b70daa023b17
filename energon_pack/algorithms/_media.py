# SPDX-License-Identifier: Apache-2.0
"""Media budgets: at most so many media tokens and media items (images + videos) per pack.

A VLM's vision tower runs over every image and video of a pack at once, so its memory, not the
language model's, often bounds a pack: ``PackingSpec(max_media_tokens_per_pack=...,
max_media_per_pack=...)``. Every algorithm packs by tokens only; :func:`enforce_media_budgets`
is a deterministic post-pass that makes any algorithm's bins honour the budgets:

0. if a pack is over a budget, :func:`~energon_pack.algorithms.balance_packs` first evens
   out the media tokens of the packs over budget and the lightest packs (:data:`VISION_COST`,
   :data:`PARTNERS_PER_OVER` light packs per pack over budget; no pack added, same fill);
1. a pack over a budget evicts members, the media-heaviest first, until it is within budget;
2. the evicted documents, longest first, go by best fit (least room left) into the packs that
   have room for them in *every* dimension: slots, ``max_samples_per_pack``, media tokens and
   media items; where none has, into the pack with media room that needs the fewest slots
   freed, whose text documents (shortest first) make way;
3. the text documents made to leave, longest first, go by best fit into any pack with room
   (the holes the evictions left, usually); a new pack is opened only when none has.

Step 0 is what keeps the fill: on the LLaVA-like mix of ``tests/benchmarks/media_packing.py``
(20,000 documents, pack 16384, a budget of 14336 media tokens where the mean pack holds 12.4k)
evicting and re-placing alone filled 91.9% (buffer 256) and 93.5% (2048), with step 0 97.7% and
98.8% (97.7% / 99.7% without budgets). It is also the costly step (``balance_packs``: ~0.01-0.03
ms per document where packs are over budget, nothing where none is).

Worked example, pack size 10, ``max_media_tokens_per_pack=6``, lengths ``[5, 3, 3, 2]`` with
media tokens ``[4, 4, 0, 0]``: best-fit decreasing gives ``[[0, 1, 3], [2]]``; pack 0 holds 8
media tokens; step 0 exchanges document 0 (5 slots, 4 media tokens) for document 2 (3 slots,
text): 8 and 5 slots, 4 media tokens each, nothing left to evict::

    >>> from energon_pack.algorithms import PackingSpec
    >>> spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    >>> load = MediaLoad.of([(4, 1), (4, 1), (0, 0), (0, 0)])
    >>> enforce_media_budgets([[0, 1, 3], [2]], np.array([5, 3, 3, 2]), load, spec)
    [[1, 3, 2], [0]]

With ``max_media_per_pack=1`` and one-image documents 0 and 3 in ``[[2, 1], [0, 3, 4]]``
(lengths ``[5, 4, 6, 3, 2]``), step 0 finds no exchange, pack 1 evicts document 0, no pack has
room for it, so pack 0 makes way: its text document 2 (6 slots, the shortest that frees
enough) leaves, 0 goes in, and 2 opens a new pack: ``[[1, 0], [3, 4], [2]]``.

When no pack is over budget the bins come back unchanged after one vectorised pass (``O(n)``).
A single document over a budget can never be packed: :func:`check_media_fits` names it (the
encoders drop and count such a document in ``encode_sample``, see :func:`media_over_budget`).

The module is over 300 lines because the budget pass is one algorithm in three steps
(levelling, eviction, re-placement with text making way) that share the per-pack load arrays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs

if TYPE_CHECKING:
    from energon_pack.algorithms._spec import PackingSpec

__all__ = [
    "VISION_COST",
    "MediaLoad",
    "check_media_fits",
    "enforce_media_budgets",
    "has_media_budgets",
    "media_over_budget",
    "pack_fits",
]

#: A pack's vision load: its media tokens only (what the budget bounds).
VISION_COST = CostModel(token=0.0, attention=0.0, image=1.0)
#: Step 0 balances each pack over a budget together with this many of the lightest packs.
PARTNERS_PER_OVER = 2


@dataclass(frozen=True)
class MediaLoad:
    """Media load of each document: placeholder tokens and items (images + videos).

    ``MediaLoad.of([(256, 1), (0, 0)])`` is two documents: one image of 256 tokens, and text.
    """

    #: (n,) int64 media placeholder tokens per document (0 for text).
    tokens: np.ndarray
    #: (n,) int64 images plus videos per document.
    items: np.ndarray

    def __post_init__(self) -> None:
        tokens = np.asarray(self.tokens).astype(np.int64, copy=False).reshape(-1)
        items = np.asarray(self.items).astype(np.int64, copy=False).reshape(-1)
        if tokens.shape != items.shape:
            raise ValueError(
                f"MediaLoad has {tokens.size} token counts but {items.size} item counts: "
                "give one (tokens, items) pair per document."
            )
        if tokens.size and (int(tokens.min()) < 0 or int(items.min()) < 0):
            i = int(np.argmin(np.minimum(tokens, items)))
            raise ValueError(
                f"MediaLoad of document {i} is ({int(tokens[i])}, {int(items[i])}): media "
                "tokens and items must be >= 0."
            )
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "items", items)

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> MediaLoad:
        """From ``(tokens, items)`` per document (``EncodedSample.media_load`` of each)."""
        arr = np.array(list(pairs), dtype=np.int64).reshape(-1, 2)
        return cls(arr[:, 0], arr[:, 1])

    @classmethod
    def zeros(cls, n: int) -> MediaLoad:
        """``n`` text documents."""
        return cls(np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64))

    def __len__(self) -> int:
        return int(self.tokens.size)

    def take(self, indices: Sequence[int] | np.ndarray) -> MediaLoad:
        """The load of the documents at ``indices``, in that order."""
        idx = np.asarray(indices, dtype=np.int64)
        return MediaLoad(self.tokens[idx], self.items[idx])


def has_media_budgets(spec: PackingSpec) -> bool:
    """True when ``spec`` sets a media budget."""
    return spec.max_media_tokens_per_pack is not None or spec.max_media_per_pack is not None


def media_over_budget(tokens: int, items: int, spec: PackingSpec) -> str | None:
    """Why one document with this media load can never be packed under ``spec``, or ``None``.

    ``media_over_budget(3000, 1, PackingSpec(pack_size=8192, max_media_tokens_per_pack=2048))``
    says ``"3000 media tokens > max_media_tokens_per_pack=2048"``.
    """
    tok_cap, item_cap = spec.max_media_tokens_per_pack, spec.max_media_per_pack
    if tok_cap is not None and tokens > tok_cap:
        return f"{tokens} media tokens > max_media_tokens_per_pack={tok_cap}"
    if item_cap is not None and items > item_cap:
        return f"{items} images and videos > max_media_per_pack={item_cap}"
    return None


def pack_fits(members: Sequence[int], load: MediaLoad | None, spec: PackingSpec) -> bool:
    """True when ``members`` (document indices) keep ``spec``'s per-pack limits besides the
    tokens: ``max_samples_per_pack`` and, with ``load``, the media budgets."""
    if spec.max_samples_per_pack is not None and len(members) > spec.max_samples_per_pack:
        return False
    if load is None or not has_media_budgets(spec):
        return True
    idx = list(members)
    return media_over_budget(int(load.tokens[idx].sum()), int(load.items[idx].sum()), spec) is None


def check_media_fits(load: MediaLoad, spec: PackingSpec) -> None:
    """Raise ``ValueError`` naming the first document whose media alone exceed a budget."""
    for cap, arr, what in (
        (spec.max_media_tokens_per_pack, load.tokens, "media tokens"),
        (spec.max_media_per_pack, load.items, "images and videos"),
    ):
        if cap is not None and arr.size and int(arr.max()) > cap:
            i = int(np.argmax(arr))
            raise ValueError(
                f"document {i} has {int(arr[i])} {what}, over the per-pack budget {cap} "
                f"({media_over_budget(int(load.tokens[i]), int(load.items[i]), spec)}): no pack "
                "can hold it. Drop such documents before packing (the task encoders drop and "
                "count them), or raise the budget."
            )


class _Packs:
    """Packs under construction with their sums per dimension (NumPy, for vectorised fits)."""

    def __init__(
        self, bins: Sequence[Sequence[int]], slots: np.ndarray, load: MediaLoad, spec: PackingSpec
    ) -> None:
        big = np.iinfo(np.int64).max // 4
        self.slots, self.load, self.size = slots, load, spec.pack_size
        self.tok_cap = (
            big if spec.max_media_tokens_per_pack is None else spec.max_media_tokens_per_pack
        )
        self.item_cap = big if spec.max_media_per_pack is None else spec.max_media_per_pack
        self.count_cap = spec.max_samples_per_pack or big
        self.members = [list(b) for b in bins]
        self.text = (load.tokens == 0) & (load.items == 0)  #: documents without media
        sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
        flat = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(sizes.sum()))
        owner = np.repeat(np.arange(len(bins)), sizes)
        self.used, self.tok, self.items, self.text_slots = (
            np.bincount(owner, weights=v[flat], minlength=len(bins)).astype(np.int64)
            for v in (slots, load.tokens, load.items, slots * self.text)
        )
        self.count = sizes

    def over(self) -> list[int]:
        """Packs over a media budget."""
        return np.flatnonzero((self.tok > self.tok_cap) | (self.items > self.item_cap)).tolist()

    def move(self, i: int, p: int, sign: int) -> None:
        """Add document ``i`` to pack ``p`` (``sign=1``) or take it out (``-1``)."""
        if sign > 0:
            self.members[p].append(i)
        else:
            self.members[p].remove(i)
        s = int(self.slots[i])
        self.used[p] += sign * s
        self.tok[p] += sign * int(self.load.tokens[i])
        self.items[p] += sign * int(self.load.items[i])
        self.count[p] += sign
        if self.text[i]:
            self.text_slots[p] += sign * s

    def media_room(self, i: int) -> np.ndarray:
        """Packs that can take document ``i``'s media (tokens and items)."""
        return (self.tok + self.load.tokens[i] <= self.tok_cap) & (
            self.items + self.load.items[i] <= self.item_cap
        )

    def best_fit(self, i: int) -> int | None:
        """The pack with the least room left that takes ``i`` in every dimension, or None."""
        room = self.size - self.used - self.slots[i]
        ok = (room >= 0) & (self.count < self.count_cap) & self.media_room(i)
        return int(np.flatnonzero(ok)[np.argmin(room[ok])]) if ok.any() else None

    def displace_for(self, i: int) -> list[int] | None:
        """Make room for media document ``i`` in the pack with media room that needs the
        fewest slots freed, by taking text documents out (the shortest one that frees enough,
        else the longest ones until enough); ``i`` goes in. Returns the documents taken out,
        or None when no pack can make room."""
        need = self.used + self.slots[i] - self.size
        ok = (need > 0) & (need <= self.text_slots) & self.media_room(i)
        if not ok.any():
            return None
        p = int(np.flatnonzero(ok)[np.argmin(need[ok])])
        short = int(need[p])
        text = sorted(
            (j for j in self.members[p] if self.text[j]), key=lambda j: (self.slots[j], j)
        )
        out = [j for j in text if self.slots[j] >= short][:1]
        if not out:
            freed = 0
            for j in reversed(text):
                out.append(j)
                freed += int(self.slots[j])
                if freed >= short:
                    break
        for j in out:
            self.move(j, p, -1)
        self.move(i, p, 1)
        return out

    def place(self, i: int) -> None:
        """Best fit, else a new pack."""
        p = self.best_fit(i)
        if p is None:
            self.members.append([])
            self.used, self.tok, self.items, self.count, self.text_slots = (
                np.append(a, 0)
                for a in (self.used, self.tok, self.items, self.count, self.text_slots)
            )
            p = len(self.members) - 1
        self.move(i, p, 1)


def _level_media(packs: _Packs, spec: PackingSpec) -> list[list[int]]:
    """Step 0: the packs over a budget and as many of the lightest packs (by media tokens)
    balanced under :data:`VISION_COST` (same packs, same fill); the other packs unchanged.
    Balancing only these bounds the time by the packs over budget, not the buffer."""
    over = packs.over()
    skip = set(over)
    light = [p for p in np.argsort(packs.tok, kind="stable").tolist() if p not in skip]
    chosen = sorted(over + light[: PARTNERS_PER_OVER * len(over)])
    levelled = balance_packs(
        [packs.members[p] for p in chosen],
        packs.slots,
        spec.pack_size,
        cost=VISION_COST,
        image_tokens=packs.load.tokens,
        max_samples_per_pack=spec.max_samples_per_pack,
    )
    keep = set(chosen)
    return [b for p, b in enumerate(packs.members) if p not in keep] + levelled


def enforce_media_budgets(
    bins: Sequence[Sequence[int]], slots: np.ndarray, load: MediaLoad, spec: PackingSpec
) -> list[list[int]]:
    """``bins`` with no pack over ``spec``'s media budgets (see the module docstring).

    Args:
        bins: A packing of ``slots`` (every index once, each pack within ``spec.pack_size``).
        slots: ``int64`` pack slots per document (lengths after alignment).
        load: Media load per document; every document must fit the budgets alone
            (:func:`check_media_fits`).
        spec: The budgets, ``pack_size`` and ``max_samples_per_pack``.

    Returns:
        Every index exactly once, no pack over any budget or the capacity; ``bins`` itself
        (as lists) when nothing is over budget. Deterministic.
    """
    if not has_media_budgets(spec) or not bins:
        return [list(b) for b in bins]
    packs = _Packs(bins, slots, load, spec)
    if not packs.over():
        return packs.members
    packs = _Packs(_level_media(packs, spec), slots, load, spec)
    over = packs.over()
    evicted: list[int] = []
    for p in over:  # heaviest first: (media tokens, items) descending, then index
        for i in sorted(packs.members[p], key=lambda i: (-load.tokens[i], -load.items[i], i)):
            if packs.tok[p] <= packs.tok_cap and packs.items[p] <= packs.item_cap:
                break
            if not packs.text[i]:
                packs.move(i, p, -1)
                evicted.append(i)
    displaced: list[int] = []
    for i in sorted(evicted, key=lambda i: (-slots[i], i)):
        if (p := packs.best_fit(i)) is not None:
            packs.move(i, p, 1)
        elif (out := packs.displace_for(i)) is not None:
            displaced += out
        else:
            packs.place(i)
    for i in sorted(displaced, key=lambda i: (-slots[i], i)):
        packs.place(i)
    return [b for b in packs.members if b]
