# SPDX-License-Identifier: Apache-2.0
"""Media budgets: at most so many media tokens and media items (images + videos) per pack.

A VLM's vision tower runs over every image and video of a pack at once, so its memory, not the
language model's, often bounds a pack: ``PackingSpec(max_media_tokens_per_pack=...,
max_media_per_pack=...)``. Every algorithm packs by tokens only; :func:`enforce_media_budgets`
is a deterministic post-pass that makes any algorithm's bins honour the budgets:

1. a pack over a budget evicts members, the media-heaviest first, until it is within budget;
2. the evicted documents, longest first, go by best fit (least room left) into the packs that
   have room for them in *every* dimension: slots, ``max_samples_per_pack``, media tokens and
   media items; a new pack is opened only when none has.

Worked example, pack size 10, ``max_media_tokens_per_pack=6``, lengths ``[5, 3, 3, 2]`` with
media tokens ``[4, 4, 0, 0]``: best-fit decreasing gives ``[[0, 1, 3], [2]]``; pack 0 holds 8
media tokens and evicts document 0 (heaviest, first by index), which goes to pack 1 (8 slots,
4 media tokens there); pack 0 keeps 5 slots and 4 media tokens::

    >>> from energon_pack.algorithms import PackingSpec
    >>> spec = PackingSpec(pack_size=10, max_media_tokens_per_pack=6)
    >>> load = MediaLoad.of([(4, 1), (4, 1), (0, 0), (0, 0)])
    >>> enforce_media_budgets([[0, 1, 3], [2]], np.array([5, 3, 3, 2]), load, spec)
    [[1, 3], [2, 0]]

When no pack is over budget the bins come back unchanged after one vectorised pass (``O(n)``).
A single document over a budget can never be packed: :func:`check_media_fits` names it (the
encoders drop and count such a document in ``encode_sample``, see :func:`media_over_budget`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from energon_pack.algorithms._spec import PackingSpec

__all__ = [
    "MediaLoad",
    "check_media_fits",
    "enforce_media_budgets",
    "has_media_budgets",
    "media_over_budget",
    "pack_fits",
]


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


def _pack_sums(bins: Sequence[Sequence[int]], values: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per-pack sums of each of ``values`` (per-document arrays), vectorised."""
    sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    flat = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(sizes.sum()))
    owner = np.repeat(np.arange(len(bins)), sizes)
    return [
        np.bincount(owner, weights=v[flat], minlength=len(bins)).astype(np.int64) for v in values
    ]


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
    tok_cap = spec.max_media_tokens_per_pack
    item_cap = spec.max_media_per_pack
    packs = [list(b) for b in bins]
    if (tok_cap is None and item_cap is None) or not packs:
        return packs
    big = np.iinfo(np.int64).max // 4
    tok_cap = big if tok_cap is None else tok_cap
    item_cap = big if item_cap is None else item_cap
    used, tok, items = _pack_sums(packs, [slots, load.tokens, load.items])
    over = np.flatnonzero((tok > tok_cap) | (items > item_cap)).tolist()
    if not over:
        return packs
    evicted: list[int] = []
    for p in over:  # heaviest first: (media tokens, items) descending, then index
        for i in sorted(packs[p], key=lambda i: (-load.tokens[i], -load.items[i], i)):
            if tok[p] <= tok_cap and items[p] <= item_cap:
                break
            if load.tokens[i] == 0 and load.items[i] == 0:
                continue
            packs[p].remove(i)
            evicted.append(i)
            used[p] -= slots[i]
            tok[p] -= load.tokens[i]
            items[p] -= load.items[i]
    count = np.array([len(b) for b in packs], dtype=np.int64)
    cap_count = spec.max_samples_per_pack or big
    for i in sorted(evicted, key=lambda i: (-slots[i], i)):
        s, t, m = int(slots[i]), int(load.tokens[i]), int(load.items[i])
        room = spec.pack_size - used - s
        ok = (room >= 0) & (count < cap_count) & (tok + t <= tok_cap) & (items + m <= item_cap)
        if ok.any():
            p = int(np.flatnonzero(ok)[np.argmin(room[ok])])  # best fit, first on ties
        else:
            packs.append([])
            p = len(packs) - 1
            used, tok, items, count = (np.append(a, 0) for a in (used, tok, items, count))
        packs[p].append(i)
        used[p] += s
        tok[p] += t
        items[p] += m
        count[p] += 1
    return [b for b in packs if b]
