# SPDX-License-Identifier: Apache-2.0
"""The registry of packing algorithms.

Every algorithm is a function ``(lengths, capacity, max_samples_per_pack) -> bins`` where
``lengths`` is a validated, already aligned ``int64`` array and each bin is a list of indices into
it. :func:`~energon_pack.algorithms.pack_lengths` validates and aligns the lengths with a
:class:`~energon_pack.algorithms.PackingSpec`, looks its ``algorithm`` up here and calls it::

    >>> from energon_pack.algorithms import pack_lengths
    >>> pack_lengths([6, 5, 3, 4], 10, algorithm="next_fit")
    [[0], [1, 2], [3]]
    >>> pack_lengths([6, 5, 3, 4], 10, algorithm="first_fit_decreasing")
    [[0, 3], [1, 2]]

The CLI, the task encoders, the tests and the benchmark all iterate this one dict, so a new
algorithm registered here is available (and tested) everywhere. One shortcut, with the same
bins: while the default's entry here is ``best_fit_decreasing_repair``, ``pack_lengths`` runs it
on a short Python list of ints (a packing buffer, up to 512 lengths, with alignment 1 and no
``step_packs``, media or balance) through its list entry point
(``_repair.best_fit_decreasing_repair_list``), without building the ``int64`` array.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from energon_pack.algorithms._balance import balanced
from energon_pack.algorithms._best_fit import best_fit_decreasing
from energon_pack.algorithms._first_fit import first_fit, first_fit_decreasing
from energon_pack.algorithms._next_fit import next_fit
from energon_pack.algorithms._repair import (
    best_fit_decreasing_repair,
    best_fit_decreasing_search,
)

__all__ = ["ALGORITHMS", "DEFAULT_ALGORITHM", "PackingAlgorithm"]


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
