# SPDX-License-Identifier: Apache-2.0
"""Media budgets: at most so many media tokens and media items (images + videos) per pack.

Every algorithm packs by tokens only; :func:`enforce_media_budgets` is a deterministic
post-pass that makes any algorithm's bins honour ``max_media_tokens_per_pack`` and
``max_media_per_pack``. See docs/howto/media-budgets.md and docs/benchmarks/media-packing.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs
from energon_pack.algorithms._spec import PackingSpec

__all__ = [
    "VISION_COST",
    "MediaLoad",
    "check_media_fits",
    "enforce_media_budgets",
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


def pack_fits(members: Sequence[int], load: MediaLoad | None, spec: PackingSpec) -> bool:
    """True when ``members`` (document indices) keep ``spec``'s per-pack limits besides the
    tokens: ``max_samples_per_pack`` and, with ``load``, the media budgets."""
    if spec.max_samples_per_pack is not None and len(members) > spec.max_samples_per_pack:
        return False
    if load is None or not spec.has_media_budgets:
        return True
    idx = list(members)
    return spec.media_over_budget(int(load.tokens[idx].sum()), int(load.items[idx].sum())) is None


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
                f"({spec.media_over_budget(int(load.tokens[i]), int(load.items[i]))}): no pack "
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
        Every index exactly once, no pack over any budget or the pack size; ``bins`` itself
        (as lists) when nothing is over budget. Deterministic.
    """
    if not spec.has_media_budgets or not bins:
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
