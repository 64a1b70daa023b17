# SPDX-License-Identifier: Apache-2.0
"""The entry point every packer calls: :func:`pack_lengths`, lengths and a spec in, bins out.

It aligns and validates the lengths with the spec, runs the spec's algorithm from
:data:`~energon_pack.algorithms.ALGORITHMS`, then optionally evens out the packs' costs
(``balance``) and orders them per optimizer step (``spec.step_packs``)::

    >>> pack_lengths([5, 4, 6, 3, 2], PackingSpec(pack_size=10))
    [[2, 1], [0, 3, 4]]
    >>> pack_lengths([5, 8, 1], 16, algorithm="next_fit", alignment=4)  # slots 8, 8, 4
    [[0, 1], [2]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs
from energon_pack.algorithms._registry import ALGORITHMS
from energon_pack.algorithms._spec import PackingSpec, as_spec
from energon_pack.algorithms._step_order import step_order

__all__ = ["pack_lengths"]


def pack_lengths(
    lengths: Sequence[int] | np.ndarray,
    spec: PackingSpec | int,
    *,
    balance: CostModel | None = None,
    **spec_fields: Any,
) -> list[list[int]]:
    """Partition ``range(len(lengths))`` into packs of at most ``spec.pack_size`` slots.

    Args:
        lengths: Token length of each sample (positive integers, each fitting a pack once
            rounded up to ``spec.alignment``).
        spec: The :class:`PackingSpec`; or the pack size, with the other spec fields as
            keywords (``pack_lengths(lengths, 4096, algorithm="next_fit")``).
        balance: If given, even out the packs' estimated costs under this cost model after the
            algorithm ran (:func:`~energon_pack.algorithms.balance_packs`: same packs count,
            same fill). ``algorithm="balanced"`` is the default algorithm with ``CostModel()``.
        spec_fields: :class:`PackingSpec` fields replacing the spec's.

    Returns:
        Bins of indices into ``lengths``: every index exactly once, deterministic. With
        ``spec.step_packs``, ordered so that any ``step_packs`` consecutive ones cost about the
        same under ``balance`` (else ``CostModel()``; :func:`~energon_pack.algorithms.step_order`).

    Raises:
        ValueError: a bad spec field, a length ``<= 0``, or a length above the pack size after
            alignment (the message says what to do).
    """
    spec = as_spec(spec, **spec_fields)
    arr = spec.slot_lengths(lengths)
    if arr.size == 0:
        return []
    cap, per_pack = spec.pack_size, spec.max_samples_per_pack
    bins = ALGORITHMS[spec.algorithm](arr, cap, per_pack)
    if balance is not None:
        bins = balance_packs(bins, arr, cap, cost=balance, max_samples_per_pack=per_pack)
    if spec.step_packs is not None:
        costs = (balance or CostModel()).pack_costs(bins, arr)
        bins = [bins[i] for i in step_order(costs, spec.step_packs)]
    return bins
