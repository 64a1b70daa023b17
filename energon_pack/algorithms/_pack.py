# SPDX-License-Identifier: Apache-2.0
"""The entry point every packer calls: :func:`pack_lengths`, lengths and a spec in, bins out.

It runs the spec's algorithm, then optionally evens out the packs' costs, enforces the media
budgets and orders the packs per optimizer step. See docs/concepts/packing.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs, balanced
from energon_pack.algorithms._best_fit import (
    best_fit_decreasing_repair,
    best_fit_decreasing_repair_list,
)
from energon_pack.algorithms._media import MediaLoad, check_media_fits, enforce_media_budgets
from energon_pack.algorithms._registry import ALGORITHMS
from energon_pack.algorithms._spec import PackingSpec, as_spec
from energon_pack.algorithms._step_order import step_order

__all__ = ["MEDIA_COST", "pack_lengths"]

#: The cost model of packs with media (``balanced``, and ``step_packs`` without ``balance``):
#: ``image=0.4`` per media token, Qwen2-VL-7B's vision FLOPs per merged token over its language
#: model's per token (docs/benchmarks/media-packing.md).
MEDIA_COST = CostModel(image=0.4)


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
        lengths: Token length of each sample (positive ints, each fitting a pack once aligned).
        spec: The :class:`PackingSpec`, or the pack size with the other fields as keywords.
        media: Media load of each sample: needed by the media budgets (enforced last,
            :func:`enforce_media_budgets`); ``balanced`` and the ``step_packs`` order then
            count media tokens (:data:`MEDIA_COST`).
        balance: Even out the packs' costs under this model after the algorithm (same packs
            count, same fill); ``algorithm="balanced"`` is the default with ``CostModel()``.
        spec_fields: :class:`PackingSpec` fields replacing the spec's.

    Returns bins of indices: every index once, deterministic, no pack over a budget; with
    ``step_packs``, ordered by :func:`step_order`. Raises ``ValueError`` naming the fix for a
    bad field or length, media budgets without ``media``, or one sample over a budget.
    """
    spec = as_spec(spec, **spec_fields)
    if type(lengths) is list and media is None and balance is None and _plain(spec):
        bins = best_fit_decreasing_repair_list(lengths, spec.pack_size, spec.max_samples_per_pack)
        if bins is not None:  # energon's buffers: the default on the list, no array
            return bins
    arr = spec.slot_lengths(lengths)
    _check_media(arr, media, spec)
    if arr.size == 0:
        return []
    pack_size, per_pack = spec.pack_size, spec.max_samples_per_pack
    algorithm = ALGORITHMS[spec.algorithm]
    if media is not None and algorithm is balanced and balance is None:
        # balanced = the default algorithm + balance_packs(CostModel()); with media, the
        # balance counts the media tokens (one balance pass, not two).
        algorithm, balance = best_fit_decreasing_repair, MEDIA_COST
    bins = algorithm(arr, pack_size, per_pack)
    image_tokens = None if media is None else media.tokens
    if balance is not None:
        bins = balance_packs(
            bins,
            arr,
            pack_size,
            cost=balance,
            image_tokens=image_tokens,
            max_samples_per_pack=per_pack,
        )
    if media is not None:
        bins = enforce_media_budgets(bins, arr, media, spec)
    if spec.step_packs is not None:
        costs = _order_costs(bins, arr, media, balance)
        bins = [bins[i] for i in step_order(costs, spec.step_packs)]
    return bins


def _plain(spec: PackingSpec) -> bool:
    """The spec asks for the default algorithm and nothing after it (no alignment, step
    order or media budgets)."""
    return (
        ALGORITHMS[spec.algorithm] is best_fit_decreasing_repair
        and spec.alignment == 1
        and spec.step_packs is None
        and not spec.has_media_budgets
    )


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
        if spec.has_media_budgets:
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
