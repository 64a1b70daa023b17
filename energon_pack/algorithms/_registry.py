# SPDX-License-Identifier: Apache-2.0
"""The registry of packing algorithms and the public entry point :func:`pack_lengths`.

Every algorithm is a function ``(lengths, capacity, max_samples_per_pack) -> bins`` where
``lengths`` is a validated, already aligned ``int64`` array and each bin is a list of indices into
it. ``pack_lengths`` validates, aligns, looks the name up in :data:`ALGORITHMS` and calls it::

    >>> pack_lengths([6, 5, 3, 4], 10, algorithm="next_fit")
    [[0], [1, 2], [3]]
    >>> pack_lengths([6, 5, 3, 4], 10, algorithm="first_fit_decreasing")
    [[0, 3], [1, 2]]

The CLI, the task encoders, the tests and the benchmark all iterate this one dict, so a new
algorithm registered here is available (and tested) everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from energon_pack.algorithms._balance import CostModel, balance_packs, balanced
from energon_pack.algorithms._best_fit import best_fit_decreasing
from energon_pack.algorithms._first_fit import first_fit, first_fit_decreasing
from energon_pack.algorithms._next_fit import next_fit
from energon_pack.algorithms._options import PackOptions, prepare_lengths
from energon_pack.algorithms._repair import (
    best_fit_decreasing_repair,
    best_fit_decreasing_search,
)
from energon_pack.algorithms._step_order import step_order

__all__ = ["ALGORITHMS", "DEFAULT_ALGORITHM", "PackingAlgorithm", "pack_lengths"]


class PackingAlgorithm(Protocol):
    """A packing algorithm: partition sample indices into packs of at most ``capacity``.

    Args:
        lengths: 1-D ``int64`` array of positive lengths, each ``<= capacity`` (already aligned).
        capacity: Pack size in tokens.
        max_samples_per_pack: At most this many indices per bin (``None``: no cap).

    Returns:
        Bins of indices into ``lengths``; every index exactly once, no bin over ``capacity``,
        the same output for the same input.
    """

    def __call__(
        self, lengths: np.ndarray, capacity: int, max_samples_per_pack: int | None = None
    ) -> list[list[int]]: ...


#: name -> algorithm. Iterate this to test or benchmark every algorithm.
ALGORITHMS: dict[str, PackingAlgorithm] = {
    "next_fit": next_fit,
    "first_fit": first_fit,
    "first_fit_decreasing": first_fit_decreasing,
    "best_fit_decreasing": best_fit_decreasing,
    "best_fit_decreasing_repair": best_fit_decreasing_repair,
    "best_fit_decreasing_search": best_fit_decreasing_search,
    "balanced": balanced,
}

#: The algorithm ``pack_lengths`` uses when none is named: BFD plus a bounded repair, a few
#: milliseconds above BFD. ``best_fit_decreasing_search`` packs fuller at about 2-3x the time;
#: ``balanced`` evens out the packs' compute cost at the same fill.
DEFAULT_ALGORITHM = "best_fit_decreasing_repair"


def pack_lengths(
    lengths: Sequence[int] | np.ndarray,
    capacity: int,
    *,
    algorithm: str = DEFAULT_ALGORITHM,
    max_samples_per_pack: int | None = None,
    alignment: int = 1,
    balance: CostModel | None = None,
    step_packs: int | None = None,
) -> list[list[int]]:
    """Partition ``range(len(lengths))`` into packs of at most ``capacity`` tokens.

    Args:
        lengths: Token length of each sample (positive integers).
        capacity: Pack size in tokens.
        algorithm: A key of :data:`ALGORITHMS`.
        max_samples_per_pack: At most this many samples per pack (``None``: no cap).
        alignment: Round each length up to a multiple of this before packing (``2 * CP`` for
            context parallelism).
        balance: If given, even out the packs' estimated costs under this cost model after the
            algorithm ran (:func:`~energon_pack.algorithms.balance_packs`: same packs count,
            same fill). ``algorithm="balanced"`` is the default algorithm with ``CostModel()``.
        step_packs: If given, order the packs so that any ``step_packs`` consecutive ones cost
            about the same under ``balance`` (else ``CostModel()``): the packs one rank trains
            on per optimizer step (:func:`~energon_pack.algorithms.step_order`; same packs).

    Returns:
        Bins of indices into ``lengths``: every index exactly once, deterministic.

    Raises:
        ValueError: unknown algorithm, non-positive capacity, a length ``<= 0``, or a length
            above ``capacity`` after alignment (the message says what to do).
    """
    fn = ALGORITHMS.get(algorithm)
    if fn is None:
        raise ValueError(
            f"Unknown packing algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)} "
            "(or register yours in energon_pack.algorithms.ALGORITHMS)."
        )
    if max_samples_per_pack is not None or alignment != 1:
        PackOptions(max_samples_per_pack=max_samples_per_pack, alignment=alignment)
    arr = prepare_lengths(lengths, capacity, alignment)
    if arr.size == 0:
        return []
    bins = fn(arr, int(capacity), max_samples_per_pack)
    if balance is not None:
        bins = balance_packs(
            bins, arr, int(capacity), cost=balance, max_samples_per_pack=max_samples_per_pack
        )
    if step_packs is not None:
        costs = (balance or CostModel()).pack_costs(bins, arr)
        bins = [bins[i] for i in step_order(costs, step_packs)]
    return bins
