# SPDX-License-Identifier: Apache-2.0
"""The entry point every packer calls: :func:`pack_lengths`, lengths and a spec in, bins out.

It aligns and validates the lengths with the spec, runs the spec's algorithm from
:data:`~energon_pack.algorithms.ALGORITHMS`, then optionally evens out the packs' costs
(``balance``), keeps every pack within the media budgets (``media``) and orders the packs per
optimizer step (``spec.step_packs``)::

    >>> pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))
    [[2, 1], [0, 3, 4]]
    >>> pack_lengths([5, 8, 1], 16, algorithm="next_fit", alignment=4)  # slots 8, 8, 4
    [[0, 1], [2]]
    >>> media = MediaLoad.of([(3, 1), (0, 0), (0, 0), (3, 1), (0, 0)])  # two 3-token images
    >>> pack_lengths([5, 4, 6, 3, 2], 10, media=media, max_media_per_pack=1)  # one per pack
    [[1, 0], [3, 4], [2]]

With ``media`` and ``step_packs``, packs are ordered by :data:`MEDIA_COST` (the language
model's cost plus the vision tower's per media token), so that the ``step_packs`` packs of a
step carry about the same vision load. On the LLaVA-like mix of
``tests/benchmarks/media_packing.py`` (docs/benchmarks/media-packing.md) this halves the
vision-load step CV of the packing order (0.205 -> 0.096 at buffer 256, 0.245 -> 0.054 at
2048); ranking by media tokens alone levels them a little more (0.090, 0.047) and the language
model's cost a little less, so the cost that tracks the step time is the default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs, balanced
from energon_pack.algorithms._media import (
    MediaLoad,
    check_media_fits,
    enforce_media_budgets,
    has_media_budgets,
)
from energon_pack.algorithms._registry import ALGORITHMS
from energon_pack.algorithms._repair import (
    best_fit_decreasing_repair,
    best_fit_decreasing_repair_list,
)
from energon_pack.algorithms._spec import PackingSpec, as_spec
from energon_pack.algorithms._step_order import step_order

__all__ = ["MEDIA_COST", "pack_lengths"]

#: The cost model of packs with media (``media`` given: ``balanced``, and ``step_packs``
#: without ``balance``):
#: ``CostModel()`` plus ``image=0.4`` per media token, the vision tower's forward FLOPs per
#: merged token over the language model's linear FLOPs per token for Qwen2-VL-7B (ViT 32 x
#: 1280 wide, 4 patches per merged token: ~5 GFLOPs; Qwen2-7B: ~13 GFLOPs per token).
MEDIA_COST = CostModel(image=0.4)
#: Lists up to this long (``select_samples_to_pack``'s buffers) take the default algorithm's
#: list path (:func:`_short_list`), the same bins: ~2 us less per call for 16 lengths (7 -> 5),
#: 5-8 us less for 64-256; above, NumPy's sort and bitset best fit win (2048 short lengths:
#: 330 us through the array, 490 us as a list).
SHORT_LIST = 512


def pack_lengths(
    lengths: Sequence[int] | np.ndarray,
    spec: PackingSpec | int,
    *,
    media: MediaLoad | None = None,
    balance: CostModel | None = None,
    **spec_fields: Any,
) -> list[list[int]]:
    """Partition ``range(len(lengths))`` into packs of at most ``spec.pack_size`` slots.

    Args:
        lengths: Token length of each sample (positive integers, each fitting a pack once
            rounded up to ``spec.alignment``).
        spec: The :class:`PackingSpec`; or the pack size, with the other spec fields as
            keywords (``pack_lengths(lengths, 4096, algorithm="next_fit")``).
        media: Media load of each sample (:class:`~energon_pack.algorithms.MediaLoad`). Needed
            by the media budgets (enforced after the algorithm and ``balance``:
            :func:`~energon_pack.algorithms.enforce_media_budgets`); with it, ``balanced``
            and the ``step_packs`` order count media tokens (:data:`MEDIA_COST`; see the
            module docstring).
        balance: If given, even out the packs' estimated costs under this cost model after the
            algorithm ran (:func:`~energon_pack.algorithms.balance_packs`: same packs count,
            same fill). ``algorithm="balanced"`` is the default algorithm with ``CostModel()``
            (``MEDIA_COST`` with ``media``).
        spec_fields: :class:`PackingSpec` fields replacing the spec's.

    Returns:
        Bins of indices into ``lengths``: every index exactly once, deterministic, no pack over
        a budget. With ``spec.step_packs``, ordered so that any ``step_packs`` consecutive ones
        cost about the same under ``balance`` (else ``CostModel()``, ``MEDIA_COST`` with
        ``media``; :func:`~energon_pack.algorithms.step_order`).

    Raises:
        ValueError: a bad spec field, a length ``<= 0``, a length above the pack size after
            alignment, media budgets without ``media``, or one sample over a media budget
            (the message says what to do).
    """
    if type(lengths) is list and media is None and balance is None and not spec_fields:
        bins = _short_list(lengths, spec)
        if bins is not None:
            return bins
    spec = as_spec(spec, **spec_fields)
    arr = spec.slot_lengths(lengths)
    _check_media(arr, media, spec)
    if arr.size == 0:
        return []
    cap, per_pack = spec.pack_size, spec.max_samples_per_pack
    algorithm = ALGORITHMS[spec.algorithm]
    if media is not None and algorithm is balanced and balance is None:
        # balanced = the default algorithm + balance_packs(CostModel()); with media, the
        # balance counts the media tokens (one balance pass, not two).
        algorithm, balance = best_fit_decreasing_repair, MEDIA_COST
    bins = algorithm(arr, cap, per_pack)
    image_tokens = None if media is None else media.tokens
    if balance is not None:
        bins = balance_packs(
            bins, arr, cap, cost=balance, image_tokens=image_tokens, max_samples_per_pack=per_pack
        )
    if media is not None:
        bins = enforce_media_budgets(bins, arr, media, spec)
    if spec.step_packs is not None:
        costs = _order_costs(bins, arr, media, balance)
        bins = [bins[i] for i in step_order(costs, spec.step_packs)]
    return bins


def _short_list(lengths: list, spec: PackingSpec | int) -> list[list[int]] | None:
    """The default algorithm on a short list of ints without building an array (the same
    bins: :func:`~energon_pack.algorithms._repair.best_fit_decreasing_repair_list`), or
    ``None`` where it does not apply: a longer list, alignment, ``step_packs``, media budgets,
    another algorithm, or lengths the validating path must name (zero, too long, not ints)."""
    if (
        len(lengths) > SHORT_LIST
        or not isinstance(spec, PackingSpec)
        or not spec._plain
        or ALGORITHMS[spec.algorithm] is not best_fit_decreasing_repair
    ):
        return None
    return best_fit_decreasing_repair_list(lengths, spec.pack_size, spec.max_samples_per_pack)


def _order_costs(
    bins: list[list[int]], arr: np.ndarray, media: MediaLoad | None, balance: CostModel | None
) -> np.ndarray:
    """What ``step_order`` levels: ``balance``'s costs if given, else ``MEDIA_COST``'s with
    ``media``, else ``CostModel()``'s."""
    model = balance or (CostModel() if media is None else MEDIA_COST)
    return model.pack_costs(bins, arr, None if media is None else media.tokens)


def _check_media(arr: np.ndarray, media: MediaLoad | None, spec: PackingSpec) -> None:
    """Raise ``ValueError`` unless ``media`` matches ``arr`` and fits the budgets one by one."""
    if media is None:
        if has_media_budgets(spec):
            raise ValueError(
                "the spec sets media budgets (max_media_tokens_per_pack / max_media_per_pack) "
                "but no media loads were given: pass media=MediaLoad(...) (one per sample; "
                "the task encoders pass EncodedSample.media_load), or unset the budgets."
            )
        return
    if len(media) != arr.size:
        raise ValueError(
            f"media has {len(media)} entries but lengths has {arr.size}: give one media load "
            "per sample (0, 0 for text)."
        )
    check_media_fits(media, spec)
